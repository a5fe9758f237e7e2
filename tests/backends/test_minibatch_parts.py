"""How a round's samples are cut into minibatches (the same for torch and mlx): whole prompt groups together,
every sample once per epoch, near-equal sizes, and the same cut for the same batch."""

from __future__ import annotations

from collections import Counter

from backends.base import OptimConfig
from backends.grpo_batch import Sequence, minibatch_parts


def round_of(prompts: int, completions: int) -> list[Sequence]:
    """`prompts` groups of `completions` samples, the groups interleaved as a round's batch comes."""
    return [Sequence([100 + p, 7, 8, 200 + c, 2], prompt_len=3) for c in range(completions) for p in range(prompts)]


def prompts_in(part: list[int], seqs: list[Sequence]) -> set[int]:
    return {seqs[i].ids[0] for i in part}


def test_as_many_prompts_as_parts_give_one_prompt_a_part():
    seqs = round_of(prompts=4, completions=8)
    parts = minibatch_parts(seqs, OptimConfig(epochs=1, minibatches=4), seed=3)
    assert len(parts) == 4
    assert [len(prompts_in(part, seqs)) for part in parts] == [1, 1, 1, 1]
    assert sorted(i for part in parts for i in part) == list(range(len(seqs)))


def test_every_epoch_covers_every_sample_once_in_near_equal_parts():
    seqs = round_of(prompts=3, completions=5)
    optim = OptimConfig(epochs=3, minibatches=2)
    parts = minibatch_parts(seqs, optim, seed=11)
    assert len(parts) == optim.epochs * optim.minibatches
    for epoch in range(optim.epochs):
        cut = parts[epoch * 2 : epoch * 2 + 2]
        assert sorted(len(part) for part in cut) == [7, 8]
        assert sorted(i for part in cut for i in part) == list(range(len(seqs)))
        # 3 prompts in 2 contiguous parts: one prompt is split, so 4 (part, prompt) pairs, not up to 6.
        assert sum(len(prompts_in(part, seqs)) for part in cut) == 4


def test_fewer_prompts_than_parts_split_a_group():
    seqs = round_of(prompts=1, completions=6)
    parts = minibatch_parts(seqs, OptimConfig(epochs=1, minibatches=4), seed=0)
    assert [len(part) for part in parts] == [2, 2, 1, 1]
    assert Counter(i for part in parts for i in part) == Counter(range(6))


def test_more_parts_than_samples_give_one_sample_each():
    seqs = round_of(prompts=1, completions=2)
    assert sorted(minibatch_parts(seqs, OptimConfig(epochs=1, minibatches=8), seed=0)) == [[0], [1]]


def test_the_cut_follows_the_seed_only():
    seqs = round_of(prompts=4, completions=4)
    optim = OptimConfig(epochs=2, minibatches=2)
    assert minibatch_parts(seqs, optim, seed=5) == minibatch_parts(seqs, optim, seed=5)
    assert any(minibatch_parts(seqs, optim, seed=5) != minibatch_parts(seqs, optim, seed=s) for s in range(6, 12))
