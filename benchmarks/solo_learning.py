"""Does the bundled model learn under RL on this machine? Solo SAPO nodes (J = 0) on bundled defaults.

For each seed: `swarm run --no-ui` with defaults in its own run folder for up to --minutes of wall
time (then Ctrl-C, which checkpoints and exits 0), then `swarm eval --n N` of the final adapter. The
baseline is `swarm eval --n N` of the starting model, measured in the same run of this script.
Learning is reported against wall time from the start of each `swarm run` process, its in-run held-out
evaluations included (and model loading and checkpoints): each curve row has `wall_s`, and each seed the
share of its wall time its evaluations took. Writes curves and results to JSON and a PNG plot; prints
the gain in points of held-out accuracy.

    python -m benchmarks.solo_learning --seeds 0 1 2 --minutes 30 --parallel 3 --out out/solo

Another model (a candidate folder): SWARM_MODEL_PATH=DIR applies to the runs and the evaluations alike.
The runs take the model's recommended settings (its swarm.toml; the bundled model's: rollouts at T = 0.8,
32 questions per step, LoRA weight decay); the sampled reward of the evaluations is always at T = 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.settings import Settings, apply_env


def swarm(*args: str) -> list[str]:
    return [sys.executable, "-m", "swarm_app", *args]


def eval_json(env: dict, n: int, preset: str, samples: int, adapter: Path | None = None) -> dict:
    """`swarm eval --json`: greedy accuracy, and the sampled reward at T = 1 whatever the rollouts use."""
    cmd = swarm("eval", "--tasks", preset, "--n", str(n), "--samples", str(samples), "--json",
                *(["--adapter", str(adapter)] if adapter else []))
    out = subprocess.run(cmd, capture_output=True, text=True, env={**env, "SWARM_MODEL_TEMPERATURE": "1.0"},
                         check=True)
    return json.loads(out.stdout)


def run_seeds(seeds: list[int], minutes: float, out: Path, env: dict, preset: str, extra: list[str]) -> dict[int, float]:
    """Run the seeds side by side for `minutes` under `env`; returns each process's start time (epoch seconds)."""
    procs, launched = [], {}
    for seed in seeds:
        run_dir = out / f"seed-{seed}"
        log = open(out / f"seed-{seed}.log", "w", encoding="utf-8")
        # --offline: solo nodes need no swarm, and parallel seeds raced for the default port (one died at start)
        cmd = swarm("run", "--no-ui", "--offline", "--fresh", "--tasks", preset, "--seed", str(seed),
                    "--run-dir", str(run_dir), *extra)
        launched[seed] = time.time()
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.monotonic() + minutes * 60
    while time.monotonic() < deadline and any(p.poll() is None for p, _ in procs):
        time.sleep(2)
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # saves the last completed round and exits 0
    for proc, log in procs:
        proc.wait(timeout=600)
        log.close()
    return launched


