"""The shared GRPO update skeleton (backends/update.py) on a scripted engine: one number as the whole policy,
so each hook's calls can be counted and checked without torch or mlx.

The engines' own numbers are checked against the NumPy reference in test_conformance.py; here: which
samples get the separate old-policy pass, what the first minibatch keeps, skipped steps, progress, modes.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from backends.base import BackendError, Hardware, ModelSpec, OptimConfig, TrainSample
from backends.grpo_batch import Sequence, minibatch_parts, shuffle_seed
from backends.update import GrpoEngine

PROMPTS = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
BATCH = [TrainSample(PROMPTS[0], "x y", 1.0), TrainSample(PROMPTS[0], "x", -1.0), TrainSample(PROMPTS[0], "z", 0.0),
         TrainSample(PROMPTS[1], "x y z", 0.5), TrainSample(PROMPTS[1], "y", -0.5)]


def encode(sample: TrainSample) -> Sequence:
    """One token per prompt character, one per completion word, then the end token 0."""
    prompt = [ord(c) for c in sample.messages[0]["content"]]
    return Sequence(prompt + [len(w) for w in sample.completion.split()] + [0], len(prompt))


class Mode:
    """Stands in for a model: records train()/eval() as torch and mlx modules take them."""

    def __init__(self) -> None:
        self.training = False

    def train(self) -> None:
        self.training = True

    def eval(self) -> None:
        self.training = False


class Scripted(GrpoEngine):
    """Every completion token's log-prob is `theta`; the gradient is d loss / d theta, one float."""

    name = "scripted"

    def __init__(self, optim: OptimConfig, norm: float | None = None, trainable: bool = True) -> None:
        super().__init__()
        self._model, self._optimizer = Mode(), "sgd" if trainable else None
        self._spec = ModelSpec("unused", optim=optim)
        self.theta, self.norm = 0.0, norm
        self.separate: list[int] = []  # completion lengths that went through the eval-mode pass
        self.given_old: list[tuple[int, bool, list]] = []  # per group pass: (step, train mode, old log-probs)
        self.steps_applied = 0

    @classmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        return True, "scripted"

    def load(self, spec: ModelSpec) -> None:
        raise NotImplementedError

    def generate(self, prompts, n, sampling, progress=None):
        raise NotImplementedError

    def save_adapter(self, folder) -> None:
        raise NotImplementedError

    def load_adapter(self, folder) -> None:
        raise NotImplementedError

    def _encode_sample(self, sample: TrainSample) -> Sequence:
        return encode(sample)

    def _vocab_size(self) -> int:
        return 10

    def _old_logps(self, seqs: list[Sequence]) -> list:
        assert not self._model.training
        self.separate.extend(s.n_completion for s in seqs)
        return [np.full(s.n_completion, self.theta) for s in seqs]

    def _group_gradients(self, seqs, old, advantages, total):
        self.given_old.append((self.steps_applied, self._model.training, old))
        own = [np.full(s.n_completion, self.theta) for s in seqs]
        old = [mine if theirs is None else theirs for theirs, mine in zip(old, own)]
        ratios = [np.exp(mine - theirs) for mine, theirs in zip(own, old)]
        loss = -sum(a * r.sum() for a, r in zip(advantages, ratios)) / total
        cut = [int(((r < 1 - self._spec.optim.clip_low) & (a < 0) | (r > 1 + self._spec.optim.clip_high) & (a > 0)).sum())
               for a, r in zip(advantages, ratios)]
        return loss, cut, own, loss  # d loss / d theta equals the loss here: every token's ratio is exp(theta - old)

    def _add_gradients(self, first, second):
        return first + second

    def _clip_gradients(self, grads, max_norm):
        norm = abs(grads) if self.norm is None else self.norm
        return grads * min(1.0, max_norm / norm) if norm else grads, norm

    def _apply_gradients(self, grads) -> None:
        self.theta -= self._spec.optim.learning_rate * grads
        self.steps_applied += 1

    def _named_gradients(self, grads) -> dict:
        return {"theta": np.array(grads)}


