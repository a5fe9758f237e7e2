"""The real command in a real terminal (tmux): `swarm run` on the bundled model, `q` and SIGTERM; and
SIGTERM for the headless view. Each waits on what the screen or the output shows, bounded."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from swarm_app.training.checkpoint import Checkpoints
from tests.slow_fake import slow_fake_engine

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or sys.platform == "win32", reason="needs tmux")


class Terminal:
    """One tmux server of our own (its own socket), one window running `command`."""

    def __init__(self, command: str, env: dict[str, str], size=(100, 30)) -> None:
        self.socket = f"swarm-test-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-x", str(size[0]), "-y", str(size[1]),
                        f"env {exports} {command}; sleep 60"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p"], capture_output=True,
                              text=True).stdout

    def wait_for(self, predicate, seconds: float = 120.0) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"the screen never showed what was expected:\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, "send-keys", *keys], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def a_round_finished(text: str) -> bool:
    """The title says "training · round N" (the last completed round) with N >= 1."""
    return re.search(r"training · round [1-9]", text) is not None


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"SWARM_HOME": str(tmp_path / "home"), "SWARM_PEER_ENABLED": "false", "SWARM_MODEL_THREADS": "1",
            "SWARM_TRAIN_EVAL_EVERY": "0", "PATH": os.environ["PATH"], "TERM": "xterm-256color"}


def swarm_run(tmp_path: Path, *extra: str) -> str:
    swarm = shutil.which("swarm") or f"{sys.executable} -m swarm_app"
    return (f"sh -c 'echo $$ > {tmp_path}/pid; exec {swarm} run --run-dir {tmp_path}/run --rounds 0 {' '.join(extra)}'"
            f"; echo EXIT=$? > {tmp_path}/exit")  # Textual draws on stderr: no redirection


def exit_code(tmp_path: Path, seconds: float = 60.0) -> int:
    deadline = time.monotonic() + seconds
    while not (tmp_path / "exit").exists():
        assert time.monotonic() < deadline, "the command did not end"
        time.sleep(0.2)
    return int((tmp_path / "exit").read_text().strip().split("=")[1])


def assert_checkpoint_loads(run_dir: Path) -> int:
    from backends.base import ModelSpec
    from backends.torch.engine import TorchBackend
    from swarm_app.kernel.paths import bundled_model_dir

    state, folder = Checkpoints(run_dir).load_latest()
    backend = TorchBackend()
    backend.load(ModelSpec(str(bundled_model_dir())))
    backend.load_adapter(folder)  # raises if the checkpoint cannot be loaded
    backend.close()
    return state.round


@pytest.mark.timeout(300)
def test_q_in_the_tui_checkpoints_and_exits_0(tmp_path, env):
    term = Terminal(swarm_run(tmp_path), env)
    try:
        screen = term.wait_for(a_round_finished)
        assert "Dashboard" in screen and "swarm-tiny" in screen
        term.keys("q")
        assert exit_code(tmp_path) == 0, term.screen()
        assert "stopped after round" in term.wait_for(lambda t: "stopped after round" in t, 30)
    finally:
        term.close()
    assert assert_checkpoint_loads(tmp_path / "run") >= 1


@pytest.mark.timeout(300)
def test_sigterm_stops_the_tui_cleanly(tmp_path, env):
    term = Terminal(swarm_run(tmp_path), env)
    try:
        term.wait_for(a_round_finished)
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGTERM)
        assert exit_code(tmp_path) == 0, term.screen()
        assert "stopped after round" in term.wait_for(lambda t: "stopped after round" in t, 30)
    finally:
        term.close()
    assert assert_checkpoint_loads(tmp_path / "run") >= 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("when", ["loading", "training"])
def test_sigterm_stops_the_headless_view_cleanly(tmp_path, env, when):
    proc = subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--log-format", "json",
                             "--run-dir", str(tmp_path / "run"), "--rounds", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wanted = "ModelLoading" if when == "loading" else "RoundFinished"
    for line in proc.stdout:
        if json.loads(line)["event"] == wanted:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0 and "Traceback" not in err
    assert events[-1]["event"] == "RunStopped" and events[-1]["reason"] == "interrupted"


@pytest.mark.timeout(300)
def test_a_damaged_model_in_the_tui_is_one_line_and_exit_2(tmp_path, env):
    """Issue 29: it was a 755-line traceback and exit 0; the traceback belongs in swarm.log only."""
    from tests.session.test_one_line_failures import damaged_model

    term = Terminal(swarm_run(tmp_path, "--model", str(damaged_model(tmp_path))), env, size=(400, 30))  # no wrap
    try:
        assert exit_code(tmp_path, 120) == 2, term.screen()
        screen = term.wait_for(lambda t: "swarm: " in t, 30)
    finally:
        term.close()
    said = [line for line in screen.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("swarm: ") and "model.safetensors" in said[0], screen
    assert "Traceback" not in screen
    assert "Traceback" in (tmp_path / "home" / "log" / "swarm.log").read_text()


@pytest.mark.timeout(300)
def test_q_during_the_demos_final_evaluation_keeps_the_summary(tmp_path, env, stub_model):
    """Issue 29: `q` after "finished" printed a summary without rows while the final evaluations ran unseen."""
    slowed = slow_fake_engine(tmp_path / "hook", greedy_s=0.005)  # alone, it evaluates 2000 items in 0.1 s
    swarm = shutil.which("swarm") or f"{sys.executable} -m swarm_app"
    command = (f"{swarm} demo --nodes 2 --rounds 2 --backend fake --model {stub_model} --out {tmp_path}/demo"
               f"; echo EXIT=$? > {tmp_path}/exit")
    term = Terminal(command, {**env, "SWARM_TRAIN_EVAL_N": "2000", **slowed}, size=(120, 30))
    try:
        term.wait_for(lambda t: re.search(r"final evaluation \d+/2000", t) is not None, 180)
        term.keys("q")
        assert exit_code(tmp_path) == 0, term.screen()
        screen = term.wait_for(lambda t: "cum. total reward" in t, 30)
    finally:
        term.close()
    rows = screen.split("cum. total reward", 1)[1].splitlines()
    assert sum(re.match(r"\s+[01]\s+fake\s+2\s", line) is not None for line in rows) == 2, screen


FAKE_BATTERY = '''\
"""Test-only: psutil's battery reading comes from the JSON file named by SWARM_TEST_BATTERY."""
import json, os, psutil, collections
_Battery = collections.namedtuple("sbattery", "percent secsleft power_plugged")
def _battery():
    state = json.loads(open(os.environ["SWARM_TEST_BATTERY"]).read())
    return _Battery(50, -1, state["plugged"])
