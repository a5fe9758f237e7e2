"""Ask the home router to forward the listen port (UPnP-IGD), with the optional async-upnp-client.

Most participants sit behind a home router; many routers forward a port when asked over UPnP-IGD. The
library is an extra (`pip install "swarm-app[upnp]"`) and is imported only here, only when a mapping is
tried: without it the node says so in one line and goes on. A mapping is never trusted on the router's
word: it only names the port peers are asked to dial back (`PeerNode.public_port`), and the node counts as
reachable once they did (peer/io/reachability.py). The gateway is found by SSDP on the LAN (4 s), or
given (`PeerConfig.upnp_gateway`: its description URL; the tests' fake gateway on loopback). The lease is
renewed before it ends and the mapping removed when the node stops. NAT-PMP/PCP is not done.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

log = logging.getLogger(__name__)

SEARCH_S = 4
"""How long SSDP discovery waits for a gateway's answer."""
LEASE_S = 3600
"""The mapping's lease; it is renewed at half of it."""
REQUEST_S = 5.0
GATEWAY_TYPE = "urn:schemas-upnp-org:device:InternetGatewayDevice:1"
CONNECTION_SERVICES = ("urn:schemas-upnp-org:service:WANIPConnection:1", "urn:schemas-upnp-org:service:WANIPConnection:2",
                       "urn:schemas-upnp-org:service:WANPPPConnection:1")
DESCRIPTION = "swarm-app"
INSTALL_HINT = 'pip install "swarm-app[upnp]"'


@dataclass
class PortMapping:
    """A port the router forwards to this machine (claimed by the router: dial-back decides if it works)."""

    connection: Any
    """async_upnp_client's UpnpService of the gateway's WAN connection (WANIPConnection or WANPPPConnection)."""
    location: str
    internal_ip: str
    internal_port: int
    external_port: int
    external_ip: str | None


def installed() -> bool:
    return importlib.util.find_spec("async_upnp_client") is not None


async def find_gateway(timeout_s: int = SEARCH_S) -> str | None:
    """The description URL of the first Internet gateway answering an SSDP search on the LAN; None when
    none answers within `timeout_s` (or multicast is not possible here)."""
    from async_upnp_client.search import async_search

    found: list[str] = []

    async def on_answer(headers: Any) -> None:
        if headers.get("location"):
            found.append(headers["location"])

    try:
        await async_search(on_answer, timeout=timeout_s, search_target=GATEWAY_TYPE)
    except OSError as exc:
        log.info("UPnP: no gateway search (%s)", exc.strerror or exc)
    return found[0] if found else None


async def map_port(port: int, gateway: str | None = None, lease_s: int = LEASE_S) -> PortMapping | None:
    """Ask the gateway (found by SSDP unless given) to forward TCP `port` to this machine's same port. None,
    after one log line saying why, when the library is missing, no gateway answers or it refuses."""
    if not installed():
        log.info("UPnP: not tried (%s adds it); forward port %d by hand if peers cannot reach this node",
                 INSTALL_HINT, port)
        return None
    location = gateway or await find_gateway()
    if location is None:
        log.info("UPnP: no gateway answered on the LAN (UPnP off on the router?)")
        return None
    from async_upnp_client.exceptions import UpnpError

    try:
        return await _add_mapping(location, port, lease_s)
    except (UpnpError, aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError, KeyError) as exc:
        log.info("UPnP: the gateway at %s did not map port %d (%s)", location, port, exc.__class__.__name__)
        return None


async def _add_mapping(location: str, port: int, lease_s: int) -> PortMapping:
    """The three SOAP calls of IGD's WAN connection service, called on the service itself (the library's IGD
    profile changed its signatures between versions; the service's actions are the standard's)."""
    from async_upnp_client.aiohttp import AiohttpRequester
    from async_upnp_client.client_factory import UpnpFactory

    device = await UpnpFactory(AiohttpRequester(REQUEST_S), non_strict=True).async_create_device(location)
    connection = next(filter(None, map(device.find_service, CONNECTION_SERVICES)), None)
    if connection is None:
        raise ValueError("no WAN connection service")
    internal_ip = local_ip_towards(location)
    await connection.action("AddPortMapping").async_call(
        NewRemoteHost="", NewExternalPort=port, NewProtocol="TCP", NewInternalPort=port, NewInternalClient=internal_ip,
        NewEnabled=True, NewPortMappingDescription=DESCRIPTION, NewLeaseDuration=lease_s)
    answer = await connection.action("GetExternalIPAddress").async_call()
    external_ip = answer.get("NewExternalIPAddress") or None
    log.info("UPnP: the router at %s forwards port %d to %s:%d (external address %s); peers will be asked to "
             "dial it back", urlsplit(location).hostname, port, internal_ip, port, external_ip or "unknown")
    return PortMapping(connection, location, internal_ip, port, port, external_ip)


async def unmap(mapping: PortMapping) -> None:
    """Remove the mapping (on stop); a router that does not answer is only logged."""
    from async_upnp_client.exceptions import UpnpError

    try:
        await mapping.connection.action("DeletePortMapping").async_call(
            NewRemoteHost="", NewExternalPort=mapping.external_port, NewProtocol="TCP")
    except (UpnpError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        log.debug("UPnP: removing the mapping of port %d failed (%s)", mapping.external_port, exc.__class__.__name__)


def local_ip_towards(url: str) -> str:
    """This machine's address on the route to `url`'s host (a UDP connect sends nothing)."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((parts.hostname or "", parts.port or 80))
        return sock.getsockname()[0]
