"""Round time of `swarm run --no-ui` at each thread count, per engine, on the bundled model.

The sizing advice gives an engine one thread per physical core. This checks, on this machine and through
the product path (a real `swarm run --no-ui --offline` process with the bundled model's recommended
settings), that more threads make rounds faster: each engine runs --rounds rounds at every thread count of
--threads from a fresh run folder with seed 0, one process at a time; the figure is the median wall time
between consecutive rounds after the first five (generation, reward, update, metrics and checkpoint),
with the median gen_s and train_s beside it. Results go to --out after every run.

    python benchmarks/session_threads.py [--rounds 25] [--engines llama_cpp torch] [--threads 1 2]
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
from pathlib import Path

WARM_UP_ROUNDS = 5


def timed_run(engine: str, threads: int, rounds: int, work: Path) -> dict:
    run_dir = work / f"{engine}-{threads}"
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "SWARM_HOME": str(work / "home"), "SWARM_MODEL_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--backend", engine,
                    "--rounds", str(rounds), "--seed", "0", "--run-dir", str(run_dir)],
                   env=env, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("gen_s") is not None][WARM_UP_ROUNDS:]
    gaps = [b["time"] - a["time"] for a, b in zip(rows, rows[1:])]
    return {"rounds": len(gaps), "round_s": round(statistics.median(gaps), 3),
            "gen_s": round(statistics.median(r["gen_s"] for r in rows), 3),
            "train_s": round(statistics.median(r["train_s"] for r in rows), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--engines", nargs="+", default=["llama_cpp", "torch"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/session_threads.json"))
    args = parser.parse_args()
    results: dict = {"rounds": args.rounds, "engines": {}}
    with tempfile.TemporaryDirectory() as work:
        for engine in args.engines:
            entry = results["engines"].setdefault(engine, {})
            for threads in args.threads:
                entry[str(threads)] = timed_run(engine, threads, args.rounds, Path(work))
                print(f"{engine} {threads} thread(s): {json.dumps(entry[str(threads)])}", flush=True)
            first, last = entry[str(args.threads[0])]["round_s"], entry[str(args.threads[-1])]["round_s"]
            entry[f"speedup_{args.threads[-1]}_over_{args.threads[0]}"] = round(first / last, 3)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
