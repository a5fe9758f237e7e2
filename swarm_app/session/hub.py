"""`Hub`: a session without training (`swarm hub`), a node that keeps a reachable address useful to its swarm.

It runs the same peer node as `swarm run` (built from the [peer] settings by peering.py's `peer_config`,
listen address claimed by `usable_listen`), with no engine, no trainer and no run folder: it accepts inbound
links (up to `max_inbound`, more than a training node's 64), admits what its peers push and answers their
pulls (admission re-scores every rollout: the core regenerates tasks from their references, no model
needed), so rollouts cross it by the normal pulls; it answers dial-backs and announces itself on the DHT
once reachable, as every node does. It publishes nothing of its own (sharing off: there is nothing to
share). Once a minute it publishes `HubStatus` (links, rollouts admitted and relayed, bytes in and out).
Must not: import an engine, torch or transformers (a hub runs on a small server: tests/session/test_hub.py
checks the modules a running hub loaded), or write anything but the peer table, the DHT state and its lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from swarm_app.kernel.errors import RunFolderBusy, UsageError
from swarm_app.kernel.events import Event, HubStarted, HubStatus
from swarm_app.kernel.settings import Settings
from swarm_app.session.bus import EventBus
from swarm_app.session.peering import Peering

log = logging.getLogger(__name__)

HUB_INBOUND = 128
"""Inbound links a hub holds by default: twice a training node's (64), measured at 64 in
docs/hub.md (each link costs a websocket, its send queue and its pulls)."""
MOST_INBOUND = 1024
STATUS_S = 60.0


def hub_settings_error(settings: Settings, max_inbound: int, signs_record: bool = False) -> str | None:
    """What makes these settings unusable for a hub (one that puts the swarm's record: `signs_record`), in one
    line (None: usable)."""
    if not settings.peer.enabled:
        return ("a hub exists to be reached by its swarm: --offline ([peer] enabled = false, from a flag, "
                "SWARM_PEER_ENABLED or config.toml) makes no sense for `swarm hub`; drop it")
    if not 1 <= max_inbound <= MOST_INBOUND:
        return f"--max-inbound {max_inbound}: give a number of links from 1 to {MOST_INBOUND} (default {HUB_INBOUND})"
    if signs_record and not settings.peer.dht:
        return "--sign-record puts the swarm's record on the BitTorrent DHT: drop --no-dht ([peer] dht = false)"
    return None


def hub_config(settings: Settings, max_inbound: int = HUB_INBOUND, record: SwarmRecord | None = None):
    """The hub's peer config: the [peer] settings' (peer_config), sharing off, `max_inbound` links in; with a
    `record`, it puts the swarm's signed record of hubs on the DHT. UsageError for settings a hub cannot use."""
    error = hub_settings_error(settings, max_inbound, record is not None)
    if error:
        raise UsageError(error)
    peering = Peering(EventBus(), None)
    peering.configure(settings)
    # private addresses together keep holding at most half the node, as on a training node (limits.py)
    config = peering.config.with_protocol(share=False, max_inbound=max_inbound, max_inbound_lan=max(1, max_inbound // 2))
    if record is not None:
        config = dataclasses.replace(config, dht=dataclasses.replace(config.dht, record_signer=record.signer,
                                                                     record_hubs=record.hubs))
    return config


@dataclass(frozen=True)
class SwarmRecord:
    """What `swarm hub --sign-record FILE --record-hub HOST:PORT ...` puts on the DHT: `hubs`, signed by the
    creator's key kept in FILE (peer/core/swarm_record.py)."""

    signer: Any
    hubs: tuple[str, ...]
    created: bool
    """The key file was made now (the hub says so, with the public key members give as --swarm-key)."""

    @classmethod
    def load(cls, path: Path, hubs: list[str]) -> SwarmRecord:
        """The key in `path` (made, readable by this user only, when missing) and the checked hub addresses;
        UsageError for a missing hub, a bad address or an unreadable key file (checked before the key is made)."""
        from swarm_app.peer.core import swarm_record
        from swarm_app.peer.core.identity import b64url, check_private_file, unb64url, write_private_file

        checked = cls.checked_hubs(hubs)
        created = not path.exists()
        try:
            if created:
                signer = swarm_record.Signer.generate()
                write_private_file(path, (b64url(signer.seed) + "\n").encode("ascii"))
            else:
                check_private_file(path)
                signer = swarm_record.Signer(unb64url(path.read_text(encoding="ascii").strip()))
                signer.public_key  # noqa: B018 (a seed of the wrong size raises here, not on the first put)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"--sign-record {path}: not a swarm key file this app wrote ({exc}); give another "
                             "path to make a new key (members would then need the new --swarm-key)") from None
        return cls(signer, checked, created)

    @staticmethod
    def checked_hubs(hubs: list[str]) -> tuple[str, ...]:
        """The `--record-hub` addresses, checked, duplicates dropped; UsageError when none is given, one is not
        HOST:PORT or the record would not fit."""
        from swarm_app.peer.core import swarm_record
        from swarm_app.peer.core.config import check_dial_address

        if not hubs:
            raise UsageError("--sign-record needs the hubs to list: give --record-hub HOST:PORT (this hub's public "
                             "address, and others), once each")
        checked = tuple(dict.fromkeys(check_dial_address(h, "--record-hub") for h in hubs))
        try:
            swarm_record.encode("x" * 64, list(checked))  # the longest swarm name
        except ValueError as exc:
            raise UsageError(f"--record-hub: {exc}") from None
        return checked


class Hub:
    """One hub: `run()` until `stop()` (Ctrl-C, SIGTERM); events to the subscribers (the headless view)."""

    def __init__(self, settings: Settings, max_inbound: int = HUB_INBOUND, *, status_s: float = STATUS_S,
                 node: Any = None, record: SwarmRecord | None = None) -> None:
        """`node`: a PeerNode built by the caller (tests give one its own identity); None: this user's,
        built from the settings with this machine's key. `record`: the swarm's signed record to put."""
        self.events = EventBus()
        self.peering = Peering(self.events, None)
        self.peering.config = hub_config(settings, max_inbound, record)
        self.peering.claim_listen(settings)
        self.status_s = status_s
        self.node = node
        self._lock: Any = None
        self._stopped: asyncio.Event | None = None

    @property
    def config(self):
        return self.peering.config

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        return self.events.subscribe(subscriber)

    def stop(self) -> None:
        """Ask `run()` to end (on the loop: the signal handler's call)."""
        if self._stopped is not None:
            self._stopped.set()

    async def run(self) -> None:
        """Start the node, report every `status_s`, stop it cleanly when asked (peers get a bye)."""
        self._stopped = asyncio.Event()
        self.events.attach(asyncio.get_running_loop())
        self._lock_key()
        try:
            if self.node is None:
                from swarm_app.peer.io.node import PeerNode  # deferred: aiohttp's server side, the peer layer

                self.node = PeerNode.from_config(self.config)
            self.peering.node = self.node
            await self.node.start()
            self.events.publish(self._started())
            tasks = [asyncio.create_task(self.peering.watch()), asyncio.create_task(self._report())]
            try:
                await self._stopped.wait()
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self.peering.leave()
        finally:
            if self._lock is not None:
                self._lock.release()

    def _lock_key(self) -> None:
        """One hub per node key on this machine: two would hold one node id and refuse each other."""
        from swarm_app.kernel.paths import user_dirs
        from swarm_app.kernel.runlock import RunLock

        folder = user_dirs().data / ("hub-" + self.config.identity_name if self.config.identity_name else "hub")
        try:
            self._lock = RunLock.acquire(folder)
        except RunFolderBusy as exc:
            raise RunFolderBusy(f"a hub with this node key already runs on this machine ({folder / 'node.lock'}); "
                                "stop it first, or give this one another key with SWARM_PEER_IDENTITY=NAME",
                                title=exc.title) from None

    def _started(self) -> HubStarted:
        node, config = self.node, self.config
        from swarm_app.peer.io.dht import installed

        return HubStarted(node.node_id, node.address or "", config.swarm, config.protocol.max_inbound,
                          len(config.bootstrap), 0 if config.local_only else node.public_port or 0,
                          config.dht is not None and installed(), len(config.dns_seeds))

    async def _report(self) -> None:
        """HubStatus every `status_s`: counters since the previous one."""
        before = self.node.stats()
        while True:
            await asyncio.sleep(self.status_s)
            now = self.node.stats()
            self.events.publish(status_between(before, now, self.status_s))
            before = now


def status_between(before, now, interval_s: float) -> HubStatus:
    """The HubStatus for two NodeStats snapshots `interval_s` apart."""
    relayed = (now.rollouts_served - now.served) - (before.rollouts_served - before.served)
    rejected = sum(now.rejected.values()) - sum(before.rejected.values())
    return HubStatus(now.inbound, now.outbound, now.accepted - before.accepted, relayed, rejected,
                     now.bytes_in - before.bytes_in, now.bytes_out - before.bytes_out, now.pool_size,
                     interval_s, now.reachable, now.lan_only)

