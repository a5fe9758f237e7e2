"""`swarm demo`: a local swarm of training sessions in one process, and `swarm identity`."""

import json

from swarm_app.cli import main


def demo(stub_model, out, *extra):
    return main(["demo", "--nodes", "2", "--backend", "fake", "--model", str(stub_model), "--local", "2",
                 "--completions", "4", "--out", str(out), "--no-ui", *extra])


def round_rows(node):
    """A node's rows of rounds (its evaluation rows, with a "type", left out)."""
    rows = [json.loads(line) for line in (node / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "type" not in row]


def node_lines(summary):
    """The summary's node rows (the untouched model's "base" row left out)."""
    return [line for line in summary if not line.lstrip().startswith("base")]


def nodes_ran(out):
    """(rounds in metrics.jsonl, train.rounds, train.external) of each node, as its run.json recorded them."""
    found = []
    for node in sorted(out.glob("node-*")):
        train = json.loads((node / "run.json").read_text())["settings"]["train"]
        found.append((len(round_rows(node)), train["rounds"], train["external"]))
    return found


def test_demo_runs_every_node_and_prints_a_summary(stub_model, tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--nodes", "3", "--rounds", "3", "--backend", "fake", "--model", str(stub_model),
                 "--local", "2", "--completions", "4", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    for node in range(3):
        assert sum(line.startswith(f"node {node}  round") for line in text.splitlines()) == 3
        assert [row["round"] for row in round_rows(out / f"node-{node}")] == [1, 2, 3]
        assert json.loads((out / f"node-{node}" / "run.json").read_text())["seed"] == node
    summary = node_lines(text.split("cum. total reward")[1].splitlines()[1:])
    assert len(summary) == 3
    sent = [int(line.split()[-3]) for line in summary]
    received = [int(line.split()[-2]) for line in summary]
    assert all(s <= 3 * 2 for s in sent) and sum(sent) > 0  # own groups with a reward spread are published
    assert sum(received) > 0


def test_identity_show_creates_a_key_once(capsys):
    assert main(["identity", "show"]) == 0
    first = capsys.readouterr().out
    assert main(["identity", "show"]) == 0
    second = capsys.readouterr().out
    node_id = [line.split()[-1] for line in second.splitlines() if line.startswith("node id")][0]
    assert "created a new identity" in first and "created" not in second
    assert node_id in first and "PRIVATE" not in first + second


def test_demo_nodes_take_their_engines_in_turn(stub_model, tmp_path, capsys):
    from swarm_app.demo.local_swarm import node_settings
    from swarm_app.kernel.settings import Settings

    chosen = [node_settings(Settings(), i, tmp_path, ("torch", "llama_cpp", "mlx")).model.backend for i in range(4)]
    assert chosen == ["torch", "llama_cpp", "mlx", "torch"]
    code = main(["demo", "--nodes", "2", "--rounds", "1", "--backends", "fake", "--model", str(stub_model),
                 "--out", str(tmp_path / "demo"), "--no-ui"])
    summary = node_lines(capsys.readouterr().out.split("cum. total reward")[1].splitlines()[1:])
    assert code == 0 and [line.split()[1] for line in summary] == ["fake", "fake"]
    assert main(["demo", "--nodes", "2", "--backends", "torch,nope"]) == 2
    assert "unknown engine nope" in capsys.readouterr().err


def test_demo_takes_rounds_and_external_from_config_and_env_and_a_flag_beats_both(
        stub_model, tmp_path, isolated_home, monkeypatch, capsys):
    config = isolated_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[train]\nrounds = 2\nexternal = 1\n")
    assert demo(stub_model, tmp_path / "config") == 0
    assert "demo: 2 nodes, 2 rounds, J = 1;" in capsys.readouterr().out
    assert nodes_ran(tmp_path / "config") == [(2, 2, 1), (2, 2, 1)]
    monkeypatch.setenv("SWARM_TRAIN_ROUNDS", "3")
    assert demo(stub_model, tmp_path / "env") == 0
    assert nodes_ran(tmp_path / "env") == [(3, 3, 1), (3, 3, 1)]  # env over config; external still from config
    assert demo(stub_model, tmp_path / "flags", "--rounds", "1", "--external", "0") == 0
    assert nodes_ran(tmp_path / "flags") == [(1, 1, 0), (1, 1, 0)]


def test_demo_evaluations_are_rows_and_the_summary_has_the_untouched_models_baseline(stub_model, tmp_path, capsys):
    out = tmp_path / "demo"
    assert demo(stub_model, out, "--rounds", "2") == 0
    text = capsys.readouterr().out
    found = {}
    for node in range(2):
        lines = [json.loads(line) for line in (out / f"node-{node}" / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in lines if "type" not in r] == [1, 2]
        found[node] = {r["kind"]: r for r in lines if r.get("type") == "eval"}
    assert set(found[0]) == {"baseline", "final"} and set(found[1]) == {"final"}
    assert found[0]["baseline"]["round"] == 0 and found[1]["final"]["round"] == 2
    summary = text.split("cum. total reward")[1].splitlines()[1:]
    baseline = next(line for line in summary if line.lstrip().startswith("base"))
    assert f"{found[0]['baseline']['heldout_acc']:.3f}" in baseline and "untouched" in baseline
    for node in range(2):
        row = next(line for line in summary if line.split()[0] == str(node))
        assert f"{found[node]['final']['heldout_acc']:.3f}" in row
