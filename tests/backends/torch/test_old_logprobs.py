"""The torch engine's old-policy log-probs on the bundled model (one thread): the round's first minibatch
reuses its own forward pass for them (detached) instead of a second no-grad pass, except with dropout.
The bookkeeping itself (which samples get which pass) is backends/update.py's: tests/backends/test_update.py;
that the kept log-probs are each sample's own: test_conformance.py, on every engine.
"""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.base import LoraConfig, ModelSpec, OptimConfig, TrainSample  # noqa: E402
from backends.torch.engine import TorchBackend  # noqa: E402
from tests.backends.conformance import BUNDLED  # noqa: E402

ADD = [{"role": "user", "content": "What is 3 + 4?"}]
BASE = [{"role": "user", "content": "Convert the binary number 1011 to base 10."}]
BATCH = [
    TrainSample(ADD, "<answer>7</answer>", 1.2),
    TrainSample(ADD, "3 + 4 = 8 <answer>8</answer>", -0.4),
    TrainSample(ADD, "It is 7.", 0.0),
    TrainSample(BASE, "<answer>11</answer>", 0.9),
    TrainSample(BASE, "1011 is 13 <answer>13</answer>", -0.9),
    TrainSample(ADD, "<answer>12</answer>", -0.8),
]


def load(model_dir=BUNDLED, **spec_fields) -> TorchBackend:
    torch.set_num_threads(1)
    backend = TorchBackend()
    backend.load(ModelSpec(str(model_dir), threads=1, **spec_fields))
    return backend


def ratio_one_loss(backend: TorchBackend) -> float:
    """The loss when every ratio is 1: -sum(A_i * n_i) / sum(n_i) over the completion token counts n_i."""
    n = [len(row) for row in backend.token_logprobs(BATCH)]
    return -sum(s.advantage * k for s, k in zip(BATCH, n)) / sum(n)


@pytest.mark.parametrize("optim", [OptimConfig(learning_rate=1e-3, epochs=2, minibatches=2),
                                   OptimConfig(learning_rate=0.05, epochs=1, minibatches=1)])
def test_reusing_the_first_pass_trains_as_separate_old_log_probs_do(optim):
    reusing, separate = load(optim=optim), load(optim=optim)
    separate.reuses_first_pass = False
    assert reusing.reuses_first_pass
    ours, theirs = reusing.train_step(BATCH), separate.train_step(BATCH)
    assert ours.steps == theirs.steps == optim.epochs * optim.minibatches
    assert ours.loss == pytest.approx(theirs.loss, abs=1e-6)
    assert ours.clipped_fraction == pytest.approx(theirs.clipped_fraction, abs=1e-6)
    assert ours.grad_norm == pytest.approx(theirs.grad_norm, rel=1e-5)
    # The policies, not single weights: LoRA A gets no gradient until B leaves zero, then Adam moves each
    # entry by about +-lr whatever its gradient's size, so float noise (1e-7) can flip single entries.
    after, expected = reusing.token_logprobs(BATCH), separate.token_logprobs(BATCH)
    assert [len(row) for row in after] == [len(row) for row in expected]
    for row, expected_row in zip(after, expected):
        assert row == pytest.approx(expected_row, abs=1e-4)
    before = load().token_logprobs(BATCH)
    assert any(abs(x - y) > 1e-3 for row, old in zip(after, before) for x, y in zip(row, old))  # it did train


def test_the_first_minibatch_is_not_computed_twice():
    passes: list[int] = []

    def count_passes(backend: TorchBackend) -> int:
        passes.clear()
        hook = backend.model.get_decoder().register_forward_hook(lambda m, a, out: passes.append(1))
        try:
            backend.train_step(BATCH)
        finally:
            hook.remove()
        return len(passes)

    one_step = OptimConfig(epochs=1, minibatches=1)
    reusing, separate = load(optim=one_step), load(optim=one_step)
    separate.reuses_first_pass = False
    # Two prompts, each a prefill pass and a completions pass: once with reuse, twice without.
    assert (count_passes(reusing), count_passes(separate)) == (4, 8)


def test_with_lora_dropout_old_log_probs_come_from_eval_mode():
    one_step = OptimConfig(learning_rate=0.05, epochs=1, minibatches=1)
    noisy, plain = load(lora=LoraConfig(dropout=0.3), optim=one_step), load(optim=one_step)
    assert not noisy.reuses_first_pass and plain.reuses_first_pass
    for backend in (noisy, plain):
        backend.train_step(BATCH)  # LoRA B starts at zero, where dropout on its input changes nothing
    ratio_one = ratio_one_loss(plain)
    torch.manual_seed(3)
    assert plain.train_step(BATCH).loss == pytest.approx(ratio_one, abs=1e-6)
    # A train-mode pass with dropout is one noisy draw: against eval-mode old log-probs the ratio is not 1.
    assert abs(noisy.train_step(BATCH).loss - ratio_one) > 1e-4


def test_a_dropout_rate_in_the_model_config_turns_reuse_off(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.1}))
    assert not load(folder).reuses_first_pass
