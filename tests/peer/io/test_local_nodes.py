"""What the CLI wires: peer flags -> PeerConfig, the demo orchestration, discovery helpers, metrics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.settings import Settings
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.config import DEFAULT_LISTEN, DhtConfig, PeerConfig
from swarm_app.peer.io.discovery import MdnsDiscovery, advertised_ips, read_peer_table
from swarm_app.peer.io.local_nodes import demo_config, run_demo
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollout


def test_peer_settings_and_flags_build_the_config(tmp_path):
    from swarm_app.cli import build_parser
    from swarm_app.commands.flags import load_settings_for
    from swarm_app.session.peering import peer_config

    args = build_parser().parse_args(["run", "--peer", "10.0.0.2:47470", "--peer", "[::1]:5", "--listen", "127.0.0.1:0",
                                      "--no-mdns", "--no-share", "--metrics-listen", "127.0.0.1:9464",
                                      "--config", str(tmp_path / "none.toml")])
    (tmp_path / "none.toml").write_text("")
    config = peer_config(load_settings_for(args))
    assert config.bootstrap == ("10.0.0.2:47470", "[::1]:5") and config.listen == "127.0.0.1:0"
    assert not config.mdns and not config.share and config.metrics_listen == "127.0.0.1:9464"
    default = peer_config(Settings())
    dht = DhtConfig(state_path=user_dirs().data / "dht-nodes.json")  # on, public routers, the table saved
    assert default == PeerConfig(upnp=True, dht=dht) and default.listen == DEFAULT_LISTEN and default.mdns and default.share
    assert default.swarm == "easy" and default.bootstrap == ()  # the preset's public swarm; no bootstrap ships
    bad = Settings()
    bad.peer.peers = ["no-port"]
    with pytest.raises(UsageError, match="HOST:PORT"):
        peer_config(bad)


def test_node_settings_give_each_demo_node_its_own_run_and_seed(tmp_path):
    from swarm_app.demo.local_swarm import node_settings

    base = Settings()
    base.train.seed, base.train.external = 5, 4
    s2 = node_settings(base, 2, tmp_path)
    assert s2.run.run_dir == str(tmp_path / "node-2") and s2.train.seed == 7 and s2.train.external == 4
    assert not s2.run.ui and not s2.peer.enabled and base.run.run_dir == "" and base.train.seed == 5


async def test_run_demo_nodes_find_each_other_and_exchange_rollouts():
    seen: dict[int, set[str]] = {}

    async def run_node(i: int, node: PeerNode) -> None:
        for k in range(2):
            node.publish(make_rollout(seed=500 + i, index=k))
        deadline = time.monotonic() + 20
        authors: set[str] = set()
        while len(authors) < 2 and time.monotonic() < deadline:
            authors |= {r.author for r in node.sample(10)}
            await asyncio.sleep(0.1)
        seen[i] = authors

    stats = await run_demo(3, run_node, demo_config(pull_interval_s=0.3))
    ids = {s.node_id for s in stats}
    assert all(seen[i] == ids - {stats[i].node_id} for i in range(3))
    assert all(s.neighbours >= 1 and s.published == 2 for s in stats)


async def test_run_demo_survives_a_failing_node():
    async def run_node(i: int, node: PeerNode) -> None:
        if i == 1:
            raise RuntimeError("boom")
        await asyncio.sleep(0.2)

    stats = await run_demo(2, run_node, demo_config())
    assert len(stats) == 2


def test_advertised_ips():
    assert advertised_ips("127.0.0.1") == [] and advertised_ips("localhost") == []
    assert advertised_ips("192.168.1.5") == ["192.168.1.5"]
    assert all(not ip.startswith("127.") for ip in advertised_ips("0.0.0.0"))


class ResolvedService:
    """Stands in for zeroconf's AsyncServiceInfo after a successful lookup (no multicast in tests)."""

    port = 4000

    def __init__(self, service_type: str, name: str, node: bytes = b"other-id") -> None:
        self.properties = {b"node": node}

    async def async_request(self, zc, timeout_ms) -> bool:
        return True

    def parsed_addresses(self) -> list[str]:
        return ["192.168.1.9"]


async def test_mdns_answers_become_addresses(monkeypatch):
    import zeroconf.asyncio

    found = []
    mdns = MdnsDiscovery("self-id", "0.0.0.0", 47470, lambda addr, node: found.append((addr, node)))
    monkeypatch.setattr(zeroconf.asyncio, "AsyncServiceInfo", ResolvedService)
    await mdns._resolve(None, "_swarm-rsp._tcp.local.", "x")
    assert found == [("192.168.1.9:4000", "other-id")]
    monkeypatch.setattr(zeroconf.asyncio, "AsyncServiceInfo",
                        lambda t, n: ResolvedService(t, n, node=b"self-id"))
    await mdns._resolve(None, "_swarm-rsp._tcp.local.", "me")
    assert len(found) == 1  # our own announcement is not a peer


def test_a_damaged_peer_table_is_an_empty_one(tmp_path: Path):
    path = tmp_path / "peers.json"
    book = AddressBook(__import__("random").Random(0))
    assert book.load_json(read_peer_table(path)) == 0  # missing
    path.write_text("{not json")
    assert book.load_json(read_peer_table(path)) == 0
    path.write_text('{"peers": [{"addr": "10.0.0.1:5"}, {"addr": 7}, "x"]}')
    assert book.load_json(read_peer_table(path)) == 1


async def test_each_node_has_its_own_metrics_registry():
    from swarm_app.peer.core.identity import Identity
    from tests.peer.helpers import fast_config

    a, b = PeerNode(fast_config(), Identity.generate()), PeerNode(fast_config(), Identity.generate())
    a.core.tally.count("published", 3)
    assert b"rsp_published_total 3.0" in a.metrics.render()[0]
    assert b"rsp_published_total 0.0" in b.metrics.render()[0]


def test_importing_the_cli_hooks_is_cheap():
    import subprocess
    import sys

    code = ("import sys, swarm_app.cli; "
            "print(sorted(m for m in ('aiohttp', 'cryptography', 'zeroconf', 'reasoning_gym', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
