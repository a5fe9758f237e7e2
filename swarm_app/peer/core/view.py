"""What the I/O shell and the views may read of a node core: `CoreView`, a read-only face over its owners.

peer/io reads the core only through this (and changes it only through `NodeCore`'s methods): whether any
peer is connected, the dial-back verdict, whether a peer is banned, the peer table to save, the figures
for /metrics (`figures`, a frozen copy) and the views' snapshot (`stats`, stats.py's `NodeStats`). It
hands out copies and answers, never the live tables. Sans-IO: the time is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.exchange import PeerExchange
from swarm_app.peer.core.intake import Intake
from swarm_app.peer.core.links import Links
from swarm_app.peer.core.stats import NodeStats, PeerSnapshot
from swarm_app.peer.core.tally import Tally


@dataclass(frozen=True)
class CoreFigures:
    """The core's figures at one moment, for /metrics."""

    events: dict[str, int]
    """The tally's counters by name (tally.py)."""
    rejected: dict[str, int]
    """Rollouts, messages and handshakes refused, by reason."""
    records_rejected: dict[str, int]
    """Node records in peer lists refused, by reason (exchange.py)."""
    inbound: int
    outbound: int
    pool_rollouts: int
    pool_bytes: int
    seen_entries: int
    known_addresses: int


class CoreView:
    def __init__(self, node_id: str, links: Links, intake: Intake, exchange: PeerExchange, addresses: AddressBook,
                 tally: Tally) -> None:
        self.node_id = node_id
        self._links, self._intake, self._exchange, self._addresses, self._tally = links, intake, exchange, addresses, tally

    @property
    def connected(self) -> bool:
        """Whether any peer connection is open (safe from another thread: the size of a dict)."""
        return len(self._links) > 0

    @property
    def links(self) -> int:
        """Open links, inbound and outbound."""
        return len(self._links)

    def is_linked(self, peer: str) -> bool:
        """Whether a link to `peer` (a node id) is open."""
        return peer in self._links.by_peer

    @property
    def reachable(self) -> bool | None:
        """Whether peers can dial this node from outside, as dial-back found (None: not known yet)."""
        return self._exchange.reachable

    @property
    def sharing(self) -> bool:
        return self._intake.sharing

    def is_banned(self, node: str, now: float) -> bool:
        return self._intake.peers.is_banned(node, now)

    def peer_table(self) -> list[dict[str, Any]]:
        """The addresses worth saving for the next run (addressbook.AddressBook.to_json)."""
        return self._addresses.to_json()

    def figures(self) -> CoreFigures:
        directions = [c.direction for c in self._links.values()]
        pool = self._intake.pool
        return CoreFigures(self._tally.events(), self._tally.rejections(), dict(self._exchange.rejected),
                           directions.count("in"), directions.count("out"), len(pool), pool.nbytes,
                           len(self._intake.admission.seen), len(self._addresses))

    def stats(self, address: str | None, now: float) -> NodeStats:
        """A snapshot for the views: the node, its figures and one row per peer it knows."""
        connected = {c.peer: c.direction for c in self._links.values()}
        rows = tuple(
            PeerSnapshot(r.node_id, r.address, r.node_id in connected, connected.get(r.node_id),
                         -round(r.offense.value(now), 3), r.is_banned(now), r.received, r.accepted,
                         dict(r.rejected), r.authored, r.used, r.mean_advantage, r.last_seen,
                         self._dialed_ok(r.address), r.latency_ms)
            for r in self._intake.peers.records() if r.node_id != self.node_id)
        directions = list(connected.values())
        tally, pool = self._tally, self._intake.pool
        return NodeStats(self.node_id, address, self._intake.sharing, directions.count("in"), directions.count("out"),
                         len(self._addresses), len(pool), pool.nbytes, len(self._intake.admission.seen),
                         tally["published"], tally["pushes"], tally["accepted"], tally.rejections(),
                         tally["bans"], rows, served=tally["own_served"],
                         rollouts_served=tally["rollouts_served"], bytes_in=tally["ws_bytes_in"],
                         bytes_out=tally["ws_bytes_out"])

    def _dialed_ok(self, address: str | None) -> bool:
        entry = self._addresses.get(address) if address else None
        return bool(entry is not None and entry.last_ok > 0)
