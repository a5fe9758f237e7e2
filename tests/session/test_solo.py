"""The solo curve a node that learns from peers is compared with: found in an experiment's results.json or
in a solo run folder of the same model, and published to the views by the session."""

import json

from swarm_app.kernel.events import RunStarted, SoloCurveFound
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.rollouts import Inbox
from swarm_app.session.solo import find_solo_curve
from tests.session.test_session import make_settings, run


def write_results(folder, model="swarm-tiny", preset="easy", solo="8/0"):
    """The keys of results.json that the lookup reads, as experiment/runner.py writes them."""
    folder.mkdir(parents=True)
    curves = {solo: {"heldout_rounds": [0, 5, 10], "heldout": {"mean": [0.2, 0.3, 0.35], "std": [0, 0, 0]}},
              "4/4": {"heldout_rounds": [0, 5, 10], "heldout": {"mean": [0.2, 0.4, 0.5], "std": [0, 0, 0]}}}
    configs = [{"config": solo, "seeds": [0, 1, 2]}, {"config": "4/4", "seeds": [0, 1, 2]}]
    summary = {"solo": solo, "curves": curves, "configs": configs}
    (folder / "results.json").write_text(json.dumps({"experiment": {"model": model, "preset": preset},
                                                     "summary": summary}))


def write_run(folder, model_dir, external=0, preset="easy"):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"model": str(model_dir), "preset": preset}))
    rows = [{"round": t, "n_external": external, "heldout_acc": 0.1 * t if t % 2 == 0 else None} for t in (1, 2, 3, 4)]
    rows.append({"type": "eval", "kind": "baseline", "round": 0, "heldout_acc": 0.05})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_experiments_solo_arm_is_the_curve(tmp_path, stub_model):
    data = tmp_path / "data"
    write_results(data / "experiments" / "other-model", model="someone/else")
    write_results(data / "experiments" / "default")
    found = find_solo_curve(data, "swarm-tiny", stub_model, "easy", data / "runs" / "default")
    assert found.rounds == (0, 5, 10) and found.accuracy == (0.2, 0.3, 0.35)
    assert "config 8/0, mean of 3 seed(s)" in found.source and "default" in found.source


def test_a_solo_run_of_the_same_model_is_the_curve(tmp_path, stub_model):
    data = tmp_path / "data"
    write_run(data / "runs" / "with-peers", stub_model, external=2)
    write_run(data / "runs" / "other-preset", stub_model, preset="paper")
    write_run(data / "runs" / "other-model", tmp_path)
    write_run(data / "runs" / "default", stub_model)  # the node's own run folder
    assert find_solo_curve(data, "swarm-tiny", stub_model, "easy", data / "runs" / "default") is None
    write_run(data / "runs" / "alone", stub_model)
    found = find_solo_curve(data, "swarm-tiny", stub_model, "easy", data / "runs" / "default")
    assert found.rounds == (0, 2, 4) and found.accuracy == (0.05, 0.2, 0.4)
    assert found.source.startswith("solo run ") and found.source.endswith("alone")


def test_damaged_files_are_skipped(tmp_path, stub_model):
    data = tmp_path / "data"
    (data / "experiments" / "broken").mkdir(parents=True)
    (data / "experiments" / "broken" / "results.json").write_text("{not json")
    (data / "experiments" / "odd").mkdir()
    (data / "experiments" / "odd" / "results.json").write_text(json.dumps({"experiment": [], "summary": 3}))
    (data / "runs" / "torn").mkdir(parents=True)
    (data / "runs" / "torn" / "run.json").write_text("[1, 2")
    assert find_solo_curve(data, "swarm-tiny", stub_model, "easy", data / "runs" / "default") is None
    assert (data / "experiments" / "broken" / "results.json").exists()  # only read, never moved


def test_a_node_that_learns_from_peers_gets_the_solo_curve_of_an_earlier_solo_run(stub_model):
    runs = user_dirs().runs
    solo = make_settings(stub_model, runs / "solo", 4, eval_every=2)
    _, events, _ = run(solo)
    assert not [e for e in events if isinstance(e, SoloCurveFound)]  # a solo node is not compared with itself
    assert [e.external for e in events if isinstance(e, RunStarted)] == [0]
    _, events, _ = run(make_settings(stub_model, runs / "swarm", 1, external=2), exchange=Inbox())
    (found,) = [e for e in events if isinstance(e, SoloCurveFound)]
    assert found.rounds == (2, 4) and found.source == f"solo run {runs / 'solo'}"
    assert [e.external for e in events if isinstance(e, RunStarted)] == [2]
    assert events.index(found) > next(i for i, e in enumerate(events) if isinstance(e, RunStarted))
