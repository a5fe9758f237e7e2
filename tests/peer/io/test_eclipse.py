"""The eclipse of issue 28 on real nodes on loopback: sixty servers that only announce themselves.

The attacker (hostile_servers.py) holds 60 addresses, each its own /24 (127.66.i.1): at each a server that
completes the hello, answers pulls with nothing, lists only hostile records and passes dial-back, and a
second key that says hello to the victim announcing that server and asks to be dialed back.

Honest: six nodes that publish signed rollouts (127.28.1-6.1), the victim (127.28.10.1) and its neighbour
(127.28.11.1), which knows only the victim: the attacker reaches it only through what the victim passes on.
The producers' own outbound slots are spent on one hub, so the victim can hold all six as outbound links
and the neighbour seven (the victim too): 3 hostile links of 8 is a bound an overlay can keep. Both run a
`swarm run` node's overlay rules and budgets with its clocks ten times faster (pulls every 1 s, rotation
every 6 s, ...): 30 s of attack stand for five minutes. The attack starts either once both hold honest
links ("settled"), or as soon as the victim listens ("joining", counted once its first minute, in
which a newcomer fills its links before judging them, is over).

The poisoned peer list: a neighbour whose /peers answer names 160 dead addresses (127.31.k.1) may cost the
node only its budget of dials to addresses it never reached (`unverified_dial_burst` at once,
`unverified_dial_rate` after that).
"""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import pytest

from swarm_app.peer.core.addressbook import parse_address
from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.records import MAX_RECORDS
from swarm_app.peer.io.discovery import read_peer_table
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollout, wait_for
from tests.peer.io.hostile_servers import HOSTILE, PREFIX, SWARM, DeadAddresses, Hostile, hostile_crowd, listed
from tests.peer.io.nodes_on_loopback import FAST_DIALBACK, linux_only, on

pytestmark = linux_only

PRODUCERS = 6
ATTACK_S = 30.0
SETTLE_S = 6.0
"""A node's first minute (`settle_after_s`) at this pace: it fills `low_outbound` links before judging them."""
WARMUP_S = SETTLE_S + 1.0
"""A joining victim's first minute and a pull before the count starts: the bound is a settled node's."""
SAMPLE_S = 0.5
MOST_HOSTILE_OUT = 3
"""Of 8 outbound links (issue 28)."""
DEAD = 160
POISON_S = 20.0


def real_node(ip: str, *bootstrap: str) -> PeerConfig:
    """A `swarm run` node's overlay rules and budgets (default SourceLimits, 8 outbound links, the
    unverified-dial budget) on `ip`, every interval ten times shorter; no mDNS, no UPnP."""
    config = PeerConfig(listen=f"{ip}:0", source_ip=ip, swarm=SWARM, bootstrap=bootstrap, mdns=False,
                        reachability=FAST_DIALBACK, tick_s=0.1)
    return config.with_protocol(pull_interval_s=1.0, exchange_interval_s=3.0, rotate_interval_s=6.0,
                                useless_hold_s=60.0, prune_backoff_s=6.0, score_half_life_s=30.0,
                                standing_refresh_s=0.5, idle_inbound_s=6.0, settle_after_s=SETTLE_S,
                                useless_min_age_s=1.0, stalled_rotate_s=2.0)


# --- the honest side

@asynccontextmanager
async def producers() -> AsyncIterator[list[PeerNode]]:
    """PRODUCERS honest nodes, stopped on exit, once the hub lists them all. The first is a hub that dials
    nobody, the others dial only the hub: their outbound slots are spent (as in a larger swarm), so every link
    the victim and the neighbour hold with them is one they dialed."""
    nodes: list[PeerNode] = []
    try:
        for i in range(1, PRODUCERS + 1):
            hub = nodes[0].address if nodes else None
            config = on(f"127.28.{i}.1", *([hub] if hub else []), swarm=SWARM)
            nodes.append(PeerNode(config.with_protocol(target_outbound=min(1, i - 1)), Identity.generate()))
            await nodes[-1].start()
        hub = nodes[0]
        listing = await wait_for(lambda: len(hub.core.peer_list(hub.clock())["peers"]) >= PRODUCERS, timeout_s=20)
        assert listing, "the hub never listed the producers: the victim would have nobody honest to find"
        yield nodes
    finally:
        await asyncio.gather(*(node.stop() for node in nodes), return_exceptions=True)


