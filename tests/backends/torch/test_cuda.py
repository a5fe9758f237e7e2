"""The torch engine on CUDA (marked gpu; skipped where no CUDA device is visible): bf16 where the card
supports it, generation and a GRPO step on the bundled model, memory reported. benchmarks/gpu_check.sh
runs this on a GPU machine."""

from __future__ import annotations

import math

import pytest

from backends.base import ModelSpec, Sampling, TrainSample
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")]


def test_generation_and_a_grpo_step_on_the_gpu():
    import torch

    from backends.torch.engine import TorchBackend

    backend = TorchBackend()
    backend.load(ModelSpec(str(bundled_model_dir())))
    assert backend.device().startswith("cuda") and backend.memory() > 0
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    assert next(backend.model.parameters()).dtype in (expected, torch.float32)  # LoRA weights may stay fp32
    task = tasks.regenerate(tasks.draw(tasks.preset("easy"), 0, 1, 1)[0])
    outputs = backend.generate([task.messages()] * 2, 4, Sampling(max_new_tokens=24, seed=1))
    assert [len(group) for group in outputs] == [4, 4]
    batch = [TrainSample(task.messages(), c.text, a) for c, a in zip(outputs[0], (1.0, -1.0, 0.5, -0.5))]
    first = backend.train_step(batch)
    assert math.isfinite(first.loss) and first.tokens > 0
    backend.close()


def test_gpu_memory_fraction_caps_what_this_process_may_allocate():
    """`[resources] gpu_memory_fraction` reaches torch's caching allocator: past the cap, an allocation that
    would fit on the card fails. (On a CPU there is no allocator to cap: the setting does nothing there.)"""
    import torch

    from backends.torch.engine import TorchBackend

    total = torch.cuda.get_device_properties(0).total_memory
    backend = TorchBackend()
    backend.load(ModelSpec(path=str(bundled_model_dir()), threads=1, gpu_memory_fraction=0.05))
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(total * 0.10), dtype=torch.uint8, device="cuda")  # twice the cap, far below the card
    finally:
        backend.close()
        torch.cuda.set_per_process_memory_fraction(1.0)
