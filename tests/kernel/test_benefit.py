"""The benefit meter's arithmetic (kernel/benefit.py): the solo curve read at the node's engine CPU, never past its
ends, and the 95% interval of the difference, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from swarm_app.kernel.benefit import Comparison, NoComparison, compare, difference_se, interpolate, points

# The bundled model's shipped solo curve, first points (assets/models/swarm-tiny/solo_curve.json)
CPU = (0.0, 77.562, 154.573, 232.688)
ACCURACY = (0.31, 0.345833, 0.361667, 0.374167)


def test_interpolation_is_linear_between_the_two_points_around_it():
    assert interpolate(CPU, ACCURACY, 0.0) == 0.31
    assert interpolate(CPU, ACCURACY, 154.573) == 0.361667
    # a quarter of the way from 77.562 to 154.573: 0.345833 + 0.25 * (0.361667 - 0.345833)
    assert interpolate(CPU, ACCURACY, 77.562 + 0.25 * (154.573 - 77.562)) == pytest.approx(0.3497915)
    assert interpolate((0.0, 10.0), (0.5, 0.3), 4.0) == pytest.approx(0.42)  # falling curves too


def test_interpolation_never_extrapolates():
    assert interpolate(CPU, ACCURACY, 232.7) is None
    assert interpolate((5.0, 10.0), (0.4, 0.5), 4.9) is None
    assert interpolate((), (), 1.0) is None


def test_the_standard_error_is_that_of_a_difference_of_two_proportions():
    # 0.6 on 64 items against 0.5 on 200: sqrt(0.24/64 + 0.25/200) = sqrt(0.005)
    assert difference_se(0.6, 64, 0.5, 200) == pytest.approx(math.sqrt(0.005))
    # a mean of 3 seeds whose spread (sd 0.08) is larger than its binomial term: 0.0064 / 3 replaces 0.25 / 200
    assert difference_se(0.6, 64, 0.5, 200, spread=0.08, seeds=3) == pytest.approx(math.sqrt(0.24 / 64 + 0.0064 / 3))
    # a small spread does not shrink the binomial term; one seed has no spread to use
    assert difference_se(0.6, 64, 0.5, 200, spread=0.001, seeds=3) == pytest.approx(math.sqrt(0.005))
    assert difference_se(0.6, 64, 0.5, 200, spread=0.05, seeds=1) == pytest.approx(math.sqrt(0.005))


def test_the_comparison_reads_solo_at_the_nodes_cpu_with_a_95_percent_interval():
    found = compare(0.6, 64, 10.0, (0.0, 9.0, 18.0), (0.48, 0.5, 0.53), 200)
    assert isinstance(found, Comparison)
    solo = 0.5 + 0.03 / 9  # one ninth of the way from 9 s to 18 s
    assert found.solo == pytest.approx(solo) and found.node_n == 64 and found.solo_n == 200
    se = math.sqrt(0.6 * 0.4 / 64 + solo * (1 - solo) / 200)
    assert found.se == pytest.approx(se)
    low, high = found.interval
    assert (low, high) == pytest.approx((0.6 - solo - 1.959964 * se, 0.6 - solo + 1.959964 * se))
    assert points(found.difference) == "+9.7" and (points(low), points(high)) == ("-4.2", "+23.5")


def test_the_seeds_spread_is_interpolated_like_the_accuracy():
    found = compare(0.4, 200, 15.0, (0.0, 10.0, 20.0), (0.3, 0.4, 0.4), 200, (0.0, 0.02, 0.06), seeds=3)
    assert found.se == pytest.approx(math.sqrt(0.24 / 200 + max(0.24 / 200, 0.04**2 / 3)))


def test_beyond_the_solo_curve_there_is_no_comparison():
    found = compare(0.6, 64, 500.0, CPU, ACCURACY, 200)
    assert found == NoComparison("beyond the solo curve (500 engine CPU s; it ends at 233)")
    assert compare(0.6, 64, 1.0, (5.0, 9.0), (0.4, 0.5), 200).reason.startswith("before the solo curve's first point")
    assert compare(0.6, 64, 1.0, (), (), 200) == NoComparison("the solo curve has no engine CPU figures")
