"""The round's GRPO update as every engine that tokenizes and trains in Python runs it (torch, mlx), and the
small pieces such an engine needs around it.

Owns the skeleton of `train_step`: the minibatch cut (grpo_batch.minibatch_parts), which samples need a
separate old-policy pass, the loop over the parts with progress and train/eval mode, one optimizer step a
part (the gradient accumulated group by group, clipped to max_grad_norm, the step skipped when its norm is
not finite) and the round's summary, with each sample's old log-probs and clipped tokens (`SampleStats`);
also `loss_and_gradients` (the same first step without the update, for comparing engines) and the
HF-tokenizer glue both engines share (encodings, completion text).
An engine supplies its tensor work through the `_`-hooks marked "engine:" and sets the loaded state in
`load`. Nothing here imports an engine's library: a model is only called through `train()` / `eval()`,
which torch and mlx modules both have.
"""

from __future__ import annotations

import logging
import math
from abc import abstractmethod
from typing import Any

from backends.base import Backend, BackendError, Completion, Messages, ModelSpec, Progress, SampleStats, TrainSample, TrainStats
from backends.chat import encode_prompt
from backends.grpo_batch import Sequence, Step, encode_sample, group_by_prompt, minibatch_parts, shuffle_seed, summarize

log = logging.getLogger(__name__)


