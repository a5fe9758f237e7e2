"""Bounded state of admitted rollouts: the pool (what training samples and pulls are served from)
and the seen-cache (what duplicate and replay drops are decided by).

Both are hard-capped: the pool by entries and bytes (oldest out), the seen-cache by entries; when the
seen-cache drops an entry before it expires, the author's floor rises so that a replay of what was
forgotten is still refused. The pool is shared with the training thread and takes a lock; the
seen-cache is used on the event loop only. Sans-IO: no clocks, no sockets, no logging.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.wire import SignedRollout


@dataclass
class PoolEntry:
    signed: SignedRollout
    rollout: Rollout
    """Author is the author's node id."""
    via: str
    """Node id of the neighbour it came from; "" for own rollouts."""
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

    def __init__(self, self_id: str, max_entries: int, max_bytes: int, max_age_ms: int) -> None:
        self.self_id = self_id
        self.max_entries, self.max_bytes, self.max_age_ms = max_entries, max_bytes, max_age_ms
        self._entries: OrderedDict[bytes, PoolEntry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def insert(self, entry: PoolEntry) -> int:
        """Add an entry; returns how many old entries were pushed out to stay within the caps."""
        with self._lock:
            if entry.signed.id in self._entries:
                return 0
            self._entries[entry.signed.id] = entry
            self._bytes += len(entry.signed.body)
            evicted = 0
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= len(old.signed.body)
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
                self._bytes -= len(oldest.signed.body)
                dropped += 1
        return dropped

    def sample(self, count: int, now_ms: int, rng: random.Random, per_author_cap: int | None = None) -> list[Rollout]:
        """Up to `count` fresh peer rollouts never handed out before: uniform, at most a cap per author.

        The cap defaults to the smallest one that still fills the draw (water-filling over authors):
        one prolific author cannot crowd out the others, and a swarm of few authors still fills it.
        Chosen entries are marked taken.
        """
        if count <= 0:
            return []
        cutoff = now_ms - self.max_age_ms
        with self._lock:
            fresh = [e for e in self._entries.values()
                     if not e.taken and e.author != self.self_id and e.ts_ms >= cutoff]
            rng.shuffle(fresh)
            cap = per_author_cap or fill_cap(Counter(e.author for e in fresh), count)
            chosen: list[PoolEntry] = []
            per_author: dict[str, int] = {}
            for entry in fresh:
                if per_author.get(entry.author, 0) < cap:
                    per_author[entry.author] = per_author.get(entry.author, 0) + 1
                    chosen.append(entry)
                    if len(chosen) == count:
                        break
            for entry in chosen:
                entry.taken = True
        return [e.rollout for e in chosen]

    def for_pull(self, have: dict[str, int], limit: int, now_ms: int, requester: str,
                 rng: random.Random) -> list[SignedRollout]:
        """A pull answer: the newest fresh rollout of each author newer than what the requester has,
        one per author, authors it has not heard from first, then those heard from longest ago."""
        cutoff = now_ms - self.max_age_ms
        newest: dict[str, PoolEntry] = {}
        with self._lock:
            for entry in self._entries.values():
                if entry.author == requester or entry.ts_ms < cutoff or entry.ts_ms <= have.get(entry.author, -1):
                    continue
                best = newest.get(entry.author)
                if best is None or entry.ts_ms > best.ts_ms:
                    newest[entry.author] = entry
        authors = list(newest)
        rng.shuffle(authors)
        authors.sort(key=lambda a: (a in have, have.get(a, 0)))  # stable: unheard first, then oldest heard
        return [newest[a].signed for a in authors[:limit]]


def fill_cap(available: Counter, count: int) -> int:
    """Smallest per-author cap c with sum(min(n, c)) >= count (or the largest n when none is)."""
    cap = 1
    while cap < max(available.values(), default=1) and sum(min(n, cap) for n in available.values()) < count:
        cap += 1
    return cap


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
