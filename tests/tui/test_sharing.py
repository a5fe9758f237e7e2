"""The dashboard's sharing panel: the numbers it shows are the ones fed in as session events, through the
app's own path and through the replay `swarm watch` gets (the look is in the snapshots)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from swarm_app.kernel.events import RunStarted, event_from_dict
from swarm_app.tui.app import SwarmApp
from swarm_app.tui.sharing import SharingPanel, heldout_line, reward_line, signal_line, sparkline
from swarm_app.tui.state import ViewState
from swarm_app.watch.history import EventHistory
from tests.tui.script import SOLO, T0, dashboard_script, metrics, scripted


async def panel_after(events) -> str:
    app = SwarmApp(scripted(events, asyncio.Event()), subtitle="/runs/demo", clock=lambda: T0 + 25)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        return str(app.query_one(SharingPanel).render())


def mean(values):
    return sum(values) / len(values)


async def test_the_panel_shows_own_and_peers_reward_the_signal_share_and_the_solo_gap():
    text = await panel_after(dashboard_script(rounds=12))
    recent = [metrics(t) for t in range(3, 13)]  # the last 10 of 12 rounds
    own, peers = mean([m.reward_local for m in recent]), mean([m.reward_external for m in recent])
    assert f"own {own:.2f} " in text and f"from peers {peers:.2f} " in text, text
    # 2 peers' groups of 6 with a reward spread a round, 12 rounds; 60 accepted (PeersUpdated)
    assert "signal from peers 33%: 24 of 72 groups with a reward spread · received 60" in text, text
    # held-out 0.60 at round 10 (EvaluationFinished), the solo curve 0.53 at round 10
    assert "held-out 0.60 at round 10 · solo 0.53 at round 10 (+7 points) · swarm experiment in" in text, text


async def test_a_node_with_external_0_is_told_it_learns_alone_and_how_to_learn_from_peers():
    text = await panel_after(dashboard_script(rounds=6, external=0))
    assert text.split("\n")[0].endswith(" from peers -"), text  # no peers' reward, no sparkline
    assert "shares its groups but learns only from its own (--external 0)" in text
    assert "swarm run --external 4" in text


async def test_without_a_solo_run_the_panel_says_how_to_get_one():
    events = [e for e in dashboard_script() if e is not SOLO]
    text = await panel_after(events)
    assert "held-out 0.60 at round 10 · no solo run to compare with: run swarm experiment" in text, text


def test_an_offline_node_has_nothing_from_peers():
    s = ViewState()
    s.apply(RunStarted("/runs/demo", "torch", "cpu", "swarm-tiny", "easy", 1, 20, offline=True, external=0))
    assert str(signal_line(s)).startswith("offline (--offline): nothing shared")
    assert str(heldout_line(s)) == "held-out: no evaluation yet (e: now)"


def test_a_watcher_draws_the_same_panel_from_the_replay():
    history, direct = EventHistory(), ViewState()
    for event in dashboard_script():
        direct.apply(event)
        history.record(event)
    watched = ViewState()
    for text in history.replay():
        watched.apply(event_from_dict(json.loads(text)))
    assert watched.solo == SOLO
    for line in (reward_line, signal_line, heldout_line):
        assert str(line(watched)) == str(line(direct))


def test_the_sparkline_is_on_a_fixed_scale_with_gaps_for_missing_rounds():
    assert sparkline([0.0, 0.5, 1.0, None, 2.0, -1.0]) == "▁▅█·█▁"


def test_a_solo_curve_that_starts_later_is_compared_at_its_first_point():
    s = ViewState()
    for event in dashboard_script(rounds=4):
        s.apply(event)
    s.apply(dataclasses.replace(SOLO, rounds=(5, 10), accuracy=(0.5, 0.53)))
    assert "held-out: no evaluation yet (e: now) · solo 0.50 at round 5 ·" in str(heldout_line(s))
