"""Crash safety end to end: real processes killed with SIGKILL, then resumed."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from swarm_app.training.checkpoint import Checkpoints


def start(args, env_extra=None):
    env = {**os.environ, "SWARM_MODEL_MAX_NEW_TOKENS": "24", "SWARM_TRAIN_EVAL_EVERY": "0", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--log-format", "json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def events_of(output):
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def next_event(proc, name):
    """The next JSON event called `name` on the process's stdout (earlier lines are skipped)."""
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == name:
            return event
    raise AssertionError(f"the process ended before {name}")


def metric_rounds(run_dir, rows: int | None = None):
    """Round numbers of the first `rows` lines of metrics.jsonl (all lines when None). A SIGKILL can cut the
    line after them mid-write; the next start sets such a line aside (see test_reliability)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["round"] for line in lines[:rows]]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_mid_round_then_resume_with_the_torch_backend(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    common = ["--model", str(tiny_model_dir), "--backend", "torch", "--run-dir", str(run_dir),
              "--local", "4", "--completions", "4"]
    first = start(common + ["--rounds", "3"])
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert metric_rounds(run_dir) == [1, 2, 3]

    second = start(common + ["--rounds", "6"])
    started = next_event(second, "RunStarted")  # printed after the model loaded, as round 4 begins
    second.kill()  # SIGKILL: no handler runs
    second.communicate(timeout=60)
    assert started["event"] == "RunStarted" and started["start_round"] == 4

    third = start(common + ["--rounds", "6"])
    out, err = third.communicate(timeout=600)
    assert third.returncode == 0, err
    events = events_of(out)
    assert [e for e in events if e["event"] == "RunStarted"][0]["start_round"] == 4
    assert [e["metrics"]["round"] for e in events if e["event"] == "RoundFinished"] == [4, 5, 6]
    assert metric_rounds(run_dir) == [1, 2, 3, 4, 5, 6]

    from backends.base import ModelSpec
    from backends.torch.engine import TorchBackend

    state, folder = Checkpoints(run_dir).load_latest()
    assert state.round == 6 and state.metrics_rows == 6
    backend = TorchBackend()
    backend.load(ModelSpec(str(tiny_model_dir)))
    backend.load_adapter(folder)  # raises if the adapter is not loadable


def test_sigkill_at_random_moments_never_breaks_the_checkpoint(stub_model, tmp_path):
    """Ten kills at random moments of a fast fake-backend run: every time, the run resumes cleanly."""
    model = stub_model
    run_dir = tmp_path / "run"
    args = ["--model", str(model), "--backend", "fake", "--run-dir", str(run_dir), "--rounds", "100000",
            "--local", "2", "--completions", "2"]
    rng = random.Random(0)
    resumed_from = []
    for _ in range(10):
        proc = start(args)
        started = next_event(proc, "RunStarted")
        resumed_from.append(started["start_round"])
        next_event(proc, "RoundFinished")  # tasks are imported now: rounds take milliseconds
        time.sleep(rng.uniform(0.0, 0.3))
        proc.kill()
        proc.communicate(timeout=60)
        state, _ = Checkpoints(run_dir).load_latest()
        assert metric_rounds(run_dir, state.metrics_rows) == list(range(1, state.round + 1))
    assert resumed_from == sorted(resumed_from) and resumed_from[-1] > 10  # progress across kills
    proc = start(args[:-6] + ["--rounds", "0"])
    next_event(proc, "RoundFinished")
    proc.send_signal(signal.SIGINT)  # Ctrl-C: saves and exits 0
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    state, _ = Checkpoints(run_dir).load_latest()
    assert metric_rounds(run_dir) == list(range(1, state.round + 1))
