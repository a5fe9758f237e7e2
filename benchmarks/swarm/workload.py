"""What simulated nodes publish: cheap tasks in place of reasoning-gym, and a round-by-round schedule.

Admission regenerates every received rollout's task and re-scores its completions; with reasoning-gym
that costs milliseconds per rollout, far more than everything else a simulated node does, so the
simulator injects `sim_task` and `sim_score` (admission's own injection points) for a dataset of its
own: "What is S + I?" with its sum as the answer. Everything else, signatures included, is real.

Publishing follows a SAPO round: a node generates for `round_s` (its own pace, +-20%), then shares the
round's groups at once, only those with a reward spread (the others never leave a node). Defaults, and
why: 8 groups every 60 s, one every 7.5 s on average, as a laptop with a 0.5B model doing I = 8
questions x L = 4-8 completions a round; `body_bytes` 2,000 (short completions: the wire's cost scales
with real sizes, 4-16 KB a group, and bytes per minute are reported for this size).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import Task, TaskRef

SIM_DATASET = "sim_sum"
SIM_DIGEST = "0" * 16


def sim_task(ref: TaskRef) -> Task:
    """The simulator's task: KeyError for anything else, as for a config this node does not know."""
    if ref.dataset != SIM_DATASET or ref.config_digest != SIM_DIGEST:
        raise KeyError(ref.dataset)
    return Task(ref, f"What is {ref.seed} + {ref.index}?", str(ref.seed + ref.index), {})


def sim_score(task: Task, text: str) -> float:
    return 1.0 if f"<answer>{task.answer}</answer>" in text else 0.0


def sim_rollout(seed: int, index: int, round_: int, body_bytes: int = 2000, completions: int = 4) -> Rollout:
    """A group with a reward spread (every other completion right), padded to about `body_bytes`."""
    task = sim_task(TaskRef(SIM_DATASET, SIM_DIGEST, seed, index))
    pad = "x" * max(0, (body_bytes - 400) // completions)
    texts = tuple(f"step {k}: {pad} <answer>{task.answer if k % 2 == 0 else -1}</answer>" for k in range(completions))
    return Rollout(task.ref, task.question, task.answer, texts, "sim-model", round_, "", 0)


class Publisher:
    """Each node's rounds: every `round_s` (x U(0.8, 1.2), drawn per node), `groups` rollouts at once."""

    def __init__(self, rng: random.Random, round_s: float = 60.0, groups: int = 8, body_bytes: int = 2000) -> None:
        self.rng, self.round_s, self.groups, self.body_bytes = rng, round_s, groups, body_bytes

    def start(self, schedule: Callable, publish: Callable[[Rollout], bool], node_seed: int) -> None:
        """Begin publishing; `publish` returns False once the node is gone, which ends its rounds."""
        pace = self.round_s * self.rng.uniform(0.8, 1.2)
        schedule(self.rng.uniform(0.2, 1.0) * pace, self._round, schedule, publish, node_seed, pace, 0)

    def _round(self, schedule: Callable, publish: Callable[[Rollout], bool], node_seed: int, pace: float,
               round_: int) -> None:
        for k in range(self.groups):
            if not publish(sim_rollout(node_seed, round_ * self.groups + k, round_, self.body_bytes)):
                return
        schedule(pace, self._round, schedule, publish, node_seed, pace, round_ + 1)
