"""`Peering`: a session's part in the swarm, from building its peer node to stopping it.

A session either runs a node of its own ([peer] enabled: built in `Session.open` from the settings,
started when the run begins, stopped when it ends) or shows the one its caller made and runs (the demo's
`exchange`, when it has `stats()`). Either way the views get the node's events (`SwarmJoined`, then peer
events once a second), each round's metrics row gets the swarm's figures, and the user is told once when
the peers they named cannot be reached. Training never waits on any of it: unreachable peers are the
node's to retry. `peer_config` and `usable_listen` derive the node's config from the settings before
anything loads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from typing import TYPE_CHECKING, Any, Callable

from swarm_app.kernel import swarms
from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.events import SwarmJoined
from swarm_app.kernel.rollouts import RolloutExchange
from swarm_app.kernel.settings import PeerSettings, Settings
from swarm_app.session.bus import EventBus
from swarm_app.session.peer_events import PeerTracker

if TYPE_CHECKING:
    from swarm_app.peer.core.config import PeerConfig

log = logging.getLogger(__name__)


class Peering:
    def __init__(self, events: EventBus, exchange: RolloutExchange | None) -> None:
        self.events = events
        self.node: Any = exchange if callable(getattr(exchange, "stats", None)) else None
        """The node shown in the views: the session's own, or the caller's; None when the run is offline."""
        self.config: PeerConfig | None = None
        """The config of the session's own node (None when the caller brought the node, or there is none)."""
        self._brought = exchange is not None
        self._alone_warned = False
        self._counted = {"shared": 0, "pushed": 0, "served": 0}
        """The node's counters at the previous round's row (a node counts from 0 when it starts)."""

    def configure(self, settings: Settings) -> None:
        """The config of the session's own node from the [peer] settings (UsageError when they are bad): when
        [peer] enabled says so and the caller brought no node."""
        if not self._brought and settings.peer.enabled:
            self.config = peer_config(settings)

    def claim_listen(self, settings: Settings) -> None:
        """A listen address that binds now (usable_listen): a busy default port becomes a free one."""
        if self.config is not None:
            self.config = usable_listen(self.config, settings)

    def build(self, last_row: Callable[[], dict]):
        """This user's peer node, built now and started by `join()`; /metrics also shows the training
        figures of the last round (`last_row()`)."""
        from swarm_app.peer.io.node import PeerNode  # deferred: only networked runs need aiohttp's server side
        from swarm_app.training.prometheus import RoundCollector

        self.node = PeerNode.from_config(self.config, collectors=(RoundCollector(last_row),))
        return self.node

    async def join(self) -> None:
        """Start the session's own node (built in open()) and announce it. It never blocks training:
        unreachable peers are retried later."""
        if self.node is None:
            return
        if self.config is not None:  # the caller's node (the demo) is started by the caller
            await self.node.start()  # the address was probed in open(); only a race with another program fails here
        node = self.node
        checked = 0 if node.config.local_only else node.public_port
        from swarm_app.peer.io.dht import installed  # the node is built: aiohttp and the peer layer are loaded

        self.events.publish(SwarmJoined(node.node_id, node.address or "", node.config.swarm, len(node.config.bootstrap),
                                        checked or 0, node.config.dht is not None and installed(),
                                        len(node.config.dns_seeds)))

    async def watch(self, interval_s: float = 1.0) -> None:
        """Peer events for the views, from the node's snapshot once a second."""
        if self.node is None:
            return
        tracker = PeerTracker()
        while True:
            for event in tracker.update(self.node.stats()):
                self.events.publish(event)
            await asyncio.sleep(interval_s)

    async def leave(self) -> None:
        """Stop the node the session started; the demo stops its own."""
        if self.node is not None and self.config is not None:
            await self.node.stop()

    def set_sharing(self, share: bool) -> None:
        if self.node is not None:
            self.node.set_sharing(share)

    def figures(self) -> dict:
        """The swarm's columns of a round's metrics row (none offline)."""
        if self.node is None:
            return {}
        stats = self.node.stats()
        self._warn_when_alone(stats.neighbours)
        now = {"shared": stats.published, "pushed": stats.sent, "served": stats.served}
        since, self._counted = {k: now[k] - self._counted[k] for k in now}, now
        return {"peers": stats.neighbours, "pool": stats.pool_size, "rollouts_published": stats.published,
                "rollouts_sent": stats.sent, "rollouts_accepted": stats.accepted,
                "rollouts_rejected": sum(stats.rejected.values()), **since}

    def _warn_when_alone(self, neighbours: int) -> None:
        """Say once (until a peer connects) that the peers the user named cannot be reached."""
        bootstrap = [*self.config.bootstrap, *map(str, self.config.dns_seeds)] if self.config else ()
        if neighbours or not bootstrap:
            self._alone_warned = False
        elif not self._alone_warned:
            self._alone_warned = True
            log.warning("no peer connected: %s cannot be reached (yet). Training alone and retrying; check "
                        "that the address is right and that the node there runs `swarm run`", ", ".join(bootstrap))


