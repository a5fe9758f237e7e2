"""Good guest: does the default thread count keep pace when other programs take the cores, and does the
owner's own work keep its speed at level light?

Part 1, pace. The bundled model's rounds (`swarm run --no-ui --offline`, a fresh run folder each time) while
a competing load of 0, 1 and 2 busy-loop processes (started and stopped here) takes cores: the default
(adaptive threads) against fixed `--threads 1` and `--threads 2`, interleaved within each load, on the
torch and the llama.cpp engines. A run's pace is its median round time after the first round (metrics.jsonl
`round_s`). Targets: default <= 1.15x the best fixed count, and <= 1.10x `--threads 1`.

Part 2, the owner's side. A fixed pure-Python loop timed in another process: alone, then while a node
trains at `[resources] level = light`. Target: at least 80% of its speed alone.

Results: benchmarks/results/good_guest.json (rewritten after each measurement: a kill keeps what was done),
with the load average beside every figure. Run it on an otherwise quiet machine:

    python -m benchmarks.good_guest [--rounds 20] [--engines torch,llama_cpp] [--max-run-s 300] [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "good_guest.json"
BUSY = "while True: pass"
SEED = 7
"""Every run draws the same questions: with a run's own random seed, round times differ by ~10% between runs
for the questions alone."""
OWNER_WORK = "import time\nt=time.perf_counter()\nx=0\nfor i in range(30_000_000): x+=i\nprint(time.perf_counter()-t)"


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def run_rounds(work: Path, rounds: int, engine: str, threads: int | None, max_s: float) -> dict:
    """One fresh `swarm run` of `rounds` rounds: its median round time after the first (a warm-up), and the
    thread count of each round. A run still going after `max_s` (two threads behind a busy loop can take
    minutes a round) is stopped and judged on the rounds it finished; with none past the warm-up, the
    warm-up round stands, and with none at all, `max_s` is a lower bound."""
    run_dir = work / f"run-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--fresh", "--rounds", str(rounds),
           "--run-dir", str(run_dir), "--backend", engine, "--seed", str(SEED)]
    if threads:
        cmd += ["--threads", str(threads)]
    env = {**os.environ, "SWARM_HOME": str(work / "home")}
    before = load_average()
    started = time.monotonic()
    cut_short = False
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max_s)
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1:] or ["exit %d" % proc.returncode]}
    except subprocess.TimeoutExpired:
        cut_short = True
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    rows = [r for r in rows if "type" not in r]
    times = [r["round_s"] for r in rows][1:] or [r["round_s"] for r in rows] or [max_s]
    result = {"median_round_s": round(statistics.median(times), 3), "mean_round_s": round(statistics.fmean(times), 3),
              "rounds_done": len(rows), "wall_s": round(time.monotonic() - started, 1), "load_before": before,
              "load_after": load_average(), "threads_used": sorted({r.get("threads") for r in rows if r.get("threads")}),
              "threads_by_round": [r.get("threads") for r in rows]}
    if cut_short:
        result["cut_short_after_s"] = max_s
    return result


def pace(args, work: Path, result: dict) -> None:
    for engine in args.engines:
        for load in (0, 1, 2):
            procs = busy_loops(load)
            time.sleep(2)
            try:
                cell = result.setdefault("pace", {}).setdefault(engine, {}).setdefault(str(load), {})
                modes = [("default", None), ("threads_1", 1), ("threads_2", 2)]
                for mode, threads in modes[load:] + modes[:load]:  # each mode first at one load: no drift bias
                    if "median_round_s" not in cell.get(mode, {}):  # --resume keeps what was measured
                        cell[mode] = run_rounds(work, args.rounds, engine, threads, args.max_run_s)
                        write(result)
                ok = all("median_round_s" in cell[m] for m in ("default", "threads_1", "threads_2"))
                if ok:
                    default, one = cell["default"]["median_round_s"], cell["threads_1"]["median_round_s"]
                    best = min(one, cell["threads_2"]["median_round_s"])
                    cell["default_vs_best"], cell["default_vs_threads_1"] = round(default / best, 3), round(default / one, 3)
                write(result)
            finally:
                stop(procs)


def owner(args, work: Path, result: dict) -> None:
    alone = [float(subprocess.run([sys.executable, "-c", OWNER_WORK], capture_output=True, text=True).stdout)
             for _ in range(3)]
    config = work / "light.toml"
    config.write_text("[resources]\nlevel = \"light\"\n")
    run_dir = work / "owner-run"
    node = subprocess.Popen([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--fresh", "--rounds", "0",
                             "--run-dir", str(run_dir), "--config", str(config)],
                            env={**os.environ, "SWARM_HOME": str(work / "home")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(25)  # the model loaded and rounds under way
        beside = [float(subprocess.run([sys.executable, "-c", OWNER_WORK], capture_output=True, text=True).stdout)
                  for _ in range(3)]
        load = load_average()
    finally:
        node.terminate()
        node.wait(timeout=60)
    result["owner"] = {"alone_s": alone, "beside_light_node_s": beside, "load_during": load,
                       "speed_ratio": round(statistics.median(alone) / statistics.median(beside), 3)}
    write(result)


def write(result: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, OUT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--engines", default="torch,llama_cpp")
    parser.add_argument("--skip-pace", action="store_true")
    parser.add_argument("--skip-owner", action="store_true")
    parser.add_argument("--max-run-s", type=float, default=300.0, help="stop one run after this long")
    parser.add_argument("--resume", action="store_true", help="keep the measurements already in the results file")
    args = parser.parse_args()
    args.engines = [e for e in args.engines.split(",") if e]
    # a kill runs the `finally`s that stop the busy loops: a stray one would load every later measurement
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": args.rounds, "cores": os.cpu_count(),
              "load_at_start": load_average()}
    if args.resume and OUT.exists():
        result = json.loads(OUT.read_text())
    with tempfile.TemporaryDirectory(prefix="swarm-guest-") as tmp:
        if not args.skip_pace:
            pace(args, Path(tmp), result)
        if not args.skip_owner:
            owner(args, Path(tmp), result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
