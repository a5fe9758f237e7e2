"""Own versus external groups in one round's update: what a peer's group gives this node compared with one of
its own (issue 30). Only figures the round has anyway (rewards, advantages, the update's per-sample
`TrainStats.samples`): no extra forward pass. Pure: no backend, no I/O, no state between rounds.

Each figure comes twice, `_own` (this node's groups) and `_external` (peers' groups the update used):
- `logp`: the mean log-prob per completion token under this node's policy as the round started (the old
  log-probs of the ratio), over the update's samples (A != 0): sum of log-probs / tokens. How likely this
  node's model finds the text: external text is another adapter's samples, re-tokenized here.
- `clipped`: the share of those samples' tokens where the clip cut the gradient, over the update's steps.
  The old log-probs are this node's own, so the first step's ratio is 1 for external text too: the clip
  only acts from the second minibatch or epoch on, and never with one of each.
- `advantage`: the mean |A| over the completions of groups with a reward spread (the size of a group's
  push, before `negative_weight`).
- `signal`: the share of groups with a reward spread: own, of the I groups drawn; external, of the peers'
  groups re-scored this round (the valid ones), before the ones without a spread are dropped.
And `reward_local_on_external_tasks`: for each external group, this node's own mean reward this round on
the same dataset, averaged over the external groups whose dataset it also drew (None when none did). Next
to `reward_local`, it says whether peers' questions are ones this node already answers.
`logp` and `clipped` are None where the engine reports no per-sample figures (the fake engine).
"""

from __future__ import annotations

from typing import Any, Protocol

from backends.base import SampleStats, TrainStats
from swarm_app.training.grpo import has_signal


class Group(Protocol):
    """What a figure needs of a scored group (training.loop.ScoredGroup)."""

    rewards: list[float]
    task: Any

    @property
    def advantages(self) -> list[float]: ...


def round_diagnostics(own: list[Group], external: list[Group], checked: int, from_peer: list[bool],
                      stats: TrainStats | None) -> dict[str, float | None]:
    """The figures above; `from_peer[k]` says whether the update's sample k came from a peer's group, and
    `checked` is how many valid peer groups were re-scored to find `external`."""
    samples = stats.samples if stats is not None else ()
    mine = [s for s, peer in zip(samples, from_peer) if not peer]
    theirs = [s for s, peer in zip(samples, from_peer) if peer]
    return {
        "logp_own": token_logp(mine), "logp_external": token_logp(theirs),
        "clipped_own": clipped_share(mine), "clipped_external": clipped_share(theirs),
        "advantage_own": mean_abs_advantage(own), "advantage_external": mean_abs_advantage(external),
        "signal_own": signal_share(own, len(own)), "signal_external": signal_share(external, checked),
        "reward_local_on_external_tasks": own_reward_on_tasks(own, external),
    }


def token_logp(samples: list[SampleStats]) -> float | None:
    scored = [s for s in samples if s.old_logp is not None]
    tokens = sum(s.tokens for s in scored)
    return sum(s.old_logp for s in scored) / tokens if tokens else None


def clipped_share(samples: list[SampleStats]) -> float | None:
    trained = sum(s.trained_tokens for s in samples)
    return sum(s.clipped for s in samples) / trained if trained else None


def mean_abs_advantage(groups: list[Group]) -> float | None:
    values = [abs(a) for g in groups if has_signal(g.rewards) for a in g.advantages]
    return sum(values) / len(values) if values else None


def signal_share(groups: list[Group], out_of: int) -> float | None:
    return sum(has_signal(g.rewards) for g in groups) / out_of if out_of else None


def own_reward_on_tasks(own: list[Group], external: list[Group]) -> float | None:
    by_task: dict[str, list[float]] = {}
    for g in own:
        by_task.setdefault(g.task.ref.dataset, []).extend(g.rewards)
    matched = [by_task[g.task.ref.dataset] for g in external if g.task.ref.dataset in by_task]
    return sum(sum(r) / len(r) for r in matched) / len(matched) if matched else None
