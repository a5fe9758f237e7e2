"""`swarm experiment`: the grid's checks, the metrics, and a small experiment on the bundled model killed
with SIGKILL after its first cell and finished by the same command."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm_app.cli import main
from swarm_app.experiment.plan import Config, Plan, default_configs, parse_configs
from swarm_app.experiment.summary import summarize
from swarm_app.experiment.table import markdown
from swarm_app.kernel.hardware import cpu_identity
from tests.slow_fake import slow_fake_engine

SMALL = ["--nodes", "2", "--configs", "8/0,4/4", "--seeds", "1", "--rounds", "3", "--eval-every", "3", "--eval-n", "8",
         "--no-ui"]
OUTPUTS = ("results.json", "table.md", "summary.json", "cumulative_reward.png", "heldout_accuracy.png", "local_reward.png")


def test_default_configs_split_the_models_update_as_the_paper_splits_8():
    assert [c.name for c in default_configs(32)] == ["32/0", "24/8", "16/16", "8/24"]
    assert [c.name for c in default_configs(8)] == ["8/0", "6/2", "4/4", "2/6"]
    assert parse_configs(" 32/0, 16/16") == (Config(32, 0), Config(16, 16))


def test_it_has_its_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0 and text.startswith("usage: swarm experiment ")
    assert "run the same command again to continue a stopped experiment" in text


@pytest.mark.parametrize("flags, says", [
    (["--configs", "32/0,16/8"], "I + J must be the same"),
    (["--configs", "32-0"], "is not I/J"),
    (["--configs", "0/32"], "out of range"),
    (["--configs", "16/16,16/16"], "names a config twice"),
    (["--nodes", "1", "--configs", "16/16"], "need peers"),
    (["--nodes", "two"], "--nodes 'two' is not a whole number"),
    (["--rounds", "0"], "--rounds 0 must be at least 1"),
    (["--seeds", "7-3"], "the range runs backwards"),
    (["--seeds", "three"], "write a count (3: seeds 0-2) or a range (3-7: seeds 3 to 7)"),
    (["--seeds", "95-104"], "--seeds 95-104 is out of range"),
])
def test_bad_input_is_one_line_and_exit_2(flags, says, tmp_path, capsys):
    assert main(["experiment", "--out", str(tmp_path / "x"), *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def _cell(config, seed, gains):
    """A cell record as cell.py writes it: two nodes, two rounds, a held-out point at round 2."""
    local, external = map(int, config.split("/"))
    nodes = []
    for node, accuracy in enumerate(gains):
        rows = [{"round": t, "reward_local": 0.5, "reward_local_sum": 4.0, "reward_external_sum": 1.0 * external,
                 "n_external": external, "groups_with_signal": 4, "round_s": 2.0, "eval_s": 1.0 if t == 2 else None,
                 "cpu_s": 1.5, "eval_cpu_s": 0.5 if t == 2 else None} for t in (1, 2)]
        nodes.append({"rows": rows, "heldout": [{"round": 2, "accuracy": accuracy, "per_task": {"a": accuracy}}],
                      "sampled_end": {"mean_reward": 0.4}})
    return {"cell": {"key": f"{local}-{external}-seed{seed}", "config": config, "seed": seed}, "nodes": nodes,
            "wall_s": 60.0, "train_wall_s": 50.0, "load_average": {"start": [1.0], "end": [2.0]}}


def test_the_summary_sums_the_papers_reward_and_pairs_gains_with_the_solo_arm_by_seed():
    plan = Plan(2, (Config(8, 0), Config(4, 4)), 2, 2, 2, 8, 2, 1)
    base = {"accuracy": 0.30, "per_task": {"a": 0.30}, "sampled": {"mean_reward": 0.2}}
    cells = [_cell("8/0", 0, [0.40, 0.40]), _cell("4/4", 0, [0.45, 0.45]),
             _cell("8/0", 1, [0.36, 0.38]), _cell("4/4", 1, [0.37, 0.39])]
    summary = summarize(plan, base, cells)
    solo, shared = summary["configs"]
    assert summary["cells"]["8-0-seed0"]["cum_reward"] == 2 * 2 * 4.0  # nodes x rounds x own rewards
    assert summary["cells"]["4-4-seed0"]["cum_reward"] == 2 * 2 * (4.0 + 4.0)  # own and external
    assert solo["gain_points"]["mean"] == pytest.approx((10 + 7) / 2)
    assert shared["vs_solo"]["gain_points"]["values"] == pytest.approx([5.0, 1.0])  # paired by seed
    assert shared["vs_solo"]["cum_reward_ratio"]["mean"] == pytest.approx(2.0)
    assert solo["rounds_per_hour"]["mean"] == pytest.approx(3600 * 2 / 3.0)  # evaluations left out
    assert solo["cpu_s_per_node_round"]["mean"] == pytest.approx(1.25)
    assert summary["curves"]["4/4"]["heldout"]["mean"] == pytest.approx([0.30, 0.415])


def _costing(cell, cpu_s):
    for node in cell["nodes"]:
        for row in node["rows"]:
            row.update(cpu_s=cpu_s, eval_cpu_s=None)
    return cell


def test_at_equal_compute_the_costlier_solo_arm_is_read_where_it_had_spent_what_sharing_spent():
    plan = Plan(2, (Config(8, 0), Config(4, 4)), 2, 2, 2, 8, 2, 1)
    base = {"accuracy": 0.30, "per_task": {"a": 0.30}}
    cells = [_costing(_cell("8/0", 0, [0.40, 0.40]), 2.0), _costing(_cell("4/4", 0, [0.36, 0.36]), 1.0),
             _costing(_cell("8/0", 1, [0.40, 0.40]), 2.0), _costing(_cell("4/4", 1, [0.38, 0.38]), 1.0)]
    summary = summarize(plan, base, cells)
    equal = summary["configs"][1]["vs_solo"]["equal_compute"]
    assert equal["cpu_s_per_node"]["mean"] == pytest.approx(2.0)  # sharing's 2 rounds x 1.0 s
    assert equal["solo_rounds"]["values"] == pytest.approx([1.0, 1.0])
    assert equal["solo_gain_points"]["values"] == pytest.approx([5.0, 5.0])  # 0.30 -> 0.40 over 2 rounds, read at 1
    assert equal["gain_points"]["values"] == pytest.approx([6.0, 8.0])
    assert equal["cum_reward_ratio"]["values"] == pytest.approx([4.0, 4.0])  # 2 x 2 x 8 against 2 x 1 x 4
    head = summary["headline"]
    assert head["best_config"] == "4/4" and head["seeds"] == 2 and head["rounds"] == 2
    assert head["solo_heldout_gain"] == pytest.approx(10.0) and head["best_heldout_gain"] == pytest.approx(7.0)
    assert head["equal_compute"]["gain_ratio"] == pytest.approx(7.0 / 5.0)
    goal = head["goal"]
    assert goal["ratio_met"] and goal["beyond_seed_spread"]  # +2 +- 1.4
    assert not goal["not_below_solo_at_equal_rounds"] and not goal["met"]  # 7 against 10 at equal rounds


def test_a_seed_whose_two_cells_ran_on_different_processors_is_named_at_equal_compute():
    """CPU seconds of two processors are not one currency: the summary and the table name the seed whose
    sharing cell ran on another machine than its solo cell, and no seed whose cells share one (or predate
    the record)."""
    plan = Plan(2, (Config(8, 0), Config(4, 4)), 2, 2, 2, 8, 2, 1)
    base = {"accuracy": 0.30, "per_task": {"a": 0.30}}
    cells = [_cell("8/0", 0, [0.40, 0.40]), _cell("4/4", 0, [0.45, 0.45]),
             _cell("8/0", 1, [0.36, 0.38]), _cell("4/4", 1, [0.37, 0.39]),
             _cell("8/0", 2, [0.36, 0.38]), _cell("4/4", 2, [0.37, 0.39])]
    for cell, machines in zip(cells, (["old, 2 CPUs"], ["old, 2 CPUs"], ["old, 2 CPUs"], ["new, 2 CPUs"], [], ["new, 2 CPUs"])):
        cell["machines"] = machines
    summary = summarize(plan, base, cells)
    assert summary["configs"][1]["vs_solo"]["across_machines"] == [1]
    setup = {"model": "m", "engine": "fake", "preset": "easy", "completions": 8, "temperature": 0.8}
    text = markdown(plan, setup, summary)
    assert "**4/4, seed(s) 1: its cell and 8/0's ran on different processors**" in text
    for cell in cells:
        cell["machines"] = ["old, 2 CPUs"]
    summary = summarize(plan, base, cells)
    assert summary["configs"][1]["vs_solo"]["across_machines"] == []
    assert "different processors" not in markdown(plan, setup, summary)


def test_the_cell_carries_the_mean_own_and_external_figures_of_the_rows_that_have_them():
    plan = Plan(2, (Config(4, 4),), 1, 2, 2, 8, 2, 1)
    cell = _cell("4/4", 0, [0.4, 0.4])
    cell["nodes"][0]["rows"][0].update(logp_own=-0.5, logp_external=-1.5, signal_external=1.0)
    cell["nodes"][1]["rows"][1].update(logp_own=-0.7, logp_external=-2.5, signal_external=0.5)
    figures = summarize(plan, {"accuracy": 0.3, "per_task": {}}, [cell])["cells"]["4-4-seed0"]["own_vs_external"]
    assert figures["logp_own"] == pytest.approx(-0.6) and figures["logp_external"] == pytest.approx(-2.0)
    assert figures["signal_external"] == pytest.approx(0.75) and figures["reward_local"] == pytest.approx(0.5)
    assert figures["clipped_external"] is None  # no row has it


def test_a_changed_command_on_the_same_folder_is_refused_and_the_same_one_keeps_every_cell(stub_model, tmp_path, capsys):
    out = tmp_path / "exp"
    fake = ["--backend", "fake", "--model", str(stub_model), "--out", str(out), "--eval-samples", "2"]
    assert main(["experiment", *SMALL, *fake]) == 0
    cells = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    assert sorted(cells) == ["4-4-seed0.json", "8-0-seed0.json"]
    capsys.readouterr()
    assert main(["experiment", *SMALL, *fake]) == 0
    assert "2 of 2 cells already done" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == cells
    assert main(["experiment", *SMALL, *fake, "--rounds", "4"]) == 2
    err = capsys.readouterr().err
    assert "holds an experiment with other settings: rounds (3 then, 4 now)" in err and len(err.splitlines()) == 1


def test_a_seed_range_runs_those_seeds_only_and_a_later_count_keeps_them(stub_model, tmp_path, capsys):
    """`--seeds 1-1` (a replication on a fresh seed) runs seed 1's cells, with seed 1's node seeds, and its
    outputs are over seed 1 alone; `--seeds 2` in the same folder then runs only seed 0's."""
    out = tmp_path / "exp"
    fake = ["--backend", "fake", "--model", str(stub_model), "--out", str(out), "--eval-samples", "0"]
    small = [*SMALL[:SMALL.index("--seeds")], *SMALL[SMALL.index("--seeds") + 2:]]
    assert main(["experiment", *small, "--seeds", "1-1", *fake]) == 0
    assert "x 1 seed(s) (1-1)" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["4-4-seed1.json", "8-0-seed1.json"]
    cell = json.loads((out / "cells" / "4-4-seed1.json").read_text())
    assert cell["cell"]["node_seeds"] == [1000, 1001]
    assert cell["machines"] == [cpu_identity()]  # what its CPU seconds were measured on
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"]["seed_ids"] == [1]
    assert [c["seeds"] for c in results["summary"]["configs"]] == [[1], [1]]
    assert main(["experiment", *small, "--seeds", "2", *fake]) == 0
    assert "2 of 4 cells already done" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["experiment"]["seed_ids"] == [0, 1]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_the_bundled_model_killed_after_its_first_cell_finishes_only_the_missing_one(tmp_path):
    out = tmp_path / "exp"
    command = [sys.executable, "-m", "swarm_app", "experiment", *SMALL, "--out", str(out)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    done = out / "cells" / "8-0-seed0.json"
    deadline = time.monotonic() + 240
    while not done.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()  # SIGKILL: the second cell is under way, or its outputs are being written
    _, err = first.communicate(timeout=60)
    assert done.exists(), err
    kept = done.read_bytes()
    assert not (out / "cells" / "4-4-seed0.json").exists(), "the first run ended before it could be killed"

    second = subprocess.run(command, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert second.returncode == 0, second.stderr
    assert "1 of 2 cells already done" in second.stdout and "cell 1/2" not in second.stdout
    assert "cell 2/2  4/4 seed 0 done" in second.stdout
    assert done.read_bytes() == kept
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name
    results = json.loads((out / "results.json").read_text())
    assert [c["cell"]["key"] for c in results["cells"]] == ["8-0-seed0", "4-4-seed0"]
    for cell in results["cells"]:
        assert [node["seed"] for node in cell["nodes"]] == [0, 1]  # both configs, the same node seeds
        for node in cell["nodes"]:
            assert [row["round"] for row in node["rows"]] == [1, 2, 3]
            assert all(row["cpu_s"] > 0 for row in node["rows"])
            assert [p["round"] for p in node["heldout"]] == [3] and node["heldout"][0]["per_task"]
    shared = results["cells"][1]["nodes"]
    assert sum(row["n_external"] for node in shared for row in node["rows"]) > 0  # peers' groups trained on
    assert all(node["peer"]["accepted"] > 0 for node in shared)
    table = (out / "table.md").read_text()
    assert "| 8/0 | 1 |" in table and "| 4/4 | 1 |" in table


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_cell_killed_part_way_goes_on_from_its_nodes_checkpoints(stub_model, tmp_path):
    from swarm_app.training.checkpoint import Checkpoints

    out = tmp_path / "exp"
    command = [sys.executable, "-m", "swarm_app", "experiment", "--nodes", "2", "--configs", "8/0,4/4", "--seeds", "1",
               "--rounds", "8", "--eval-every", "4", "--eval-n", "8", "--no-ui", "--backend", "fake",
               "--model", str(stub_model), "--out", str(out)]
    slowed = slow_fake_engine(tmp_path / "hook", sampled_s=0.01)  # a round of 4 questions x 8 answers: 0.3 s
    env = {**os.environ, **slowed, "SWARM_HOME": str(tmp_path / "home")}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    nodes = [Checkpoints(out / "runs" / "4-4-seed0" / f"node-{i}") for i in range(2)]

    def checkpointed() -> list[int]:
        return [c.load_latest()[0].round if c.latest_file.exists() else 0 for c in nodes]

    deadline = time.monotonic() + 120
    while min(checkpointed()) < 5 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()  # SIGKILL, part way through the sharing cell
    _, err = first.communicate(timeout=60)
    at_kill = checkpointed()
    assert 5 <= min(at_kill) and max(at_kill) < 8, (at_kill, err)
    rows_before = [{r["round"]: r["time"] for r in map(json.loads, (out / "runs" / "4-4-seed0" / f"node-{i}" /
                                                                   "metrics.jsonl").read_text().splitlines())
                    if "type" not in r} for i in range(2)]

    second = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0, second.stderr
    assert "1 of 2 cells already done" in second.stdout
    assert f"going on from the last checkpoints: rounds {at_kill[0]}, {at_kill[1]} done" in second.stdout
    cell = json.loads((out / "cells" / "4-4-seed0.json").read_text())
    assert cell["runs"] == 2 and cell["wall_s"] > 0
    for i, node in enumerate(cell["nodes"]):
        assert [row["round"] for row in node["rows"]] == list(range(1, 9))
        assert all(row["cpu_s"] is not None for row in node["rows"]), node["rows"]
        kept = [row for row in node["rows"] if row["round"] <= at_kill[i]]
        assert all(row["time"] == rows_before[i][row["round"]] for row in kept)  # not run again
        assert [p["round"] for p in node["heldout"]] == [4, 8] and all(p["per_task"] for p in node["heldout"])
        assert node["engine_cpu_s"] >= sum(row["cpu_s"] for row in node["rows"]) - 1e-3
    assert (out / "summary.json").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_node_killed_while_its_last_round_is_scored_is_scored_without_training_again(stub_model, tmp_path):
    from swarm_app.kernel.errors import CheckpointError
    from swarm_app.training.checkpoint import Checkpoints

    out = tmp_path / "exp"
    command = [sys.executable, "-m", "swarm_app", "experiment", "--nodes", "2", "--configs", "8/0", "--seeds", "1",
               "--rounds", "5", "--eval-every", "5", "--eval-n", "8", "--no-ui", "--backend", "fake",
               "--model", str(stub_model), "--out", str(out)]
    # a round of 8 questions x 8 answers: 1.3 s; the sampled held-out reward after it (8 x 4 answers): 0.6 s
    env = {**os.environ, **slow_fake_engine(tmp_path / "hook", sampled_s=0.02), "SWARM_HOME": str(tmp_path / "home")}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    folder = out / "runs" / "8-0-seed0"

    def last_checkpoint(node: Path) -> int:
        return Checkpoints(node).load_latest()[0].round if Checkpoints(node).latest_file.exists() else 0

    def being_scored() -> bool:  # a node checkpointed its last round and is not finished
        for node in folder.glob("node-*"):
            if last_checkpoint(node) == 5 and not json.loads((node / "experiment_node.json").read_text())["finished"]:
                return True
        return False

    deadline = time.monotonic() + 120
    while first.poll() is None and time.monotonic() < deadline:
        try:
            if being_scored():
                break
        except (ValueError, OSError, CheckpointError):
            pass  # a file being replaced
        time.sleep(0.02)
    first.kill()  # SIGKILL: a node did all its rounds and its sampled held-out reward is under way
    _, err = first.communicate(timeout=60)
    assert not (out / "cells" / "8-0-seed0.json").exists(), err
    times = [{r["round"]: r["time"] for r in map(json.loads, (folder / f"node-{i}" / "metrics.jsonl").read_text()
                                                   .splitlines()) if "type" not in r} for i in range(2)]
    # the node being scored; the other may have logged its round 5 and been killed before its checkpoint:
    # that one goes on from its last checkpoint and does its rounds again
    scored = [last_checkpoint(folder / f"node-{i}") == 5 for i in range(2)]
    assert any(scored) and all(5 in t for t, s in zip(times, scored) if s)

    second = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0, second.stderr
    assert "going on from the last checkpoints" in second.stdout, second.stdout
    cell = json.loads((out / "cells" / "8-0-seed0.json").read_text())
    assert cell["runs"] == 2
    for i, node in enumerate(cell["nodes"]):
        assert [row["round"] for row in node["rows"]] == [1, 2, 3, 4, 5]
        if scored[i]:  # this node had checkpointed its last round: it was scored, not trained again
            assert all(row["time"] == times[i][row["round"]] for row in node["rows"])
        assert node["sampled_end"]["questions"] == 8 and node["heldout"][-1]["round"] == 5


def test_the_best_config_is_the_one_most_above_solo_for_the_same_cpu_time_not_the_one_with_the_most_points():
    plan = Plan(2, (Config(8, 0), Config(6, 2), Config(2, 6)), 2, 2, 2, 8, 2, 1)
    base = {"accuracy": 0.30, "per_task": {"a": 0.30}}
    cells = [_costing(_cell("8/0", s, [0.40, 0.40]), 2.0) for s in (0, 1)]
    # 6/2 costs what solo costs and ends 1 point above it; 2/6 costs half and ends 1 point below it, where
    # the solo arm, read at half its CPU time, had 5 points
    cells += [_costing(_cell("6/2", s, [0.41, 0.41]), 2.0) for s in (0, 1)]
    cells += [_costing(_cell("2/6", s, [0.39, 0.39]), 1.0) for s in (0, 1)]
    head = summarize(plan, base, cells)["headline"]
    assert head["best_config"] == "2/6"
    assert head["equal_compute"]["best_heldout_gain"] == pytest.approx(9.0)
    assert head["equal_compute"]["solo_heldout_gain"] == pytest.approx(5.0)
