"""One round's update data, the same for every engine that trains in Python (torch, mlx): the encoded
prompt + completion sequences, their grouping by shared prompt under a logit budget (plain Python: lengths
in, index groups out), and the record of each optimizer step with the round's summary. Engines do the
tensor work; nothing here imports one.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import NamedTuple

from backends.base import Messages, OptimConfig, SampleStats, TrainSample, TrainStats
from backends.chat import encode_prompt

LOGIT_BUDGET = 1 << 26
"""Logit elements per training forward pass (256 MiB in fp32); minibatches are split to stay under it."""


@dataclass(frozen=True)
class Sequence:
    """Prompt + completion token ids; tokens from `prompt_len` on are the completion (with the end token)."""

    ids: list[int]
    prompt_len: int

    @property
    def n_completion(self) -> int:
        return len(self.ids) - self.prompt_len


class Step(NamedTuple):
    """One optimizer step: summed loss, tokens in its token mean, clipped tokens, gradient norm, taken."""

    loss: float
    tokens: int
    clipped: float
    grad_norm: float
    taken: bool


def encode_sample(tok, messages: Messages, completion: str, end_id: int, model_id: str) -> Sequence:
    """The prompt as the chat template renders it, then the completion and the end-of-turn token."""
    prompt = encode_prompt(tok, messages, model_id)
    return Sequence(prompt + tok(completion, add_special_tokens=False)["input_ids"] + [end_id], len(prompt))


def by_prompt(seqs: list[Sequence]) -> list[list[int]]:
    """Indices of `seqs` grouped by prompt, in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(tuple(s.ids[: s.prompt_len]), []).append(i)
    return list(groups.values())


def split_by_budget(lengths: list[int], vocab: int, budget: int = LOGIT_BUDGET) -> list[list[int]]:
    """Consecutive index groups whose padded logits (rows x longest x vocab) stay under `budget`."""
    groups: list[list[int]] = []
    longest = 0
    for i, length in enumerate(lengths):
        longest = max(longest, length)
        if groups and (len(groups[-1]) + 1) * longest * vocab <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
            longest = length
    return groups


def group_by_prompt(seqs: list[Sequence], vocab: int) -> list[list[int]]:
    """Indices of `seqs` grouped by prompt, each group split so its padded logits stay under the budget."""
    return [[members[j] for j in part] for members in by_prompt(seqs)
            for part in split_by_budget([seqs[i].n_completion + 1 for i in members], vocab)]


def shuffle_seed(batch: list[TrainSample]) -> int:
    """A seed from the batch itself: a resumed round reshuffles exactly as before, with no state to save."""
    digest = hashlib.sha256("\x00".join(s.completion for s in batch).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def minibatch_parts(seqs: list[Sequence], optim: OptimConfig, seed: int) -> list[list[int]]:
    """Per epoch, the indices of `seqs` in `optim.minibatches` near-equal parts, whole prompt groups together.

    The prompts come in a fresh random order each epoch, each prompt's samples shuffled and kept next to each
    other, and that order is cut into contiguous parts. So a part holds as few prompts as equal sizes allow
    (I prompts into I parts: one each), and every engine that shares a prompt's pass across its samples runs
    each prompt once per part instead of once per part for nearly every prompt, as a plain shuffle would.
    A group's advantages then also cancel within its part, as they do over the round.
    """
    groups = by_prompt(seqs)
    rng = random.Random(seed)
    parts = min(optim.minibatches, len(seqs))
    out: list[list[int]] = []
    for _ in range(optim.epochs):
        rng.shuffle(groups)
        order = [i for members in groups for i in rng.sample(members, len(members))]
        size, extra = divmod(len(order), parts)
        starts = [k * size + min(k, extra) for k in range(parts + 1)]
        out.extend(order[starts[k] : starts[k + 1]] for k in range(parts))
    return out


def summarize(steps: list[Step], tokens: int, samples: tuple[SampleStats, ...] = ()) -> TrainStats:
    """The round's figures: mean loss over steps, clipped share of tokens, mean norm of the steps taken, and
    the per-sample figures as given."""
    taken = [s for s in steps if s.taken]
    return TrainStats(
        loss=sum(s.loss for s in steps) / len(steps),
        tokens=tokens,
        clipped_fraction=sum(s.clipped for s in steps) / max(sum(s.tokens for s in steps), 1),
        grad_norm=sum(s.grad_norm for s in taken) / max(len(taken), 1),
        steps=len(taken),
        samples=samples,
    )
