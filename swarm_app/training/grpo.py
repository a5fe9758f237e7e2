"""Our exact GRPO variant, and the group advantages the trainer hands to a backend.

The variant, implemented by each backend's `train_step`
(`backends/torch/grpo_loss.py` for torch):
- Groups: the L completions of one question. Advantage A_i = (r_i - mean(r)) / (std(r) + 1e-6), with
  the population std of the group. A group whose rewards are all equal has A = 0 everywhere and adds
  nothing to the loss. `train.negative_weight` (1 by default: plain GRPO) scales the negative advantages
  before the update, so a value below 1 leans on reinforcing the better completions rather than
  suppressing the worse ones.
- Ratio rho = exp(log pi(token) - log pi_old(token)), where pi_old's log-probs are computed once per
  round before the first optimizer step, so that with several epochs or minibatches the clip acts.
- Per-token loss: -min(rho * A, clip(rho, 1 - 0.2, 1 + 0.28) * A) (eps_low 0.2, eps_high 0.28).
- Minibatches: per epoch, the round's samples cut into `train.minibatches` near-equal parts with whole
  groups kept together where sizes allow (`backends/grpo_batch.py: minibatch_parts`).
- No KL term, no reference model. Token-mean over all completion tokens of a minibatch.
- AdamW on LoRA parameters only, gradient norm clipped (1.0 by default).
This module is pure Python: no torch.
"""

from __future__ import annotations

import math

ADVANTAGE_EPS = 1e-6


def group_advantages(rewards: list[float]) -> list[float]:
    """Group-normalized advantages; all zeros when every reward is the same."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std == 0.0:
        return [0.0] * len(rewards)
    return [(r - mean) / (std + ADVANTAGE_EPS) for r in rewards]


def weigh_negatives(advantages: list[float], negative_weight: float) -> list[float]:
    """The advantages with every negative one scaled by `negative_weight` (1: unchanged)."""
    if negative_weight == 1.0:
        return advantages
    return [a * negative_weight if a < 0 else a for a in advantages]


def has_signal(rewards: list[float]) -> bool:
    """True when a group's rewards differ, i.e. it changes the policy."""
    return len(set(rewards)) > 1
