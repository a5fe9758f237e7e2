"""How big is one round's LoRA update, how much of it is noise, and does forgetting follow its size?

Issue 14, step 1 ("Diagnose before tuning"), on the bundled model at the app's defaults (torch engine,
1 thread, easy preset, I = 8, L = 8, J = 0, 48 new tokens at T = 1, LoRA r 16 / alpha 32 on all seven
projections, AdamW lr 3e-4, 2 minibatches, 1 epoch). One fresh run per --lr, driven through the app's
own Trainer (its generation, scoring and `_update`, i.e. `train_step`):

- size: for each adapted module type, ||dW|| / ||W|| (Frobenius, summed over the layers) with
  dW = (alpha/r) (B_after A_after - B_before A_before) over one round's update;
- noise: from the same adapter and optimizer state, two more updates, each on one half of the round's
  groups (the groups with a reward spread split alternately, so both halves carry signal); the cosine
  between the two dW, per module type and flattened over all modules. Also the cosine between the two
  halves' summed, clipped gradients (what AdamW was given), and between each half's and the full update.
  The run then continues from the full round's update, so measuring does not change the trajectory;
- forgetting: held-out greedy accuracy per task every --eval-every rounds (the app's held-out list) beside
  the accumulated update ||(alpha/r) B A|| / ||W|| (B starts at 0) and the update over that window.

Measured rounds: the first --measure rounds and --measure rounds starting at --late. Partial results are
written to --out after every measured round and every evaluation.

    python -m benchmarks.research.update_noise [--rounds 60] [--lr 3e-4 1e-3] \
        [--out benchmarks/results/learning/update_noise.json]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import time
from collections import defaultdict
from pathlib import Path

from backends import registry
from backends.base import LoraConfig, ModelSpec, OptimConfig, Sampling
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.training.evaluation import evaluate
from swarm_app.training.grpo import has_signal
from swarm_app.training.loop import RoundPlan, ScoredGroup, Trainer

I, L, NEW_TOKENS = 8, 8, 48  # noqa: E741  (I and L: the paper's names)


def lora_layers(model) -> dict[str, object]:
    return {name: mod for name, mod in model.named_modules()
            if hasattr(mod, "base_layer") and hasattr(mod, "lora_A") and "default" in mod.lora_A}


def module_type(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def products(layers):
    """(alpha/r) B A per layer, float64."""
    import torch

    with torch.no_grad():
        return {n: (m.scaling["default"] * (m.lora_B["default"].weight.double() @ m.lora_A["default"].weight.double()))
                for n, m in layers.items()}


def snapshot(backend):
    params = {n: p.detach().clone() for n, p in backend._model.named_parameters() if p.requires_grad}
    return params, copy.deepcopy(backend._optimizer.state_dict())


def restore(backend, state) -> None:
    import torch

    params, optim = state
    with torch.no_grad():
        for n, p in backend._model.named_parameters():
            if n in params:
                p.copy_(params[n])
    backend._optimizer.load_state_dict(copy.deepcopy(optim))


class GradTap:
    """Wraps the optimizer's step to sum the (clipped) gradients it is given over a train_step."""

    def __init__(self, backend) -> None:
        self.backend, self.sum = backend, None
        self._orig = backend._optimizer.step
        backend._optimizer.step = self._step

    def _step(self, *a, **k):
        named = {n: p.grad.detach().double().clone() for n, p in self.backend._model.named_parameters()
                 if p.requires_grad and p.grad is not None}
        if self.sum is None:
            self.sum = named
        else:
            for n, g in named.items():
                self.sum[n] = self.sum[n] + g
        return self._orig(*a, **k)

    def take(self):
        out, self.sum = self.sum, None
        return out

    def rewrap(self) -> None:
        """After load_state_dict the step method is the class's again on some torch versions: wrap again."""
        self.backend._optimizer.step = self._step


def by_type(deltas: dict, weights: dict) -> dict[str, dict]:
    """Per module type: ||dW|| / ||W|| (norms summed over layers in quadrature)."""
    num, den = defaultdict(float), defaultdict(float)
    for n, d in deltas.items():
        num[module_type(n)] += float(d.pow(2).sum())
        den[module_type(n)] += weights[n]
    out = {t: math.sqrt(num[t] / den[t]) for t in sorted(num)}
    out["all"] = math.sqrt(sum(num.values()) / sum(den.values()))
    return out