class GrpoEngine(Backend):
    """One model + LoRA adapter + optimizer, updated with GRPO one minibatch part at a time.

    Old-policy log-probs (the policy as the round starts): with `reuses_first_pass`, the samples of the
    round's first minibatch take theirs from that minibatch's own forward pass, detached (no update has
    happened yet, so they are the same numbers and the first step's ratio is exactly 1); the others get one
    no-grad pass in eval mode before the first step. An engine turns reuse off when a train-mode pass is
    random (dropout), as one noisy draw is not the policy's log-probs: then every sample gets the eval pass.
    """

    def __init__(self) -> None:
        self._model: Any = None
        self._tok: Any = None
        self._optimizer: Any = None
        self._spec: ModelSpec | None = None
        self._model_id = ""
        self._stop_ids: list[int] = []
        self._end_id = 0
        self.reuses_first_pass = True
        """Whether the round's first minibatch keeps its own pass's log-probs as the old ones (see the class
        docstring); `load` sets it, and setting it False forces the separate pass (tests compare the two)."""

    # -- what the engine supplies ------------------------------------------------------------------------

    @abstractmethod
    def _vocab_size(self) -> int:
        """engine: logits per position (the budget that splits a prompt's samples into passes)."""

    @abstractmethod
    def _old_logps(self, seqs: list[Sequence]) -> list:
        """engine: per sample, the 1-D log-probs of its completion tokens, in eval mode, without gradient."""

    @abstractmethod
    def _group_gradients(self, seqs: list[Sequence], old: list, advantages: list[float],
                         total: int) -> tuple[float, float, list, Any]:
        """engine: (loss, clipped tokens per sample, own log-probs, gradient) of `seqs`, which share one prompt,
        in one pass. `old[k]` is sample k's old log-probs or None, meaning: use this pass's own, detached (the
        first-minibatch reuse); own log-probs come back detached, one 1-D array a sample. The token mean
        divides by `total`. The gradient is whatever `_add_gradients` and `_clip_gradients` take (torch
        accumulates into the parameters and returns None)."""

    def _add_gradients(self, first: Any, second: Any) -> Any:
        """engine: two groups' gradients summed (an engine that accumulates in place keeps this no-op)."""
        return first

    @abstractmethod
    def _clip_gradients(self, grads: Any, max_norm: float) -> tuple[Any, float]:
        """engine: (gradient scaled to global norm <= max_norm, its norm before scaling)."""

    @abstractmethod
    def _apply_gradients(self, grads: Any) -> None:
        """engine: one optimizer step with the clipped gradient."""

    def _zero_gradients(self) -> None:
        """engine: drop accumulated gradients (before and after each step; no-op where none are kept)."""

    @abstractmethod
    def _named_gradients(self, grads: Any) -> dict:
        """engine: the LoRA gradient as {PEFT name: numpy array in PEFT's layout}."""

    # -- the update ----------------------------------------------------------------------------------------

    def train_step(self, batch: list[TrainSample], progress: Progress | None = None) -> TrainStats:
        self._require_model()
        if self._optimizer is None:
            raise BackendError("this model was loaded with trainable=False: load it again to train")
        if all(s.advantage == 0.0 for s in batch):
            return TrainStats(loss=0.0, tokens=0)
        seqs = [self._encode_sample(s) for s in batch]
        advantages = [s.advantage for s in batch]
        parts = minibatch_parts(seqs, self._spec.optim, shuffle_seed(batch))
        # A == 0 adds nothing to the loss or gradient: no forward pass, but its tokens count in the token mean.
        reused = set(parts[0]) if self.reuses_first_pass else set()
        pending = [i for i, a in enumerate(advantages) if a != 0.0 and i not in reused]
        old = dict(zip(pending, self._old_logps([seqs[i] for i in pending])))
        self._model.train()
        steps, clipped = [], [0] * len(seqs)
        try:
            for k, part in enumerate(parts, 1):
                steps.append(self._minibatch_step(part, seqs, advantages, old, clipped))
                if progress is not None:
                    progress(k, len(parts))
        finally:
            self._model.eval()
        return summarize(steps, tokens=sum(s.n_completion for s in seqs),
                         samples=sample_stats(seqs, old, clipped, parts))

    def _minibatch_step(self, part: list[int], seqs: list[Sequence], advantages: list[float], old: dict,
                        clipped: list[int]) -> Step:
        """One optimizer step over the samples `part`; the token mean spans all of them, A == 0 ones included.
        Each sample's clipped tokens are added to `clipped`."""
        total = sum(seqs[i].n_completion for i in part)
        keep = [i for i in part if advantages[i] != 0.0]
        if not keep:
            return Step(0.0, total, 0.0, 0.0, False)
        self._zero_gradients()
        loss, cut, grads = self._part_gradients(keep, seqs, advantages, old, total)
        for i, n in cut.items():
            clipped[i] += n
        grads, norm = self._clip_gradients(grads, self._spec.optim.max_grad_norm)
        finite = math.isfinite(norm)
        if finite:
            self._apply_gradients(grads)
        else:
            log.warning("skipped an optimizer step: the gradient norm is %s", norm)
        self._zero_gradients()
        return Step(loss, total, sum(cut.values()), norm, finite)

    def _part_gradients(self, keep: list[int], seqs: list[Sequence], advantages: list[float], old: dict,
                        total: int) -> tuple[float, dict[int, int], Any]:
        """(loss, clipped tokens by sample index, gradient) of the samples `keep`, accumulated one prompt group
        at a time so each pass stays under the logit budget. A sample missing from `old` (the round's first minibatch
        under reuse) takes this pass's own log-probs and keeps them there for the later parts and epochs."""
        loss_sum = 0.0
        clipped: dict[int, int] = {}
        grads = None
        for group in self._groups([seqs[i] for i in keep]):
            members = [keep[j] for j in group]
            loss, cut, own, g = self._group_gradients([seqs[i] for i in members], [old.get(i) for i in members],
                                                      [advantages[i] for i in members], total)
            for i, logp, n in zip(members, own, cut):
                old.setdefault(i, logp)
                clipped[i] = int(n)
            grads = g if grads is None else self._add_gradients(grads, g)
            loss_sum += loss
        return loss_sum, clipped, grads

    def loss_and_gradients(self, batch: list[TrainSample]) -> tuple[float, dict]:
        """The first step's loss (ratio 1) and its LoRA gradient over `batch` as one minibatch, with PEFT names
        and layout (numpy), without updating anything: for comparing engines in tests."""
        self._require_model()
        seqs = [self._encode_sample(s) for s in batch]
        advantages = [s.advantage for s in batch]
        keep = [i for i, a in enumerate(advantages) if a != 0.0]
        old = dict(zip(keep, self._old_logps([seqs[i] for i in keep])))
        self._zero_gradients()
        loss, _, grads = self._part_gradients(keep, seqs, advantages, old, sum(s.n_completion for s in seqs))
        named = self._named_gradients(grads)
        self._zero_gradients()
        return loss, named

    def token_logprobs(self, batch: list[TrainSample]) -> list[list[float]]:
        self._require_model()
        return [logp.tolist() for logp in self._old_logps([self._encode_sample(s) for s in batch])]

    # -- the loaded model and its tokenizer ----------------------------------------------------------------

    def _require_model(self):
        if self._model is None:
            raise BackendError("no model loaded: call load() first")
        return self._model

    @property
    def model_id(self) -> str:
        self._require_model()
        return self._model_id

    @property
    def model(self) -> Any:
        """The loaded model as the engine's library holds it (torch: the PEFT-wrapped module; mlx: the mlx-lm
        module with its LoRA layers), for checks and measurements that look inside: parameters, dtypes,
        hooks, a plain forward pass. BackendError before load."""
        return self._require_model()

    @property
    def tokenizer(self) -> Any:
        """The model's HF tokenizer, which every encoding of this engine goes through."""
        self._require_model()
        return self._tok

    @property
    def stop_ids(self) -> list[int]:
        """The token ids that end a completion (the end-of-turn token and the checkpoint's end tokens)."""
        self._require_model()
        return list(self._stop_ids)

    def encode_prompt(self, messages: Messages) -> list[int]:
        """The prompt's token ids as the model's chat template renders it, up to where the answer starts."""
        return encode_prompt(self._tok, messages, self._model_id)

    _encode_prompt = encode_prompt
    """The former private name, still called under benchmarks/ and tests/session/ (drop it once they move)."""

    def _encode_sample(self, sample: TrainSample) -> Sequence:
        return encode_sample(self._tok, sample.messages, sample.completion, self._end_id, self._model_id)

    def _groups(self, seqs: list[Sequence]) -> list[list[int]]:
        return group_by_prompt(seqs, self._vocab_size())

    def _completion(self, new_tokens: list[int]) -> Completion:
        """Text up to the first stop token; n_tokens counts the generated tokens including that stop token."""
        stops = [i for i, t in enumerate(new_tokens) if t in self._stop_ids]
        end = stops[0] if stops else len(new_tokens)
        return Completion(self._tok.decode(new_tokens[:end], skip_special_tokens=True), end + 1 if stops else end)


def sample_stats(seqs: list[Sequence], old: dict, clipped: list[int], parts: list[list[int]]) -> tuple[SampleStats, ...]:
    """Per sample: its tokens, the sum of its old log-probs (None without a pass), its clipped tokens and its
    tokens over the steps it was in. `old` holds any engine's 1-D arrays (torch, mlx, numpy: all have tolist)."""
    steps_in = [0] * len(seqs)
    for part in parts:
        for i in part:
            steps_in[i] += 1
    return tuple(SampleStats(s.n_completion, float(sum(old[i].tolist())) if i in old else None, clipped[i],
                             s.n_completion * steps_in[i]) for i, s in enumerate(seqs))
