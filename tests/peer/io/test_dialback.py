"""Dial-back on real nodes, each on its own 127.x address: nodes that peers can dial become reachable, one whose
announced port nobody listens on becomes unreachable (and still trades rollouts: it dials out); a helper
dials back only the requester's own address, within its rate limits; a helper's "yes" is not taken on
trust."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from swarm_app.peer.core.reachability import DialbackLimits, new_token
from tests.peer.helpers import make_rollouts, wait_for
from tests.peer.io.nodes_on_loopback import linux_only, on, started

pytestmark = linux_only


def port_nobody_listens_on(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


async def test_nodes_that_peers_can_dial_become_reachable_and_one_behind_a_closed_port_does_not():
    hosts = [f"127.0.4.{i}" for i in range(1, 6)]
    async with started(on(hosts[0])) as (first,):
        async with started(*(on(h, first.address) for h in hosts[1:])) as others:
            closed = port_nobody_listens_on("127.0.4.9")
            async with started(on("127.0.4.9", first.address, public_port=closed)) as (behind_nat,):
                open_nodes = [first, *others]
                assert await wait_for(lambda: all(n.core.reachable for n in open_nodes), timeout_s=40), \
                    [(n.stats().witnesses, n.stats().unreached) for n in open_nodes]
                assert await wait_for(lambda: behind_nat.core.reachable is False, timeout_s=40), behind_nat.stats()
                stats = behind_nat.stats()
                assert stats.unreached >= 3 and stats.witnesses == 0 and stats.public_port == closed
                assert all(n.stats().witnesses >= 3 for n in open_nodes)
                # it still works: it dials out, and rollouts flow both ways over the links it opened
                assert behind_nat.stats().outbound >= 1
                got: set[str] = set()
                behind_nat.add_listener(lambda entry, pushed: got.add(entry.author))
                for rollout in make_rollouts(2, seed=410):
                    first.publish(rollout)
                assert await wait_for(lambda: first.node_id in got, timeout_s=20)
                async with aiohttp.ClientSession() as http:
                    async with http.get(f"http://{first.address}/rsp/v1/info") as resp:
                        info = await resp.json()
                assert info["reachable"] is True and info["swarm"] == "easy" and info["hello"] == 2


async def test_a_helper_dials_back_only_the_requesters_own_address():
    async with started(on("127.0.5.1"), on("127.0.5.2")) as (helper, bystander):
        port = int(bystander.address.rsplit(":", 1)[1])  # a node that does listen, on another address
        request = {"node": bystander.node_id, "port": port, "token": new_token()}
        connector = aiohttp.TCPConnector(local_addr=("127.0.5.9", 0))
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.post(f"http://{helper.address}/rsp/v1/dialback", json=request) as resp:
                answer = await resp.json()
        assert answer["reachable"] is False and answer["addr"] == f"127.0.5.9:{port}"
        assert bystander.dialback.counters["probes"] == 0  # never aimed at anyone else


async def test_a_helper_limits_dial_backs_per_requester():
    async with started(on("127.0.5.20", dialback=DialbackLimits())) as (helper,):  # a real node's budget
        statuses = []
        connector = aiohttp.TCPConnector(local_addr=("127.0.5.21", 0))
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(4):
                request = {"node": "a" * 32, "port": port_nobody_listens_on("127.0.5.21"), "token": new_token()}
                async with http.post(f"http://{helper.address}/rsp/v1/dialback", json=request) as resp:
                    statuses.append(resp.status)
            async with http.post(f"http://{helper.address}/rsp/v1/dialback", data=b"{nonsense") as resp:
                assert resp.status in (400, 429)
        assert statuses == [200, 200, 429, 429]  # a burst of two, then one a minute
        assert helper.dialback.door.refused >= 2


@pytest.mark.parametrize("query", ["", "?nonce=short", "?nonce=" + "A" * 43 + "&token=x"])
async def test_a_probe_without_a_proper_nonce_is_refused(query):
    async with started(on("127.0.5.30")) as (node,):
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{node.address}/rsp/v1/probe{query}") as resp:
                status = resp.status
        assert status == (200 if "A" * 43 in query else 400)


async def test_a_helpers_yes_without_a_dial_back_does_not_count():
    async def liar(request: web.Request) -> web.Response:
        return web.json_response({"reachable": True})

    app = web.Application()
    app.router.add_post("/rsp/v1/dialback", liar)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.5.40", 0).start()
    liar_addr = f"127.0.5.40:{runner.addresses[0][1]}"
    try:
        async with started(on("127.0.5.41")) as (node,):
            reached, why = await node.dialback.ask(node.session, liar_addr, node.public_port)
            assert reached is False and "could not dial" in why
            assert node.dialback.state.failed and not node.dialback.state.confirmed
    finally:
        await runner.cleanup()