def cosines(x: dict, y: dict, key=module_type) -> dict[str, float]:
    dot, nx, ny = defaultdict(float), defaultdict(float), defaultdict(float)
    for n in x:
        t = key(n)
        dot[t] += float((x[n] * y[n]).sum())
        nx[t] += float(x[n].pow(2).sum())
        ny[t] += float(y[n].pow(2).sum())
    out = {t: dot[t] / math.sqrt(nx[t] * ny[t]) if nx[t] and ny[t] else None for t in sorted(dot)}
    tx, ty = sum(nx.values()), sum(ny.values())
    out["all"] = sum(dot.values()) / math.sqrt(tx * ty) if tx and ty else None
    return out


def grad_key(name: str) -> str:
    # ...layers.0.self_attn.q_proj.lora_A.default.weight -> q_proj
    parts = name.split(".")
    return parts[parts.index("lora_A") - 1] if "lora_A" in parts else parts[parts.index("lora_B") - 1]


def diff(after: dict, before: dict) -> dict:
    return {n: after[n] - before[n] for n in after}


def measured_update(trainer, backend, layers, tap, own):
    """Full round's update plus the two half updates from the same state; leaves the full update applied."""
    before_state = snapshot(backend)
    p0 = products(layers)
    trainer._update(own, [], None)
    full = diff(products(layers), p0)
    g_full = tap.take()
    after_state = snapshot(backend)
    signal = [g for g in own if has_signal(g.rewards)]
    halves = [signal[0::2], signal[1::2]]
    deltas, grads = [], []
    for half in halves + completion_halves(signal):
        restore(backend, before_state)
        tap.rewrap()
        if any(has_signal(g.rewards) for g in half):
            trainer._update(half, [], None)
            deltas.append(diff(products(layers), p0))
            grads.append(tap.take())
        else:
            deltas.append(None)
            grads.append(None)
    # what the optimizer state alone moves: the same two steps with zero gradients (Adam's momentum)
    restore(backend, before_state)
    tap.rewrap()
    momentum = diff(momentum_only(backend, steps=backend._spec.optim.minibatches * backend._spec.optim.epochs, layers=layers), p0)
    restore(backend, after_state)
    tap.rewrap()
    return full, deltas, grads, g_full, [len(h) for h in halves], momentum


def completion_halves(groups) -> list[list]:
    """The same questions, disjoint samples: completions 0-3 and 4-7 of every group, advantages renormalized
    within each half (a half without a reward spread drops out)."""
    out = []
    for k in range(2):
        part = []
        for g in groups:
            n = len(g.rewards) // 2
            idx = range(k * n, (k + 1) * n)
            rollout = dataclasses.replace(g.rollout, completions=tuple(g.rollout.completions[i] for i in idx))
            part.append(ScoredGroup(rollout, g.task, [g.rewards[i] for i in idx]))
        out.append([g for g in part if has_signal(g.rewards)])
    return out


def momentum_only(backend, steps: int, layers):
    import torch

    params = [p for group in backend._optimizer.param_groups for p in group["params"]]
    if not backend._optimizer.state:
        return products(layers)  # fresh optimizer: no momentum, nothing moves
    for _ in range(steps):
        for p in params:
            p.grad = torch.zeros_like(p)
        type(backend._optimizer).step(backend._optimizer)
    backend._optimizer.zero_grad(set_to_none=True)
    return products(layers)


