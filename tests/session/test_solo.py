"""The solo curve a node that learns from peers is compared with at equal engine CPU: found in an experiment's
results.json, in a solo run folder of the same model, or shipped beside the model; published by the session."""

import json
import os
import time
from pathlib import Path

import pytest

from backends.fake import FakeBackend
from swarm_app.kernel.events import RoundFinished, RunStarted, SoloCurveFound
from swarm_app.kernel.paths import bundled_model_dir, user_dirs
from swarm_app.kernel.rollouts import Inbox
from swarm_app.kernel.settings import Settings, describe
from swarm_app.session.recommendations import apply_recommendations
from swarm_app.session.solo import SHIPPED, find_solo_curve, settings_differ
from tests.session.test_session import make_settings, rows, run
from tools.make_solo_curve import make

ROOT = Path(__file__).resolve().parents[2]


def cell(config, seed, cpu_per_round, accuracy_at_10, threads=1):
    """A cell file's keys the lookup reads, as experiment/cell.py writes them: 2 nodes, 10 rounds, an evaluation
    at round 5 and 10 (whose CPU is in `cpu_s` and left out by `eval_cpu_s`)."""
    def node(i):
        rows = [{"round": t, "cpu_s": cpu_per_round + (2.0 if t % 5 == 0 else 0.0),
                 "eval_cpu_s": 2.0 if t % 5 == 0 else None} for t in range(1, 11)]
        heldout = [{"round": 5, "accuracy": 0.3 + 0.01 * i, "kind": "scheduled"},
                   {"round": 10, "accuracy": accuracy_at_10 + 0.01 * i, "kind": "scheduled"}]
        return {"node": i, "rows": rows, "heldout": heldout}
    return {"cell": {"config": config, "seed": seed}, "engine": "llama_cpp", "threads": threads,
            "nodes": [node(0), node(1)]}


def write_results(folder, model="swarm-tiny", preset="easy", solo="8/0", settings=None):
    """The keys of results.json (and experiment.json) that the lookup reads, as experiment/runner.py writes them."""
    folder.mkdir(parents=True)
    cells = [cell(solo, 0, 1.0, 0.35), cell(solo, 1, 1.2, 0.45), cell("4/4", 0, 0.5, 0.6)]
    results = {"experiment": {"model": model, "preset": preset, "eval_n": 200}, "base": {"accuracy": 0.2, "n": 200},
               "summary": {"solo": solo}, "cells": cells}
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "experiment.json").write_text(json.dumps({"settings": settings or {"train": {"learning_rate": 3e-4}}}))


def write_run(folder, model_dir, external=0, preset="easy", cpu=True, n=64):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"model": str(model_dir), "preset": preset, "backend": "fake"}))
    rows = [{"round": t, "n_external": external, "train_cpu_s": 1.5 if cpu else None,
             "heldout_acc": 0.1 * t if t % 2 == 0 else None, "heldout_n": n if t % 2 == 0 else None}
            for t in (1, 2, 3, 4)]
    rows.append({"type": "eval", "kind": "baseline", "round": 0, "heldout_acc": 0.05, "n": n})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def find(data, stub_model, **kwargs):
    return find_solo_curve(data, "swarm-tiny", stub_model, "easy", data / "runs" / "default", **kwargs)


def test_the_experiments_solo_arm_is_the_curve_with_its_cpu_axis(tmp_path, stub_model):
    data = tmp_path / "data"
    write_results(data / "experiments" / "other-model", model="someone/else")
    write_results(data / "experiments" / "default")
    found = find(data, stub_model)
    assert found.rounds == (0, 5, 10)
    # per seed the mean of its 2 nodes (+0.005), then the mean of the 2 seeds
    assert found.accuracy == pytest.approx((0.2, 0.305, 0.405))
    assert found.spread == pytest.approx((0.0, 0.0, 0.0707107), abs=1e-6)  # sd of 0.355 and 0.455
    # engine CPU without evaluations: 5 rounds at 1.0 s (seed 0) and at 1.2 s (seed 1), mean 5.5 s a 5 rounds
    assert found.cpu_s == pytest.approx((0.0, 5.5, 11.0))
    assert (found.n, found.seeds, found.engine, found.threads) == (200, 2, "llama_cpp", 1)
    assert "config 8/0, mean of 2 seed(s)" in found.source and "default" in found.source


def test_an_experiment_with_other_learning_settings_is_not_the_curve(tmp_path, stub_model):
    data = tmp_path / "data"
    write_results(data / "experiments" / "default", settings={"train": {"learning_rate": 1e-3, "rounds": 5}})
    own = {"train": {"learning_rate": 3e-4, "rounds": 150}}
    assert find(data, stub_model, settings=own) is None
    assert settings_differ({"train": {"learning_rate": 1e-3, "rounds": 5}}, own) == ["train.learning_rate"]
    assert find(data, stub_model, settings={"train": {"learning_rate": 1e-3, "rounds": 150}}) is not None


