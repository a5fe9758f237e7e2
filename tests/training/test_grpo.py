"""Group advantages against a hand computation."""

import math

import pytest

from swarm_app.training.grpo import ADVANTAGE_EPS, group_advantages, has_signal, weigh_negatives


def test_advantages_match_hand_computation():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    mean = 3 / 8
    std = math.sqrt((3 * (1 - mean) ** 2 + 5 * mean**2) / 8)
    expected = [(r - mean) / (std + ADVANTAGE_EPS) for r in rewards]
    assert group_advantages(rewards) == pytest.approx(expected, rel=1e-12)
    assert sum(group_advantages(rewards)) == pytest.approx(0.0, abs=1e-12)


def test_equal_rewards_give_zero_advantage_and_no_signal():
    assert group_advantages([0.5] * 4) == [0.0] * 4
    assert not has_signal([1.0] * 8)
    assert has_signal([1.0, 1.0, 0.0])
    assert group_advantages([]) == []


def test_partial_credit_is_normalized_too():
    adv = group_advantages([0.25, 0.75])
    assert adv == pytest.approx([-1.0, 1.0], abs=1e-5)


def test_negative_weight_scales_only_the_negative_advantages():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0])
    weighted = weigh_negatives(adv, 0.25)
    assert weighted[0] == adv[0] and weighted[1:] == pytest.approx([a * 0.25 for a in adv[1:]])
    assert weigh_negatives(adv, 1.0) == adv
    assert weigh_negatives(adv, 0.0)[1:] == [0.0, 0.0, 0.0]
