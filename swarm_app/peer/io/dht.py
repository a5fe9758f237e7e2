"""Finding a swarm by its name on the BitTorrent Mainline DHT (libtorrent; the `[dht]` extra).

A swarm has two rendezvous keys, `info_hash(name)` (sha1 of "swarm-app/rsp<version>/<name>") for members
a peer has dialed back, and `info_hash(name, UNCHECKED)` (".../<name>/unchecked") for the rest. The node
runs a DHT-only libtorrent session (no torrents, no BitTorrent transfers), looks the swarm up on start and
then every few minutes (jittered; every `hungry_s` while it holds fewer than `hungry_below` links, backing
off while lookups bring nothing new; the unchecked key only while it is short of links), and announces its
peer port under the key `announce_key()` names (core/dht_timer.announce_key: the checked key once dial-back
confirmed it or the router maps its port, the unchecked key before, none after a "not reachable" verdict).
Announces are repeated (the first may be lost while the routing table fills). Every address a lookup
returns goes to `on_found(addr, checked)`, which hands it to the core as an unverified address of source
"dht" or "dht-unchecked": a dial to it costs the core's unverified-dial budget, the core dials unchecked
ones last, and only a hello proves anything. What it finds is public: anyone who knows a swarm's name can
list its announcing members.

A swarm whose members know its creator's public key (`record_key`) also has a signed record of hubs (a BEP 44
mutable item, core/swarm_record.py): read at every lookup, checked (libtorrent and `swarm_record.verify`), its
addresses go to `on_record` (the core dials them as bootstrap addresses); a hub given the creator's key
(`record_signer`) puts it every `record_every_s`.

libtorrent meets asyncio through `set_alert_fd` on one end of a non-blocking socketpair, read with
`loop.add_reader`, then `pop_alerts()`: nothing blocks the loop, and `set_alert_notify` (which can
deadlock on the GIL) is never used. `dht_get_peers_reply_alert` needs `dht_operation` in the alert mask,
and no alert says a lookup is done: replies are merged as they come. The routing table (the DHT state's
node list) is saved as JSON between runs and restored with `add_dht_node`; routers only answer first
queries (they never enter routing tables). This module makes no protocol decision.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import random
import socket
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.files import write_text_atomic
from swarm_app.peer import PROTOCOL_VERSION
from swarm_app.peer.core import swarm_record
from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.config import DhtConfig, check_dial_address
from swarm_app.peer.core.dht_timer import CHECKED, UNCHECKED, DhtTimer, announce_key, looks_unchecked
from swarm_app.peer.core.identity import b64url

log = logging.getLogger(__name__)

INSTALL = 'pip install "swarm-app[dht]"'
STATE_NAME = "dht-nodes.json"
SAVED_NODES = 200
SEEN_KEPT = 4096
"""Addresses remembered as already handed on (a lookup repeats them): bounded."""
SEEN_AGAIN_S = 1800.0
"""An address handed on is handed on again only after this (the core forgets dead ones after a few tries)."""


def info_hash(swarm: str, key: str = CHECKED) -> bytes:
    """The swarm's rendezvous key on the DHT (20 bytes): CHECKED, or UNCHECKED (core/dht_timer.py)."""
    suffix = "" if key == CHECKED else f"/{key}"
    return hashlib.sha1(f"swarm-app/rsp{PROTOCOL_VERSION}/{swarm}{suffix}".encode()).digest()


def installed() -> bool:
    return importlib.util.find_spec("libtorrent") is not None


def status_line(enabled: bool, swarm: str, record_key: bytes | None = None) -> str:
    """What the doctor and the start-up log say of the DHT."""
    if not enabled:
        return "DHT: off (--no-dht, [peer] dht = false, or --offline)"
    if not installed():
        return f"DHT: off (libtorrent not installed: {INSTALL})"
    record = (f"; reads the swarm's record of hubs signed by {b64url(record_key)[:12]}..."
              if record_key else "")
    return (f"DHT: on (looks swarm '{swarm}' up on the BitTorrent Mainline DHT and announces this node's port{record}; "
            "anyone who knows the swarm's name can list its members' addresses)")