def curve(run_dir: Path, launched: float) -> list[dict]:
    """One row per round; `wall_s` is when the round ended, its evaluation included (a row's `time` is
    stamped before the evaluation), counted from the start of the process."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{**{k: r.get(k) for k in ("round", "reward_local", "heldout_acc", "round_s", "eval_s")},
             "wall_s": round(r["time"] + (r.get("eval_s") or 0.0) - launched, 3)} for r in rows]


def eval_cost(rows: list[dict]) -> dict:
    """How much of the run its in-run evaluations took."""
    evals = [r["eval_s"] for r in rows if r["eval_s"] is not None]
    wall = rows[-1]["wall_s"] if rows else 0.0
    return {"evaluations": len(evals), "eval_s_total": round(sum(evals), 1), "wall_s": wall,
            "eval_s_each": round(sum(evals) / len(evals), 2) if evals else None,
            "eval_share": round(sum(evals) / wall, 4) if wall else None}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for seed, res in results["seeds"].items():
        rows = res["curve"]
        minutes = [r["wall_s"] / 60 for r in rows]
        ax1.plot(minutes, moving_average([r["reward_local"] for r in rows], 5), label=f"seed {seed}")
        evals = [r for r in rows if r["heldout_acc"] is not None]
        ax2.plot([0] + [r["wall_s"] / 60 for r in evals], [results["baseline"]["accuracy"]] + [r["heldout_acc"] for r in evals],
                 marker="o", label=f"seed {seed} (eval {res['eval_cost']['eval_share'] or 0:.0%} of its time)")
    wall = "wall-clock minutes (evaluation included)"
    ax1.set(title="training reward (own rollouts, moving avg 5)", xlabel=wall)
    ax2.set(title="held-out accuracy (greedy, in-run eval)", xlabel=wall)
    ax1.legend()
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def moving_average(values: list[float], k: int) -> list[float]:
    return [sum(values[max(0, i - k + 1):i + 1]) / len(values[max(0, i - k + 1):i + 1]) for i in range(len(values))]


def sampled(report: dict) -> str:
    return f"{report['sampled']['mean_reward']:.3f}" if report.get("sampled") else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=30.0, help="wall time per seed")
    parser.add_argument("--parallel", type=int, default=1, help="seeds run at the same time")
    parser.add_argument("--eval-n", type=int, default=500)
    parser.add_argument("--samples", type=int, default=4,
                        help="completions per held-out question for the sampled reward at T = 1 (0: greedy only)")
    parser.add_argument("--tasks", default="easy", help="task preset for training and evaluation")
    parser.add_argument("--out", type=Path, default=Path("out/solo"))
    parser.add_argument("--run-env", action="append", default=[], metavar="SWARM_KEY=VALUE",
                        help="a setting for the training runs only, not the evaluations (repeatable), e.g. "
                             "SWARM_MODEL_TEMPERATURE=0.7 (the held-out sampled reward stays at T = 1)")
    parser.add_argument("extra", nargs="*", help="extra flags for swarm run (after --)")
    args = parser.parse_args()
    bad = [item for item in args.run_env if not item.startswith("SWARM_") or "=" not in item]
    if bad:
        parser.error(f"--run-env takes SWARM_SECTION_FIELD=VALUE, not {bad[0]!r}")
    run_settings = dict(item.split("=", 1) for item in args.run_env)
    try:  # the app ignores SWARM_* variables of sections it does not have: a typo would go unnoticed
        apply_env(Settings(), run_settings, strict=True)
    except UsageError as exc:
        parser.error(f"--run-env: {exc}")
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SWARM_HOME": str(args.out.resolve() / "home")}
    started = time.time()
    baseline = eval_json(env, args.eval_n, args.tasks, args.samples)
    print(f"baseline held-out accuracy {baseline['accuracy']:.3f} (n={baseline['n']}), sampled reward "
          f"{sampled(baseline)}", flush=True)
    run_env = {**env, **run_settings}
    launched: dict[int, float] = {}
    for i in range(0, len(args.seeds), args.parallel):
        launched |= run_seeds(args.seeds[i:i + args.parallel], args.minutes, args.out, run_env, args.tasks,
                              args.extra)
    results = {"model": os.environ.get("SWARM_MODEL_PATH") or "bundled", "baseline": baseline, "tasks": args.tasks,
               "minutes": args.minutes, "parallel": args.parallel, "run_env": args.run_env, "seeds": {}}
    for seed in args.seeds:
        run_dir = args.out / f"seed-{seed}"
        final = eval_json(env, args.eval_n, args.tasks, args.samples, adapter=run_dir)
        rows = curve(run_dir, launched[seed])
        cost = eval_cost(rows)
        results["seeds"][seed] = {"final": final, "rounds": len(rows), "curve": rows, "eval_cost": cost,
                                  "gain_points": 100 * (final["accuracy"] - baseline["accuracy"])}
        if final.get("sampled") and baseline.get("sampled"):
            results["seeds"][seed]["sampled_gain_points"] = 100 * (final["sampled"]["mean_reward"] -
                                                                   baseline["sampled"]["mean_reward"])
        print(f"seed {seed}: {len(rows)} rounds in {cost['wall_s'] / 60:.1f} min, held-out {baseline['accuracy']:.3f} -> "
              f"{final['accuracy']:.3f} ({results['seeds'][seed]['gain_points']:+.1f} points), sampled reward "
              f"{sampled(baseline)} -> {sampled(final)}; {cost['evaluations']} "
              f"in-run evaluations took {cost['eval_share'] or 0:.1%} of that time", flush=True)
    gains = [r["gain_points"] for r in results["seeds"].values()]
    results["mean_gain_points"] = sum(gains) / len(gains)
    results["wall_s"] = time.time() - started
    (args.out / "solo_learning.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "solo_learning.png")
    print(f"mean gain {results['mean_gain_points']:+.1f} points over {len(gains)} seeds; "
          f"wrote {args.out / 'solo_learning.json'} and {args.out / 'solo_learning.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
