"""Bounded state of admitted rollouts: the pool (what training samples and pulls are served from)
and the seen-cache (what duplicate and replay drops are decided by).

Both are hard-capped: the pool by entries and bytes (oldest out), the seen-cache by entries; when the
seen-cache drops an entry before it expires, the author's floor rises so that a replay of what was
forgotten is still refused. No one source can fill the pool: each author and each delivering address
holds at most `share` of its entries and of its bytes, and past that its own oldest entries go, not
others' (so entries far beyond the usual size cost their bytes against their source). The external
draw (`sample`) is spread across networks and authors and weighted by their standing (sources.py).
The pool is shared with the training thread and takes a lock; the seen-cache is used on the event loop
only. Sans-IO: no clocks, no sockets, no logging.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Container

from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.sources import PUBLIC, STANDING_FLOOR, Networks
from swarm_app.peer.core.wire import SignedRollout


@dataclass
class PoolEntry:
    signed: SignedRollout
    rollout: Rollout
    """Author is the author's node id."""
    via: str
    """Node id of the neighbour it came from; "" for own rollouts."""
    source: str = ""
    """Address (IP) of the neighbour it came from; "" for own rollouts."""
    taken: bool = field(default=False)
    """Already handed to training (each admitted rollout is trained on at most once)."""

    @property
    def author(self) -> str:
        return self.rollout.author

    @property
    def ts_ms(self) -> int:
        return self.rollout.created_ms


