"""Joining a swarm by name on real nodes (each on its own 127.x address): a node given only a bootstrap
address finds the others through peer exchange and trains on their rollouts; a node of another swarm, or
of a swarm-app from before swarm names, is refused, and both sides say why."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import ClientHandshake, decode_frame, encode
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollouts, wait_for
from tests.peer.io.nodes_on_loopback import linux_only, on, started

pytestmark = linux_only

MEMBERS = 8


async def test_a_node_with_only_a_bootstrap_address_finds_six_peers_and_trains_on_their_rollouts():
    hosts = [f"127.0.2.{i}" for i in range(1, MEMBERS + 1)]
    async with started(on(hosts[0])) as (first,):
        async with started(*(on(host, first.address) for host in hosts[1:])) as others:
            members = [first, *others]
            async with started(on("127.0.2.100", first.address)) as (joiner,):
                assert joiner.config.bootstrap == (first.address,)
                assert await wait_for(lambda: joiner.stats().neighbours >= 6, timeout_s=40), joiner.stats()
                learned = {s.node_id for s in joiner.core.addresses.entries() if s.source == "exchange"}
                assert len(learned & {m.node_id for m in members}) >= 5  # all but the bootstrap came by exchange
                admitted: set[str] = set()
                joiner.add_listener(lambda entry, pushed: admitted.add(entry.author))
                for i, member in enumerate(members):
                    for rollout in make_rollouts(2, seed=300 + i):
                        member.publish(rollout)
                member_ids = {m.node_id for m in members}
                assert await wait_for(lambda: len(admitted & member_ids) >= 6, timeout_s=40), admitted
                drawn = joiner.sample(16)  # what the trainer draws, as it does each round
                for rollout in drawn:
                    joiner.record_used(rollout, 0.5)
                assert len({r.author for r in drawn} & member_ids) >= 6
                print(f"\njoiner: {joiner.stats().neighbours} neighbours, rollouts of {len(admitted)} of {MEMBERS} "
                      f"members admitted, {len(drawn)} drawn for training")


async def test_a_node_of_another_swarm_is_refused_and_both_sides_say_why(caplog):
    caplog.set_level(logging.WARNING, logger="swarm_app.peer.io.node")
    async with started(on("127.0.3.1")) as (easy,):
        async with started(on("127.0.3.2", easy.address, swarm="my-lab")) as (lab,):
            assert await wait_for(lambda: easy.refusals and lab.refusals, timeout_s=15)
            await asyncio.sleep(0.5)
            assert set(easy.refusals) == {"swarm 'my-lab' != 'easy'"}
            (dialer_reason,) = lab.refusals
            assert dialer_reason.startswith("swarm 'easy' != 'my-lab'") and "--swarm easy" in dialer_reason
            assert easy.stats().neighbours == 0 and lab.stats().neighbours == 0
            assert easy.stats().refusals == dict(easy.refusals) and lab.stats().swarm == "my-lab"
            assert "handshake" not in easy.stats().rejected  # another swarm is no offence
            assert "not connected to 127.0.3.2: swarm 'my-lab' != 'easy'" in caplog.text
            assert f"not connected to {easy.address}: swarm 'easy' != 'my-lab'" in caplog.text
            state = lab.core.addresses.get(easy.address)
            # backs off: the next dial is set after the refusal (0.5-1 s at the first failure), not at once; timed
            # from the refusal's own log record, so a loaded machine that reaches this line late still checks it
            refused_at = min(r.created for r in caplog.records if f"not connected to {easy.address}" in r.getMessage())
            assert state is not None and state.failures >= 1 and state.next_attempt > refused_at


async def test_a_hello_from_before_swarm_names_gets_a_version_bye():
    async with started(on("127.0.3.10")) as (node,):
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"http://{node.address}/rsp/v1/ws")
            hello = ClientHandshake(Identity.generate(), None).start()
            del hello["swarm"]
            await ws.send_str(encode({**hello, "v": 1}))
            reply = decode_frame((await ws.receive(timeout=5)).data)
            await ws.close()
        assert (reply.reason, reply.swarm) == ("version", "")
        assert await wait_for(lambda: node.refusals, timeout_s=5)
        assert [*node.refusals] == ["an older swarm-app (hello v1, before swarm names): it needs an update"]


async def test_refusal_reasons_are_bounded():
    async with started(on("127.0.3.20")) as (node,):
        for i in range(100):
            node.refused(f"swarm 'x{i}' != 'easy'", "127.0.3.21")
        assert len(node.refusals) <= 33 and node.refusals["other refusals"] > 0


def test_nodes_name_the_swarm_in_info_and_stats():
    node = PeerNode(on("127.0.3.30", swarm="my-lab"), Identity.generate())
    assert node.stats().swarm == "my-lab" and node.stats().reachable is None
