"""Round time of one engine against another on this machine, measured in the same run of this script.

For each repeat, runs `swarm run --no-ui --offline --fresh` with the baseline engine, then with the candidate
(interleaved, so load on a shared machine drifts into both), same seed and questions, one thread (--threads 1,
and the whole process pinned to one core where the OS allows, since MLX has no thread setting), no held-out
evaluation, the bundled model at I = 8, L = 8. Reads generation, update and round times from metrics.jsonl
and prints medians and candidate/baseline ratios; writes the JSON to --out.

    python benchmarks/engine_rounds.py --candidate mlx --baseline torch --rounds 4 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("gen_s", "train_s", "round_s")


def run_rounds(engine: str, args: argparse.Namespace, work: Path) -> list[dict]:
    env = {**os.environ, "SWARM_HOME": str(work / "home"), "SWARM_TRAIN_EVAL_EVERY": "0",
           "SWARM_MODEL_PATH": str(ROOT / "assets" / "models" / "swarm-tiny"), "OMP_NUM_THREADS": "1"}
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--fresh", "--backend", engine,
           "--threads", "1", "--rounds", str(args.rounds), "--seed", str(args.seed), "--local", "8",
           "--completions", "8", "--run-dir", str(run_dir)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def medians(rows: list[dict]) -> dict:
    return {f: statistics.median(r[f] for r in rows) for f in FIELDS} | {"rounds": len(rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="mlx")
    parser.add_argument("--baseline", default="torch")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "engine_rounds.json")
    args = parser.parse_args()
    pinned = hasattr(os, "sched_setaffinity")
    if pinned:  # children inherit it: MLX's CPU backend has no thread-count setting
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rows: dict[str, list[dict]] = {args.baseline: [], args.candidate: []}
    with tempfile.TemporaryDirectory(prefix="engine-rounds-") as tmp:
        for k in range(args.repeats):
            for engine in rows:
                rows[engine] += run_rounds(engine, args, Path(tmp) / f"{engine}-{k}")
    results = {"baseline": args.baseline, "candidate": args.candidate, "seed": args.seed, "I": 8, "L": 8,
               "threads": 1, "pinned_to_one_core": pinned, "machine": platform.platform(),
               "per_engine": {e: medians(r) for e, r in rows.items()}}
    base, cand = results["per_engine"][args.baseline], results["per_engine"][args.candidate]
    results["ratio"] = {f: cand[f] / base[f] for f in FIELDS}
    for f in FIELDS:
        print(f"{f:8s} median {base[f]:6.2f} s {args.baseline} -> {cand[f]:6.2f} s {args.candidate} "
              f"(x{results['ratio'][f]:.2f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
