"""The price of the adaptive thread count on a short run: `swarm run` at the default threads against `--threads 1`.

The default tunes its thread count as it runs (swarm_app/resources/threads.py): it starts on one thread and
probes more. With one of 2 cores kept busy by another program, a probe round at 2 threads used to cost a
6-round run a quarter of its wall time (1.25-1.30x `--threads 1`); the probe now waits for free CPUs. This
times whole processes, start-up included: for each number of busy cores (--busy, default 1 then 0) and each
run length (--rounds, default 6 then 20), `--warmup` unmeasured pairs and then `--pairs` pairs of
A = `swarm run --no-ui --offline --rounds R` (default threads) and B = the same with `--threads 1`, run in
turn (A B A B ...), each in a fresh run folder and user home, on the bundled model (torch). The figure is the
median of the pairs' A/B wall-time ratios (pairing keeps the ratio fair while the machine's speed drifts).
Busy cores are `python -c 'while True: pass'` loops pinned to CPU 0, 1, ... with taskset where it exists,
each ended by `timeout` after at most --busy-limit seconds and killed when their row is done.

    python -m benchmarks.thread_probe                       # the full table (minutes; on quiet cores)
    python -m benchmarks.thread_probe --rounds 1 --pairs 1 --warmup 0 --busy 1   # a check that it runs
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
from pathlib import Path

BUSY_LOOP = "while True: pass"


def start_busy(cores: int, limit_s: int) -> list[subprocess.Popen]:
    """`cores` busy loops, each pinned to its own CPU where taskset exists, each bounded by `timeout`."""
    loops = []
    for cpu in range(cores):
        command = ["timeout", str(limit_s), sys.executable, "-c", BUSY_LOOP]
        if shutil.which("taskset"):
            command = ["taskset", "-c", str(cpu), *command]
        loops.append(subprocess.Popen(command))
    return loops


def stop_busy(loops: list[subprocess.Popen]) -> None:
    for loop in loops:
        loop.terminate()
    for loop in loops:
        loop.wait(timeout=10)


def timed_run(rounds: int, threads: int | None, work: Path, timeout_s: float) -> float:
    """Wall seconds of one `swarm run` process from start to exit, in a fresh run folder and user home."""
    folder = Path(tempfile.mkdtemp(dir=work))
    command = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--rounds", str(rounds),
               "--seed", "0", "--run-dir", str(folder / "run")]
    if threads is not None:
        command += ["--threads", str(threads)]
    env = {**os.environ, "SWARM_HOME": str(folder / "home")}
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    shutil.rmtree(folder, ignore_errors=True)
    return seconds


def measure(rounds: int, pairs: int, warmup: int, work: Path, timeout_s: float) -> dict:
    """A (default threads) and B (--threads 1) in turn; the median of the pairs' A/B ratios."""
    a_s, b_s = [], []
    for i in range(warmup + pairs):
        a, b = timed_run(rounds, None, work, timeout_s), timed_run(rounds, 1, work, timeout_s)
        if i >= warmup:
            a_s.append(a)
            b_s.append(b)
    ratios = [a / b for a, b in zip(a_s, b_s)]
    return {"rounds": rounds, "pairs": pairs, "default_s": [round(s, 2) for s in a_s],
            "threads1_s": [round(s, 2) for s in b_s], "ratio_median": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[6, 20])
    parser.add_argument("--busy", type=int, nargs="+", default=[1, 0], help="busy cores, one row set each")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--busy-limit", type=int, default=600, help="seconds a busy loop may live at most")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one swarm run may take")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the rows (printed too)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="thread-probe-") as tmp:
        for busy in args.busy:
            for rounds in args.rounds:
                loops = start_busy(busy, args.busy_limit)
                try:
                    row = {"busy_cores": busy, "cpus": os.cpu_count(),
                           **measure(rounds, args.pairs, args.warmup, Path(tmp), args.timeout)}
                finally:
                    stop_busy(loops)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out is not None:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