def summary(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    def r(v: float) -> float:
        return float(f"{v:.4g}")

    return {"mean": r(statistics.mean(values)), "sd": r(statistics.stdev(values)) if len(values) > 1 else 0.0,
            "min": r(min(values)), "max": r(max(values)), "n": len(values)}


def run(lr: float, args, out: dict, out_path: Path) -> None:

    spec = ModelSpec(str(args.model), lora=LoraConfig(), optim=OptimConfig(learning_rate=lr), threads=1)
    backend = registry.load("torch", spec)
    specs = tasks.preset("easy")
    eval_refs = tasks.heldout(specs, args.eval_n)
    plan = RoundPlan(specs, I, 0, L, seed=args.seed, sampling=Sampling(max_new_tokens=NEW_TOKENS, temperature=1.0))
    trainer = Trainer(backend, plan)
    layers = lora_layers(backend._model)
    weights = {n: float(m.base_layer.weight.double().pow(2).sum()) for n, m in layers.items()}
    tap = GradTap(backend)
    entry = {"lr": lr, "rounds_run": args.rounds, "seed": args.seed, "rounds": [], "evals": []}
    out["runs"][f"lr={lr:g}{args.tag}"] = entry
    windows = [("early", range(1, args.measure + 1))] + [(f"from_{s}", range(s, s + args.measure)) for s in args.late]
    measure = {t for _, span in windows for t in span}
    window_start = products(layers)
    prev_grad = None
    started = time.perf_counter()

    def do_eval(t: int) -> None:
        nonlocal window_start
        result = evaluate(backend, eval_refs, NEW_TOKENS)
        now = products(layers)
        entry["evals"].append({
            "round": t, "wall_s": round(time.perf_counter() - started, 1), "accuracy": round(result.accuracy, 4),
            "per_task": {k: round(v, 4) for k, v in result.per_task.items()},
            "accumulated_rel": {k: round(v, 6) for k, v in by_type(now, weights).items()},
            "window_rel": {k: round(v, 6) for k, v in by_type(diff(now, window_start), weights).items()},
        })
        window_start = now
        print(f"lr={lr:g} eval round {t}: acc {result.accuracy:.3f} {result.per_task} "
              f"accumulated {entry['evals'][-1]['accumulated_rel']['all']:.4f}", flush=True)
        out_path.write_text(json.dumps(out, indent=1))

    do_eval(0)
    for t in range(1, args.rounds + 1):
        own = trainer._generate_own(t)
        row = {"round": t, "reward": round(statistics.mean(r for g in own for r in g.rewards), 4),
               "groups_with_signal": sum(has_signal(g.rewards) for g in own)}
        if t in measure and row["groups_with_signal"] >= 2:
            full, (d1, d2, c1, c2), (g1, g2, h1, h2), g_full, sizes, mom = measured_update(trainer, backend, layers,
                                                                                          tap, own)
            fresh = [diff(d, mom) for d in (d1, d2)]
            same_q = c1 is not None and c2 is not None
            row.update({
                "half_groups": sizes,
                "rel_update": {k: round(v, 6) for k, v in by_type(full, weights).items()},
                "rel_update_half": [round(by_type(d, weights)["all"], 6) for d in (d1, d2)],
                "cos_halves": {k: None if v is None else round(v, 4) for k, v in cosines(d1, d2).items()},
                "cos_half_vs_full": [round(cosines(d, full)["all"], 4) for d in (d1, d2)],
                "rel_momentum_only": round(by_type(mom, weights)["all"], 6),
                "cos_halves_minus_momentum": {k: None if v is None else round(v, 4)
                                              for k, v in cosines(*fresh).items()},
                "cos_halves_same_questions": ({k: None if v is None else round(v, 4) for k, v in cosines(c1, c2).items()}
                                              if same_q else None),
                "cos_grad_halves_same_questions": ({k: None if v is None else round(v, 4)
                                                    for k, v in cosines(h1, h2, grad_key).items()} if same_q else None),
                "cos_grad_consecutive_rounds": (round(cosines(prev_grad, g_full, grad_key)["all"], 4)
                                                if prev_grad is not None else None),
                "cos_grad_halves": {k: None if v is None else round(v, 4) for k, v in cosines(g1, g2, grad_key).items()},
            })
            prev_grad = g_full
            print(f"lr={lr:g} round {t}: reward {row['reward']:.3f} signal {row['groups_with_signal']} "
                  f"rel {row['rel_update']['all']:.2e} cos(dW halves) {row['cos_halves']['all']:.3f} "
                  f"minus momentum {row['cos_halves_minus_momentum']['all']} "
                  f"cos(grad halves) {row['cos_grad_halves']['all']:.3f} "
                  f"same-q dW {row['cos_halves_same_questions'] and row['cos_halves_same_questions']['all']} "
                  f"grad {row['cos_grad_halves_same_questions'] and row['cos_grad_halves_same_questions']['all']} "
                  f"consec grad {row['cos_grad_consecutive_rounds']} mom-only rel {row['rel_momentum_only']:.2e}", flush=True)
        else:
            trainer._update(own, [], None)
            prev_grad = tap.take()
        entry["rounds"].append(row)
        if t % args.eval_every == 0:
            do_eval(t)
        elif t in measure:
            out_path.write_text(json.dumps(out, indent=1))
    backend.close()
    summarize_run(entry, windows)
    out_path.write_text(json.dumps(out, indent=1))


def summarize_run(entry: dict, windows) -> None:
    """Mean, sd, min and max over each window's measured rounds."""
    for label, span in windows:
        rows = [r for r in entry["rounds"] if r["round"] in span and "cos_halves" in r]
        if not rows:
            continue
        types = list(rows[0]["rel_update"])
        entry[f"summary_{label}"] = {
            "rounds": [r["round"] for r in rows],
            "rel_update": {t: summary([r["rel_update"][t] for r in rows]) for t in types},
            "cos_halves": {t: summary([r["cos_halves"][t] for r in rows]) for t in types},
            "cos_grad_halves": {t: summary([r["cos_grad_halves"][t] for r in rows]) for t in types},
            "cos_halves_minus_momentum": {t: summary([r["cos_halves_minus_momentum"][t] for r in rows]) for t in types},
            "rel_momentum_only": summary([r["rel_momentum_only"] for r in rows]),
            "cos_halves_same_questions": {t: summary([r["cos_halves_same_questions"][t] for r in rows
                                                      if r["cos_halves_same_questions"]]) for t in types},
            "cos_grad_halves_same_questions": {t: summary([r["cos_grad_halves_same_questions"][t] for r in rows
                                                           if r["cos_grad_halves_same_questions"]]) for t in types},
            "cos_grad_consecutive_rounds": summary([r["cos_grad_consecutive_rounds"] for r in rows]),
            "cos_half_vs_full": summary([c for r in rows for c in r["cos_half_vs_full"]]),
        }


def gradient_scaling(args, out: dict, out_path: Path) -> None:
    """Cosine between the gradients of two disjoint sets of n questions (groups with a reward spread), at the
    fresh adapter, for growing n: if every question's gradient is shared + own part with shared share c of
    its squared norm, cos(n) ~ n c / (1 + n c), so c and the questions an update needs follow from the curve."""

    spec = ModelSpec(str(args.model), threads=1)
    backend = registry.load("torch", spec)
    plan = RoundPlan(tasks.preset("easy"), I, 0, L, seed=args.seed + 1000,
                     sampling=Sampling(max_new_tokens=NEW_TOKENS, temperature=1.0))
    trainer = Trainer(backend, plan)
    tap = GradTap(backend)
    sizes = sorted(args.scaling)
    need, pool, t = 2 * max(sizes), [], 0
    while len(pool) < need:
        t += 1
        pool += [g for g in trainer._generate_own(t) if has_signal(g.rewards)]
    start = snapshot(backend)
    grads = []
    for g in pool[:need]:  # one gradient per question; sets are sums of these (the app's token mean aside)
        restore(backend, start)
        tap.rewrap()
        trainer._update([g], [], None)
        grads.append(tap.take())
    restore(backend, start)
    backend.close()

    def total(gs):
        return {n: sum(g[n] for g in gs) for n in gs[0]}

    rows = []
    for n in sizes:
        cos = [cosines(total(grads[k:k + n]), total(grads[k + n:k + 2 * n]), grad_key)["all"]
               for k in range(0, need - 2 * n + 1, 2 * n)]
        rows.append({"n_questions": n, "pairs": len(cos), "cos": summary(cos) if len(cos) > 1 else
                     {"mean": round(cos[0], 4), "n": 1}})
        print(f"gradient scaling: n={n} cos {rows[-1]['cos']}", flush=True)
    single = [cosines(grads[i], grads[j], grad_key)["all"] for i in range(need) for j in range(i + 1, need)
              if pool[i].task.ref.dataset == pool[j].task.ref.dataset]
    cross = [cosines(grads[i], grads[j], grad_key)["all"] for i in range(need) for j in range(i + 1, need)
             if pool[i].task.ref.dataset != pool[j].task.ref.dataset]
    out["gradient_scaling"] = {"adapter": "fresh (B = 0)", "questions": need, "rounds_drawn": t, "by_n": rows,
                               "pairwise_same_task": summary(single), "pairwise_other_task": summary(cross),
                               "tasks": sorted({g.task.ref.dataset for g in pool[:need]})}
    print(json.dumps(out["gradient_scaling"]), flush=True)
    out_path.write_text(json.dumps(out, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=bundled_model_dir(), help="model folder (default: the bundled one)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--measure", type=int, default=10, help="measured rounds at the start and at --late")
    parser.add_argument("--late", type=int, nargs="+", default=[50], help="first rounds of the later measured windows")
    parser.add_argument("--tag", default="", help="suffix of this run's key in the JSON")
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-n", type=int, default=200, help="held-out items (round-robin over the tasks)")
    parser.add_argument("--out", default="benchmarks/results/learning/update_noise.json")
    parser.add_argument("--scaling", type=int, nargs="*", default=[],
                        help="only the gradient-scaling measurement, for these set sizes (e.g. 1 2 4 8 16 32)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out = json.loads(out_path.read_text()) if out_path.exists() else {}
    out.update({"model": str(args.model), "engine": "torch", "threads": 1, "preset": "easy", "I": I, "L": L,
                "max_new_tokens": NEW_TOKENS, "temperature": 1.0, "lora": {"rank": 16, "alpha": 32},
                "minibatches": 2, "epochs": 1, "eval_n": args.eval_n})
    out.setdefault("runs", {})
    if args.scaling:
        gradient_scaling(args, out, out_path)
        return
    for lr in args.lr:
        run(lr, args, out, out_path)


if __name__ == "__main__":
    main()