def read_nodes(path: Path | None) -> list[str]:
    """Saved DHT nodes (HOST:PORT); [] when there is no usable file."""
    if path is None:
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("DHT node file %s unreadable (%s); starting from the routers", path, exc.__class__.__name__)
        return []
    nodes = data.get("nodes") if isinstance(data, dict) else None
    return [n for n in nodes if isinstance(n, str)][:SAVED_NODES] if isinstance(nodes, list) else []


def state_nodes(state: Any) -> list[str]:
    """HOST:PORT of the nodes in a bdecoded libtorrent DHT state (compact 6-byte IPv4, 18-byte IPv6)."""
    inner = state.get(b"dht state", {}) if isinstance(state, dict) else {}
    found = []
    for key, size, family in ((b"nodes", 6, socket.AF_INET), (b"nodes6", 18, socket.AF_INET6)):
        for raw in inner.get(key, []) if isinstance(inner, dict) else []:
            if isinstance(raw, bytes) and len(raw) == size:
                ip = socket.inet_ntop(family, raw[:-2])
                found.append(format_address(ip, int.from_bytes(raw[-2:], "big")))
    return found


class DhtDiscovery:
    """Announce `port()` under the swarm's key `announce_key()` names (None: none), look the swarm up, report
    on_found("HOST:PORT", checked); with a record key, report the signed record's hubs to on_record([...])."""

    def __init__(self, config: DhtConfig, swarm: str, host: str, port: Callable[[], int | None],
                 announce_key: Callable[[], str | None], links: Callable[[], int],
                 on_found: Callable[[str, bool], None], rng: random.Random | None = None,
                 on_record: Callable[[list[str]], None] | None = None) -> None:
        self.config, self.swarm, self.host = config, swarm, host
        self.port, self.announce_key, self.links, self.on_found = port, announce_key, links, on_found
        self.on_record = on_record
        self.salt = swarm_record.salt(swarm)
        self.record_seq = 0
        """The sequence number of the last record handed on (0: none yet)."""
        self.record_handed = -SEEN_AGAIN_S
        self.records_refused = self.puts = 0
        self._next_put = 0.0
        self.rng = rng or random.Random()
        self.keys = {key: info_hash(swarm, key) for key in (CHECKED, UNCHECKED)}
        self.key = self.keys[CHECKED]
        self.found: OrderedDict[tuple[str, bool], float] = OrderedDict()
        """(address, under the checked key) handed on, with when (bounded by SEEN_KEPT)."""
        self.lookups = self.announces = self.replies = 0
        self._session: Any = None
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._task: asyncio.Task | None = None
        self._bootstrapped = asyncio.Event()
        self.timer: DhtTimer | None = None
        """The lookup and announce schedule, from the first lookup on."""

    @property
    def listen_port(self) -> int | None:
        """The DHT's UDP port (None until started)."""
        return self._session.listen_port() if self._session is not None else None

    async def start(self) -> bool:
        """Open the session and start the schedule; False (logged) when libtorrent is missing or unusable."""
        if not installed():
            log.warning("DHT: off (libtorrent not installed: %s); peers come from mDNS, bootstrap and the table", INSTALL)
            return False
        import libtorrent as lt  # deferred: ~10 MB, only for a node that uses the DHT

        self._lt = lt
        try:
            self._session = lt.session(self._settings(lt))
        except RuntimeError as exc:
            log.warning("DHT: off (libtorrent could not start: %s)", exc)
            return False
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        self._pair = (a, b)
        self._session.set_alert_fd(b.fileno())
        asyncio.get_running_loop().add_reader(a.fileno(), self._on_alerts)
        for node in [*self.config.nodes, *read_nodes(self.config.state_path)]:
            self._add_node(node)
        self._task = asyncio.create_task(self._schedule(), name="dht-schedule")
        log.info("DHT: on, swarm '%s' key %s (routers: %s)%s", self.swarm, self.key.hex()[:12],
                 ", ".join(self.config.routers) or "none",
                 f"; reads its record signed by {b64url(self.config.record_key)[:12]}..." if self.config.record_key else "")
        return True

    def _settings(self, lt: Any) -> dict:
        listen = self.config.listen or format_address(self.host, 0)
        mask = lt.alert_category.dht | lt.alert_category.dht_operation | lt.alert_category.error
        return {"listen_interfaces": listen, "enable_dht": True, "enable_lsd": False, "enable_upnp": False,
                "enable_natpmp": False, "enable_incoming_tcp": False, "enable_outgoing_tcp": False,
                "enable_incoming_utp": False, "enable_outgoing_utp": False,
                "dht_bootstrap_nodes": ",".join(self.config.routers), "alert_mask": int(mask)}

    def _add_node(self, node: str) -> None:
        try:
            host, port = parse_address(node)
        except ValueError:
            log.warning("DHT node %r is not HOST:PORT; skipped", node)
            return
        self._session.add_dht_node((host, port))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is None:
            return
        self._save_nodes()
        if self._pair is not None:
            asyncio.get_running_loop().remove_reader(self._pair[0].fileno())
        holder = [self._session]
        self._session = None
        await asyncio.to_thread(holder.clear)  # the last reference: its destructor joins libtorrent's threads
        for sock in self._pair or ():
            sock.close()

    def _save_nodes(self) -> None:
        path = self.config.state_path
        if path is None:
            return
        lt = self._lt
        flags = lt.save_state_flags_t.save_dht_state
        state = lt.bdecode(lt.write_session_params_buf(self._session.session_state(flags=flags), flags))
        nodes = state_nodes(state)
        if not nodes:
            return
        try:
            write_text_atomic(path, json.dumps({"version": 1, "nodes": nodes[:SAVED_NODES]}))
        except OSError as exc:
            log.warning("could not save the DHT nodes to %s: %s", path, exc)

    # --- alerts (event loop)

    def _on_alerts(self) -> None:
        assert self._pair is not None
        try:
            while self._pair[0].recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        if self._session is None:
            return
        for alert in self._session.pop_alerts():
            self._on_alert(alert)

    def _on_alert(self, alert: Any) -> None:
        lt = self._lt
        if isinstance(alert, lt.dht_get_peers_reply_alert):
            key = bytes(alert.info_hash.to_bytes())
            if key in self.keys.values():
                self.replies += 1
                self._merge(alert.peers(), key == self.key)
        elif isinstance(alert, lt.dht_mutable_item_alert):
            self._on_item(alert)
        elif isinstance(alert, lt.dht_put_alert):
            log.info("DHT: swarm record put on %d nodes", alert.num_success)
        elif isinstance(alert, lt.dht_bootstrap_alert):
            self._bootstrapped.set()
        elif isinstance(alert, lt.listen_failed_alert):
            log.warning("DHT: %s", alert.message())

    def _on_item(self, alert: Any) -> None:
        """A mutable item came back: the swarm's record when it is under the creator's key and this swarm's salt,
        not empty, signed, and not handed on already (a newer sequence number, or SEEN_AGAIN_S later)."""
        key = self.config.record_key
        if key is None or bytes(alert.key) != key or bytes(alert.salt) != self.salt:
            return
        value, seq = alert.item, int(alert.seq)
        if not isinstance(value, bytes) or not value:
            return  # nothing stored under the key (yet)
        if not swarm_record.verify(key, bytes(alert.signature), self.salt, seq, value):
            self.records_refused += 1
            log.warning("DHT: a swarm record with a bad signature was refused")
            return
        now = asyncio.get_running_loop().time()
        if seq < self.record_seq or (seq == self.record_seq and now - self.record_handed < SEEN_AGAIN_S):
            return
        try:
            hubs = swarm_record.decode(self.swarm, value)
        except ValueError as exc:
            self.records_refused += 1
            log.warning("DHT: the swarm record was refused: %s", exc)
            return
        self.record_seq, self.record_handed = seq, now
        usable = []
        for hub in hubs:
            try:
                usable.append(check_dial_address(hub, "swarm record hub"))
            except UsageError as exc:
                log.warning("DHT: %s; skipped", exc)
        log.info("DHT: swarm record %d lists %d hub(s)", seq, len(usable))
        if usable and self.on_record is not None:
            self.on_record(usable)

    def _merge(self, peers: list[tuple[str, int]], checked: bool) -> None:
        now = asyncio.get_running_loop().time()
        for ip, port in peers:
            if not port:
                continue
            addr = format_address(ip, port)
            last = self.found.get((addr, checked))
            if last is not None and now - last < SEEN_AGAIN_S:
                continue
            self.found[addr, checked] = now
            self.found.move_to_end((addr, checked))
            while len(self.found) > SEEN_KEPT:
                self.found.popitem(last=False)
            if self.timer is not None:
                self.timer.found()
            self.on_found(addr, checked)

    # --- the schedule

    async def _schedule(self) -> None:
        """Look up and announce: first once the DHT has bootstrapped (or after `first_s`), then as
        core/dht_timer.py says."""
        try:
            await asyncio.wait_for(self._bootstrapped.wait(), self.config.first_s)
        except asyncio.TimeoutError:
            pass
        loop = asyncio.get_running_loop()
        timer = self.timer = DhtTimer(self.config, self.rng, loop.time())
        while True:
            now = loop.time()
            key = self.announce_key()
            if timer.announce_due(now, key):
                self._announce(key)
            links = self.links()
            if timer.lookup_due(now, links):
                self._lookup(looks_unchecked(links, self.config.hungry_below))
            if self.config.record_signer is not None and self.config.record_hubs and now >= self._next_put:
                self._put_record()
                self._next_put = now + self.config.record_every_s
            wake = timer.wake_after(loop.time())
            if self.config.record_signer is not None:
                wake = min(wake, self._next_put - loop.time())
            await asyncio.sleep(max(0.05, wake))

    def _lookup(self, unchecked: bool) -> None:
        self.lookups += 1
        self._session.dht_get_peers(self._lt.sha1_hash(self.key))
        if unchecked:
            self._session.dht_get_peers(self._lt.sha1_hash(self.keys[UNCHECKED]))
        if self.config.record_key is not None:
            self._session.dht_get_mutable_item(self.config.record_key, self.salt)

    def _put_record(self) -> None:
        """Put the record of `record_hubs` under the creator's key (libtorrent reads the stored sequence number
        and signs the next one)."""
        signer = self.config.record_signer
        value = swarm_record.encode(self.swarm, list(self.config.record_hubs))
        self.puts += 1
        self._session.dht_put_mutable_item(signer.expanded_secret, signer.public_key, value, self.salt)

    def _announce(self, key: str) -> None:
        port = self.port()
        if not port:
            return
        self.announces += 1
        assert self.timer is not None
        self.timer.announced(key)
        self._session.dht_announce(self._lt.sha1_hash(self.keys[key]), port, 0)
        log.debug("DHT: announced port %d for swarm '%s' (%s)", port, self.swarm, key)


def node_announce_key(node: Any) -> str | None:
    """announce_key for a running node. Dial-backs from its own network (a LAN) do not make it checked: an
    internet newcomer would dial its router's address, which may not forward the port."""
    state = node.dialback.state
    outside = node.core.confirmed if node.config.local_only else state.reached_from_outside()
    return announce_key(None if state.lan_only else node.core.reachable, outside, node.mapping is not None)


def for_node(node: Any) -> DhtDiscovery:
    """The DHT discovery of a running `PeerNode` (peer/io/node.py), reading its state through callbacks."""
    config = node.config
    host = parse_address(node.address)[0]
    core = node.core
    return DhtDiscovery(config.dht, config.swarm, host, lambda: node.public_port,
                        lambda: node_announce_key(node),
                        lambda: core.discovery_links(node.clock()), node._found_on_dht, random.Random(node.rng.random()),
                        node._found_in_record)
