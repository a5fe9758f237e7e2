"""The GRPO policy loss in MLX: the same variant as backends/torch/grpo_loss.py (torch), on padded arrays.

Exact variant (swarm_app/training/grpo.py): ratio_t = exp(logp_t - old_logp_t) with old_logp taken once
per round (a constant here: stop_gradient), loss_t = -min(ratio_t * A, clip(ratio_t, 1 - clip_low,
1 + clip_high) * A), no KL, token mean over the masked tokens or over `num_tokens` when one minibatch is
split into several gradient passes. The clipped fraction counts tokens where the clip cuts the gradient.
MLX has no boolean indexing, so tokens come as [B, T] arrays with a mask instead of a flat vector.
Must not import mlx_lm, torch or swarm_app, nor know about tokens or models.
"""

from __future__ import annotations

import mlx.core as mx


def grpo_loss(logp: mx.array, old_logp: mx.array, advantages: mx.array, mask: mx.array, clip_low: float = 0.2,
              clip_high: float = 0.28, num_tokens: int | None = None) -> tuple[mx.array, mx.array]:
    """(scalar loss, clipped fraction); `advantages` broadcasts against `logp` ([B, 1] over [B, T])."""
    mask = mask.astype(mx.bool_)
    advantages = advantages.astype(logp.dtype)
    # where() before exp: padded positions may hold anything, and exp of garbage can overflow to inf.
    ratio = mx.exp(mx.where(mask, logp - mx.stop_gradient(old_logp), 0.0))
    unclipped = ratio * advantages
    clipped = mx.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    per_token = mx.where(mask, -mx.minimum(unclipped, clipped), 0.0)
    count = mask.sum()
    denom = mx.maximum(count, 1) if num_tokens is None else max(num_tokens, 1)
    loss = per_token.sum() / denom
    cut = clip_cut(ratio, advantages, clip_low, clip_high)
    fraction = mx.stop_gradient((cut & mask).sum().astype(mx.float32) / mx.maximum(count, 1))
    return loss, fraction


def clip_cut(ratio: mx.array, advantages: mx.array, clip_low: float = 0.2, clip_high: float = 0.28) -> mx.array:
    """Where the clip cuts the gradient (boolean, `ratio`'s shape): ratio below 1 - clip_low with A < 0, or
    above 1 + clip_high with A > 0."""
    return ((ratio < 1.0 - clip_low) & (advantages < 0)) | ((ratio > 1.0 + clip_high) & (advantages > 0))
