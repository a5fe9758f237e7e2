"""No takeover: fresh keys and useless groups from one place cannot decide what a node trains on.

A real node on 127.0.0.1 with the budgets a `swarm run` node has (only the time it takes to earn standing
is shortened); an honest peer connects from another network (127.0.1.1), attackers from 127.0.0.0/24
(127.0.0.x addresses are distinct sources on Linux loopback). The external draw is the trainer's call,
`PeerNode.sample(J)`, with `record_used` for every group drawn, as the trainer does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter

import aiohttp

from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import ClientHandshake, decode_frame, encode
from swarm_app.peer.core.sources import SourceLimits
from swarm_app.peer.core.wire import SignedRollout
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollout, signed
from tests.peer.io.nodes_on_loopback import linux_only

J = 8


def strict_config() -> PeerConfig:
    """The default budgets of a real node; standing is earned in 1 s instead of 2 minutes."""
    config = PeerConfig(listen="127.0.0.1:0", mdns=False, peer_table=False,
                        sources=SourceLimits(standing_age_s=1.0))
    config = config.with_protocol(pull_interval_s=3600.0, exchange_interval_s=3600.0, target_outbound=0,
                                  standing_refresh_s=0.1)
    return dataclasses.replace(config, tick_s=0.05)


class Client:
    """A peer from `ip` that completes the hello and pushes its own rollouts."""

    def __init__(self, ip: str, identity: Identity | None = None) -> None:
        self.ip, self.identity = ip, identity or Identity.generate()
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> Client:
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(self.ip, 0)))
        return self

    async def __aexit__(self, *exc) -> None:
        if self.ws is not None:
            await self.ws.close()
        await self.http.close()

    async def connect(self, node: PeerNode) -> None:
        self.ws = await self.http.ws_connect(f"http://{node.address}/rsp/v1/ws")
        hs = ClientHandshake(self.identity, None)
        await self.ws.send_str(encode(hs.start()))
        reply = await self.ws.receive(timeout=5)
        await self.ws.send_str(encode(hs.on_server_hello(decode_frame(reply.data))))

    async def push(self, *items: SignedRollout) -> None:
        await self.ws.send_str(encode({"t": "push", "items": [i.to_item() for i in items]}))


def own_rollouts(identity: Identity, first: int, n: int) -> list[SignedRollout]:
    now = int(time.time() * 1000)
    return [signed(identity, make_rollout(seed=7, index=first + i), ts_ms=now + first + i) for i in range(n)]


async def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def draw_rounds(node: PeerNode, rounds: int, honest: str, sybils: frozenset[str] = frozenset()) -> tuple[int, int, int]:
    """(the honest peer's groups, Sybils' groups, all groups) over `rounds` external draws of J, each group
    used as the trainer does."""
    got = mine = theirs = 0
    for _ in range(rounds):
        for rollout in node.sample(J):
            got += 1
            mine += rollout.author == honest
            theirs += rollout.author in sybils
            node.record_used(rollout, 0.5)
    return mine, theirs, got


def judged(node: PeerNode) -> Counter:
    """Rollouts the node admitted or refused so far, by outcome ("accepted" or the refusal's reason)."""
    stats = node.stats()
    return Counter({**stats.rejected, "accepted": stats.accepted})


async def push_as_sybils(node: PeerNode) -> list[str]:
    """100 fresh keys from one address, then 100 from ten addresses of one /24: one connection each, three
    of its own rollouts pushed by each; their node ids."""
    sybils: list[str] = []
    for k in range(200):
        async with Client("127.0.0.2" if k < 100 else f"127.0.0.{10 + k % 10}") as sybil:
            await sybil.connect(node)
            await sybil.push(*own_rollouts(sybil.identity, 1000 + 10 * k, SYBIL_PUSH))
            sybils.append(sybil.identity.node_id)
    return sybils


SYBIL_PUSH = 3
DRAWS = 5


@linux_only
async def test_fresh_keys_from_one_place_get_few_authors_in_and_little_of_the_draw():
    """Two honest peers from two networks set the baseline (the honest peer's share of the draw is
    measured, about a half, not 1 by construction); then 200 fresh keys from one /24 push 600 rollouts."""
    node = PeerNode(strict_config(), Identity.generate())
    await node.start()
    try:
        async with Client("127.0.1.1") as honest, Client("127.0.3.1") as other:
            for peer in (honest, other):
                await peer.connect(node)
                await peer.push(*own_rollouts(peer.identity, 0, 40))
            await wait_for(lambda: len(node.pool) >= 80)
            baseline = draw_rounds(node, 2, honest.identity.node_id)  # both earn their standing
            await asyncio.sleep(1.2)
            before = judged(node)
            sybils = await push_as_sybils(node)
            for peer in (honest, other):
                await peer.push(*own_rollouts(peer.identity, 100, 40))
            pushed = 200 * SYBIL_PUSH + 80
            await wait_for(lambda: (judged(node) - before).total() >= pushed)  # every push arrived and was judged
            await asyncio.sleep(0.3)
            outcomes = judged(node) - before
            admitted = {r.node_id for r in node.stats().peers if r.authored} & set(sybils)
            attacked = draw_rounds(node, DRAWS, honest.identity.node_id, frozenset(sybils))
    finally:
        await node.stop()
    print(f"\nbaseline (honest, sybil, all) {baseline}, under attack {attacked}; outcomes {dict(outcomes)}")
    assert outcomes.total() == pushed, outcomes  # nothing else was judged: each Sybil push landed once
    assert len(admitted) <= 4, f"{len(admitted)} of 200 fresh keys got rollouts admitted"
    assert outcomes["new_author"] >= 200 * SYBIL_PUSH - SYBIL_PUSH * len(admitted), outcomes  # refused at the door
    assert outcomes["accepted"] >= 80, outcomes  # the honest peers' second batch, every one
    honest_share, baseline_share = attacked[0] / attacked[2], baseline[0] / baseline[2]
    assert 0.25 <= baseline_share <= 0.75, baseline  # two honest peers: the baseline is a measured share
    assert honest_share >= 0.5 * baseline_share, (baseline, attacked)
    assert attacked[1] <= SourceLimits().new_source_cap * DRAWS, attacked  # a network without standing: 2 a draw


POOL_BYTES = 400_000
"""A small pool for the bloated test, so one source's byte share (a quarter: 100 KB) binds within 60 rounds."""


def bloated(rollout, filler: int) -> object:
    """`rollout` with every completion padded by `filler` bytes: its reward spread (half right) is kept."""
    return dataclasses.replace(rollout, completions=tuple("x" * filler + " " + c for c in rollout.completions))


async def test_useless_and_bloated_groups_do_not_crowd_the_honest_peer_out():
    """Each round the honest peer shares its 4 groups and the node draws J = 4. Then an attacker pushes, at
    its receive budget, a right answer repeated (no reward spread) and, every other round, a group with a
    reward spread padded with 12 KB of filler per completion: over 60 rounds the useless groups are refused
    as no-signal, the bloated ones are admitted but the attacker holds at most its byte share of the pool,
    and the honest peer's groups per round stay within 80% of its baseline."""
    config = dataclasses.replace(strict_config(), pool_max_bytes=POOL_BYTES)
    node = PeerNode(config, Identity.generate())
    await node.start()
    honest_id = Identity.generate()
    held: list[int] = []

    async def rounds(n: int, first: int, attacker: Client | None = None) -> float:
        used = 0
        for r in range(n):
            if attacker is not None:
                rollout = make_rollout(seed=9, index=first + r)
                group = (bloated(rollout, 12_000) if r % 2 else
                         dataclasses.replace(rollout, completions=(rollout.completions[0],) * 4))
                await attacker.push(signed(attacker.identity, group, ts_ms=int(time.time() * 1000)))
            await honest.push(*own_rollouts(honest_id, 4 * (first + r), 4))
            await asyncio.sleep(0.25)
            if attacker is not None:
                held.append(node.pool.held_by(attacker.identity.node_id)[1])
            for rollout in node.sample(4):
                used += rollout.author == honest_id.node_id
                node.record_used(rollout, 0.5)
        return used / n

    try:
        async with Client("127.0.1.1", honest_id) as honest, Client("127.0.2.1") as attacker:
            await honest.connect(node)
            baseline = await rounds(30, 0)
            await attacker.connect(node)
            attacked = await rounds(60, 1000, attacker)
            stats = node.stats()
    finally:
        await node.stop()
    share = int(POOL_BYTES * config.sources.pool_share)
    print(f"\nhonest groups per round: {baseline:.2f} alone, {attacked:.2f} attacked; attacker's bytes in the pool "
          f"(most {max(held)}, share {share}); refused {dict(stats.rejected)}")
    assert stats.rejected.get("no_signal", 0) >= 30  # the useless groups never took room in the pool
    assert max(held) >= 2 * 48_000, held  # 30 bloated groups were admitted (they carry a spread)...
    assert max(held) <= share, held  # ...and the byte share pushed the attacker's own oldest out
    assert attacked >= 0.8 * baseline, (baseline, attacked, dict(stats.rejected))
