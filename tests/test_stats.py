"""`swarm stats`: a participant's record of a run, from a real `swarm demo` of three nodes (fake engine)."""

import json
import re

from swarm_app.cli import main


def rows(node):
    return [json.loads(line) for line in (node / "metrics.jsonl").read_text().splitlines()]


def test_stats_of_a_demo_node_lists_its_peers_and_counts(stub_model, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--nodes", "3", "--rounds", "8", "--backend", "fake", "--model", str(stub_model), "--local",
                 "2", "--completions", "4", "--external", "4", "--out", str(out), "--no-ui"]) == 0
    text = capsys.readouterr().out
    ids = {int(i): node_id for i, node_id in re.findall(r"^node (\d+) .*?: node (\S+) listening", text, re.M)}
    assert len(ids) == 3

    assert main(["stats", "--run-dir", str(out / "node-0"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    node_rows = rows(out / "node-0")
    rounds = [r for r in node_rows if "type" not in r]
    assert record["rounds"] == len(rounds) == 8 and record["online_rounds"] == 8
    # one process: the node's own cumulative counters on its last row are the same totals
    assert record["shared"]["rollouts"] == rounds[-1]["rollouts_published"] > 0
    assert record["shared"]["pushed"] == rounds[-1]["rollouts_sent"] > 0
    used = sum(r["n_external"] for r in rounds)
    assert record["used"]["groups"] == used > 0
    top = {p["node_id"]: p["groups"] for p in record["used"]["top_peers"]}
    assert set(top) <= {ids[1], ids[2]} and sum(top.values()) == used  # the two other nodes, never itself
    assert record["used"]["peers"] == len(top)
    evaluations = [r for r in node_rows if r.get("heldout_acc") is not None]
    assert evaluations[0].get("kind") == "baseline" and evaluations[-1].get("kind") == "final"
    heldout = record["heldout"]
    assert heldout["first"] == {"round": 0, "accuracy": evaluations[0]["heldout_acc"]}
    assert heldout["latest"] == {"round": 8, "accuracy": evaluations[-1]["heldout_acc"]}
    assert heldout["gain"] == round(evaluations[-1]["heldout_acc"] - evaluations[0]["heldout_acc"], 6)

    assert main(["stats", "--run-dir", str(out / "node-0")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"used     {used:,} peers' groups with a reward spread, from {len(top)} peers" in lines


def test_stats_of_a_missing_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["stats", "--run-dir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run in" in err
