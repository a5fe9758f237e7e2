"""`swarm hub`: bad input is one line and exit 2; a hub relays a rollout between two nodes linked only to it
(real aiohttp servers on loopback, the hub built from Settings as the command builds it); a running hub
loads no torch, transformers or other engine."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_app.cli import main
from swarm_app.kernel.events import HubStarted, HubStatus
from swarm_app.kernel.settings import load_settings
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.io.node import PeerNode
from swarm_app.session.hub import Hub
from tests.peer.helpers import fast_config, make_rollout, wait_for, with_bootstrap

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, says", [
    (["--offline"], "--offline ([peer] enabled = false"),
    (["--max-inbound", "0"], "--max-inbound 0: give a number of links from 1 to 1024"),
    (["--max-inbound", "5000"], "--max-inbound 5000: give a number"),
    (["--listen", "nowhere"], "peer.listen 'nowhere'"),
    (["--swarm", "Not A Name"], "swarm name 'Not A Name'"),
    (["--swarm-key", "abc"], "--swarm-key ([peer] swarm_key) 'abc' is not a swarm key"),
    (["--record-hub", "203.0.113.9:1"], "give --sign-record FILE too"),
    (["--sign-record", "creator.key"], "--sign-record needs the hubs to list: give --record-hub"),
    (["--sign-record", "creator.key", "--record-hub", "203.0.113.9:1"], "drop --no-dht"),
    (["--sign-record", "creator.key", "--record-hub", "nowhere"], "--record-hub 'nowhere'"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(argv, says, capsys, monkeypatch, isolated_home):
    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    code = main(["hub", "--no-dht", "--no-mdns", "--no-upnp", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("swarm: ") and says in err, err
    assert not isolated_home.exists() or not any(p.is_file() for p in isolated_home.rglob("*"))


def test_the_record_key_file_is_made_private_once_and_read_back(tmp_path):
    from swarm_app.kernel.errors import UsageError
    from swarm_app.session.hub import SwarmRecord, hub_config

    path = tmp_path / "creator.key"
    made = SwarmRecord.load(path, ["203.0.113.9:47470", "203.0.113.9:47470"])
    assert made.created and made.hubs == ("203.0.113.9:47470",) and path.stat().st_mode & 0o777 == 0o600
    again = SwarmRecord.load(path, ["203.0.113.9:47470"])
    assert not again.created and again.signer.public_key == made.signer.public_key
    settings = load_settings(None, {}, {"peer.enabled": "true", "peer.listen": "127.0.0.1:0", "peer.mdns": "false",
                                        "peer.upnp": "false"})
    dht = hub_config(settings, record=again).dht
    assert dht.record_signer == again.signer and dht.record_hubs == again.hubs
    path.write_text("not a key\n")
    with pytest.raises(UsageError, match="not a swarm key file"):
        SwarmRecord.load(path, ["203.0.113.9:47470"])


def test_offline_from_the_environment_is_refused_too(capsys, isolated_home):
    assert os.environ["SWARM_PEER_ENABLED"] == "false"  # conftest: as a config.toml or SWARM_* would say it
    assert main(["hub", "--listen", "127.0.0.1:0"]) == 2
    assert "makes no sense for `swarm hub`" in capsys.readouterr().err


def hub_settings():
    return load_settings(None, {}, {"peer.enabled": "true", "peer.listen": "127.0.0.1:0", "peer.mdns": "false",
                                    "peer.dht": "false", "peer.upnp": "false"})


def leaf(hub_address: str) -> PeerNode:
    """A node linked to the hub alone: it never asks for peer lists, so it never hears of the other leaf."""
    config = fast_config(exchange_interval_s=3600.0, hungry_exchange_s=3600.0)
    return PeerNode(with_bootstrap(config, hub_address), Identity.generate())


def test_a_hub_relays_a_rollout_between_two_nodes_linked_only_to_it():
    async def scenario():
        events = []
        hub = Hub(hub_settings(), status_s=1.0)
        hub.subscribe(events.append)
        running = asyncio.create_task(hub.run())
        assert await wait_for(lambda: any(isinstance(e, HubStarted) for e in events), 10)
        address = next(e.address for e in events if isinstance(e, HubStarted))
        a, b = leaf(address), leaf(address)
        received = []
        b.add_listener(lambda entry, pushed: received.append(entry))
        await a.start()
        await b.start()
        try:
            linked = lambda: hub.node.stats().inbound + hub.node.stats().outbound >= 2  # noqa: E731
            assert await wait_for(lambda: a.connected() and b.connected() and linked(), 15)
            a.publish(make_rollout(seed=7))
            got = await wait_for(lambda: any(e.author == a.node_id and e.via == hub.node.node_id for e in received), 15)
            assert not a.core.view.is_linked(b.node_id) and not b.core.view.is_linked(a.node_id)
            await asyncio.sleep(1.2)  # one HubStatus after the relay
            return got, hub.node.stats(), events
        finally:
            await a.stop()
            await b.stop()
            hub.stop()
            await running

    got, stats, events = asyncio.run(scenario())
    assert got, "the rollout never reached B through the hub"
    assert stats.accepted >= 1 and stats.rollouts_served >= 1
    assert stats.published == 0 and stats.served == 0  # nothing of its own
    statuses = [e for e in events if isinstance(e, HubStatus)]
    assert sum(s.relayed for s in statuses) >= 1 and sum(s.admitted for s in statuses) >= 1
    assert sum(s.bytes_in for s in statuses) > 0 and sum(s.bytes_out for s in statuses) > 0


ENGINES = ("torch", "transformers", "peft", "mlx", "llama_cpp", "textual")
"""numpy and sympy may load: reasoning_gym regenerates a task to re-score a rollout with them."""
PROBE = f"""
import atexit, sys
atexit.register(lambda: print("LOADED", sorted(m for m in {ENGINES!r} if m in sys.modules), flush=True))
from swarm_app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def admitted(address: str) -> float:
    import re
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    except OSError:  # a hub starved of CPU (the cores busy with other work) answers late: not yet
        return 0.0
    return float(re.search(r"^rsp_accepted_total ([0-9.e+]+)$", text, re.M).group(1))