@asynccontextmanager
async def running(config: PeerConfig, table: Path | None = None) -> AsyncIterator[PeerNode]:
    node = PeerNode(config, Identity.generate(), peer_table_path=table)
    try:
        await node.start()
        yield node
    finally:
        await node.stop()


async def publish_forever(nodes: list[PeerNode]) -> None:
    """Every honest node publishes one signed rollout group twice a second."""
    for k in range(10**6):
        for i, node in enumerate(nodes):
            node.publish(make_rollout(seed=500 + i, index=k))
        await asyncio.sleep(0.5)


def outbound_hosts(node: PeerNode) -> list[str]:
    return [c.ip for c in node.core.links.conns.values() if c.direction == "out"]


async def sample_links(nodes: list[PeerNode], hostile: set[str], seconds: float) -> list[list[tuple[int, int]]]:
    """Per node, (hostile, all) outbound links every SAMPLE_S for `seconds`."""
    series: list[list[tuple[int, int]]] = [[] for _ in nodes]
    for _ in range(round(seconds / SAMPLE_S)):
        await asyncio.sleep(SAMPLE_S)
        for node, points in zip(nodes, series):
            hosts = outbound_hosts(node)
            points.append((sum(h in hostile for h in hosts), len(hosts)))
    return series


async def peer_list(http: aiohttp.ClientSession, node: PeerNode) -> list[tuple[str, str | None, bool]]:
    """(addr, node, verified by `node`) of each entry of its /peers answer but its own, checked as the answer
    arrives."""
    async with http.get(f"http://{node.address}{PREFIX}/peers") as resp:
        answer = await resp.json()
    entries = [e for e in answer.get("peers", []) if e["addr"] != node.address]
    states = [node.core.addresses.get(e["addr"]) for e in entries]
    return [(e["addr"], e.get("node"), s is not None and s.verified) for e, s in zip(entries, states)]


def host_of(addr: str) -> str:
    return parse_address(addr)[0]


def shown(series: list[tuple[int, int]]) -> str:
    return " ".join(f"{h}/{n}" for h, n in series[1::2])  # once a second