class RolloutPool:
    """Admitted rollouts by id, oldest first; capped at `max_entries` and `max_bytes` of bodies."""

    def __init__(self, self_id: str, max_entries: int, max_bytes: int, max_age_ms: int,
                 share: float = 0.25, new_source_cap: int = 2, networks: Networks = PUBLIC) -> None:
        self.self_id = self_id
        self.max_entries, self.max_bytes, self.max_age_ms = max_entries, max_bytes, max_age_ms
        self.share, self.new_source_cap, self.networks = share, new_source_cap, networks
        """`share`: most of the entries, and of the bytes, one author or one delivering address may hold."""
        """Groups per draw from a network whose authors have not earned standing (all below half weight)."""
        self._entries: OrderedDict[bytes, PoolEntry] = OrderedDict()
        self._bytes = 0
        self._held: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        """Entries and bytes held per source key ("a:" + author, "s:" + address)."""
        self._weights: dict[str, float] = {}
        self._homes: dict[str, str] = {}
        self._lock = threading.Lock()

    def set_standing(self, weights: dict[str, float], homes: dict[str, str]) -> None:
        """Each author's weight in the draw and the network it was introduced by (the core's view, replaced
        whole: the training thread reads whichever dictionaries it finds)."""
        self._weights, self._homes = weights, homes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def held_by(self, author: str) -> tuple[int, int]:
        """Entries and bytes `author`'s rollouts hold now (what its share is measured in)."""
        entries, nbytes = self._held.get(f"a:{author}", (0, 0))
        return entries, nbytes

    def insert(self, entry: PoolEntry) -> int:
        """Add an entry; returns how many old entries were pushed out to stay within the caps."""
        with self._lock:
            if entry.signed.id in self._entries:
                return 0
            self._entries[entry.signed.id] = entry
            self._account(entry, +1)
            evicted = self._keep_share(entry)
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._account(old, -1)
                evicted += 1
            return evicted

    def _sources(self, entry: PoolEntry) -> list[str]:
        return [f"a:{entry.author}"] + ([f"s:{entry.source}"] if entry.source else [])

    def _account(self, entry: PoolEntry, sign: int) -> None:
        size = len(entry.signed.body)
        self._bytes += sign * size
        for key in self._sources(entry):
            held = self._held[key]
            held[0] += sign
            held[1] += sign * size
            if held[0] <= 0:
                del self._held[key]

    def _keep_share(self, entry: PoolEntry) -> int:
        """Evict the oldest entries of `entry`'s own sources while either holds more than its share."""
        if entry.author == self.self_id:
            return 0  # own rollouts: what pulls are served from
        evicted = 0
        max_entries, max_bytes = max(1, int(self.max_entries * self.share)), max(1, int(self.max_bytes * self.share))
        for key in self._sources(entry):
            while key in self._held and (self._held[key][0] > max_entries or self._held[key][1] > max_bytes):
                oldest = next(e for e in self._entries.values() if key in self._sources(e))
                del self._entries[oldest.signed.id]
                self._account(oldest, -1)
                evicted += 1
        return evicted

    def expire(self, now_ms: int) -> int:
        """Drop entries older than the freshness window (scanning from the oldest received)."""
        cutoff, dropped = now_ms - self.max_age_ms, 0
        with self._lock:
            while self._entries:
                oldest = next(iter(self._entries.values()))
                if oldest.ts_ms >= cutoff:
                    break
                self._entries.popitem(last=False)
                self._account(oldest, -1)
                dropped += 1
        return dropped

    def sample(self, count: int, now_ms: int, rng: random.Random, per_author_cap: int | None = None) -> list[Rollout]:
        """Up to `count` fresh peer rollouts never handed out before, marked taken.

        Spread across sources: a network whose authors have not earned standing gives at most
        `new_source_cap` groups a draw; each author at most the smallest cap that still fills the draw
        (water-filling), unless `per_author_cap` says otherwise. Within that, each group is drawn with
        probability in proportion to its author's standing, so a swarm of fresh keys weighs little
        against peers whose groups taught this node before.
        """
        if count <= 0:
            return []
        cutoff = now_ms - self.max_age_ms
        weights, homes = self._weights, self._homes
        with self._lock:
            fresh = [e for e in self._entries.values()
                     if not e.taken and e.author != self.self_id and e.ts_ms >= cutoff]
            chosen = self._draw(fresh, count, rng, weights, homes, per_author_cap)
            for entry in chosen:
                entry.taken = True
        return [e.rollout for e in chosen]

    def _draw(self, fresh: list[PoolEntry], count: int, rng: random.Random, weights: dict[str, float],
              homes: dict[str, str], per_author_cap: int | None) -> list[PoolEntry]:
        def weight(entry: PoolEntry) -> float:
            return max(weights.get(entry.author, STANDING_FLOOR), 1e-6)

        def network(entry: PoolEntry) -> str:
            return homes.get(entry.author) or self.networks.of(entry.source)

        established = {network(e) for e in fresh if weight(e) >= 0.5}
        # weighted sampling without replacement: sort by u ** (1 / w) (Efraimidis and Spirakis)
        order = sorted(fresh, key=lambda e: rng.random() ** (1.0 / weight(e)), reverse=True)
        chosen: list[PoolEntry] = []
        taken: set[int] = set()
        per_author: Counter = Counter()
        per_network: Counter = Counter()
        most = max(Counter(e.author for e in fresh).values(), default=0)
        # water-filling: one group per author first, then two, ... until the draw is full
        for cap in ([per_author_cap] if per_author_cap else range(1, most + 1)):
            for i, entry in enumerate(order):
                net = network(entry)
                if i in taken or per_author[entry.author] >= cap or (
                        net not in established and per_network[net] >= self.new_source_cap):
                    continue
                taken.add(i)
                per_author[entry.author] += 1
                per_network[net] += 1
                chosen.append(entry)
                if len(chosen) == count:
                    return chosen
        return chosen

    def held_ids(self, since_ms: int) -> list[bytes]:
        """Ids of the rollouts of others from `since_ms` on: what a pull answer need not bring this node."""
        with self._lock:
            return [e.signed.id for e in self._entries.values()
                    if e.rollout.created_ms >= since_ms and e.rollout.author != self.self_id]

    def is_own(self, rollout_id: bytes) -> bool:
        """Whether the pool holds `rollout_id` as one of this node's own rollouts."""
        entry = self._entries.get(rollout_id)
        return entry is not None and entry.author == self.self_id

    def for_pull(self, have: dict[str, int], limit: int, now_ms: int, requester: str,
                 rng: random.Random, max_age_ms: int | None = None,
                 heard: Container[str] = (), held: HeardFilter | None = None,
                 recent: Container[str] = ()) -> list[SignedRollout]:
        """A pull answer: the newest fresh rollout of each author that the requester does not hold (newer
        than `have[author]`, not in `held`), one per author, authors it has not heard from (in neither
        `have` nor `heard`) first, then those not heard from lately (not in `recent`), then those heard
        from longest ago. `max_age_ms`: only rollouts this recent (default: the pool's freshness window)."""
        cutoff = now_ms - (self.max_age_ms if max_age_ms is None else max_age_ms)
        newest: dict[str, PoolEntry] = {}
        newest_ts: dict[str, int] = {}
        known = have.get
        with self._lock:  # a hub answers several pulls a second over thousands of entries: plain lookups only
            for entry in self._entries.values():
                rollout = entry.rollout
                author, ts = rollout.author, rollout.created_ms
                if ts < cutoff or author == requester or ts <= known(author, -1) or ts <= newest_ts.get(author, -1):
                    continue
                if held is not None and held.holds(entry.signed.id):
                    continue
                newest[author], newest_ts[author] = entry, ts
        authors = list(newest)
        rng.shuffle(authors)
        authors.sort(key=lambda a: (a in have or a in heard, a in recent, have.get(a, 0)))  # stable
        return [newest[a].signed for a in authors[:limit]]