def peer_config(settings: Settings):
    """The peer node's configuration from the [peer] settings; a bad address or swarm name raises UsageError."""
    from swarm_app.peer.core.config import PeerConfig, check_address

    peer = settings.peer
    if not re.fullmatch(r"[A-Za-z0-9-]{0,32}", peer.identity):
        raise UsageError(f"peer.identity {peer.identity!r}: use up to 32 letters, digits and '-'")
    listen = check_address(peer.listen, "peer.listen")
    config = PeerConfig(listen=listen, identity_name=peer.identity, source_ip=loopback_source(listen),
                        swarm=swarms.swarm_name(peer.swarm, settings.tasks.preset),
                        bootstrap=bootstrap_addresses(settings), dns_seeds=dns_seeds(settings), mdns=peer.mdns,
                        upnp=peer.upnp, dht=dht_config(settings),
                        metrics_listen=check_address(peer.metrics_listen, "peer.metrics_listen") if peer.metrics_listen else None)
    return config.with_protocol(share=peer.share)


def loopback_source(listen: str) -> str | None:
    """The address to dial from: a node listening on a loopback address other than 127.0.0.1 and ::1 (127.0.0.N,
    as nodes of one machine that stand for a LAN's machines do) dials from it, so that its peers see it there
    and dial it back there (the OS would pick 127.0.0.1 for all of them: one source, one host). Such a node
    reaches only loopback peers, as it can only be reached from them. None (the OS's choice) otherwise."""
    import ipaddress

    from swarm_app.peer.core.addressbook import parse_address

    host = parse_address(listen)[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if ip.is_loopback and str(ip) not in ("127.0.0.1", "::1") else None


def dht_config(settings: Settings):
    """The DHT part of the peer config ([peer] dht, dht_listen, dht_nodes, dht_routers), None when it is off;
    a bad address raises UsageError naming the setting."""
    from swarm_app.kernel.paths import user_dirs
    from swarm_app.peer.core.config import DhtConfig, check_address, check_dial_address
    from swarm_app.peer.core.swarm_record import parse_public_key
    from swarm_app.peer.io.dht import STATE_NAME

    peer = settings.peer
    record_key = parse_public_key(peer.swarm_key) if peer.swarm_key else None  # checked even with the DHT off
    if not peer.dht:
        return None
    return DhtConfig(listen=check_address(peer.dht_listen, "peer.dht_listen") if peer.dht_listen else "",
                     nodes=tuple(check_dial_address(a, "peer.dht_nodes address") for a in peer.dht_nodes),
                     routers=tuple(check_dial_address(a, "peer.dht_routers address") for a in peer.dht_routers),
                     state_path=user_dirs().data / STATE_NAME, record_key=record_key)


def bootstrap_entries(settings: Settings) -> list[tuple[str, str]]:
    """Where the node looks first, as typed, each with what it is called in an error: `[peer] bootstrap` where
    any layer set it, else the list shipped for its swarm; then `[peer] peers`."""
    peer = settings.peer
    swarm = swarms.swarm_name(peer.swarm, settings.tasks.preset)
    given = "peer.bootstrap" in settings.given
    bootstrap = peer.bootstrap if given else swarms.shipped_bootstrap(swarm)
    return [(a, "bootstrap address") for a in bootstrap] + [(a, "peer address") for a in peer.peers]


def bootstrap_addresses(settings: Settings) -> tuple[str, ...]:
    """Where the node dials first: the HOST:PORT entries of `bootstrap_entries`, each checked (UsageError naming
    the setting), duplicates dropped."""
    from swarm_app.peer.core.config import check_dial_address, is_dns_seed

    checked = [check_dial_address(a, what) for a, what in bootstrap_entries(settings) if not is_dns_seed(a)]
    return tuple(dict.fromkeys(checked))


def dns_seeds(settings: Settings) -> tuple:
    """The `dns:NAME[@IP:PORT]` entries of `bootstrap_entries`, each checked (UsageError), duplicates dropped."""
    from swarm_app.peer.core.config import check_dns_seed, is_dns_seed

    checked = [check_dns_seed(a, what.replace("address", "DNS seed")) for a, what in bootstrap_entries(settings)
               if is_dns_seed(a)]
    return tuple(dict.fromkeys(checked))


def any_port(listen: str) -> str:
    host = listen.rsplit(":", 1)[0]
    return f"{host}:0"


def usable_listen(config, settings: Settings):
    """The config with a listen address that binds now: a busy default port becomes any free port
    (with a warning); a busy address the user chose is an error."""
    from swarm_app.peer.core.addressbook import parse_address
    from swarm_app.peer.io.ports import bind_error

    host, port = parse_address(config.listen)
    error = bind_error(host, port)
    if error is None:
        return config
    reason = error.strerror or str(error)
    if settings.peer.listen != PeerSettings.listen:
        raise UsageError(f"cannot listen on {config.listen}: {reason}; choose another address with --listen "
                         f"(port 0 picks any free port)", title="Network")
    log.warning("port %d is taken (%s; another swarm node on this machine?): listening on a free port "
                "instead; pass --listen HOST:PORT to choose one", port, reason)
    return dataclasses.replace(config, listen=any_port(config.listen))
