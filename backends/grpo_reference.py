"""The GRPO loss and its gradient in NumPy: the reference every engine's loss is tested against.

The same variant as backends/torch/grpo_loss.py (and swarm_app/training/grpo.py): per completion token,
ratio = exp(logp - old_logp), loss_t = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A),
no KL, token mean over the masked tokens (or over `num_tokens`). The gradient is written out by hand,
not taken by autograd, so an engine whose autograd disagrees is caught:
    d loss / d logp_t = -A * ratio_t / N   where the unclipped term is the minimum,
                        0                  where the clip acts (ratio > 1 + clip_high with A > 0,
                                           or ratio < 1 - clip_low with A < 0).
Must not import torch, mlx or any engine: it is what they are compared with.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ReferenceLoss(NamedTuple):
    loss: float
    grad_logp: np.ndarray
    """d loss / d logp, same shape as logp (0 on masked-out tokens)."""
    clipped_fraction: float


def grpo_loss_reference(logp, old_logp, advantages, mask=None, clip_low: float = 0.2, clip_high: float = 0.28,
                        num_tokens: int | None = None) -> ReferenceLoss:
    """Loss, gradient and clipped fraction in float64; `advantages` broadcasts against `logp`."""
    logp = np.asarray(logp, dtype=np.float64)
    old_logp = np.asarray(old_logp, dtype=np.float64)
    adv = np.broadcast_to(np.asarray(advantages, dtype=np.float64), logp.shape)
    mask = np.ones(logp.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    n = max(int(mask.sum()) if num_tokens is None else num_tokens, 1)
    ratio = np.exp(np.where(mask, logp - old_logp, 0.0))
    clipped_ratio = np.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -np.minimum(ratio * adv, clipped_ratio * adv)
    cut = ((ratio > 1.0 + clip_high) & (adv > 0)) | ((ratio < 1.0 - clip_low) & (adv < 0))
    grad = np.where(mask & ~cut, -adv * ratio / n, 0.0)
    loss = float(np.where(mask, per_token, 0.0).sum() / n)
    fraction = float((cut & mask).sum() / max(int(mask.sum()), 1))
    return ReferenceLoss(loss, grad, fraction)
