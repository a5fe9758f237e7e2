"""Signed node records on real nodes, each on its own 127.x address: a node learns a peer through GET /peers as
that peer's own record, relayed byte for byte by the node that verified it, and refuses the forged records
a lying server lists (an honest node's id at the liar's address, an altered copy, an id that is not its
key's), counting them on /metrics."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import AsyncIterator

import aiohttp
import rfc8785
from aiohttp import web

from swarm_app.peer.core.addressbook import format_address
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.records import RECORD_LIFETIME_MS, RECORD_PREFIX, NodeRecord
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import wait_for
from tests.peer.io.nodes_on_loopback import linux_only, on, started

pytestmark = linux_only


def forgeries(genuine: NodeRecord, liar_addr: str, liar: Identity, now_ms: int) -> list[dict[str, str]]:
    """What a liar can make of an honest node's record: its id at the liar's address under the liar's
    signature, its genuine record with the address changed, and its id over the liar's key."""
    body = {"v": 1, "node": genuine.node, "key": "", "swarm": "easy", "addrs": [liar_addr], "reachable": True,
            "issued_ms": now_ms, "expires_ms": now_ms + RECORD_LIFETIME_MS}
    forged = []
    for key in (json.loads(genuine.body)["key"], b64url(liar.public_key)):
        raw = rfc8785.dumps({**body, "key": key})
        forged.append({"body": raw.decode(), "sig": b64url(liar.sign(RECORD_PREFIX + raw))})
    altered = genuine.to_item()
    forged.append({**altered, "body": altered["body"].replace(genuine.addrs[0], liar_addr)})
    return forged


@asynccontextmanager
async def liar(host: str, records: list) -> AsyncIterator[str]:
    """A server that is always full (its websocket answers 503, so a node asks it for peers instead) and
    lists `records` (filled in by the caller) at GET /rsp/v1/peers. Yields its address."""
    async def full(request: web.Request) -> web.Response:
        return web.json_response({"error": "busy"}, status=503)

    async def peers(request: web.Request) -> web.Response:
        return web.json_response({"records": records, "peers": []})

    app = web.Application()
    app.router.add_get("/rsp/v1/ws", full)
    app.router.add_get("/rsp/v1/peers", peers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, 0).start()
        yield format_address(host, runner.addresses[0][1])
    finally:
        await runner.cleanup()


def holds_record_of(node: PeerNode, subject: PeerNode) -> bool:
    own = subject.core.exchange.own
    held = node.core.exchange.records.get(subject.node_id)
    return own is not None and held is not None and held.body == own.body


async def test_a_node_learns_a_peer_from_its_signed_record_and_refuses_forged_ones():
    async with started(on("127.0.8.1")) as (hub,):
        async with started(on("127.0.8.2", hub.address)) as (member,):
            # the hub dials the member back (dial-back), the member signs its record, the hub asks for it
            assert await wait_for(lambda: holds_record_of(hub, member), timeout_s=20), member.core.exchange.own
            relayed = hub.core.peer_list(hub.clock())["records"]
            assert member.core.exchange.own.to_item() in relayed  # as the member signed it
            assert member.core.exchange.own.addrs == (member.address,)
            forged: list = []
            async with liar("127.0.8.66", forged) as liar_addr:
                forged += forgeries(member.core.exchange.own, liar_addr, Identity.generate(), int(hub.clock() * 1000))
                async with started(on("127.0.8.3", hub.address, liar_addr)) as (joiner,):
                    # the record may first come from the member itself (asked for its own record: that answer
                    # adds no address); the hub's list then brings the address
                    assert await wait_for(lambda: holds_record_of(joiner, member)
                                          and joiner.core.addresses.get(member.address) is not None, timeout_s=20)
                    learned = joiner.core.addresses.get(member.address)
                    assert learned is not None and learned.node_id == member.node_id
                    assert await wait_for(lambda: sum(joiner.core.exchange.rejected.values()) >= 3, timeout_s=20)
                    rejected = joiner.core.exchange.rejected  # per answer: two bad signatures, one wrong id
                    assert set(rejected) == {"bad_signature", "wrong_node"}
                    assert rejected["bad_signature"] == 2 * rejected["wrong_node"]
                    liars_entry = joiner.core.addresses.get(liar_addr)
                    assert liars_entry is not None and liars_entry.node_id is None  # never named the member's
                    assert all(r.node != member.node_id or r.addrs == (member.address,)
                               for r in joiner.core.exchange.records.values())
                    before = rejected["wrong_node"]  # the liar may be asked again while /metrics is read
                    async with aiohttp.ClientSession() as http:
                        async with http.get(f"http://{joiner.address}/metrics") as resp:
                            metrics = await resp.text()
                    line = 'rsp_records_rejected_total{reason="wrong_node"} '
                    counted = [float(x[len(line):]) for x in metrics.splitlines() if x.startswith(line)]
                    assert counted and before <= counted[0] <= rejected["wrong_node"]


@linux_only
async def test_the_info_endpoint_says_whether_the_node_shares_now():
    """/rsp/v1/info's `share` follows `s` (set_sharing) while the node runs, not the flag it started with."""
    async with started(on("127.0.9.1")) as (node,):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async def shares() -> bool:
                async with http.get(f"http://{node.address}/rsp/v1/info") as resp:
                    return (await resp.json())["share"]

            assert await shares() is True
            node.set_sharing(False)
            assert await shares() is False
