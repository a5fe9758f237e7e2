"""What this node knows about each peer: counters for the views, offense score, bans.

A peer is a node id. Rejections add offense points by reason (`REASON_WEIGHTS`); points leak away at
a steady rate, so an honest peer's occasional stale rollout is forgotten while a flooder or forger
crosses `offense_limit` within seconds and is banned for an exponentially growing, jittered time.
Counters keyed by sender (received, accepted, rejected) and by author (authored, used, advantage)
live in the same record. Bounded: least recently seen records out. Sans-IO: `now` is an argument.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from swarm_app.peer.core.ratelimit import LeakyScore

REASON_WEIGHTS: dict[str, float] = {
    "duplicate": 0.05,      # normal in gossip now and then; by the thousand it is a flood
    "stale": 0.2,           # a slow path or a skewed clock
    "unknown_task": 0.2,    # an honest node with another task mix
    "author_rate": 0.5,     # only counted for pushed rollouts; pull answers are not the sender's fault
    "no_signal": 0.1,       # pushed only; honest nodes do not push groups without a reward spread
    "new_author": 0.5,      # pushed only: a fresh key from a source whose budget of new authors is spent
    "future": 1.0,
    "conn_rate": 1.0,
    "replay": 2.0,
    "version": 2.0,
    "handshake": 5.0,
    "bad_message": 5.0,
    "malformed": 5.0,
    "schema": 5.0,
    "heldout_seed": 5.0,    # honest nodes never share one: an attempt to inflate our held-out score
    "not_canonical": 10.0,
    "too_large": 10.0,
    "bad_signature": 10.0,  # forgery
    "ground_truth": 10.0,   # forgery
    "frame_too_large": 25.0,
}


@dataclass
class PeerRecord:
    node_id: str
    offense: LeakyScore
    address: str | None = None
    received: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    authored: int = 0
    """Admitted rollouts written by this peer (whoever delivered them)."""
    used: int = 0
    advantage_sum: float = 0.0
    bans: int = 0
    banned_until: float = 0.0
    last_seen: float = 0.0
    latency_ms: float | None = None
    """Round trip of the last hello with this peer."""

    @property
    def mean_advantage(self) -> float | None:
        return self.advantage_sum / self.used if self.used else None

    def is_banned(self, now: float) -> bool:
        return now < self.banned_until


@dataclass(frozen=True)
class ScorePolicy:
    offense_limit: float = 50.0
    """Offense points at which a peer is disconnected and banned."""
    offense_leak: float = 1.0
    """Points forgiven per second."""
    ban_base_s: float = 60.0
    """First ban; each further ban doubles it (with +-20% jitter)."""
    ban_max_s: float = 3600.0
    capacity: int = 4096
    """Peer records kept (least recently seen out)."""


class PeerBook:
    def __init__(self, policy: ScorePolicy, rng: random.Random) -> None:
        self.policy, self.rng = policy, rng
        self._records: OrderedDict[str, PeerRecord] = OrderedDict()

    def get(self, node_id: str, now: float) -> PeerRecord:
        record = self._records.get(node_id)
        if record is None:
            record = self._records[node_id] = PeerRecord(node_id, LeakyScore(self.policy.offense_leak, now))
            while len(self._records) > self.policy.capacity:
                self._evict_one(now)
        else:
            self._records.move_to_end(node_id)
        record.last_seen = max(record.last_seen, now)
        return record

    def peek(self, node_id: str) -> PeerRecord | None:
        return self._records.get(node_id)

    def records(self) -> list[PeerRecord]:
        return list(self._records.values())

    def is_banned(self, node_id: str, now: float) -> bool:
        record = self._records.get(node_id)
        return record is not None and record.is_banned(now)

    def penalize(self, node_id: str, reason: str, now: float, count: int = 1) -> bool:
        """Count `count` rejections; True when this crosses the offense limit and bans the peer now."""
        record = self.get(node_id, now)
        record.rejected[reason] += count
        weight = REASON_WEIGHTS.get(reason, 1.0) * count
        if weight <= 0 or record.offense.add(weight, now) < self.policy.offense_limit or record.is_banned(now):
            return False
        span = min(self.policy.ban_max_s, self.policy.ban_base_s * 2 ** record.bans)
        record.banned_until = now + span * self.rng.uniform(0.8, 1.2)
        record.bans += 1
        record.offense.points = 0.0  # the ban is the sentence; start clean when it ends
        return True

    def _evict_one(self, now: float) -> None:
        # keep banned records: forgetting them would lift the ban
        for node_id, record in self._records.items():
            if not record.is_banned(now):
                del self._records[node_id]
                return
        self._records.popitem(last=False)
