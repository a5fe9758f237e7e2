"""How long a SAPO round takes here, against a baseline revision measured in the same run of this script.

For each revision (the baseline, then the working tree) runs `swarm run --no-ui --offline` for --rounds
rounds with the same seed, no held-out evaluation, in a fresh run folder, and reads generation, update
and round times from its metrics.jsonl. The baseline is a git worktree of --baseline; both use the
model bundled in the working tree, so only the code differs. Prints medians and new/baseline ratios.

    python benchmarks/round_speed.py --baseline 1e8dffe --rounds 12
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

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("gen_s", "train_s", "round_s")


def run_rounds(code: Path, rounds: int, seed: int, work: Path) -> dict[str, float]:
    env = {**os.environ, "SWARM_HOME": str(work / "home"), "SWARM_TRAIN_EVAL_EVERY": "0",
           "SWARM_MODEL_PATH": str(ROOT / "assets" / "models" / "swarm-tiny")}
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--fresh", "--rounds", str(rounds),
           "--seed", str(seed), "--run-dir", str(run_dir)]
    subprocess.run(cmd, cwd=code, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {f: statistics.median(r[f] for r in rows) for f in FIELDS} | {"rounds": len(rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("out/round_speed.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="round-speed-"))
    baseline_tree = work / "baseline-code"
    subprocess.run(["git", "worktree", "add", "--detach", str(baseline_tree), args.baseline], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        results = {"baseline": args.baseline, "seed": args.seed,
                   "before": run_rounds(baseline_tree, args.rounds, args.seed, work / "before"),
                   "after": run_rounds(ROOT, args.rounds, args.seed, work / "after")}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline_tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    results["ratio"] = {f: results["after"][f] / results["before"][f] for f in FIELDS}
    for f in FIELDS:
        print(f"{f:8s} median {results['before'][f]:7.2f} s at {args.baseline} -> {results['after'][f]:7.2f} s now "
              f"(x{results['ratio'][f]:.2f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
