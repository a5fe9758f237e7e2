"""How fast can the bundled model's adapter learn the held-out tasks at all? Supervised steps on the truth.

Issue 14's ceiling test. GRPO on this model gains about +6 points of held-out greedy accuracy in ~735
rounds (30 minutes), and its gradients are per question (benchmarks/results/learning/README.md). If the
same adapter, trained on the *ground-truth* answers of the same draws with the same optimizer, gains
little more in the same time, the model is the limit and no change to the RL update will reach +10; if
it gains much more, the RL update is the limit.

Each step: the round's draw (`tasks.draw(preset, seed, t, I)`, the questions a GRPO round t would ask),
one target per question (`<answer>TRUTH</answer>`, the target the model was pre-trained on), and one call
of the app's own `train_step` with advantage 1 on every target. With one minibatch and one epoch that is
exactly a supervised step (token mean of -log p over the answer tokens; the ratio is 1 on the first and
only pass, so the clip never acts) through the same LoRA, AdamW, weight decay and gradient clip as a
GRPO round. The settings are the bundled model's recommended ones (its swarm.toml: I = 32, 1 minibatch,
lr 3e-4, weight decay 1.0), so only the targets differ from a GRPO round. Training time excludes the
evaluations (500 held-out items, greedy, the app's held-out list) at the steps given by --eval-at.
Partial results are written after every evaluation.

    PYTHONPATH=tools python -m benchmarks.research.sft_ceiling --minutes 10 --eval-at 0 230 \
        --out benchmarks/results/learning/sft_ceiling.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from backends.base import TrainSample
from benchmarks.research.timed_training import load_torch, recommended_settings, train_for
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.training.evaluation import evaluate


def build_script():
    """tools/make_default_model.py, which imports its siblings in tools/ by bare name: run with PYTHONPATH=tools."""
    try:
        import make_default_model
    except ModuleNotFoundError as exc:
        if exc.name != "make_default_model":
            raise
        raise SystemExit("this script uses tools/make_default_model.py: run it from the repository root as "
                         f"PYTHONPATH=tools python -m benchmarks.research.{Path(__file__).stem} ...") from None
    return make_default_model


def train_every_weight(backend, lr: float) -> None:
    """Unfreeze the base model under the engine's adapter and give the engine an AdamW over every weight.
    A benchmark-only reach into the engine: the app itself only ever trains the adapter."""
    import torch

    model = backend._model
    for p in model.parameters():
        p.requires_grad_(True)
    backend._optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=bundled_model_dir())
    parser.add_argument("--minutes", type=float, default=10.0, help="training wall time, evaluations excluded")
    parser.add_argument("--eval-at", type=int, nargs="*", default=[0], help="also evaluate after these steps "
                        "(0: the starting model); the last step is always evaluated")
    parser.add_argument("--eval-n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, help="learning rate (default: the model's recommended one)")
    parser.add_argument("--rank", type=int, help="LoRA rank, alpha = 2 x rank (default: the model's recommended LoRA)")
    parser.add_argument("--full", action="store_true", help="train every weight of the model (AdamW at --lr, "
                        "weight decay 0.1 as in pre-training) instead of the LoRA adapter: is the adapter the limit?")
    parser.add_argument("--tasks", default="easy")
    parser.add_argument("--out", type=Path, default=Path("out/sft_ceiling.json"))
    args = parser.parse_args()
    target_answer = build_script().target_answer  # the pre-training targets

    settings, _ = recommended_settings(args.model)
    if args.lr:
        settings.train.learning_rate = args.lr
    if args.rank:
        settings.lora.rank, settings.lora.alpha = args.rank, 2 * args.rank
    backend, spec = load_torch(settings, args.model)
    if args.full:
        train_every_weight(backend, settings.train.learning_rate)
    specs = tasks.preset(args.tasks)
    eval_refs = tasks.heldout(specs, args.eval_n)
    local = settings.train.local
    result = {"model": str(args.model), "full": args.full, "optim": dataclasses.asdict(spec.optim),
              "lora": dataclasses.asdict(spec.lora), "local": local, "minutes": args.minutes, "seed": args.seed,
              "evaluations": []}

    def record(step: int, train_s: float) -> None:
        started = time.perf_counter()
        res = evaluate(backend, eval_refs, settings.model.max_new_tokens)
        row = {"step": step, "questions": step * local, "train_s": round(train_s, 1), **res.to_dict(),
               "eval_s": round(time.perf_counter() - started, 1)}
        result["evaluations"].append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        print(f"step {step} ({train_s / 60:.1f} min of training): held-out {res.accuracy:.3f} "
              f"{json.dumps({k: round(v, 2) for k, v in res.per_task.items()})}", flush=True)

    def step(k: int) -> None:
        batch = []
        for ref in tasks.draw(specs, args.seed, k, local):
            task = tasks.regenerate(ref)
            answer = target_answer(task)
            if answer is not None:
                batch.append(TrainSample(task.messages(), f"<answer>{answer}</answer>", 1.0))
        backend.train_step(batch)

    if 0 in args.eval_at:
        record(0, 0.0)
    train_for(args.minutes, step, args.eval_at, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
