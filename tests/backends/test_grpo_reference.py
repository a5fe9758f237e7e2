"""The NumPy GRPO reference: hand numbers, then the torch loss (the function and the engine) against it.

Tolerances: the pure loss function in float64 agrees to 1e-12 (same formula, different library); in
float32 to 1e-6. The torch engine's reported loss, from float32 model log-probs, agrees to 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.grpo_reference import grpo_loss_reference
from tests.backends.test_grpo_loss import ADVANTAGES, HAND_GRADS, HAND_LOSSES, MASK, N_TOKENS, RATIOS


def fixed_batch(seed: int = 0, shape=(6, 10)):
    """Log-probs whose ratios straddle both clip bounds, mixed-sign advantages (one zero), ragged masks."""
    rng = np.random.default_rng(seed)
    old = rng.uniform(-6.0, -0.1, shape)
    logp = old + np.log(rng.uniform(0.5, 1.6, shape))
    adv = rng.normal(0.0, 1.0, (shape[0], 1))
    adv[2] = 0.0
    lengths = rng.integers(1, shape[1] + 1, shape[0])
    mask = np.arange(shape[1])[None, :] < lengths[:, None]
    return logp, old, adv, mask


def test_reference_matches_the_hand_computation():
    ref = grpo_loss_reference(np.log(RATIOS), np.zeros((3, 3)), np.array(ADVANTAGES)[:, None], MASK)
    assert ref.loss == pytest.approx(sum(map(sum, HAND_LOSSES)) / N_TOKENS, abs=1e-12)
    assert np.allclose(ref.grad_logp, HAND_GRADS, atol=1e-12)
    assert ref.clipped_fraction == pytest.approx(2 / 8)


def test_the_fixed_batch_exercises_both_clip_bounds():
    logp, old, adv, mask = fixed_batch()
    ratio = np.exp(logp - old)
    assert ((ratio > 1.28) & (adv > 0) & mask).any() and ((ratio < 0.8) & (adv < 0) & mask).any()
    assert 0.0 < grpo_loss_reference(logp, old, adv, mask).clipped_fraction < 0.5


@pytest.mark.parametrize("dtype_name, tolerance", [("float64", 1e-12), ("float32", 1e-6)])
def test_torch_loss_function_equals_the_reference(dtype_name, tolerance):
    torch = pytest.importorskip("torch")
    from backends.torch.grpo_loss import grpo_loss

    logp, old, adv, mask = fixed_batch()
    dtype = getattr(torch, dtype_name)
    t_logp = torch.tensor(logp, dtype=dtype, requires_grad=True)
    loss, clipped = grpo_loss(t_logp, torch.tensor(old, dtype=dtype), torch.tensor(adv, dtype=dtype),
                              torch.tensor(mask), num_tokens=50)
    loss.backward()
    ref = grpo_loss_reference(logp, old, adv, mask, num_tokens=50)
    assert loss.item() == pytest.approx(ref.loss, abs=tolerance)
    assert np.allclose(t_logp.grad.numpy(), ref.grad_logp, atol=tolerance)
    assert clipped.item() == pytest.approx(ref.clipped_fraction, abs=1e-7)
