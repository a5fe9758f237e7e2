"""`swarm watch`: its one-line errors, `--no-ui` against a real node process, and the TUI in tmux."""

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from swarm_app.cli import main
from swarm_app.watch.endpoint import StatusEndpoint
from swarm_app.watch.file import WatchInfo, write_watch_file
from swarm_app.watch.history import EventHistory

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_no_watch_file_says_no_node_runs_there(tmp_path, capsys):
    assert main(["watch", "--no-ui", "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (f"swarm: no node is running in {tmp_path / 'run'}; start one with swarm run "
                                       "(or pass the node's --run-dir)\n")


def test_a_stale_watch_file_says_the_node_is_gone(tmp_path, capsys):
    port = free_port()  # closed again: nothing listens there
    write_watch_file(tmp_path, WatchInfo(port, "token", 4242))
    assert main(["watch", "--run-dir", str(tmp_path)]) == 2  # the TUI never starts
    err = capsys.readouterr().err
    assert err.startswith(f"swarm: no node answers on 127.0.0.1:{port}: {tmp_path / 'watch.json'} is stale")
    assert "4242" in err and "swarm run" in err and err.count("\n") == 1


def test_a_refused_token_is_one_line(tmp_path, capsys):
    async def scenario():
        async with StatusEndpoint(EventHistory(), tmp_path) as endpoint:
            write_watch_file(tmp_path, WatchInfo(endpoint.info.port, "not-the-token", os.getpid()))
            return await asyncio.to_thread(main, ["watch", "--no-ui", "--run-dir", str(tmp_path)])

    assert asyncio.run(scenario()) == 2
    err = capsys.readouterr().err
    assert "refused the token" in err and "start the node with swarm run" in err and err.count("\n") == 1


def node_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    return {**env, "SWARM_HOME": str(home), "SWARM_PEER_ENABLED": "false", "PYTHONUNBUFFERED": "1"}


def start_node(stub_model, run_dir, env) -> subprocess.Popen:
    node = subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--backend", "fake", "--model",
                             str(stub_model), "--rounds", "0", "--run-dir", str(run_dir)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (run_dir / "watch.json").exists():
        assert node.poll() is None, node.communicate()
        assert time.monotonic() < deadline, "the node wrote no watch.json in 30 s"
        time.sleep(0.05)
    return node


def stop_node(node: subprocess.Popen) -> tuple[int, str]:
    node.send_signal(signal.SIGTERM)
    out, _ = node.communicate(timeout=30)
    return node.returncode, out


@pytest.fixture
def node(stub_model, tmp_path, isolated_home):
    run_dir = tmp_path / "run"
    env = node_env(isolated_home)
    process = start_node(stub_model, run_dir, env)
    yield process, run_dir, env
    if process.poll() is None:
        process.kill()
        process.communicate()


def test_no_ui_prints_the_round_lines_and_exits_0_when_the_node_stops(node):
    process, run_dir, env = node
    watcher = subprocess.Popen([sys.executable, "-m", "swarm_app", "watch", "--no-ui", "--run-dir", str(run_dir)],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while sum(line.startswith("round ") for line in lines) < 20:
            line = watcher.stdout.readline()
            assert line, watcher.communicate(timeout=10)
            lines.append(line)
        node_rc, node_out = stop_node(process)
        out, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    lines += out.splitlines(keepends=True)
    rounds = [int(m.group(1)) for m in map(re.compile(r"round (\d+) ").match, lines) if m]
    assert rounds == list(range(rounds[0], rounds[-1] + 1))  # replay then live: no round missed or twice
    assert rounds[0] == 1 or len(rounds) >= 500  # the replay reaches back 500 rounds
    last = re.search(r"stopped after round (\d+) \(interrupted\)", node_out)
    assert node_rc == 0 and last and rounds[-1] == int(last.group(1))
    assert watcher.returncode == 0 and f"stopped after round {rounds[-1]} (interrupted)" in out
    assert err == ""


def tmux(socket_name: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket_name, *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_tui_in_tmux_shows_rounds_and_quits_with_q(node, tmp_path):
    process, run_dir, env = node
    exit_file = tmp_path / "watch-exit"
    socket_name = f"swarm-watch-{uuid.uuid4().hex[:8]}"
    command = (f"cd {REPO} && env SWARM_HOME={env['SWARM_HOME']} SWARM_PEER_ENABLED=false "
               f"{sys.executable} -m swarm_app watch --run-dir {run_dir}; echo EXIT=$? > {exit_file}")
    tmux(socket_name, "new-session", "-d", "-x", "100", "-y", "30", command)
    try:
        screen = wait_for_screen(socket_name, lambda text: any(int(n) > 0 for n in re.findall(r"round (\d+)", text)))
        assert "read-only" in screen
        tmux(socket_name, "send-keys", "q")
        deadline = time.monotonic() + 20
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exit_file.read_text().strip() == "EXIT=0"
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
    node_rc, node_out = stop_node(process)
    assert node_rc == 0 and "stopped after round" in node_out


def wait_for_screen(socket_name: str, ready, seconds: float = 60.0) -> str:
    deadline = time.monotonic() + seconds
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux(socket_name, "capture-pane", "-p")
        if ready(screen):
            return screen
        time.sleep(0.25)
    raise AssertionError(f"the screen never showed a finished round:\n{screen}")
