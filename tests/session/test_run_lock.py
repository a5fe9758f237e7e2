"""One node per run folder (issue 29): real `swarm run` processes on one folder, a `kill -9` that leaves
no stale lock, and metrics rows that stay one per round on resume even after two writers raced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.session.test_session import make_settings, rows, run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="kill -9 and the POSIX branch of the lock")


def swarm_run(stub_model: Path, run_dir: Path, rounds: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--backend", "fake",
                             "--model", str(stub_model), "--run-dir", str(run_dir), "--rounds", str(rounds), "--seed", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_rows(run_dir: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not ((run_dir / "metrics.jsonl").exists() and (run_dir / "checkpoints" / "latest.json").exists()):
        assert time.monotonic() < deadline, "the first node never finished a round"
        time.sleep(0.1)


@pytest.fixture
def env(isolated_home) -> dict:
    return {**os.environ, "SWARM_TRAIN_EVAL_EVERY": "0"}


@pytest.mark.timeout(180)
def test_a_second_run_on_the_folder_exits_2_naming_the_pid_and_kill_9_leaves_no_stale_lock(stub_model, tmp_path, env):
    run_dir = tmp_path / "run"
    first = swarm_run(stub_model, run_dir, 0, env)  # trains until stopped
    try:
        wait_for_rows(run_dir)
        second = swarm_run(stub_model, run_dir, 3, env)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "swarm watch" in lines[0], err
        assert "round" not in out  # it trained nothing
    finally:
        first.send_signal(signal.SIGKILL)  # no clean stop: only the OS releases the lock
        first.communicate(timeout=30)
    third = swarm_run(stub_model, run_dir, 0, env)
    try:
        wait_for_rows(run_dir)
        before = len(rows(run_dir))
        deadline = time.monotonic() + 60
        while len(rows(run_dir)) <= before + 2:  # it trains: the lock of the killed process is gone
            assert third.poll() is None and time.monotonic() < deadline, third.stderr.read()
            time.sleep(0.1)
    finally:
        third.send_signal(signal.SIGTERM)
        out, err = third.communicate(timeout=60)
    assert third.returncode == 0, err
    rounds = [row["round"] for row in rows(run_dir)]
    assert rounds == list(range(1, len(rounds) + 1))  # one row per round, none lost, none twice


def test_rows_of_two_writers_that_raced_become_one_per_round_on_resume(stub_model, tmp_path):
    """What two nodes on one folder used to leave (rounds 1,2,3,3,4,4,5,5,6,6): a resume keeps one of each."""
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 6))
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    raced = lines[:2] + [line for line in lines[2:] for _ in (1, 2)]
    (run_dir / "metrics.jsonl").write_text("\n".join(raced) + "\n")
    assert [json.loads(line)["round"] for line in raced] == [1, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    run(make_settings(stub_model, run_dir, 8))
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4, 5, 6, 7, 8]
