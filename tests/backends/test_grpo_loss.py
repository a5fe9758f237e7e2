"""The GRPO loss against numbers worked out by hand (clip bounds 0.2 / 0.28, token mean, no KL)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from backends.torch.grpo_loss import grpo_loss  # noqa: E402

# Ratios (new / old probability) per token; old log-probs are 0 so logp = log(ratio).
RATIOS = [
    [0.5, 1.0, 1.5],  # advantage +2: 1.5 is above 1 + 0.28, so the clip acts there
    [0.5, 1.1, 1.5],  # advantage -0.5: 0.5 is below 1 - 0.2, so the clip acts there
    [0.7, 1.4, 9.0],  # advantage 0: contributes nothing; the last token is padding
]
ADVANTAGES = [2.0, -0.5, 0.0]
MASK = [[1, 1, 1], [1, 1, 1], [1, 1, 0]]
N_TOKENS = 8

# loss_t = -min(r * A, clip(r, 0.8, 1.28) * A), worked out by hand:
HAND_LOSSES = [
    [-1.0, -2.0, -2.56],  # min(1.0, 1.6), min(2.0, 2.0), min(3.0, 2.56)
    [0.4, 0.55, 0.75],  # min(-0.25, -0.4), min(-0.55, -0.55), min(-0.75, -0.64)
    [0.0, 0.0, 0.0],
]
# d loss / d logp_t = -A * r / N where the unclipped term is the minimum, 0 where the clip acts.
HAND_GRADS = [
    [-2.0 * 0.5 / N_TOKENS, -2.0 * 1.0 / N_TOKENS, 0.0],
    [0.0, 0.5 * 1.1 / N_TOKENS, 0.5 * 1.5 / N_TOKENS],
    [0.0, 0.0, 0.0],
]


def _inputs():
    logp = torch.log(torch.tensor(RATIOS, dtype=torch.float64)).requires_grad_(True)
    old = torch.zeros_like(logp)
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64).unsqueeze(1)
    return logp, old, adv, torch.tensor(MASK, dtype=torch.bool)


def test_loss_matches_hand_computation():
    logp, old, adv, mask = _inputs()
    loss, clipped = grpo_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    expected = sum(sum(row) for row in HAND_LOSSES) / N_TOKENS
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(-3.86 / 8)
    # Clip acted on 2 of 8 tokens: ratio 1.5 with A > 0 and ratio 0.5 with A < 0.
    assert clipped.item() == pytest.approx(2 / 8)


def test_gradient_is_cut_exactly_where_the_clip_acts():
    logp, old, adv, mask = _inputs()
    loss, _ = grpo_loss(logp, old, adv, mask)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor(HAND_GRADS, dtype=torch.float64), atol=1e-12)


def test_zero_advantage_rows_contribute_nothing_but_count_in_the_mean():
    logp, old, adv, mask = _inputs()
    with_zero_row, _ = grpo_loss(logp, old, adv, mask)
    without, _ = grpo_loss(logp[:2], old[:2], adv[:2], mask[:2])
    assert with_zero_row.item() * N_TOKENS == pytest.approx(without.item() * 6, abs=1e-12)


def test_masked_positions_are_ignored_even_when_not_finite():
    logp, old, adv, mask = _inputs()
    poisoned = logp.detach().clone()
    poisoned[2, 2] = float("nan")
    clean, _ = grpo_loss(logp, old, adv, mask)
    loss, _ = grpo_loss(poisoned, old, adv, mask)
    assert loss.item() == pytest.approx(clean.item(), abs=1e-12)


def test_token_mean_weighs_every_token_equally():
    # A long completion (4 tokens, A = +1) and a short one (1 token, A = -1), ratio 1 everywhere.
    logp = torch.zeros(2, 4, dtype=torch.float64)
    adv = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    loss, clipped = grpo_loss(logp, logp.clone(), adv, mask)
    assert loss.item() == pytest.approx((-4 * 1.0 + 1 * 1.0) / 5)  # a mean per sequence, then over sequences, gives 0
    assert clipped.item() == 0.0


def test_flat_tokens_and_explicit_divisor():
    logp, old, adv, mask = _inputs()
    flat_logp = logp[mask]
    flat_adv = adv.expand_as(logp)[mask]
    flat, _ = grpo_loss(flat_logp, old[mask], flat_adv)
    padded, _ = grpo_loss(logp, old, adv, mask)
    halved, _ = grpo_loss(flat_logp, old[mask], flat_adv, num_tokens=2 * N_TOKENS)
    assert flat.item() == pytest.approx(padded.item(), abs=1e-12)
    assert halved.item() == pytest.approx(padded.item() / 2, abs=1e-12)


def test_old_logp_gets_no_gradient_and_ratio_one_gives_policy_gradient():
    logp = torch.full((1, 3), math.log(0.25), dtype=torch.float64, requires_grad=True)
    old = logp.detach().clone().requires_grad_(True)
    loss, clipped = grpo_loss(logp, old, torch.tensor([[3.0]], dtype=torch.float64))
    loss.backward()
    assert loss.item() == pytest.approx(-3.0)
    assert old.grad is None
    assert torch.allclose(logp.grad, torch.full((1, 3), -1.0, dtype=torch.float64))
    assert clipped.item() == 0.0