@pytest.mark.parametrize("siege", ["settled", "joining"])
async def test_sixty_announcing_servers_hold_at_most_3_of_8_outbound_links_and_no_saved_majority(tmp_path, siege):
    """"settled": the attack starts once the victim holds five honest outbound links and the neighbour five;
    "joining": the attackers knock as soon as the victim listens, and the count starts after WARMUP_S."""
    table = tmp_path / "peers.json"
    rng = random.Random(28)
    async with producers() as honest_nodes, AsyncExitStack() as stack:
        hub = honest_nodes[0].address
        victim = await stack.enter_async_context(running(real_node("127.28.10.1", hub), table))
        if siege == "joining":
            crowd = await stack.enter_async_context(hostile_crowd(victim.address, rng))
        neighbour = await stack.enter_async_context(running(real_node("127.28.11.1", victim.address)))
        publishing = asyncio.create_task(publish_forever([*honest_nodes, victim, neighbour]))
        stack.callback(publishing.cancel)
        if siege == "joining":
            await asyncio.sleep(WARMUP_S)
        else:
            honest = {host_of(n.address) for n in (*honest_nodes, victim, neighbour)}
            warm = await wait_for(lambda: sum(h in honest for h in outbound_hosts(victim)) >= 5
                                  and sum(h in honest for h in outbound_hosts(neighbour)) >= 5, timeout_s=30)
            assert warm, (outbound_hosts(victim), outbound_hosts(neighbour))
            crowd = await stack.enter_async_context(hostile_crowd(victim.address, rng))
        hostile = {h.host for h in crowd}
        series = await sample_links([victim, neighbour], hostile, ATTACK_S)
        async with aiohttp.ClientSession() as http:
            advertised = [await peer_list(http, victim), await peer_list(http, neighbour)]
        known = [sum(s.addr and host_of(s.addr) in hostile for s in n.core.addresses.entries())
                 for n in (victim, neighbour)]
        dialed_back = sum(h.dialed_back for h in crowd)
        linked = sum(h.linked > 0 for h in crowd)
        counters = {k: victim.core.tally[k] for k in ("useless_dropped", "pulls", "dial_failures")}
        await victim.stop()  # under attack: the table it saves is the one a restart dials first
    saved = [host_of(entry["addr"]) in hostile for entry in read_peer_table(table) or []]
    shares = [max(h for h, _ in points) for points in series]
    print(f"\nhostile/all outbound links, once a second over {ATTACK_S:.0f} s of attack:\n"
          f"  victim:    {shown(series[0])}\n  neighbour: {shown(series[1])}\n"
          f"most hostile: victim {shares[0]}, neighbour {shares[1]}; hostile addresses in the books: {known}; "
          f"{dialed_back} of {HOSTILE} servers dialed back by the victim, {linked} linked to; victim's {counters}\n"
          f"saved table (victim, in order; H = hostile): {''.join('H' if s else 'h' for s in saved)}\n"
          f"/peers hostile entries: victim {sum(host_of(a) in hostile for a, _, _ in advertised[0])} of "
          f"{len(advertised[0])}, neighbour {sum(host_of(a) in hostile for a, _, _ in advertised[1])} of "
          f"{len(advertised[1])}")
    # the siege landed: the victim verified the attackers' servers and dialed links to some of them
    assert dialed_back >= HOSTILE // 2 and known[0] >= HOSTILE // 2, (dialed_back, known)
    assert linked >= 1 and max(h for points in series for h, _ in points) >= 1, (linked, series)
    for name, entries in zip(("victim", "neighbour"), advertised):
        assert all(verified for _, _, verified in entries), (name, [e for e in entries if not e[2]])
    assert saved and not saved[0] and saved == sorted(saved), saved  # honest entries first
    assert 2 * sum(saved) <= len(saved), saved
    assert shares[0] <= MOST_HOSTILE_OUT, series[0]
    assert shares[1] <= MOST_HOSTILE_OUT, series[1]


# --- the poisoned peer list

async def test_a_poisoned_peer_list_costs_no_more_dials_than_the_unverified_budget():
    dead = DeadAddresses([f"127.31.{k}.1" for k in range(1, DEAD + 1)])
    await dead.start()
    records = dead.records()
    rng = random.Random(147)
    poisoner = Hostile("127.30.2.1", lambda me: listed(rng.sample(records, MAX_RECORDS)))
    await poisoner.start()
    config = real_node("127.30.1.1", poisoner.addr)
    node = PeerNode(config, Identity.generate())
    started = time.monotonic()
    try:
        await node.start()
        assert await wait_for(lambda: outbound_hosts(node) == ["127.30.2.1"], timeout_s=10)
        await asyncio.sleep(POISON_S)
        elapsed = time.monotonic() - started
        taken = sum(s.source == "exchange" for s in node.core.addresses.entries())
        failures = node.core.tally["dial_failures"]
    finally:
        await node.stop()
        await poisoner.stop()
        await dead.stop()
    protocol = config.protocol
    budget = protocol.unverified_dial_burst + protocol.unverified_dial_rate * elapsed
    print(f"\npoisoned /peers: {dead.dials} dials to dead addresses in {elapsed:.0f} s ({failures} dial failures, "
          f"{taken} dead addresses in the book); budget {budget:.1f}")
    assert dead.dials > 0, "the node never dialed the list: the test proves nothing"
    assert dead.dials <= budget, dead.dials
