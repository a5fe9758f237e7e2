"""A LAN meshes (issue 41, item 2): real nodes with the peer config `swarm run` builds (the LAN rule on, no test
trust), each on its own 127.x address and dialing from it, joined through one bootstrap, reach min(6, N - 1) links, whether all
addresses share one /24 (a home or lab LAN) or not; and honest nodes that share one address (a NAT) and push
their first rollouts at full speed are refused by the new-author budget, never banned.

Loopback is a private network (sources.LAN_NETWORKS): the nodes here stand for a LAN's machines. Every node
publishes four rollouts a second (own_push_rate, the fake engine's pace), as a `swarm run --backend fake` node.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import defaultdict
from pathlib import Path

from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollouts, wait_for
from tests.peer.io.nodes_on_loopback import linux_only, started

pytestmark = linux_only


def lan_node(tmp_path: Path, ip: str, *bootstrap: str) -> PeerConfig:
    """The peer config of `swarm run --listen IP:0 --bootstrap ... --no-mdns --no-dht --no-upnp` (every other
    setting at its default: a `swarm run` node's budgets, caps and timings, and its dialing from `ip`)."""
    from swarm_app.cli import build_parser
    from swarm_app.commands.flags import load_settings_for
    from swarm_app.session.peering import peer_config

    (tmp_path / "none.toml").write_text("")
    argv = ["run", "--listen", f"{ip}:0", "--no-mdns", "--no-dht", "--no-upnp", "--swarm", "lab",
            "--config", str(tmp_path / "none.toml")]
    for addr in bootstrap:
        argv += ["--bootstrap", addr]
    return peer_config(load_settings_for(build_parser().parse_args(argv)))


@contextlib.asynccontextmanager
async def producing(nodes: list[PeerNode], per_s: float = 4.0):
    """Every node publishes `per_s` rollouts a second while the block runs."""
    rollouts = make_rollouts(24, seed=141)

    async def produce() -> None:
        k = 0
        while True:
            for i, node in enumerate(nodes):
                node.publish(dataclasses.replace(rollouts[(k + i) % len(rollouts)], created_ms=int(time.time() * 1000)))
            k += 1
            await asyncio.sleep(1 / per_s)

    task = asyncio.create_task(produce())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def meshes(tmp_path: Path, hosts: list[str]) -> None:
    heard: dict[int, set[str]] = defaultdict(set)
    async with started(lan_node(tmp_path, hosts[0])) as (bootstrap,):
        async with started(*(lan_node(tmp_path, h, bootstrap.address) for h in hosts[1:])) as joiners:
            nodes = [bootstrap, *joiners]
            for i, node in enumerate(nodes):
                node.add_listener(lambda entry, pushed, i=i: heard[i].add(entry.author))
            async with producing(nodes):
                want = min(6, len(nodes) - 1)
                assert await wait_for(lambda: all(n.stats().neighbours >= want for n in nodes), timeout_s=75, step=0.5), \
                    [n.stats().neighbours for n in nodes]
                others = {n.node_id for n in nodes}
                assert await wait_for(lambda: all(len(heard[i] & others) >= want for i in range(len(nodes))),
                                      timeout_s=30, step=0.5), [len(heard[i]) for i in range(len(nodes))]
            assert sum(n.core.tally["bans"] for n in nodes) == 0


async def test_eight_nodes_of_one_slash24_mesh_through_one_bootstrap_with_default_settings(tmp_path):
    await meshes(tmp_path, [f"127.0.41.{i}" for i in range(1, 9)])


async def test_eight_nodes_on_eight_slash24s_mesh_through_one_bootstrap_with_default_settings(tmp_path):
    await meshes(tmp_path, [f"127.{42 + i}.0.1" for i in range(8)])


async def test_honest_nodes_behind_one_address_pushing_at_full_speed_are_refused_never_banned(tmp_path):
    """Six nodes dial from one address (127.0.0.1: the OS's choice, as behind one NAT) to a hub; each pushes its
    first 130 rollouts at once (its own-push burst): the address's budget of new authors is spent after two."""
    async with started(lan_node(tmp_path, "127.0.51.1")) as (hub,):
        behind_nat = [dataclasses.replace(lan_node(tmp_path, f"127.0.51.{i}", hub.address), source_ip=None)
                      for i in range(2, 8)]
        async with started(*behind_nat) as joiners:
            assert await wait_for(lambda: hub.stats().inbound == len(joiners), timeout_s=20), hub.stats()
            rollouts = make_rollouts(26, seed=151)
            for k in range(130):
                for node in joiners:
                    node.publish(dataclasses.replace(rollouts[k % 26], created_ms=int(time.time() * 1000)))
            assert await wait_for(lambda: hub.core.tally.rejections().get("new_author", 0) >= 200, timeout_s=20), \
                hub.core.tally.rejections()
            await asyncio.sleep(2.0)
            assert hub.core.tally["bans"] == 0 and hub.stats().inbound == len(joiners)
