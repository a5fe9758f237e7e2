"""Time from process start to the first thing a user sees: Textual's first frame of `swarm run`, and
the first line of `swarm run --no-ui`. Goal: under 1.5 s for both (issue 11).

The TUI is started in a tmux window of its own and its screen is polled every 10 ms for the tab bar;
the headless line is read from a pipe. Both runs use the bundled model, offline, in a temp SWARM_HOME,
and are stopped as soon as the figure is taken. Prints the median of --repeat runs; writes JSON.

    python benchmarks/startup.py [--repeat 5] [--out benchmarks/results/startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def swarm_command() -> list[str]:
    found = shutil.which("swarm")
    return [found] if found else [sys.executable, "-m", "swarm_app"]


def first_headless_line(env: dict[str, str], run_dir: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen([*swarm_command(), "run", "--no-ui", "--offline", "--rounds", "0", "--run-dir", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    proc.stdout.readline()
    took = time.perf_counter() - started
    proc.terminate()
    proc.wait(timeout=60)
    return took


def first_frame(env: dict[str, str], run_dir: Path) -> float:
    socket = f"swarm-startup-{uuid.uuid4().hex[:8]}"
    exports = " ".join(f"{k}={v}" for k, v in env.items() if k.startswith(("SWARM_", "PATH", "TERM")))
    command = " ".join(swarm_command()) + f" run --offline --rounds 0 --run-dir {run_dir}"
    subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-x", "100", "-y", "30", "sleep 600"], check=True)
    try:
        started = time.perf_counter()
        subprocess.run(["tmux", "-L", socket, "respawn-pane", "-k", f"env {exports} {command}"], check=True)
        deadline = started + 60
        while time.perf_counter() < deadline:
            screen = subprocess.run(["tmux", "-L", socket, "capture-pane", "-p"], capture_output=True, text=True).stdout
            if "Dashboard" in screen:
                return time.perf_counter() - started
            time.sleep(0.01)
        raise RuntimeError("no frame within 60 s")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/startup.json")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="swarm-startup-"))
    env = {**os.environ, "SWARM_HOME": str(home), "SWARM_PEER_ENABLED": "false", "TERM": "xterm-256color"}
    results = {"tui_first_frame_s": [], "headless_first_line_s": []}
    for i in range(args.repeat):
        results["headless_first_line_s"].append(round(first_headless_line(env, home / f"h{i}"), 3))
        results["tui_first_frame_s"].append(round(first_frame(env, home / f"t{i}"), 3))
    summary = {name: statistics.median(values) for name, values in results.items()}
    for name, median in summary.items():
        print(f"{name}: median {median:.2f} s over {args.repeat} runs ({results[name]}); goal 1.5 s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"median": summary, "runs": results}, indent=2))
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
