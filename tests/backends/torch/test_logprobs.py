"""The chunked log-softmax at chosen tokens (backends/torch/logprobs.py) against the plain formula: the same
values and gradients, in fp32 and in bf16, over chunks that split the rows unevenly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from backends.torch import logprobs as torch_logprobs  # noqa: E402
from backends.torch.logprobs import token_logprobs  # noqa: E402


def plain(logits, targets):
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@pytest.fixture(params=[1 << 20, 3 * 50])  # one chunk, or chunks of 3 rows over 2 x 7 rows
def chunk(request, monkeypatch):
    monkeypatch.setattr(torch_logprobs, "CHUNK_ELEMENTS", request.param)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-6)])
def test_values_and_gradients_equal_the_plain_formula(chunk, dtype, tolerance):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 7, 50, generator=generator) * 4).to(dtype)
    targets = torch.randint(0, 50, (2, 7), generator=generator)
    weights = torch.randn(2, 7, generator=generator)
    ours, theirs = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    got, expected = token_logprobs(ours, targets), plain(theirs, targets)
    assert got.dtype == torch.float32 and got.shape == (2, 7)
    assert torch.allclose(got, expected, atol=tolerance)
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    assert ours.grad.dtype == dtype
    assert torch.allclose(ours.grad.float(), theirs.grad.float(), atol=tolerance if dtype == torch.float32 else 1e-2)


def test_the_gradient_passes_a_numerical_check(chunk):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 7, 50, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 50, (2, 7), generator=generator)
    # float64 through the fp32 sums: a loose numerical check that the formula (onehot - softmax) is right.
    check = lambda x: token_logprobs(x, targets).double()  # noqa: E731
    assert torch.autograd.gradcheck(check, (logits.requires_grad_(True),), eps=1e-3, atol=1e-3, rtol=1e-2)


def test_log_probs_are_normalised():
    logits = torch.randn(1, 5, 9, generator=torch.Generator().manual_seed(2))
    everything = torch.stack([token_logprobs(logits, torch.full((1, 5), t)) for t in range(9)], dim=-1)
    assert torch.allclose(everything.exp().sum(-1), torch.ones(1, 5), atol=1e-6)
