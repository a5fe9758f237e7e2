"""The benefit meter's arithmetic: a node's held-out accuracy against a solo curve at equal engine CPU.

Pure (no I/O, no clock), so the dashboard, `swarm watch` and the tests compute the same figure. What it
compares and why:
- **Equal engine CPU, not equal rounds.** `swarm experiment` found that a sharing node learns about as much
  per round as a solo node (+0.3 +- 1.1 held-out points at equal rounds, 4 seeds) and that a sharing round
  costs ~0.54x a solo round's engine CPU: the benefit is compute. So the node's cumulative engine-thread CPU
  seconds, evaluations left out (`RoundMetrics.train_cpu_total_s`), are set against the solo curve's CPU axis
  (the same measure, `SoloCurveFound.cpu_s`).
- **Interpolated, never extrapolated.** The solo accuracy at the node's CPU is read linearly between the
  two solo points around it; beyond the curve's last point (or before its first) there is no comparison.
- **With its uncertainty.** The difference of two proportions: its standard error is
  sqrt(p_node (1 - p_node) / n_node + v_solo), where v_solo is the larger of the solo point's binomial
  variance p (1 - p) / n_solo and, for a mean over k seeds, its spread sd^2 / k (training noise, which one
  run's binomial term does not see). The node's own run-to-run noise is not known from one run and is not
  in the interval: it is a lower bound on the uncertainty of "sharing helped this node".
  The 95% interval is the difference +- 1.96 standard errors, shown in held-out points (x 100).

Must not import the session or any view: it only computes from plain numbers.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

Z95 = 1.959964
"""The two-sided 95% quantile of the normal distribution."""
POINTS = 100.0


@dataclass(frozen=True)
class Comparison:
    """The node beside the solo curve at the node's engine CPU; accuracies are proportions (0..1)."""

    cpu_s: float
    """The node's engine CPU seconds (evaluations left out) at its held-out point."""
    node: float
    node_n: int
    solo: float
    """The solo curve's accuracy at `cpu_s`, interpolated."""
    solo_n: int
    se: float
    """Standard error of `difference`."""

    @property
    def difference(self) -> float:
        return self.node - self.solo

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of `difference`."""
        return self.difference - Z95 * self.se, self.difference + Z95 * self.se


@dataclass(frozen=True)
class NoComparison:
    """Why there is no comparison, in words a participant reads ("beyond the solo curve ...")."""

    reason: str


def interpolate(xs: tuple[float, ...] | list[float], ys: tuple[float, ...] | list[float], x: float) -> float | None:
    """`ys` read linearly at `x` on the increasing axis `xs`; None outside [xs[0], xs[-1]] (no extrapolation)."""
    if not xs or len(xs) != len(ys) or x < xs[0] or x > xs[-1]:
        return None
    i = bisect_left(xs, x)
    if xs[i] == x:
        return float(ys[i])
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def difference_se(p_node: float, n_node: int, p_solo: float, n_solo: int,
                  spread: float | None = None, seeds: int = 0) -> float:
    """Standard error of p_node - p_solo (see the module docstring): binomial for the node, the larger of
    binomial and the seeds' spread (sd / sqrt(k), k >= 2) for the solo curve."""
    solo = p_solo * (1.0 - p_solo) / n_solo
    if spread is not None and seeds >= 2:
        solo = max(solo, spread * spread / seeds)
    return math.sqrt(p_node * (1.0 - p_node) / n_node + solo)


def compare(node: float, node_n: int, cpu_s: float, curve_cpu_s: tuple[float, ...], curve_accuracy: tuple[float, ...],
            curve_n: int, curve_spread: tuple[float, ...] = (), seeds: int = 0) -> Comparison | NoComparison:
    """The node's held-out accuracy `node` on `node_n` items, after `cpu_s` engine CPU seconds, against the
    solo curve (cumulative CPU seconds and accuracy at each point, `curve_n` items a point, and the standard
    deviation over `seeds` seeds at each point when it is a mean)."""
    if not curve_cpu_s or node_n <= 0 or curve_n <= 0:
        return NoComparison("the solo curve has no engine CPU figures" if not curve_cpu_s else "item counts unknown")
    if cpu_s > curve_cpu_s[-1]:
        return NoComparison(f"beyond the solo curve ({cpu_s:,.0f} engine CPU s; it ends at {curve_cpu_s[-1]:,.0f})")
    solo = interpolate(curve_cpu_s, curve_accuracy, cpu_s)
    if solo is None:
        return NoComparison(f"before the solo curve's first point ({curve_cpu_s[0]:,.0f} engine CPU s)")
    spread = interpolate(curve_cpu_s, curve_spread, cpu_s) if len(curve_spread) == len(curve_cpu_s) else None
    return Comparison(cpu_s, node, node_n, solo, curve_n, difference_se(node, node_n, solo, curve_n, spread, seeds))


def points(value: float) -> str:
    """A difference in held-out points, signed, one decimal."""
    return f"{value * POINTS:+.1f}"
