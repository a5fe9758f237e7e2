"""`swarm chat --run-dir RUN` while a real `swarm run` trains in RUN (two processes): the chat answers from the
run's checkpoint, takes no lock, and the node's metrics rows keep growing after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

SWARM = [sys.executable, "-m", "swarm_app"]


def rows(run_dir) -> int:
    path = run_dir / "metrics.jsonl"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def wait_until(condition, seconds: float, what: str, node) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert node.poll() is None, f"the node ended early: {node.stderr.read()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_chat_answers_while_the_node_trains_in_the_same_folder(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    node = subprocess.Popen([*SWARM, "run", "--no-ui", "--offline", "--threads", "1", "--backend", "torch",
                             "--rounds", "200", "--run-dir", str(run_dir)], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: (run_dir / "checkpoints" / "latest.json").exists(), 240, "a first checkpoint", node)
        chat = subprocess.run([*SWARM, "chat", "--run-dir", str(run_dir), "--threads", "1", "--prompt", "What is 2 + 2?"],
                              env=env, capture_output=True, text=True, timeout=240)
        after_chat = rows(run_dir)
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip() and "the adapter of round" in chat.stderr and "in use" not in chat.stderr
        wait_until(lambda: rows(run_dir) >= after_chat + 2, 240, "two more rounds after the chat", node)
    finally:
        node.send_signal(signal.SIGTERM)  # the node checkpoints and exits 0
        code = node.wait(timeout=120)
    assert code == 0, node.stderr.read()
