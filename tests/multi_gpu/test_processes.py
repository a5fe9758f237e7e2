"""`swarm run --gpus`: one node per GPU, tested with two fake GPUs (a fake nvidia-smi on PATH) and the
fake engine: two nodes, two keys, two run folders, and one Ctrl-C stops both cleanly."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from swarm_app.kernel.errors import UsageError
from swarm_app.multi_gpu.processes import parse_gpus, without_gpus_flag
from swarm_app.training.checkpoint import Checkpoints

FAKE_SMI = """#!/bin/sh
printf 'NVIDIA GeForce RTX 4090, 24564, 8.9, 550.54\\nNVIDIA GeForce RTX 4090, 24564, 8.9, 550.54\\n'
"""


def test_gpu_lists_are_checked_against_the_machine():
    assert parse_gpus("all", 2) == [0, 1] and parse_gpus("1", 2) == [1] and parse_gpus("0, 1", 2) == [0, 1]
    with pytest.raises(UsageError, match="has 1 GPU"):
        parse_gpus("3", 1)
    with pytest.raises(UsageError, match="no NVIDIA GPU found"):
        parse_gpus("all", 0)
    for bad in ("0,0", "x", ""):
        with pytest.raises(UsageError):
            parse_gpus(bad, 2)


def test_the_gpus_flag_is_not_passed_on():
    assert without_gpus_flag(["--gpus", "all", "--rounds", "3", "--gpus=0"]) == ["--rounds", "3"]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX fake nvidia-smi")
@pytest.mark.timeout(180)
def test_two_fake_gpus_run_two_nodes_that_stop_on_ctrl_c(stub_model, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    home = tmp_path / "home"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SWARM_HOME": str(home),
           "SWARM_PEER_ENABLED": "true", "SWARM_TRAIN_EVAL_EVERY": "0"}
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--gpus", "all", "--backend", "fake",
                             "--model", str(stub_model), "--run-dir", str(run_dir), "--rounds", "0",
                             "--listen", "127.0.0.1:0", "--no-mdns"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if "  round " in line:
            seen.add(line.split("  round ")[0])
        if seen == {"gpu 0", "gpu 1"} or time.monotonic() > deadline:
            break
    assert seen == {"gpu 0", "gpu 1"}
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "gpu 0  stopped after round" in out and "gpu 1  stopped after round" in out
    keys = [(home / "data" / f"node-key-gpu-{g}.pem").read_bytes() for g in (0, 1)]
    assert keys[0] != keys[1]
    for g in (0, 1):
        assert Checkpoints(tmp_path / f"run-gpu{g}").load_latest()[0].round >= 1
