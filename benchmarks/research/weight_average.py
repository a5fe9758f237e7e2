"""Is the held-out accuracy of a GRPO run held down by the noise of its last steps? The live adapter
against running averages of it.

Issue 14. Supervised steps on the truth through the same adapter and optimizer plateau at +3-4 points
(benchmarks/research/sft_ceiling.py), and the bundled model's own pre-training gained its last 10 points only
while its learning rate decayed: at a constant rate the weights hover around a better point without
reaching it. An exponential moving average of the LoRA weights (Polyak averaging) is that point
without touching the run's learning rate: the rollouts still come from the live adapter (on-policy),
and only the evaluated adapter is the average.

One GRPO run through the app's own Trainer (generation, scoring, `train_step`) on the model's
recommended settings (its swarm.toml), 1 thread. After every round each average in --betas takes
avg = beta * avg + (1 - beta) * live for every LoRA matrix (A and B alike). At the rounds given by
--eval-at and at the end, the held-out greedy accuracy (the app's held-out list, --eval-n items) of the
live adapter and of each average. Round time excludes the evaluations. Partial results are written
after every evaluation.

    python -m benchmarks.research.weight_average --minutes 10 --betas 0.98 0.995 --eval-at 100 200 --out out/wavg.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from backends.base import Sampling
from benchmarks.research.timed_training import load_torch, recommended_settings, train_for
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.training.evaluation import evaluate
from swarm_app.training.loop import RoundPlan, Trainer


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=bundled_model_dir())
    parser.add_argument("--minutes", type=float, default=10.0, help="training wall time, evaluations excluded")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.98, 0.995])
    parser.add_argument("--eval-at", type=int, nargs="*", default=[], help="evaluate after these rounds too")
    parser.add_argument("--eval-n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default="easy")
    parser.add_argument("--out", type=Path, default=Path("out/weight_average.json"))
    args = parser.parse_args()

    settings, applied = recommended_settings(args.model)
    backend, _ = load_torch(settings, args.model)
    specs = tasks.preset(args.tasks)
    t, m = settings.train, settings.model
    plan = RoundPlan(specs, t.local, 0, t.completions, args.seed, Sampling(m.max_new_tokens, m.temperature, m.top_p),
                     t.keep_zero_advantage_local, 0, [], t.negative_weight)
    trainer = Trainer(backend, plan)
    eval_refs = tasks.heldout(specs, args.eval_n)
    params = {name: p for name, p in backend._model.named_parameters() if p.requires_grad}
    averages = {beta: {name: p.detach().clone() for name, p in params.items()} for beta in args.betas}
    result = {"model": str(args.model), "settings": {k: str(v) for k, v in applied.items()}, "seed": args.seed,
              "betas": args.betas, "rounds": [], "evaluations": []}

    def held_out() -> dict:
        return evaluate(backend, eval_refs, m.max_new_tokens).to_dict()

    def record(round_index: int, train_s: float) -> None:
        row = {"round": round_index, "train_s": round(train_s, 1), "live": held_out()}
        live = {name: p.detach().clone() for name, p in params.items()}
        with torch.no_grad():
            for beta, average in averages.items():
                for name, p in params.items():
                    p.copy_(average[name])
                row[f"ema {beta}"] = held_out()
            for name, p in params.items():
                p.copy_(live[name])
        result["evaluations"].append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        print(f"round {round_index} ({train_s / 60:.1f} min): " + ", ".join(
            f"{k} {v['accuracy']:.3f}" for k, v in row.items() if isinstance(v, dict)), flush=True)

    def step(round_index: int) -> None:
        metrics = trainer.run_round(round_index)
        with torch.no_grad():
            for beta, average in averages.items():
                for name, p in params.items():
                    average[name].mul_(beta).add_(p.detach(), alpha=1 - beta)
        result["rounds"].append({"round": round_index, "reward_local": metrics.reward_local,
                                 "round_s": metrics.round_s})

    train_for(args.minutes, step, args.eval_at, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
