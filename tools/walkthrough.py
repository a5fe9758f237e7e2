"""A new user's first hour, replayed: the README's commands and the bad inputs of issue 29, each run as a
process in a fresh HOME (HOME and SWARM_HOME in a temp folder), each judged on its exit code and on
what reaches the screen. It fails on any traceback on screen, on an exit code other than the one
expected, and on a failure that takes more than one line to say.

    python tools/walkthrough.py [--rounds 2] [--swarm PATH] [--keep] [--trimmed]

--rounds: the quick start's length (the README says 20; a short run shows the same screens). Training runs
pass --offline: the walk-through must not join a swarm on the machine's LAN. --swarm: an installed
launcher to walk through instead of `python -m swarm_app`. Steps that need tmux (the TUI) or a folder
root cannot make read-only are skipped, and say so. Prints one line per step; exit 0 when every step
passed. tests/test_walkthrough.py runs it (slow); `.ci/run` runs `--trimmed`.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRESS = ("eval: ",)
"""Lines a command prints on stderr while it works (`swarm eval`'s progress): not part of a failure's line."""
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s+File \".*\", line \d+", re.MULTILINE)


@dataclass
class Step:
    title: str
    argv: list[str]
    code: int = 0
    one_line: bool = False
    """A failure: stderr must be exactly one line."""
    expect: str = ""
    """A regex the output (stdout + stderr) must match."""
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 900


@dataclass
class Outcome:
    title: str
    code: int
    seconds: float
    problems: list[str]
    said: str


class Walk:
    def __init__(self, swarm: list[str], home: Path, this_checkout: bool) -> None:
        self.swarm, self.home = swarm, home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARM_", "XDG_", "PYTHONPATH"))}
        self.env.update(HOME=str(home), SWARM_HOME=str(home / "swarm"))
        if this_checkout:  # `python -m swarm_app` from any folder imports this checkout (an installed launcher: its own)
            self.env["PYTHONPATH"] = str(ROOT)
        self.outcomes: list[Outcome] = []

    def run(self, step: Step) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run([*self.swarm, *step.argv], capture_output=True, text=True, cwd=self.home,
                              env={**self.env, **step.env}, timeout=step.timeout)
        self.judge(step, done.returncode, done.stdout, done.stderr, time.monotonic() - started)
        return done

    def judge(self, step: Step, code: int, out: str, err: str, seconds: float) -> None:
        problems = []
        if code != step.code:
            problems.append(f"exit {code}, expected {step.code}")
        if TRACEBACK.search(out + err):
            problems.append("a traceback on screen")
        lines = [line for line in err.strip().splitlines() if not line.startswith(PROGRESS)]
        if step.one_line and len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected 1")
        if step.expect and not re.search(step.expect, out + err):
            problems.append(f"no {step.expect!r} in the output")
        shown = lines if step.one_line or code != step.code else out.strip().splitlines()  # stderr says why it failed
        said = (shown or lines or [""])[-1]
        outcome = Outcome(step.title, code, seconds, problems, said[:160])
        self.outcomes.append(outcome)
        print(f"{'FAIL' if problems else 'ok  '} exit {code}  {seconds:6.1f}s  {step.title}", flush=True)
        print(f"     {'; '.join(problems) + ' | ' if problems else ''}{outcome.said}", flush=True)
        if code != step.code:
            print("".join(f"     stderr: {line}\n" for line in err.strip().splitlines()[-8:]), end="", flush=True)

    def skip(self, title: str, why: str) -> None:
        print(f"skip           {title}: {why}", flush=True)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.problems]


def damaged_model(where: Path) -> Path:
    """The bundled model's folder (config, tokenizer and chat template all valid) with a cut model.safetensors."""
    folder = where / "damaged-model"
    shutil.copytree(ROOT / "assets" / "models" / "swarm-tiny", folder, ignore=shutil.ignore_patterns("*.gguf"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    return folder


def stub_model(where: Path) -> Path:
    """A folder that passes the model checks, for the fake engine (it loads nothing)."""
    folder = where / "stub-model"
    folder.mkdir()
    for name, text in (("config.json", "{}"), ("tokenizer.json", "{}"), ("tokenizer_config.json", '{"chat_template": "x"}')):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def readme_commands(walk: Walk, rounds: int, work: Path) -> Path:
    run_dir = walk.home / "swarm" / "data" / "runs" / "default"
    walk.run(Step("swarm --version", ["--version"], expect=r"^swarm-app "))
    walk.run(Step("swarm --help", ["--help"], expect="COMMAND"))
    walk.run(Step("swarm doctor", ["doctor", "--listen", "127.0.0.1:0"], expect=r"run settings: I = 8 questions, J = 24"))
    walk.run(Step("swarm doctor --json", ["doctor", "--json", "--listen", "127.0.0.1:0"], expect='"run": '))
    walk.run(Step(f"quick start: swarm run --no-ui --offline --rounds {rounds}", ["run", "--no-ui", "--offline", "--rounds",
                  str(rounds)], expect=rf"round {rounds}/{rounds}.*\n(.*\n)*stopped after round {rounds} \(finished\)"))
    walk.run(Step("the start line says what the run uses", ["run", "--no-ui", "--offline", "--rounds", str(rounds + 1)],
                  expect=r"offline .*\n.*runs I = 8, L = 8"))
    walk.run(Step("swarm identity show", ["identity", "show"], expect="node id"))
    walk.run(Step("swarm watch --no-ui (no node running)", ["watch", "--no-ui", "--run-dir", str(run_dir)], code=2,
                  one_line=True, expect="no node is running"))
    return run_dir


def the_other_commands(walk: Walk, rounds: int, work: Path, run_dir: Path) -> None:
    """The rest of the README's commands (eval, demo, export, convert, identity, settings from the environment)."""
    walk.run(Step("a finished run says so", ["run", "--no-ui", "--offline", "--rounds", str(rounds + 1)],
                  expect="already finished"))
    walk.run(Step("swarm eval --adapter RUN (progress on stderr)", ["eval", "--adapter", str(run_dir), "--n", "20"],
                  expect=r"eval: greedy: 20/20 questions"))
    walk.run(Step("swarm demo --nodes 2 --rounds 2 --no-ui", ["demo", "--nodes", "2", "--rounds", "2", "--no-ui",
                  "--out", str(work / "demo")], expect=r"base .*untouched model"))
    walk.run(Step("swarm export RUN --gguf DIR --ollama NAME", ["export", str(run_dir), "--gguf", str(work / "gguf"),
                  "--ollama", "tiny"], expect="exported round"))
    walk.run(Step("swarm export onto the files it wrote", ["export", str(run_dir), "--gguf", str(work / "gguf")],
                  expect="exported round"))
    walk.run(Step("swarm convert --to mlx", ["convert", "--to", "mlx", "--run-dir", str(run_dir)], expect="converted"))
    walk.run(Step("swarm convert --to torch", ["convert", "--to", "torch", "--run-dir", str(run_dir)], expect="converted"))
    walk.run(Step("swarm identity export FILE", ["identity", "export", str(work / "key.pem")]))
    walk.run(Step("swarm identity import FILE (the same key)", ["identity", "import", str(work / "key.pem")]))
    walk.run(Step("SWARM_TRAIN_LOCAL=4 swarm run (settings from the environment)", ["run", "--no-ui", "--offline",
                  "--rounds", "1", "--run-dir", str(work / "env-run")], env={"SWARM_TRAIN_LOCAL": "4"}, expect="runs I = 4,"))


def bad_inputs(walk: Walk, work: Path, run_dir: Path) -> None:
    a_file = work / "a-file.txt"  # a file where a folder (or a new file) is wanted
    a_file.write_text("not a folder\n")
    bad = damaged_model(work)
    walk.run(Step("a damaged model.safetensors (swarm run)", ["run", "--no-ui", "--offline", "--rounds", "1", "--model",
                  str(bad), "--run-dir", str(work / "bad-run")], code=2, one_line=True, expect="model.safetensors"))
    walk.run(Step("a damaged model.safetensors (swarm eval)", ["eval", "--model", str(bad), "--n", "5"], code=2,
                  one_line=True, expect="model.safetensors"))
    for title, argv, needle in (
        ("--round (an abbreviation)", ["run", "--no-ui", "--offline", "--round", "3"], "unrecognized arguments: --round"),
        ("--model that does not exist", ["run", "--no-ui", "--offline", "--model", str(work / "none")], "does not exist"),
        ("--tasks nonsense", ["run", "--no-ui", "--offline", "--tasks", "nonsense"], "unknown task preset"),
        ("--backend warp", ["run", "--no-ui", "--offline", "--backend", "warp"], "choose one of"),
        ("--local 0", ["run", "--no-ui", "--offline", "--local", "0"], "out of range"),
        ("--run-dir that is a file", ["run", "--no-ui", "--offline", "--run-dir", str(a_file)], "is a file"),
        ("swarm identity export onto a file", ["identity", "export", str(a_file)], "exists"),
    ):
        step = Step(title, argv, code=2, expect=needle)
        step.one_line = "unrecognized" not in needle  # argparse's own error: its usage line, then the error
        walk.run(step)
    walk.run(Step("swarm run -v (after the command)", ["run", "-v", "--no-ui", "--offline", "--rounds", "1",
                  "--run-dir", str(run_dir)], expect="already finished"))
    other = work / "other.pem"
    subprocess.run([sys.executable, "-c", "import sys; from swarm_app.peer.core.identity import Identity; "
                    "open(sys.argv[1], 'wb').write(Identity.generate().to_pem())", str(other)], check=True, env=walk.env)
    walk.run(Step("swarm identity import ANOTHER (refused)", ["identity", "import", str(other)], code=2, one_line=True,
                  expect="--force"))
    walk.run(Step("swarm identity import --force ANOTHER", ["identity", "import", "--force", str(other)]))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        walk.run(Step("swarm doctor with the listen port taken", ["doctor", "--listen", f"127.0.0.1:{port}"], code=1,
                      one_line=True, expect="check failed: listen"))
    walk.run(Step("swarm doctor with no --peer answering", ["doctor", "--listen", "127.0.0.1:0", "--peer", "127.0.0.1:9"],
                  code=1, one_line=True, expect="no bootstrap or --peer address answers"))


def two_nodes_one_folder(walk: Walk, work: Path) -> None:
    """A node trains; a second on its folder is refused naming it; after a kill -9 a third starts at once."""
    run_dir = work / "shared-run"
    first = subprocess.Popen([*walk.swarm, "run", "--no-ui", "--offline", "--rounds", "0", "--run-dir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=walk.env, cwd=walk.home)
    try:
        for line in first.stdout:
            if line.startswith("run "):  # its start line: the folder is locked from before the model loads
                break
        walk.run(Step("a second swarm run on a folder in use", ["run", "--no-ui", "--offline", "--rounds", "1",
                      "--run-dir", str(run_dir)], code=2, one_line=True, expect=rf"pid {first.pid}.*swarm watch"))
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    walk.run(Step("swarm run after a kill -9 of the node (no stale lock)", ["run", "--no-ui", "--offline", "--rounds",
                  "1", "--run-dir", str(run_dir)], expect=r"stopped after round 1|already finished its 1 rounds"))


def folder_turns_unwritable(walk: Walk, work: Path) -> None:
    """The run folder turns read-only while a node trains (fake engine: a round every few milliseconds)."""
    run_dir = work / "readonly-run"
    checkpoints = run_dir / "checkpoints"
    title = "the run folder turns unwritable mid-run"
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if root and shutil.which("chattr") is None:
        walk.skip(title, "root without chattr cannot make a folder read-only")
        return
    started = time.monotonic()
    node = subprocess.Popen([*walk.swarm, "run", "--no-ui", "--offline", "--backend", "fake", "--model",
                             str(stub_model(work)), "--run-dir", str(run_dir), "--rounds", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=walk.env, cwd=walk.home)
    while not (checkpoints / "latest.json").exists() and node.poll() is None:
        time.sleep(0.1)
    locked = [checkpoints, run_dir]
    try:
        for folder in locked:
            subprocess.run(["chattr", "+i", str(folder)], check=True) if root else os.chmod(folder, 0o555)
        out, err = node.communicate(timeout=120)
    finally:
        for folder in locked:
            subprocess.run(["chattr", "-i", str(folder)], check=False) if root else os.chmod(folder, 0o755)
    walk.judge(Step(title, [], code=1, one_line=True, expect="cannot write"), node.returncode, out[-2000:], err,
               time.monotonic() - started)


class Tmux:
    """One tmux server of its own, one window running `command` (a real terminal for the TUI)."""

    def __init__(self, command: str, env: dict[str, str], size=(500, 30)) -> None:
        self.socket = f"swarm-walk-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k in ("HOME", "SWARM_HOME", "PATH",
                                                                                        "PYTHONPATH", "TERM"))
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-x", str(size[0]), "-y", str(size[1]),
                        f"env {exports} TERM=xterm-256color {command}; sleep 600"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p"], capture_output=True, text=True).stdout

    def wait_for(self, pattern: str, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if re.search(pattern, screen := self.screen()):
                return screen
            time.sleep(0.2)
        return self.screen()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def in_the_tui(walk: Walk, work: Path) -> None:
    if shutil.which("tmux") is None:
        walk.skip("the TUI steps", "tmux is not installed")
        return
    swarm = " ".join(shlex.quote(part) for part in walk.swarm)
    for title, args, wait, key, code in (
        ("TUI: swarm run --offline, then q", f"run --offline --rounds 0 --run-dir {work}/tui-run",
         r"round [1-9]\d*/?\d* · .*· offline", "q", 0),
        ("TUI: a damaged model.safetensors", f"run --offline --model {work}/damaged-model --run-dir {work}/tui-bad",
         r"swarm: ", "", 2),
    ):
        exit_file = work / f"exit-{uuid.uuid4().hex[:6]}"
        term = Tmux(f"{swarm} {args}; echo $? > {exit_file}", walk.env)
        started = time.monotonic()
        try:
            screen = term.wait_for(wait, 300)
            if key:
                subprocess.run(["tmux", "-L", term.socket, "send-keys", key], check=True)
            deadline = time.monotonic() + 120
            while not exit_file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            screen = term.screen()
        finally:
            term.close()
        got = int(exit_file.read_text().strip()) if exit_file.exists() else -1
        text = [line for line in screen.splitlines() if line.strip()]
        expect = "stopped after round" if code == 0 else "model.safetensors"
        walk.judge(Step(title, [], code=code, one_line=code != 0, expect=expect), got, screen,
                   "\n".join(text) if code else "", time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="the quick start's rounds (the README says 20)")
    parser.add_argument("--swarm", help="an installed swarm launcher (default: python -m swarm_app from this checkout)")
    parser.add_argument("--keep", action="store_true", help="keep the temp HOME and say where it is")
    parser.add_argument("--trimmed", action="store_true", help="the quick start and the bad inputs only (a few "
                        "minutes; what CI runs): no eval, demo, export, convert, identity, second node or TUI")
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="swarm-walkthrough-"))
    work = home / "work"
    work.mkdir()
    walk = Walk([args.swarm] if args.swarm else [sys.executable, "-m", "swarm_app"], home, not args.swarm)
    print(f"walk-through in a fresh HOME: {home}", flush=True)
    started = time.monotonic()
    try:
        run_dir = readme_commands(walk, args.rounds, work)
        if not args.trimmed:
            the_other_commands(walk, args.rounds, work, run_dir)
        bad_inputs(walk, work, run_dir)
        if not args.trimmed:
            two_nodes_one_folder(walk, work)
            folder_turns_unwritable(walk, work)
            in_the_tui(walk, work)
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    failed = walk.failed
    print(f"{len(walk.outcomes)} steps in {time.monotonic() - started:.0f} s: {len(walk.outcomes) - len(failed)} passed, "
          f"{len(failed)} failed" + (f" ({', '.join(o.title for o in failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
