"""The adaptive update (`train.external_policy = "adaptive"`): how many own questions a round asks, from what
peers supply.

The update aims at a number of groups with a reward spread (`train.signal_target`, the "signal groups": only
they move the policy under GRPO). Peers' groups come first: the trainer takes up to `external_wanted()` of
them from the pool (re-scored here, only those with a spread kept). Own questions then cover the shortfall:
`own_count(e)` = ceil((target - e) / rate), where `rate` is the share of this node's own groups that had a
spread, a moving average over its recent rounds. The count is held between a floor (`floor`: every node keeps
contributing its own rollouts) and the solo count (`most` = I + J), and moves at most STEP-fold from one round
to the next, so a link that opens or closes never swings the update 4x between rounds. A round in which peers
gave no group with a spread asks the solo count: alone, or beside peers that send nothing, the node trains
as a node at I + J / 0 does (within STEP of the round before).

Everything here is local and pure: deterministic given the rounds it observed and the groups the pool gave.
The state (rate, last count) is rebuilt from the run's metrics rows on resume (`replay`), so a resumed run
decides as the uninterrupted one would. Must not generate, sample or know the exchange: training/loop.py does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

STEP = 2.0
"""Own questions at most double or halve from one round to the next."""
SMOOTHING = 0.2
"""Weight of the newest round in the moving average of the own signal rate (~5 rounds' memory)."""
LOWEST_RATE = 0.05
"""The rate is never taken below this (a node whose groups all lack a spread would otherwise divide by 0)."""


@dataclass
class AdaptiveUpdate:
    target: float
    """Signal groups the update aims at."""
    floor: int
    """Fewest own questions a round."""
    most: int
    """The solo count (I + J): most own questions a round, and what a node with no peer supply asks."""
    external: int
    """J: most peers' groups a round."""
    rate: float = 0.0
    """The moving average of the share of own groups with a reward spread (0: the prior, target / most)."""
    last_own: int = 0
    """Own questions of the round before (0: none yet; the solo count is assumed)."""
    last_signal: int = -1
    """Signal groups (own and peers') of the round before (-1: none yet, no bound)."""

    def __post_init__(self) -> None:
        self.floor = max(1, min(self.floor, self.most))
        self.target = max(0.0, min(float(self.target), float(self.most))) or float(self.most)
        self.rate = self.rate or self.target / self.most  # the solo recipe's rate: alone, ask `most`
        self.last_own = self.last_own or self.most

    def bounds(self) -> tuple[int, int]:
        """The fewest and most own questions this round may ask (floor, solo count, STEP from the last round)."""
        low = max(self.floor, math.ceil(self.last_own / STEP))
        high = min(self.most, max(low, math.floor(self.last_own * STEP)))
        return low, high

    def external_wanted(self) -> int:
        """The most peers' signal groups to take this round: what the target leaves beside the fewest own
        questions this round may ask, and no more than STEP x the round before's signal groups in all (a node
        whose own groups seldom have a spread ramps up to a flood of peers' groups); at least 1 where J > 0,
        so that a supply that returns is seen."""
        if self.external == 0:
            return 0
        low, _ = self.bounds()
        aim = self.target if self.last_signal < 0 else min(self.target, STEP * max(self.last_signal, 1))
        return min(self.external, max(1, math.ceil(aim - low * self.rate - 1e-9)))

    def own_count(self, external_signal: int) -> int:
        """Own questions for a round whose peers gave `external_signal` groups with a spread."""
        low, high = self.bounds()
        if external_signal <= 0:
            wanted = self.most
        else:
            wanted = math.ceil(max(0.0, self.target - external_signal) / self.rate - 1e-9)
        return min(max(wanted, low), high)

    def observe(self, own: int, own_signal: int, external: int) -> None:
        """A finished round: `own` questions asked, `own_signal` of their groups had a reward spread, and
        `external` peers' groups (each with a spread) were trained on."""
        if own <= 0:
            return
        seen = own_signal / own
        self.rate = min(1.0, max(LOWEST_RATE, (1 - SMOOTHING) * self.rate + SMOOTHING * seen))
        self.last_own, self.last_signal = own, own_signal + external

    def replay(self, rows: Iterable[Mapping]) -> None:
        """Observe the rounds of metrics.jsonl rows (a resumed run): own groups with a spread are the round's
        signal groups less its peers' groups (each of those has one)."""
        for row in rows:
            if "n_local" in row:
                external = int(row["n_external"])
                self.observe(int(row["n_local"]), int(row["groups_with_signal"]) - external, external)
