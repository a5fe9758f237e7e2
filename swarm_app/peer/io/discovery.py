"""Where addresses come from besides `--peer`: the saved peer table and LAN mDNS (python-zeroconf).

The peer table is a small JSON file in the user data dir, written atomically; a missing or damaged
file is an empty table, never an error. mDNS announces this node as `_swarm-rsp._tcp.local.` with
its node id and browses for others; when multicast is unavailable it logs once and the node goes on
without it. Found addresses go to a callback; this module makes no protocol decisions.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from pathlib import Path
from typing import Any, Callable

from swarm_app.kernel.files import write_text_atomic
from swarm_app.peer.core.addressbook import format_address

log = logging.getLogger(__name__)

SERVICE_TYPE = "_swarm-rsp._tcp.local."
PEER_TABLE_NAME = "peers.json"
MAX_TABLE_BYTES = 1024 * 1024


def read_peer_table(path: Path) -> Any:
    """The saved addresses' JSON (for `NodeCore.load_peer_table`); None when there is no usable file.
    A bad file is logged and ignored."""
    try:
        if path.stat().st_size > MAX_TABLE_BYTES:
            log.warning("peer table %s is over 1 MiB; ignoring it", path)
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("peer table %s unreadable (%s); starting with an empty one", path, exc.__class__.__name__)
        return None
    return data.get("peers") if isinstance(data, dict) else None


def save_peer_table(path: Path, peers: list[dict[str, Any]]) -> None:
    """Write the addresses the core chose to save (`CoreView.peer_table`)."""
    try:
        write_text_atomic(path, json.dumps({"version": 1, "peers": peers}, indent=1))
    except OSError as exc:
        log.warning("could not save the peer table %s: %s", path, exc)


def advertised_ips(host: str) -> list[str]:
    """IPv4 addresses to announce for a server bound to `host`: none for loopback, every non-loopback
    interface address for a wildcard bind."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return []
    if ip.is_loopback:
        return []
    if not ip.is_unspecified:
        return [host] if ip.version == 4 else []
    import ifaddr  # a zeroconf dependency

    found = []
    for adapter in ifaddr.get_adapters():
        for item in adapter.ips:
            if isinstance(item.ip, str) and not ipaddress.ip_address(item.ip).is_loopback:
                found.append(item.ip)
    return found


class MdnsDiscovery:
    """Announce `node_id` at `port` and report other nodes as on_found("HOST:PORT", node_id or None)."""

    def __init__(self, node_id: str, host: str, port: int, on_found: Callable[[str, str | None], None]) -> None:
        self.node_id, self.host, self.port, self.on_found = node_id, host, port, on_found
        self._zc: Any = None
        self._browser: Any = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> bool:
        from zeroconf import Error as ZeroconfError
        from zeroconf import IPVersion, ServiceStateChange
        from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

        self._changes = ServiceStateChange
        try:
            self._zc = AsyncZeroconf(ip_version=IPVersion.V4Only)
            ips = advertised_ips(self.host)
            if ips:
                info = AsyncServiceInfo(SERVICE_TYPE, f"{self.node_id[:20]}.{SERVICE_TYPE}", port=self.port,
                                        addresses=[socket.inet_aton(ip) for ip in ips],
                                        properties={"node": self.node_id, "v": "1"})
                await self._zc.async_register_service(info)
            self._browser = AsyncServiceBrowser(self._zc.zeroconf, SERVICE_TYPE, handlers=[self._on_change])
        except (OSError, RuntimeError, ZeroconfError) as exc:  # no multicast route, name clash: go on without
            log.warning("mDNS unavailable (%s); LAN peers must be given with --peer", exc)
            await self.stop()
            return False
        log.info("mDNS: announcing %s on %s", SERVICE_TYPE, ", ".join(ips) or "(nothing: loopback bind)")
        return True

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        if state_change in (self._changes.Added, self._changes.Updated):
            task = asyncio.get_running_loop().create_task(self._resolve(zeroconf, service_type, name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resolve(self, zeroconf: Any, service_type: str, name: str) -> None:
        from zeroconf.asyncio import AsyncServiceInfo

        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(zeroconf, 3000):
            return
        raw = info.properties.get(b"node") if info.properties else None
        node = raw.decode("ascii", "replace") if isinstance(raw, bytes) else None
        if node == self.node_id or not info.port:
            return
        for ip in info.parsed_addresses():
            self.on_found(format_address(ip, info.port), node)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._zc is not None:
            await self._zc.async_close()  # also unregisters our service
            self._zc = None
