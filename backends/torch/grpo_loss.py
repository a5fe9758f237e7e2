"""The GRPO policy loss on per-token log-probs: a pure torch function, no model, no optimizer.

Exact variant (the one swarm_app/training/grpo.py states):
- per completion token t of sample i, with advantage A_i (group-normalized by the trainer) and the
  log-probs of the current policy (logp) and of the policy at the start of the round (old_logp):
      ratio_t = exp(logp_t - old_logp_t)
      loss_t  = -min(ratio_t * A_i, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_i)
  with asymmetric bounds (clip_low 0.2, clip_high 0.28 by default: "clip-higher");
- no KL term, no entropy bonus;
- token-mean aggregation: sum of loss_t over the masked (completion) tokens divided by the number of
  those tokens (or by `num_tokens` when the caller splits one minibatch into several backward passes),
  so long completions weigh more than short ones, token for token;
- a sample with A_i == 0 contributes 0 to the sum (but still counts in the token mean).
The clipped fraction counts tokens where the clip took effect, i.e. where the gradient is cut:
ratio < 1 - clip_low with A < 0, or ratio > 1 + clip_high with A > 0.

Must not import transformers or peft, nor know about tokens, padding or models.
"""

from __future__ import annotations

import torch


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    num_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar loss, clipped fraction) for tokens of any shape.

    `advantages` broadcasts against `logp` (shape [B, 1] for per-sample values over [B, T] tokens).
    `mask` (same shape as `logp`, 1 for completion tokens) defaults to all ones. `num_tokens` is the
    divisor of the token mean; it defaults to the number of masked tokens here.
    """
    if mask is None:
        mask = torch.ones_like(logp, dtype=torch.bool)
    mask = mask.bool()
    advantages = advantages.to(logp.dtype)
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    # where(), not a product: padded positions may hold inf/nan, and nan * 0 is nan.
    per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    denom = int(mask.sum().item()) if num_tokens is None else num_tokens
    denom = max(denom, 1)
    loss = per_token.sum() / denom
    with torch.no_grad():
        cut_count = (clip_cut(ratio, advantages, clip_low, clip_high) & mask).sum()
        clipped_fraction = cut_count.to(torch.float32) / max(int(mask.sum().item()), 1)
    return loss, clipped_fraction


def clip_cut(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.28) -> torch.Tensor:
    """Where the clip cuts the gradient (boolean, the shape of `ratio`): ratio below 1 - clip_low with A < 0,
    or above 1 + clip_high with A > 0."""
    return ((ratio < 1.0 - clip_low) & (advantages < 0)) | ((ratio > 1.0 + clip_high) & (advantages > 0))
