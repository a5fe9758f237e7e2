"""The same contract tests against every installed engine, on the bundled model, one thread.

The loss check: a round of two epochs over one minibatch reports the mean of two losses; the first
(ratio 1) is taken from the log-probs before the round, the second from the log-probs after one update
(a second engine loaded the same way takes that one update), both through the NumPy reference.
Tolerance 1e-5 on float32 log-probs.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.base import OptimConfig, Sampling
from backends.grpo_reference import grpo_loss_reference
from tests.backends.conformance import BATCH, QUESTION, engine_params, load_engine, padded

pytestmark = pytest.mark.parametrize("engine", engine_params())

GREEDY = Sampling(max_new_tokens=12, temperature=0.0)
FAST = OptimConfig(learning_rate=0.05, epochs=1, minibatches=1)


def test_n_completions_per_prompt_reproducible_with_a_seed(engine):
    backend = load_engine(engine)
    sampling = Sampling(max_new_tokens=10, temperature=1.0, seed=7)
    first = backend.generate([QUESTION, QUESTION[:1]], 3, sampling)
    assert [len(group) for group in first] == [3, 3]
    assert backend.generate([QUESTION, QUESTION[:1]], 3, sampling) == first
    assert all(0 < c.n_tokens <= 10 for group in first for c in group)


def test_reported_loss_equals_the_numpy_reference(engine):
    two_epochs = load_engine(engine, optim=OptimConfig(learning_rate=0.05, epochs=2, minibatches=1))
    before = two_epochs.token_logprobs(BATCH)
    stats = two_epochs.train_step(BATCH)
    one_epoch = load_engine(engine, optim=FAST)
    one_epoch.train_step(BATCH)
    after = one_epoch.token_logprobs(BATCH)
    old, mask = padded(before)
    new, _ = padded(after)
    adv = np.array([[s.advantage] for s in BATCH])
    first, second = grpo_loss_reference(old, old, adv, mask), grpo_loss_reference(new, old, adv, mask)
    assert stats.loss == pytest.approx((first.loss + second.loss) / 2, abs=1e-5)
    assert stats.tokens == int(mask.sum())
    assert second.clipped_fraction > 0  # the clip really acts in the second epoch at this learning rate
    assert stats.clipped_fraction == pytest.approx(second.clipped_fraction / 2, abs=1e-6)


def test_per_sample_figures_are_the_old_log_probs_and_the_clips_of_the_reference(engine):
    two_epochs = load_engine(engine, optim=OptimConfig(learning_rate=0.05, epochs=2, minibatches=1))
    before = two_epochs.token_logprobs(BATCH)
    stats = two_epochs.train_step(BATCH)
    one_epoch = load_engine(engine, optim=FAST)
    one_epoch.train_step(BATCH)
    old, mask = padded(before)
    new, _ = padded(one_epoch.token_logprobs(BATCH))
    adv = np.array([[s.advantage] for s in BATCH])
    ratio = np.exp(np.where(mask, new - old, 0.0))
    cut = ((((ratio > 1.28) & (adv > 0)) | ((ratio < 0.8) & (adv < 0))) & mask).sum(axis=1)  # epoch 1 clips nothing
    samples = stats.samples
    assert [s.tokens for s in samples] == [len(row) for row in before]
    assert [s.trained_tokens for s in samples] == [2 * len(row) for row in before]
    assert [s.clipped for s in samples] == cut.tolist() and sum(cut) > 0
    assert samples[3].old_logp is None  # A = 0: no pass
    assert [s.old_logp for s in samples[:3]] == pytest.approx([sum(row) for row in before[:3]], abs=1e-4)


def test_a_policy_that_does_not_move_keeps_every_ratio_at_one(engine):
    # Learning rate 0: the second epoch's ratios, against the old log-probs the round kept (the first
    # minibatch's own pass where the engine reuses it), are 1 only if each sample kept its own.
    still = load_engine(engine, optim=OptimConfig(learning_rate=0.0, epochs=2, minibatches=1))
    n = [len(row) for row in still.token_logprobs(BATCH)]
    stats = still.train_step(BATCH)
    assert stats.steps == 2 and stats.clipped_fraction == 0.0
    assert stats.loss == pytest.approx(-sum(s.advantage * k for s, k in zip(BATCH, n)) / sum(n), abs=1e-6)


def test_train_step_lowers_the_loss_on_a_fixed_batch(engine):
    backend = load_engine(engine, optim=OptimConfig(learning_rate=1e-3, epochs=1, minibatches=1))
    before = backend.token_logprobs(BATCH)
    backend.train_step(BATCH)
    after = backend.token_logprobs(BATCH)
    old, mask = padded(before)
    new, _ = padded(after)
    adv = np.array([[s.advantage] for s in BATCH])
    assert grpo_loss_reference(new, old, adv, mask).loss < grpo_loss_reference(old, old, adv, mask).loss


def test_adapter_save_and_load_keeps_generations_identical(engine, tmp_path):
    trained = load_engine(engine, optim=FAST)
    trained.train_step(BATCH)
    trained.save_adapter(tmp_path / "adapter")
    expected = trained.generate([QUESTION], 1, GREEDY)
    fresh = load_engine(engine, optim=FAST)
    fresh.load_adapter(tmp_path / "adapter")
    assert fresh.generate([QUESTION], 1, GREEDY) == expected


def test_stream_hands_out_pieces_that_join_into_generate_s_text(engine):
    """Chat's streaming: the same tokens as generate (greedy), their text handed out as it grows."""
    backend = load_engine(engine)
    sampling = Sampling(max_new_tokens=24, temperature=0.0)
    pieces: list[str] = []
    streamed = backend.stream(QUESTION, sampling, pieces.append)
    assert streamed == backend.generate([QUESTION], 1, sampling)[0][0]
    assert "".join(pieces) == streamed.text
    if backend.supports_streaming:
        assert len(pieces) > 1, pieces