psutil.sensors_battery = _battery
'''


def rows_of(run_dir: Path) -> int:
    try:
        return len((run_dir / "metrics.jsonl").read_text().splitlines())
    except FileNotFoundError:
        return 0


def round_seconds(run_dir: Path, timeout_s: float = 120.0) -> float:
    """The wall time of one whole round here and now: between the next two rows of metrics.jsonl."""
    deadline, marks = time.monotonic() + timeout_s, []
    last = rows_of(run_dir)
    while len(marks) < 2:
        assert time.monotonic() < deadline, "no two rounds finished"
        time.sleep(0.05)
        if rows_of(run_dir) > last:
            last = rows_of(run_dir)
            marks.append(time.monotonic())
    return marks[1] - marks[0]


def test_unplugging_pauses_the_run_and_plugging_in_resumes_it(tmp_path, env):
    """A real `swarm run` whose battery reading (psutil's, injected) goes from mains to battery and back:
    on battery, no round but the one under way finishes for three rounds' time (and two polls of the rules)."""
    from swarm_app.resources.policy import POLL_S

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAKE_BATTERY)
    battery = tmp_path / "battery.json"
    battery.write_text('{"plugged": true}')
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)  # this checkout's code too
    env = {**env, "PYTHONPATH": path, "SWARM_TEST_BATTERY": str(battery)}
    run_dir = tmp_path / "run"
    term = Terminal(swarm_run(tmp_path), env)
    try:
        term.wait_for(a_round_finished)
        round_s = round_seconds(run_dir)
        battery.write_text('{"plugged": false}')
        term.wait_for(lambda text: "paused: on battery" in text and "plugged in" in text, seconds=60)
        paused_at = rows_of(run_dir)
        time.sleep(max(3 * round_s, 2 * POLL_S) + 1)  # held: three rounds' time, and the rules polled twice more
        assert rows_of(run_dir) <= paused_at + 1, (round_s, paused_at)  # the round under way may finish
        assert "paused: on battery" in term.screen()
        battery.write_text('{"plugged": true}')
        term.wait_for(lambda text: "paused" not in text and a_round_finished(text), seconds=60)
        resumed = rows_of(run_dir)
        term.wait_for(lambda text: rows_of(run_dir) > resumed + 1)
        term.keys("q")
        assert exit_code(tmp_path) == 0
    finally:
        term.close()
