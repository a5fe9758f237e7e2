"""UPnP-IGD port mapping (swarm_app/peer/io/upnp.py) against a fake gateway on loopback: the mapping asked
for, its removal on stop, a router that refuses, the library missing; and on real nodes, that a mapping is
not trusted until peers dial the node back through it."""

from __future__ import annotations

import logging
import socket

import pytest

from swarm_app.kernel.swarms import reachability_fix
from swarm_app.peer.io import upnp
from tests.peer.helpers import wait_for
from tests.peer.io.fake_gateway import EXTERNAL_IP, fake_gateway
from tests.peer.io.nodes_on_loopback import linux_only, on, started

pytest.importorskip("async_upnp_client")


async def test_the_gateway_is_asked_to_forward_the_port_and_to_forget_it_at_the_end():
    async with fake_gateway() as gateway:
        mapping = await upnp.map_port(47999, gateway.location, lease_s=1800)
        assert mapping is not None and mapping.external_ip == EXTERNAL_IP and mapping.external_port == 47999
        (added,) = gateway.actions("AddPortMapping")
        assert added == {"NewRemoteHost": "", "NewExternalPort": "47999", "NewProtocol": "TCP", "NewInternalPort": "47999",
                         "NewInternalClient": "127.0.0.1", "NewEnabled": "1", "NewPortMappingDescription": "swarm-app",
                         "NewLeaseDuration": "1800"}
        await upnp.unmap(mapping)
        assert gateway.actions("DeletePortMapping") == [{"NewRemoteHost": "", "NewExternalPort": "47999",
                                                          "NewProtocol": "TCP"}]


async def test_a_router_that_refuses_is_one_line_and_no_mapping(caplog):
    caplog.set_level(logging.INFO, logger="swarm_app.peer.io.upnp")
    async with fake_gateway(refuse=True) as gateway:
        assert await upnp.map_port(47999, gateway.location) is None
    assert "did not map port 47999" in caplog.text


async def test_without_the_library_it_says_how_to_add_it(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="swarm_app.peer.io.upnp")
    monkeypatch.setattr(upnp, "installed", lambda: False)
    assert await upnp.map_port(47999, "http://127.0.0.1:1/rootDesc.xml") is None
    assert 'not tried (pip install "swarm-app[upnp]" adds it)' in caplog.text


def closed_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@linux_only
async def test_a_mapping_counts_only_once_peers_dial_back_through_it():
    """Both nodes get a mapping from the router; the one whose announced port leads nowhere (a mapping that
    does not work) stays unreachable, and its advice says the router's word was not enough."""
    async with fake_gateway("127.0.7.250") as gateway:
        hosts = [f"127.0.7.{i}" for i in range(1, 4)]
        async with started(on(hosts[0])) as (first,):
            async with started(*(on(h, first.address) for h in hosts[1:])) as others:
                mapped = on("127.0.7.10", first.address, upnp=True, upnp_gateway=gateway.location)
                broken = on("127.0.7.11", first.address, upnp=True, upnp_gateway=gateway.location,
                            public_port=closed_port("127.0.7.11"))
                async with started(mapped, broken) as (good, bad):
                    assert await wait_for(lambda: good.core.reachable is True and bad.core.reachable is False, 40), \
                        (good.stats(), bad.stats())
                    assert good.stats().upnp == bad.stats().upnp == "mapped"
                    ports = {args["NewInternalPort"] for args in gateway.actions("AddPortMapping")}
                    assert ports == {good.address.rsplit(":", 1)[1], bad.address.rsplit(":", 1)[1]}
                    assert "the router says it forwards" in reachability_fix(bad.stats().public_port, bad.stats().upnp)
                    assert all(n.core.reachable is not False for n in [first, *others])
                assert len(gateway.actions("DeletePortMapping")) == 2  # removed when they stopped
