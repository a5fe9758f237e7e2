"""`PeerTracker`: turns successive peer-node snapshots into the events the views show.

Sans-IO, like the peer core: `update(stats)` takes a `NodeStats` snapshot and returns events
(PeersUpdated always, with the swarm's name, the peers, the rejection total and whether the node is
reachable from outside; ReachabilityChanged when dial-back reaches a verdict or changes it). It keeps only
the previous verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_app.kernel.events import (
    Event,
    PeerRow,
    PeersUpdated,
    ReachabilityChanged,
)

if TYPE_CHECKING:
    from swarm_app.peer.core.stats import NodeStats, PeerSnapshot


class PeerTracker:
    def __init__(self) -> None:
        self._verdict: tuple[bool | None, bool] = (None, False)

    def update(self, stats: "NodeStats") -> list[Event]:
        rows = tuple(sorted((peer_row(p) for p in stats.peers), key=lambda r: (not r.connected, r.node_id)))
        events: list[Event] = [PeersUpdated(rows, stats.sharing, stats.published, stats.sent, stats.accepted,
                                            sum(stats.rejected.values()), stats.pool_size, stats.swarm,
                                            stats.reachable, stats.public_port, stats.witnesses,
                                            stats.witnesses_needed, stats.upnp, stats.lan_only)]
        verdict = (stats.reachable, stats.lan_only)
        if stats.reachable is not None and verdict != self._verdict:
            events.append(ReachabilityChanged(stats.reachable, stats.public_port, stats.neighbours, stats.swarm,
                                              stats.upnp, stats.lan_only))
        self._verdict = verdict
        return events


def peer_row(p: "PeerSnapshot") -> PeerRow:
    rejected = sum(p.rejected.values())
    main = max(p.rejected, key=p.rejected.get) if rejected else ""
    return PeerRow(node_id=p.node_id, address=p.address or "", connected=p.connected,
                   reachable=p.direction == "out" or p.reachable, latency_ms=p.latency_ms,
                   received=p.received, accepted=p.accepted, rejected=rejected, main_rejection=main,
                   used=p.used, last_seen=p.last_seen)
