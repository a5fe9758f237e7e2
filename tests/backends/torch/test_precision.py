"""The torch engine's number format (model.precision): which dtype `auto` picks where, and that the
bundled model held in bf16 (forced: `auto` keeps a model this small in fp32) still generates
reproducibly, keeps an fp32 adapter, reports the loss the NumPy reference gives for its own log-probs,
lowers it, and reloads its adapter with identical generations.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.base import ModelSpec, OptimConfig, Sampling  # noqa: E402
from backends.grpo_reference import grpo_loss_reference  # noqa: E402
from backends.torch.device import BF16_CPU_MIN_PARAMS, cpu_has_native_bf16, pick_device  # noqa: E402
from backends.torch.engine import TorchBackend  # noqa: E402
from tests.backends.conformance import BATCH, BUNDLED, QUESTION, padded  # noqa: E402

GREEDY = Sampling(max_new_tokens=12, temperature=0.0)
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU rule")


def load(precision: str, **optim) -> TorchBackend:
    backend = TorchBackend()
    backend.load(ModelSpec(str(BUNDLED), threads=1, precision=precision, optim=OptimConfig(**optim)))
    return backend


@cpu_only
def test_auto_holds_a_large_model_in_bf16_only_on_a_cpu_with_native_bf16():
    threads = torch.get_num_threads()
    large, small = BF16_CPU_MIN_PARAMS, BF16_CPU_MIN_PARAMS - 1
    expected = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    assert pick_device(threads, "auto", large) == (torch.device("cpu"), expected)
    assert pick_device(threads, "auto", small)[1] == torch.float32
    assert pick_device(threads, "fp32", large)[1] == torch.float32
    assert pick_device(threads, "bf16", small)[1] == torch.bfloat16
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        pick_device(threads, "fp16", large)


def test_the_bundled_model_stays_fp32_by_default():
    backend = load("auto")
    assert {p.dtype for p in backend.model.parameters()} == {torch.float32}


def test_a_bf16_model_keeps_an_fp32_adapter_and_generates_reproducibly():
    backend = load("bf16")
    dtypes = {name: p.dtype for name, p in backend.model.named_parameters()}
    assert {d for name, d in dtypes.items() if "lora_" in name} == {torch.float32}
    base_weights = {d for name, d in dtypes.items() if "lora_" not in name and name.endswith("proj.base_layer.weight")}
    assert base_weights == {torch.bfloat16}
    sampling = Sampling(max_new_tokens=10, temperature=1.0, seed=3)
    first = backend.generate([QUESTION], 4, sampling)
    assert backend.generate([QUESTION], 4, sampling) == first
    exact = padded(load("fp32").token_logprobs(BATCH))
    rounded = padded(backend.token_logprobs(BATCH))
    assert 0 < np.abs(exact[0] - rounded[0])[exact[1]].max() < 0.5  # bf16 moves log-probs, a little


def test_a_bf16_model_reports_the_reference_loss_and_lowers_it():
    two_epochs = load("bf16", learning_rate=0.05, epochs=2, minibatches=1)
    before = two_epochs.token_logprobs(BATCH)
    stats = two_epochs.train_step(BATCH)
    one_epoch = load("bf16", learning_rate=0.05, epochs=1, minibatches=1)
    one_epoch.train_step(BATCH)
    old, mask = padded(before)
    new, _ = padded(one_epoch.token_logprobs(BATCH))
    adv = np.array([[s.advantage] for s in BATCH])
    first, second = grpo_loss_reference(old, old, adv, mask), grpo_loss_reference(new, old, adv, mask)
    # The same passes in the same format: equal up to float32 summation order.
    assert stats.loss == pytest.approx((first.loss + second.loss) / 2, abs=1e-4)
    assert second.clipped_fraction > 0

    slow = load("bf16", learning_rate=1e-3, epochs=1, minibatches=1)
    slow.train_step(BATCH)
    lowered, _ = padded(slow.token_logprobs(BATCH))
    assert grpo_loss_reference(lowered, old, adv, mask).loss < first.loss


def test_a_bf16_models_adapter_reloads_with_identical_generations(tmp_path):
    trained = load("bf16", learning_rate=0.05, epochs=1, minibatches=1)
    trained.train_step(BATCH)
    trained.save_adapter(tmp_path / "adapter")
    reloaded = load("bf16")
    reloaded.load_adapter(tmp_path / "adapter")
    assert reloaded.generate([QUESTION], 1, GREEDY) == trained.generate([QUESTION], 1, GREEDY)
