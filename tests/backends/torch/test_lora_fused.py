"""The fused LoRA forward (backends/torch/lora_fused.py) against PEFT's own: the same outputs and adapter gradients
with an fp32 base and with a bf16 base under the fp32 adapter, and PEFT's forward whenever the layer is in
another state (adapter off, merged, dropout)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from backends.torch.lora_fused import fuse_lora_forward  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(12, 40, bias=False)
        self.down = torch.nn.Linear(40, 12, bias=True)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.up(x)))


def wrapped(base_dtype, dropout: float = 0.0):
    """The block under a PEFT LoRA adapter with nonzero B (a fresh B is zero), and a fused copy of it."""
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=["up", "down"])
    model = peft.get_peft_model(Block(), config)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    model.to(base_dtype)
    for name, param in model.named_parameters():  # the adapter in fp32 over the base, as the engine has it
        if "lora_" in name:
            param.data = param.data.float()
    fused = copy.deepcopy(model)
    assert fuse_lora_forward(fused) == 2
    return model, fused


def adapter_grads(model, x):
    model.zero_grad()
    model(x).float().pow(2).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if "lora_" in n}


@pytest.mark.parametrize("base_dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_outputs_and_adapter_gradients_match_peft(base_dtype, tolerance):
    peft_model, fused = wrapped(base_dtype)
    x = torch.randn(3, 5, 12, generator=torch.Generator().manual_seed(1)).to(base_dtype)
    ours, theirs = fused(x), peft_model(x)
    assert ours.dtype == theirs.dtype == base_dtype and ours.shape == theirs.shape
    assert torch.allclose(ours.float(), theirs.float(), rtol=tolerance, atol=tolerance)
    got, expected = adapter_grads(fused, x), adapter_grads(peft_model, x)
    assert sorted(got) == sorted(expected) and len(got) == 4
    for name in got:
        assert got[name].dtype == torch.float32  # the adapter and its gradient stay fp32
        scale = expected[name].abs().max()
        assert scale > 0
        assert torch.allclose(got[name], expected[name], rtol=tolerance, atol=tolerance * scale), name


def test_other_states_take_peft_forward():
    peft_model, fused = wrapped(torch.float32)
    x = torch.randn(2, 12, generator=torch.Generator().manual_seed(2))
    with fused.disable_adapter(), peft_model.disable_adapter():
        assert torch.equal(fused(x), peft_model(x))
    fused.merge_adapter()
    peft_model.merge_adapter()
    assert torch.equal(fused(x), peft_model(x))


def test_dropout_takes_peft_forward():
    peft_model, fused = wrapped(torch.float32, dropout=0.5)
    x = torch.randn(2, 12, generator=torch.Generator().manual_seed(3))
    fused.train(), peft_model.train()
    torch.manual_seed(4)
    ours = fused(x)
    torch.manual_seed(4)
    assert torch.equal(ours, peft_model(x))  # the same dropout draw: PEFT's own code path
