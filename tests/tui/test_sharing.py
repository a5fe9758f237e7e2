"""The dashboard's sharing panel: the numbers it shows are the ones fed in as session events, through the
app's own path and through the replay `swarm watch` gets (the look is in the snapshots)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from swarm_app.kernel.events import PeersUpdated, RoundFinished, RunStarted, event_from_dict
from swarm_app.tui.app import SwarmApp
from swarm_app.tui.sharing import SharingPanel, heldout_line, reward_line, signal_line, solo_line, sparkline
from swarm_app.tui.state import ViewState, solo_at_node_cpu
from swarm_app.watch.history import EventHistory
from tests.tui.script import SOLO, T0, dashboard_script, metrics, peer, peers_updated, scripted


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
    # held-out 0.60 on 64 items at round 10 after 10 engine CPU s; the solo curve at 10 s (between its 9 s and
    # 18 s points) 0.503 on 200 items: +9.7 points, 95% interval +-1.96 sqrt(0.6 0.4 / 64 + 0.503 0.497 / 200)
    assert "held-out 0.60 at round 10 on 64 items, after 10 engine CPU s\n" in text, text
    assert ("\nsolo at equal CPU 0.50 on 200 items: +9.7 points, 95% -4.2 to +23.5 · swarm experiment in /data/"
            in text), text


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
    assert str(solo_line(watched)) == str(solo_line(direct))
    assert str(solo_line(watched)).startswith("solo at equal CPU 0.50 on 200 items: +9.7 points")


def test_the_sparkline_is_on_a_fixed_scale_with_gaps_for_missing_rounds():
    assert sparkline([0.0, 0.5, 1.0, None, 2.0, -1.0]) == "▁▅█·█▁"


def state_of(events) -> ViewState:
    s = ViewState()
    for event in events:
        s.apply(event)
    return s


def test_a_node_alone_says_nothing_about_peers():
    """No peer connected (none yet, or all gone): no comparison with solo, whatever the curves say."""
    script = dashboard_script()
    alone = [e for e in script if not isinstance(e, PeersUpdated)]
    assert str(heldout_line(state_of(alone))) == ("held-out 0.60 at round 10 · alone: no peer connected, so nothing "
                                                  "to say about sharing")
    gone = state_of(script + [peers_updated([peer(1, connected=False), peer(2, connected=False)])])
    assert "alone: no peer connected" in str(heldout_line(gone)) and "solo" not in str(heldout_line(gone))
    assert solo_line(gone) is None and solo_line(state_of(alone)) is None
    assert solo_at_node_cpu(gone) == [] and solo_at_node_cpu(state_of(script))  # nor the chart's solo line


def test_beyond_the_solo_curve_there_is_no_comparison():
    s = state_of(dashboard_script(rounds=12))
    s.apply(dataclasses.replace(SOLO, cpu_s=(0.0, 2.0, 4.0, 6.0, 8.0)))  # solo ends at 8 s; the node is at 10 s
    assert str(solo_line(s)).startswith("solo: beyond the solo curve (10 engine CPU s; it ends at 8) · swarm experiment")


def test_cpu_figures_of_another_thread_count_or_engine_are_not_compared():
    s = state_of(dashboard_script(rounds=12) + [RoundFinished(dataclasses.replace(metrics(13), threads=2))])
    assert "solo: the solo curve ran 1 engine thread(s) a node, this node 1/2: CPU not comparable" in str(solo_line(s))
    s = state_of(dashboard_script(rounds=12) + [dataclasses.replace(SOLO, engine="llama_cpp")])
    assert "solo: the solo curve ran on llama_cpp, this node on torch: CPU not comparable" in str(solo_line(s))


def test_the_chart_reads_solo_at_the_cpu_the_node_had_spent_by_each_round():
    s = state_of(dashboard_script(rounds=12))
    solo = dict(solo_at_node_cpu(s))
    # round t: t engine CPU s; solo reaches 0.5 at 9 s, 0.53 at 18 s; 12 s is a third of the way
    assert solo[0] == 0.48 and solo[9] == 0.5 and solo[12] == pytest.approx(0.51)
