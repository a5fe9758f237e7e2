"""Snapshots of the dashboard and the peers view at 80x24 and 120x40, fed by the deterministic event
script (tests/tui/script.py): no clock and no randomness reach the screen. After a deliberate change
of the look, run `pytest tests/tui/test_snapshots.py --snapshot-update` and look at the new SVGs
(tests/tui/__snapshots__/) before committing them."""

from __future__ import annotations

import asyncio

import pytest

from swarm_app.tui.app import SwarmApp
from tests.tui.script import T0, dashboard_script, scripted


def scripted_app(external: int = 2) -> SwarmApp:
    """A node that learns from peers and has a solo run to compare with (external=0: one that learns alone)."""
    return SwarmApp(scripted(dashboard_script(external=external), asyncio.Event()), subtitle="/runs/demo",
                    clock=lambda: T0 + 25)


def showing(tab: str, theme: str = ""):
    async def run_before(pilot) -> None:
        if theme:
            pilot.app.theme = theme
        await pilot.press(tab)
        await pilot.pause()
        pilot.app.flush()
        await pilot.pause()
    return run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("tab", ["1", "2"], ids=["dashboard", "peers"])
def test_view(snap_compare, size, tab):
    assert snap_compare(scripted_app(), terminal_size=size, run_before=showing(tab))


def test_dashboard_in_a_light_theme(snap_compare):
    assert snap_compare(scripted_app(), terminal_size=(80, 24), run_before=showing("1", "textual-light"))


def test_dashboard_of_a_node_that_learns_alone(snap_compare):
    """The sharing panel of a node with --external 0 says that it learns alone and how to learn from peers."""
    assert snap_compare(scripted_app(external=0), terminal_size=(80, 24), run_before=showing("1"))


def test_dashboard_with_the_participant_record(snap_compare):
    """The sharing panel's record line (RecordUpdated): gave, used from whom, held-out gain, rollbacks."""
    from swarm_app.kernel.events import RecordUpdated
    from swarm_app.kernel.record import ParticipantRecord

    record = ParticipantRecord(rounds=12, online_rounds=12, shared=96, pushed=192, served=14, groups_used=40,
                               peers_used=3, top_peers={"3f2a9c1d77e0b4aa": 22, "b7c1e09f3a2d4c55": 12},
                               first_round=0, first_accuracy=0.32, latest_round=10, latest_accuracy=0.41,
                               rollbacks=1)
    events = dashboard_script() + [RecordUpdated(record)]
    app = SwarmApp(scripted(events, asyncio.Event()), subtitle="/runs/demo", clock=lambda: T0 + 25)
    assert snap_compare(app, terminal_size=(80, 24), run_before=showing("1"))
