"""Held-out accuracy: greedy decoding on a fixed list of TaskRefs that training never draws.

An item counts as correct when its reward is 1 (the dataset's verifier fully accepts the extracted
answer). Items are regenerated and answered a batch at a time, and `answered(done, total)` hears after
each batch, so a long evaluation shows its progress (and a stop lands between batches too).
`sampled_reward` scores the same items as training rollouts are scored: the mean reward of several
completions per question at the rollout temperature (what the reward chart shows, on held-out questions).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from backends.base import Backend, Progress, Sampling
from swarm_app.kernel import tasks

EVAL_BATCH = 64
"""Prompts per generate call: bounds memory on long evaluations."""


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    n: int
    per_task: dict[str, float]

    def to_dict(self) -> dict:
        return {"accuracy": self.accuracy, "n": self.n, "per_task": self.per_task}


def evaluate(backend: Backend, refs: list[tasks.TaskRef], max_new_tokens: int,
             progress: Progress | None = None, answered: Callable[[int, int], None] | None = None) -> EvalResult:
    greedy = Sampling(max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    correct: dict[str, list[bool]] = defaultdict(list)
    for start in range(0, len(refs), EVAL_BATCH):
        chunk = [tasks.regenerate(ref, heldout=True) for ref in refs[start:start + EVAL_BATCH]]
        outputs = backend.generate([task.messages() for task in chunk], 1, greedy, progress)
        for task, (completion,) in zip(chunk, outputs):
            correct[task.ref.dataset].append(tasks.score(task, completion.text) >= 1.0)
        if answered is not None:
            answered(start + len(chunk), len(refs))
    hits = [ok for oks in correct.values() for ok in oks]
    per_task = {name: sum(oks) / len(oks) for name, oks in sorted(correct.items())}
    return EvalResult(sum(hits) / max(len(hits), 1), len(hits), per_task)


@dataclass(frozen=True)
class SampledResult:
    mean_reward: float
    questions: int
    samples: int
    temperature: float
    per_task: dict[str, float]

    def to_dict(self) -> dict:
        return {"mean_reward": self.mean_reward, "questions": self.questions, "samples": self.samples,
                "temperature": self.temperature, "per_task": self.per_task}


def sampled_reward(backend: Backend, refs: list[tasks.TaskRef], sampling: Sampling, samples: int,
                   progress: Progress | None = None, answered: Callable[[int, int], None] | None = None) -> SampledResult:
    """Mean reward of `samples` completions per held-out question drawn with `sampling` (seeded: repeatable)."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for start in range(0, len(refs), EVAL_BATCH):
        chunk = [tasks.regenerate(ref, heldout=True) for ref in refs[start:start + EVAL_BATCH]]
        outputs = backend.generate([task.messages() for task in chunk], samples, sampling, progress)
        for task, group in zip(chunk, outputs):
            rewards[task.ref.dataset].extend(tasks.score(task, completion.text) for completion in group)
        if answered is not None:
            answered(start + len(chunk), len(refs))
    every = [r for values in rewards.values() for r in values]
    per_task = {name: sum(values) / len(values) for name, values in sorted(rewards.items())}
    return SampledResult(sum(every) / max(len(every), 1), len(refs), samples, sampling.temperature, per_task)
