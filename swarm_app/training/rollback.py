"""Automatic rollback: the rule that says when held-out accuracy fell by more than its noise.

The held-out evaluation scores n fixed items (greedy), so an accuracy p is a proportion over n items
whose standard error is sqrt(p (1 - p) / n). Comparing the best accuracy seen so far (n_best items)
with the latest (n_now items), the standard error of their difference is

    se = sqrt(p (1 - p) (1 / n_best + 1 / n_now)),  p = (best + now) / 2   (= sqrt(2 p (1 - p) / n) at equal n)

and the rule fires when `best - now > Z * se`. Z is 4, not the 2 of a single test, because the best is
the maximum of every evaluation so far and a run makes many: with the accuracy not moving at all and
each evaluation an independent binomial draw (n = 64, p = 0.3-0.45), the chance that the rule fires at
least once in a run of 50 evaluations is 85% at Z = 2.5, 47-53% at Z = 3, 13-16% at Z = 3.5 and 2.4-2.5%
at Z = 4 (20,000 simulated runs each). Real evaluations score the same items with a slowly changing
model, so they wobble less than independent draws: Z = 4 errs on the side of never firing on noise. At
n = 64 and p around 0.4 it fires on a fall of ~0.35 (a model that collapsed), not on a dip of 0.1.

Only scheduled evaluations (on round rows) count; the `e` key's, the demo's baseline and final ones
do not. This module decides; the session reloads the best checkpoint (session/rollback.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

Z = 4.0
"""Standard errors of the difference a fall must exceed (see the module docstring for why 4)."""


@dataclass(frozen=True)
class Best:
    """The best scheduled evaluation so far: its round, accuracy and number of items."""

    round: int
    accuracy: float
    n: int


@dataclass(frozen=True)
class Fall:
    """A fall beyond the noise: roll back from `from_round` to the best checkpoint (`to_round`)."""

    from_round: int
    to_round: int
    best: float
    now: float
    threshold: float
    n: int

    def to_row(self, when: float) -> dict[str, Any]:
        """The `rollback` row of metrics.jsonl (keyed by the round it happened after)."""
        return {"type": ROLLBACK_ROW, "round": self.from_round, "from_round": self.from_round,
                "to_round": self.to_round, "best": self.best, "now": self.now, "threshold": self.threshold,
                "n": self.n, "z": Z, "time": when}


ROLLBACK_ROW = "rollback"


def noise_threshold(best: float, now: float, n_best: int, n_now: int, z: float = Z) -> float:
    """How far below `best` an accuracy must fall to count as a fall: z standard errors of the difference."""
    p = (best + now) / 2
    return z * math.sqrt(p * (1 - p) * (1 / max(n_best, 1) + 1 / max(n_now, 1)))


def judge(best: Best | None, round_index: int, accuracy: float, n: int, z: float = Z) -> Fall | None:
    """A Fall when `accuracy` (of round `round_index`, over n items) lies more than the noise below `best`."""
    if best is None or round_index <= best.round:
        return None
    threshold = noise_threshold(best.accuracy, accuracy, best.n, n, z)
    if best.accuracy - accuracy > threshold:
        return Fall(round_index, best.round, best.accuracy, accuracy, round(threshold, 4), n)
    return None


def improves(best: Best | None, accuracy: float) -> bool:
    """Whether an evaluation becomes the new best (a tie keeps the earlier one: nothing to rewrite)."""
    return best is None or accuracy > best.accuracy


def best_of(rows: Iterable[dict[str, Any]], n_default: int, rounds: set[int] | None = None) -> Best | None:
    """The best scheduled evaluation among round rows (the earliest of equals); only rounds in `rounds`
    when given (those whose checkpoint is still on disk). Rows without `heldout_n` count `n_default` items."""
    best: Best | None = None
    for row in rows:
        acc = row.get("heldout_acc")
        if "type" in row or acc is None or (rounds is not None and row["round"] not in rounds):
            continue
        if improves(best, acc):
            best = Best(row["round"], acc, int(row.get("heldout_n") or n_default))
    return best
