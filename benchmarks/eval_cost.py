"""What the held-out evaluation costs a run of the bundled model: the app's default cadence against the
model's own (its swarm.toml), and whether a token cap on the evaluation would save anything.

1. Cadence: `swarm run --no-ui --offline --rounds N` twice per repeat, alternating, same seed: "before"
   with SWARM_TRAIN_EVAL_EVERY=5 (the app's default, which a real model gets), "after" with nothing set
   (the bundled model's swarm.toml applies). From metrics.jsonl, round 1 (warm-up) left out: seconds per
   evaluation, seconds per round without one, the evaluations' share of all round time, and wall time.
2. Token cap, on the last "after" run's final adapter, in this process: the tokens of each greedy
   held-out answer against model.max_new_tokens, and an evaluation at max_new_tokens against one capped
   at the longest gold `<answer>...</answer>` plus the stop token (same items, same greedy decoding):
   seconds and accuracy of each.

    python benchmarks/eval_cost.py --rounds 100 --repeats 2 --out benchmarks/results/learning/eval_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(rounds: int, seed: int, run_dir: Path, env: dict) -> dict:
    cmd = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--offline", "--fresh", "--rounds", str(rounds),
           "--seed", str(seed), "--run-dir", str(run_dir)]
    started = time.time()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - started
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    evals = [r["eval_s"] for r in rows if r.get("eval_s")]
    plain = [r["round_s"] for r in rows if not r.get("eval_s")]
    total = sum(r["round_s"] for r in rows)
    return {"evaluations": len(evals), "eval_s_median": round(statistics.median(evals), 3) if evals else None,
            "round_s_median": round(statistics.median(plain), 3), "eval_share": round(sum(evals) / total, 4),
            "wall_s": round(wall, 1), "heldout": {r["round"]: r["heldout_acc"] for r in rows if r.get("eval_s")}}


def token_cap(adapter: Path, engine: str, n: int, trials: int) -> dict:
    from tokenizers import Tokenizer

    from backends import registry
    from backends.base import Sampling
    from swarm_app.kernel import tasks
    from swarm_app.kernel.settings import Settings
    from swarm_app.kernel.sizing import recommend
    from swarm_app.session.engine import detect_hardware, model_spec
    from swarm_app.session.model import resolve
    from swarm_app.training.evaluation import evaluate

    settings, model = Settings(), resolve("")
    settings.model.backend = engine
    hardware = detect_hardware(engine)
    name, _ = registry.choose(engine, hardware)
    backend = registry.load(name, model_spec(settings, model.folder, model_id=model.model_id,
                                             threads=recommend(hardware, name).threads))
    backend.load_adapter(adapter)
    refs = tasks.heldout(tasks.preset(settings.tasks.preset), n)
    items = [tasks.regenerate(ref, heldout=True) for ref in refs]
    full = settings.model.max_new_tokens
    answers = backend.generate([t.messages() for t in items], 1, Sampling(full, 0.0, seed=0))
    used = sorted(c.n_tokens for (c,) in answers)
    tokenizer = Tokenizer.from_file(str(model.folder / "tokenizer.json"))
    gold = max(len(tokenizer.encode(f"<answer>{t.answer}</answer>", add_special_tokens=False).ids) for t in items)
    cap = gold + 1  # the stop token
    timings: dict[int, list[float]] = {full: [], cap: []}
    scores = {}
    for _ in range(trials):  # interleaved: the machine's load drifts
        for budget in (full, cap):
            started = time.perf_counter()
            scores[budget] = evaluate(backend, refs, budget).accuracy
            timings[budget].append(time.perf_counter() - started)
    backend.close()
    return {"engine": name, "n": n, "max_new_tokens": full, "answer_tokens_max": used[-1],
            "answer_tokens_mean": round(statistics.mean(used), 2), "answers_stopped_by_themselves":
            sum(c.n_tokens < full for (c,) in answers), "longest_gold_tokens": gold, "cap": cap,
            "eval_s_median": {str(k): round(statistics.median(v), 3) for k, v in timings.items()},
            "accuracy": {str(k): v for k, v in scores.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default="auto", help="engine for the token-cap part")
    parser.add_argument("--trials", type=int, default=3, help="evaluations per budget in the token-cap part")
    parser.add_argument("--out", type=Path, default=Path("out/eval_cost.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eval-cost-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")} | {"SWARM_HOME": str(work / "home")}
    results: dict = {"rounds": args.rounds, "seed": args.seed, "before": [], "after": []}
    for k in range(args.repeats):
        results["before"].append(run(args.rounds, args.seed, work / f"before-{k}", env | {"SWARM_TRAIN_EVAL_EVERY": "5"}))
        results["after"].append(run(args.rounds, args.seed, work / f"after-{k}", env))
        for side in ("before", "after"):
            r = results[side][-1]
            print(f"{side:6s} {r['evaluations']:3d} evaluations of {r['eval_s_median']:.2f} s, rounds of "
                  f"{r['round_s_median']:.2f} s: evaluation {r['eval_share']:.1%} of round time, wall {r['wall_s']:.0f} s",
                  flush=True)
    from swarm_app.training.checkpoint import Checkpoints

    adapter = Checkpoints(work / f"after-{args.repeats - 1}").load_latest()[1]
    results["token_cap"] = token_cap(adapter, args.engine, 64, args.trials)
    print(json.dumps(results["token_cap"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out} (run folders in {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