def test_with_reuse_the_first_minibatch_skips_the_separate_pass_and_keeps_its_own():
    optim = OptimConfig(learning_rate=0.1, epochs=2, minibatches=2)
    engine = Scripted(optim)
    seqs = [encode(s) for s in BATCH]
    first = minibatch_parts(seqs, optim, shuffle_seed(BATCH))[0]
    stats = engine.train_step(BATCH)
    assert stats.steps == 4 == engine.steps_applied
    # The separate pass: the samples with A != 0 outside the first minibatch, and no others.
    assert sorted(engine.separate) == sorted(seqs[i].n_completion for i, s in enumerate(BATCH)
                                             if s.advantage != 0.0 and i not in first)
    # The first step's passes had nothing beforehand (theirs is kept); every later one had all it needed.
    assert all(o is None for step, _, old in engine.given_old if step == 0 for o in old)
    assert all(o is not None for step, _, old in engine.given_old if step > 0 for o in old)
    assert all(training for _, training, _ in engine.given_old)
    # Kept from the first pass, when theta was 0; the policy has moved since, so later ratios are not 1.
    assert engine.theta != 0.0 and 0.0 in {o[0] for step, _, old in engine.given_old if step > 0 for o in old}


def test_without_reuse_every_sample_with_an_advantage_gets_the_separate_pass():
    engine = Scripted(OptimConfig(epochs=1, minibatches=2))
    engine.reuses_first_pass = False
    engine.train_step(BATCH)
    assert sorted(engine.separate) == [2, 2, 3, 4]  # x / y / x y / x y z, each with its end token; not "z" (A = 0)
    assert all(o is not None for _, _, old in engine.given_old for o in old)


def test_the_first_step_has_ratio_one_either_way():
    for reuse in (True, False):
        engine = Scripted(OptimConfig(epochs=1, minibatches=1))
        engine.reuses_first_pass = reuse
        n = [len(s.completion.split()) + 1 for s in BATCH]
        assert engine.train_step(BATCH).loss == pytest.approx(-sum(s.advantage * k for s, k in zip(BATCH, n)) / sum(n))


def test_a_step_whose_gradient_norm_is_not_finite_is_skipped(caplog):
    engine = Scripted(OptimConfig(epochs=1, minibatches=1), norm=math.nan)
    with caplog.at_level(logging.WARNING):
        stats = engine.train_step(BATCH)
    assert (engine.steps_applied, stats.steps, engine.theta) == (0, 0, 0.0)
    assert "skipped an optimizer step" in caplog.text


def test_progress_counts_steps_and_the_model_returns_to_eval_mode():
    engine = Scripted(OptimConfig(epochs=2, minibatches=2))
    seen = []
    engine.train_step(BATCH, lambda done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)] and not engine.model.training

    def fail(done, total):
        raise RuntimeError("view closed")

    with pytest.raises(RuntimeError):
        engine.train_step(BATCH, fail)
    assert not engine.model.training


def test_nothing_to_learn_is_no_pass_and_an_untrainable_model_refuses():
    engine = Scripted(OptimConfig())
    stats = engine.train_step([TrainSample(PROMPTS[0], "x", 0.0)])
    assert (stats.steps, stats.tokens, engine.separate, engine.given_old) == (0, 0, [], [])
    with pytest.raises(BackendError, match="trainable=False"):
        Scripted(OptimConfig(), trainable=False).train_step(BATCH)


def test_loss_and_gradients_take_the_first_step_without_updating():
    engine = Scripted(OptimConfig(learning_rate=0.5))
    loss, grads = engine.loss_and_gradients(BATCH)
    assert loss < 0 and list(grads) == ["theta"] and float(grads["theta"]) == pytest.approx(loss)
    assert (engine.theta, engine.steps_applied) == (0.0, 0)