def test_a_running_hub_loads_no_engine_even_after_admitting_a_rollout(tmp_path):
    env = {**os.environ, "SWARM_HOME": str(tmp_path / "home"), "SWARM_PEER_ENABLED": "true",
           "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", PROBE, "hub", "--listen", "127.0.0.1:0", "--no-dht", "--no-mdns", "--no-upnp"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        first = proc.stdout.readline()
        assert first.startswith("hub for swarm 'easy'"), first
        address = first.split(" listening on ")[1].split(" ")[0]

        async def push_one() -> bool:
            node = leaf(address)
            await node.start()
            try:
                assert await wait_for(node.connected, 15)
                node.publish(make_rollout(seed=11))
                return await wait_for(lambda: admitted(address) >= 1, 30, step=0.5)
            finally:
                await node.stop()

        assert asyncio.run(push_one()), "the hub never admitted the rollout (re-scoring it loads the task code)"
    finally:
        proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    assert "hub stopped" in rest and "LOADED []" in rest, rest


def test_the_status_line_counts_the_interval_only():
    from swarm_app.headless import format_hub_status
    from swarm_app.peer.core.stats import NodeStats
    from swarm_app.session.hub import status_between

    base = NodeStats("n", None, False, 0, 0, 0, 0, 0, 0, 0, 0, 10, {"bad_sig": 1}, 0, ())
    later = dataclasses.replace(base, inbound=64, outbound=3, accepted=130, rejected={"bad_sig": 3},
                                rollouts_served=500, bytes_in=2_000_000, bytes_out=5_500_000, pool_size=42)
    status = status_between(base, later, 60.0)
    assert (status.admitted, status.relayed, status.rejected, status.bytes_in) == (120, 500, 2, 2_000_000)
    assert format_hub_status(status) == ("hub: links 64 in, 3 out (reachability unknown); last minute: rollouts "
                                         "admitted 120, relayed 500, rejected 2; bytes in 2.0 MB, out 5.5 MB; pool 42")
    on_a_lan = status_between(base, dataclasses.replace(later, reachable=True, lan_only=True), 60.0)
    assert format_hub_status(on_a_lan).startswith("hub: links 64 in, 3 out (reachable on this network only);")
