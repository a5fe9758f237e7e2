"""The dashboard's swarm line: which swarm, how many peers, whether peers outside can dial this node, and,
when they cannot, that it still works and what to forward (the look is in the snapshots)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from swarm_app.kernel.events import RunStarted
from swarm_app.tui.app import SwarmApp
from swarm_app.tui.dashboard import SwarmLine
from tests.tui.script import T0, dashboard_script, peer, peers_updated, scripted


async def line_after(events) -> str:
    app = SwarmApp(scripted(events, asyncio.Event()), subtitle="/runs/demo", clock=lambda: T0 + 25)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        return str(app.query_one(SwarmLine).render())


@pytest.mark.parametrize("reachable, says", [
    (False, ["swarm easy · 2 peers · reachable from outside: no (still works: dials out)",
             "forward TCP port 47470 on your router to this computer"]),
    (True, ["swarm easy · 2 peers · reachable from outside: yes"]),
    (None, ["reachable from outside: checking (0/3 dial-backs)"]),
])
async def test_the_swarm_line_says_whether_peers_can_dial_in_and_how_to_fix_it(reachable, says):
    text = await line_after([*dashboard_script(), peers_updated([peer(1), peer(2), peer(3, connected=False)], reachable)])
    for words in says:
        assert words in text, text
    assert ("forward TCP port" in text) == (reachable is False)


async def test_a_node_dialed_back_by_lan_peers_only_does_not_claim_the_internet():
    updated = dataclasses.replace(peers_updated([peer(1), peer(2)], True), lan_only=True)
    text = await line_after([*dashboard_script(), updated])
    assert "reachable from outside: on this network only" in text, text
    assert "reachable from outside: yes" not in text


async def test_an_offline_node_says_it_has_no_swarm():
    started = RunStarted("/runs/demo", "torch", "cpu", "swarm-tiny", "easy", 1, 20, offline=True)
    text = await line_after([started])
    assert text.startswith("offline: no swarm")


async def test_a_swarm_all_on_this_machine_draws_no_verdict():
    local = peers_updated([peer(1)], None)
    text = await line_after([*dashboard_script(), dataclasses.replace(local, port=0, witnesses_needed=0)])
    assert "swarm easy · 1 peer · reachable from outside: not checked (all nodes on this machine)" in text