def test_a_solo_run_of_the_same_model_is_the_curve(tmp_path, stub_model):
    data = tmp_path / "data"
    write_run(data / "runs" / "with-peers", stub_model, external=2)
    write_run(data / "runs" / "other-preset", stub_model, preset="paper")
    write_run(data / "runs" / "other-model", tmp_path)
    write_run(data / "runs" / "no-cpu", stub_model, cpu=False)  # written before rows carried engine CPU
    write_run(data / "runs" / "default", stub_model)  # the node's own run folder
    assert find(data, stub_model) is None
    write_run(data / "runs" / "alone", stub_model)
    found = find(data, stub_model)
    assert found.rounds == (0, 2, 4) and found.accuracy == (0.05, 0.2, 0.4)
    assert found.cpu_s == (0.0, 3.0, 6.0) and found.n == 64 and found.engine == "fake"
    assert found.source.startswith("solo run ") and found.source.endswith("alone")


def test_a_curve_on_as_many_held_out_items_as_the_node_wins(tmp_path, stub_model):
    data = tmp_path / "data"
    write_run(data / "runs" / "alone-64", stub_model, n=64)
    os.utime(data / "runs" / "alone-64" / "run.json", (1, 1))  # the older of the two
    write_run(data / "runs" / "alone-200", stub_model, n=200)
    assert find(data, stub_model, eval_n=64).source.endswith("alone-64")
    assert find(data, stub_model, eval_n=200).source.endswith("alone-200")
    assert find(data, stub_model, eval_n=100).source.endswith("alone-200")  # none has 100: the newest


def test_without_a_solo_run_the_curve_shipped_beside_the_model_is_used(tmp_path, stub_model):
    data = tmp_path / "data"
    shipped = json.loads((bundled_model_dir() / SHIPPED).read_text())
    (stub_model / SHIPPED).write_text(json.dumps(shipped))
    own = describe(Settings())
    apply_recommendations_to(own)
    found = find(data, stub_model, settings=own, eval_n=64)
    assert found.source.startswith("the app's benchmark (benchmarks/results/experiment), config 32/0")
    assert found.rounds[-1] == 150 and found.n == 200 and found.seeds == 3 and found.threads == 1
    own["train"]["learning_rate"] = 1e-3
    assert find(data, stub_model, settings=own) is None  # measured with other settings: not this recipe
    write_run(data / "runs" / "alone", stub_model)
    assert find(data, stub_model).source.endswith("alone")  # the user's own solo run comes first


def apply_recommendations_to(described):
    """The bundled model's swarm.toml applied, as `swarm run` applies it."""
    settings = Settings()
    apply_recommendations(settings, bundled_model_dir())
    described.update(describe(settings))


def test_the_shipped_curve_is_the_one_the_committed_cells_give():
    """assets/models/swarm-tiny/solo_curve.json is tools/make_solo_curve.py's output, not numbers typed in."""
    shipped = json.loads((bundled_model_dir() / SHIPPED).read_text())
    assert shipped == json.loads(json.dumps(make(ROOT / "benchmarks" / "results" / "experiment")))
    # the experiment's summary: solo gained +9.25 points in 150 rounds at 3.10 engine CPU s a round
    assert (shipped["accuracy"][-1] - shipped["accuracy"][0]) * 100 == pytest.approx(9.25)
    assert shipped["cpu_s"][-1] / 150 == pytest.approx(3.10, abs=0.01)


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


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_rows_carry_each_rounds_engine_cpu_without_its_evaluation_and_the_runs_total(stub_model, tmp_path,
                                                                                      monkeypatch):
    """The meter's axis: 64 sampled answers a round at 1 ms of CPU each, an evaluation of 16 greedy ones at 5 ms
    each every 2 rounds (left out of the round's figure); the run's total goes on across a restart."""
    complete = FakeBackend._complete

    def costly(self, prompt, index, sampling):
        burn(0.005 if sampling.temperature == 0 else 0.001)
        return complete(self, prompt, index, sampling)

    monkeypatch.setattr(FakeBackend, "_complete", costly)
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 2, eval_every=2, eval_n=16))
    _, events, _ = run(make_settings(stub_model, run_dir, 4, eval_every=2, eval_n=16))
    written = [r for r in rows(run_dir) if "type" not in r]
    assert [r["round"] for r in written] == [1, 2, 3, 4] and [r["heldout_n"] for r in written] == [None, 16] * 2
    for row in written:
        assert 0.064 <= row["train_cpu_s"] < 0.064 + 0.05, row  # the evaluation's 0.08 s is not in it
    totals = [round(sum(r["train_cpu_s"] for r in written[:t]), 4) for t in (1, 2, 3, 4)]
    assert [r["train_cpu_total_s"] for r in written] == pytest.approx(totals, abs=2e-4)
    assert [e.metrics.train_cpu_total_s for e in events if isinstance(e, RoundFinished)] == pytest.approx(totals[2:],
                                                                                                          abs=2e-4)