ID_PREFIX = 16
"""Bytes of a rollout id the seen-cache keeps: telling a duplicate from a replay of the same (author, seq)
needs no more (matching 128 bits of SHA-256 is a second preimage), and it keeps entries small."""


class SeenCache:
    """(author key, seq) -> (id prefix, ts_ms) of admitted rollouts, with per-author floors for evictions.

    Each entry is two flat bytes objects (author key + 8-byte seq; id prefix + 8-byte ts_ms), not
    tuples of bytes and ints: ~205 bytes an entry instead of ~390, and a full 10-minute window at 80
    rollouts/s holds ~48,000 of them.
    """

    def __init__(self, capacity: int, window_ms: int) -> None:
        self.capacity, self.window_ms = capacity, window_ms
        self._seen: OrderedDict[bytes, bytes] = OrderedDict()
        self._floors: OrderedDict[bytes, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, author_key: bytes, seq: int, rollout_id: bytes, ts_ms: int) -> str | None:
        """None when new; "duplicate" (same bytes), "replay" (same seq, other bytes), or "stale"
        (at or below the author's floor: possibly seen and forgotten)."""
        known = self._seen.get(author_key + seq.to_bytes(8, "big"))
        if known is not None:
            return "duplicate" if known[:ID_PREFIX] == _prefix(rollout_id) else "replay"
        if ts_ms <= self._floors.get(author_key, -1):
            return "stale"
        return None

    def add(self, author_key: bytes, seq: int, rollout_id: bytes, ts_ms: int) -> None:
        self._seen[author_key + seq.to_bytes(8, "big")] = _prefix(rollout_id) + ts_ms.to_bytes(8, "big")
        while len(self._seen) > self.capacity:
            key, value = self._seen.popitem(last=False)
            author = key[:-8]
            self._floors[author] = max(_ts(value), self._floors.pop(author, -1))
            while len(self._floors) > self.capacity:
                self._floors.popitem(last=False)

    def expire(self, now_ms: int) -> None:
        """Forget what the timestamp window refuses anyway."""
        cutoff = now_ms - self.window_ms
        while self._seen:
            key, value = next(iter(self._seen.items()))
            if _ts(value) >= cutoff:
                break
            del self._seen[key]
        for key in [k for k, ts in self._floors.items() if ts < cutoff]:
            del self._floors[key]


def _prefix(rollout_id: bytes) -> bytes:
    return rollout_id[:ID_PREFIX].ljust(ID_PREFIX, b"\0")  # ids are 32 bytes; the padding is for tests' short ones


def _ts(value: bytes) -> int:
    return int.from_bytes(value[ID_PREFIX:], "big")
