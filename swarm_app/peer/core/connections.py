"""A node's live connections: what the core keeps of each (`Connection`), and its inbound slots (`InboundSlots`).

Inbound websockets are capped in total, per address and per network (/24, /48; sources.Networks: a
private address on its own where the LAN rule is on, and private addresses together at most `per_lan`), so
that a crowd from one place cannot hold the node. When only the total is full, a newcomer from a network
that holds no slot may take the slot of an idle inbound peer: of those that gave nothing useful for
`idle_s`, the idlest from the network holding the most slots (`InboundSlots.victim`). Plain state and
choices: the core closes what is chosen, and counts.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable

from swarm_app.peer.core.overlay import DecayingCount
from swarm_app.peer.core.ratelimit import TokenBucket
from swarm_app.peer.core.sources import PUBLIC, Networks

LATE_PULLS = 16
"""Timed-out pull ids remembered per connection (one pull per 10 s: minutes of a slow peer)."""


@dataclass
class Connection:
    conn: int
    peer: str
    direction: str
    """"out" (this node dialed) or "in"."""
    addr: str | None
    """Where the peer can be dialed: the dialed address, or observed IP + announced port."""
    opened: float
    bucket: TokenBucket
    ip: str = ""
    """The peer's observed address (inbound) or the dialed host (outbound): its source for the budgets."""
    last_useful: float = 0.0
    """When the peer last gave this node something: an admitted rollout or an answer to a pull."""
    pending: dict[int, float] = field(default_factory=dict)
    """Pull request id -> deadline."""
    timed_out: deque[int] = field(default_factory=lambda: deque(maxlen=LATE_PULLS))
    """Ids of pulls that timed out: an answer to one is late, not unsolicited."""
    delivered: DecayingCount = field(default_factory=lambda: DecayingCount(300.0, 0.0))
    """Rollouts this node admitted first from this peer, decaying: its earned score (overlay.py)."""
    bye: str = ""
    """The reason the peer gave when it said bye."""
    answers: int = 0
    """Answers to this node's pulls it sent."""

    def expire_pulls(self, now: float) -> int:
        """Move the pulls past their deadline to `timed_out`; returns how many."""
        late = [req for req, deadline in self.pending.items() if deadline < now]
        for req in late:
            del self.pending[req]
            self.timed_out.append(req)
        return len(late)


class InboundSlots:
    def __init__(self, total: int, per_ip: int, per_network: int, networks: Networks = PUBLIC,
                 per_lan: int | None = None) -> None:
        self.total, self.per_ip, self.per_network = total, per_ip, per_network
        self.networks, self.per_lan = networks, total if per_lan is None else per_lan
        self.by_ip: Counter[str] = Counter()
        self.by_network: Counter[str] = Counter()
        self.lan = 0
        """Slots held by private addresses counted on their own (networks.is_lan)."""

    def reserve(self, ip: str) -> bool:
        """Claim a slot for `ip`; False when a cap (total, per address, per network) is reached."""
        if sum(self.by_ip.values()) >= self.total or self.by_ip[ip] >= self.per_ip:
            return False
        if self.by_network[self.networks.of(ip)] >= self.per_network:
            return False
        if self.networks.is_lan(ip) and self.lan >= self.per_lan:
            return False
        self.take(ip)
        return True

    def take(self, ip: str) -> None:
        """Claim a slot whatever the caps (a newcomer's, until its victim's socket closes)."""
        self.by_ip[ip] += 1
        self.by_network[self.networks.of(ip)] += 1
        self.lan += self.networks.is_lan(ip)

    def release(self, ip: str) -> None:
        self.lan -= self.networks.is_lan(ip)
        for table, key in ((self.by_ip, ip), (self.by_network, self.networks.of(ip))):
            table[key] -= 1
            if table[key] <= 0:
                del table[key]

    def victim(self, ip: str, conns: Iterable[Connection], now: float, idle_s: float) -> Connection | None:
        """The inbound connection whose slot a newcomer from `ip` may take, or None: only when the total
        alone is full and the newcomer's network holds no slot."""
        if self.by_network[self.networks.of(ip)] or sum(self.by_ip.values()) < self.total:
            return None
        if self.networks.is_lan(ip) and self.lan >= self.per_lan:
            return None
        idle = [c for c in conns if c.direction == "in" and now - max(c.opened, c.last_useful) >= idle_s]
        if not idle:
            return None
        return max(idle, key=lambda c: (self.by_network[self.networks.of(c.ip)], now - max(c.opened, c.last_useful)))
