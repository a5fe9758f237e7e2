"""Per-rollout admission cost: decode the item, parse and check the body, verify the Ed25519
signature, re-derive the ground truth from the TaskRef, insert into the pool. Target: median <= 0.5 ms.

Rollouts are realistic: a task preset's questions (distinct refs, several authors' seeds), L
completions of a few hundred characters each (a ~3-5 KB body), signed beforehand. The timed loop is
exactly what a node does per received item: `item_from_json` + `Admission.admit`. Stage medians are
measured separately on the same items to show where the time goes. Single thread; run it on an idle
machine for numbers worth comparing.

    python -m benchmarks.admission [--n 2000] [--authors 8] [--completions 8] [--preset easy] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.admission import Accepted, Admission, AdmissionLimits
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.pool import PoolEntry, RolloutPool, SeenCache
from swarm_app.peer.core.wire import item_from_json, parse_body, sign_rollout, signature_valid


def make_items(n: int, authors: int, completions: int, preset: str, now_ms: int) -> list[dict]:
    rng = random.Random(0)
    identities = [Identity.generate() for _ in range(authors)]
    items = []
    for k in range(n):
        author = k % authors
        ref = tasks.draw(tasks.preset(preset), seed=author + 1, round_index=k, count=1)[0]
        task = tasks.regenerate(ref)
        texts = tuple(f"Let me think step by step. {' '.join(str(rng.randrange(1000)) for _ in range(60))} "
                      f"<answer>{task.answer}</answer>" for _ in range(completions))
        rollout = Rollout(ref, task.question, task.answer, texts, "Qwen/Qwen2.5-0.5B-Instruct", k, "", now_ms)
        items.append(sign_rollout(identities[author], rollout, now_ms * 1000 + k, now_ms).to_item())
    return items


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_admission(items: list[dict], now_ms: int) -> list[float]:
    pool = RolloutPool("bench", max_entries=4096, max_bytes=64 << 20, max_age_ms=600_000)
    admission = Admission(pool, SeenCache(65536, 600_000), AdmissionLimits(author_burst=1e9))
    costs = []
    for item in items:
        started = time.perf_counter_ns()
        verdict = admission.admit(item_from_json(item), "peer", now_ms)
        costs.append((time.perf_counter_ns() - started) / 1e6)
        if not isinstance(verdict, Accepted):
            raise SystemExit(f"benchmark rollout rejected: {verdict}")
    return costs


def time_stages(items: list[dict]) -> dict[str, float]:
    """Median ms of each stage, measured on its own."""
    stages: dict[str, list[float]] = {"decode+parse": [], "verify": [], "ground truth": [], "pool insert": []}
    pool = RolloutPool("bench", 4096, 64 << 20, 600_000)
    for item in items:
        t0 = time.perf_counter_ns()
        signed = item_from_json(item)
        parsed = parse_body(signed.body)
        t1 = time.perf_counter_ns()
        signature_valid(parsed, signed)
        t2 = time.perf_counter_ns()
        tasks.regenerate(parsed.rollout.ref)
        t3 = time.perf_counter_ns()
        pool.insert(PoolEntry(signed, parsed.rollout, "peer"))
        t4 = time.perf_counter_ns()
        for name, span in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[name].append(span / 1e6)
    return {name: statistics.median(values) for name, values in stages.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="rollouts to admit")
    parser.add_argument("--authors", type=int, default=8)
    parser.add_argument("--completions", type=int, default=8, help="L: completions per rollout")
    parser.add_argument("--preset", default="easy", help="task preset the questions come from")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    now_ms = int(time.time() * 1000)
    items = make_items(args.n, args.authors, args.completions, args.preset, now_ms)
    body_sizes = [len(item["body"].encode()) for item in items]
    costs = time_admission(items, now_ms)
    stages = time_stages(items)
    result = {"n": len(costs), "median_ms": statistics.median(costs), "p99_ms": percentile(costs, 0.99),
              "mean_ms": statistics.fmean(costs), "body_bytes_median": statistics.median(body_sizes),
              "stage_median_ms": stages, "target_median_ms": 0.5}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"admission of {result['n']} rollouts (median body {result['body_bytes_median']:.0f} bytes, "
              f"preset {args.preset}):")
        print(f"  median {result['median_ms']:.3f} ms   p99 {result['p99_ms']:.3f} ms   mean {result['mean_ms']:.3f} ms"
              f"   (target: median <= 0.5 ms)")
        print("  stage medians: " + ", ".join(f"{k} {v:.3f} ms" for k, v in stages.items()))
    return 0 if result["median_ms"] <= 0.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
