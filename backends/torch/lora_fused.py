"""A fused forward for PEFT's plain LoRA linear layers: base(x) + scale * B(A(x)) in one addmm.

PEFT computes the adapter's output at full width in the adapter's dtype, then scales it, adds it and casts
the sum back: on a bf16 model with the fp32 adapter the app trains, that is three or four passes over a
(tokens x out_features) fp32 tensor per layer (up and gate projections: 4864 wide on Qwen2.5-0.5B), and it
cost ~1.6 s of a 5.3 s update on 2 CPU threads (torch profiler, `benchmarks/realistic_speed.py`'s round).
Here the rank-r part stays in the adapter's dtype, as PEFT has it, and only the product with B is done in the
output's dtype, fused with the sum: no full-width adapter tensor at all. The adapter's weights, their
dtype and the saved format do not change; gradients reach them as before (through a cast of B, as autocast
would do it). Layers in any other state (adapters off, merged, several adapters, dropout, DoRA or another
variant, extra arguments) take PEFT's own forward.

Imports torch and peft at module level: engine.py imports this module only when it loads a model.
"""

from __future__ import annotations

import types

import torch
from peft.tuners.lora.layer import Linear as LoraLinear


def fuse_lora_forward(model) -> int:
    """Give every LoRA linear layer of `model` (a PEFT model) the fused forward; returns how many."""
    count = 0
    for module in model.modules():
        if isinstance(module, LoraLinear) and isinstance(module.base_layer, torch.nn.Linear):
            module.forward = types.MethodType(_fused_forward, module)
            count += 1
    return count


def _plain_adapter(layer: LoraLinear) -> str | None:
    """The one active adapter of `layer` when it is plain LoRA in effect now, else None."""
    if layer.disable_adapters or layer.merged or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    if name not in layer.lora_A or name in layer.lora_variant:
        return None
    if not isinstance(layer.lora_dropout[name], torch.nn.Identity) or layer.lora_B[name].bias is not None:
        return None
    return name


def _fused_forward(self: LoraLinear, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    name = None if args or kwargs else _plain_adapter(self)
    if name is None:
        return LoraLinear.forward(self, x, *args, **kwargs)
    base = self.base_layer
    result = torch.nn.functional.linear(x, base.weight, base.bias)
    a, b = self.lora_A[name].weight, self.lora_B[name].weight
    low = torch.nn.functional.linear(x.to(a.dtype), a)  # (..., r) in the adapter's dtype
    up = (b * self.scaling[name]).to(result.dtype)
    fused = torch.addmm(result.reshape(-1, result.shape[-1]), low.reshape(-1, low.shape[-1]).to(result.dtype), up.t())
    return fused.view(result.shape)
