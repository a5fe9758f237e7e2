"""Read-only snapshots of a node core for the views (TUI peers table, headless lines, tests).

Plain frozen dataclasses, built from the core's state in one pass by view.py's `CoreView.stats`; holding
one never keeps the node's live state alive or lets a view change it. Built on the event loop thread
(see PeerNode.stats).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PeerSnapshot:
    """One row of the peers table. received/accepted/rejected count what this peer delivered;
    authored/used/mean_advantage count rollouts it wrote, whoever delivered them."""

    node_id: str
    address: str | None
    connected: bool
    direction: str | None
    """"in", "out" or None when not connected."""
    score: float
    """Minus the current offense points: 0 is clean; the peer is banned at -offense_limit."""
    banned: bool
    received: int
    accepted: int
    rejected: dict[str, int]
    authored: int
    used: int
    mean_advantage: float | None
    last_seen: float = 0.0
    """Clock time (the node's clock, Unix seconds) this node last heard from the peer; 0: never."""
    reachable: bool = False
    """This node has dialed the peer's address successfully (others can reach it too)."""
    latency_ms: float | None = None
    """Round-trip time of the last websocket ping, when measured."""


@dataclass(frozen=True)
class NodeStats:
    node_id: str
    address: str | None
    sharing: bool
    inbound: int
    outbound: int
    known_addresses: int
    pool_size: int
    pool_bytes: int
    seen_size: int
    published: int
    """Own rollouts signed and offered (whether or not any peer was connected)."""
    sent: int
    """Copies of own rollouts pushed to connected peers (each rollout goes to up to push_fanout of them)."""
    accepted: int
    rejected: dict[str, int]
    """Node-wide rejections by reason (rollouts, messages and handshakes)."""
    bans: int
    peers: tuple[PeerSnapshot, ...]
    swarm: str = ""
    """The swarm this node joined."""
    reachable: bool | None = None
    """Whether peers can dial this node (dial-back); None: not known yet."""
    lan_only: bool = False
    """`reachable` rests on peers at private addresses only: reached on this network, the internet not known."""
    public_port: int = 0
    """The port peers are asked to dial back (0: no verdict is drawn, the swarm is all on this machine)."""
    witnesses: int = 0
    """Networks whose peers dialed this node back in the current check."""
    unreached: int = 0
    """Networks whose peers could not."""
    witnesses_needed: int = 0
    """Witnesses it takes to count as reachable."""
    refusals: dict[str, int] = field(default_factory=dict)
    """Hellos refused either way, by reason (another swarm, an older version)."""
    served: int = 0
    """Copies of own rollouts handed to peers in answers to their pulls (websocket and HTTP)."""
    rollouts_served: int = 0
    """Rollouts handed to peers in pull answers, own and relayed (relayed: this minus `served`)."""
    bytes_in: int = 0
    """Bytes of websocket messages received on established links (UTF-8 text, no framing, no HTTP)."""
    bytes_out: int = 0
    """... and sent."""
    upnp: str = ""
    """The router port mapping: "" (not tried), "missing" (library absent), "none" (no gateway or refused),
    "mapped" (the router says it forwards the port; dial-back decides whether it works)."""

    @property
    def neighbours(self) -> int:
        return self.inbound + self.outbound
