"""What a pull request tells of its asker, in Bloom filters of a size that does not grow with the swarm
(docs/protocol.md §7).

- `heard`: the authors the asker heard from over the coverage window (10 minutes). The answerer sends
  authors outside it first, so a node behind NAT, whose only links are a few busy hubs, keeps meeting
  authors it has not heard from instead of drawing the same popular ones again (a coupon collector).
- `held`: the rollouts the asker holds from the pull freshness window (120 s), by id. The answerer skips
  them: what an exact map of authors to timestamps did, which grew with the authors heard (~15-35 KB a
  pull at 1,000 nodes, 40% of a leaf's bytes).
- `recent`: the authors the asker heard from lately (5 minutes), as `heard`. Among the authors in
  `heard`, the answerer sends those outside it first: those heard longest ago (after a partition heals,
  the other half) before those heard a moment ago.

A false positive only moves an author back in one answer, or leaves out one rollout the asker could
have had (about 1%: it comes in another answer); a filter that lies (a hostile asker) only changes which
honest rollouts it is sent. Positions come from SHA-256 (of a node id; a rollout id is one already) by
double hashing (Kirsch and Mitzenmacher), so both sides agree without a shared seed.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Iterable

from swarm_app.peer.core.identity import b64url, unb64url

HASHES = 7
MIN_BYTES, MAX_BYTES = 64, 2048
"""Filter sizes (powers of two): ~10 bits an entry up to 1,638 entries (false positives ~1%)."""
BITS_PER_ENTRY = 10
MAX_HASHES = 16


@lru_cache(maxsize=65536)
def _spots(digest: bytes, bits: int, hashes: int) -> tuple[tuple[int, int], ...]:
    """(byte, bit mask) of each position of a SHA-256 digest (cached: a node asks about the same ones)."""
    h1, h2 = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big") | 1
    return tuple(((p >> 3), 1 << (p & 7)) for p in ((h1 + i * h2) % bits for i in range(hashes)))


@lru_cache(maxsize=16384)
def _author_digest(author: str) -> bytes:
    return hashlib.sha256(author.encode()).digest()


def size_for(count: int) -> int:
    """Bytes of a filter for `count` entries: the smallest power of two giving ~10 bits each, within bounds."""
    size = MIN_BYTES
    while size < MAX_BYTES and size * 8 < count * BITS_PER_ENTRY:
        size *= 2
    return size


class HeardFilter:
    """A Bloom filter of authors (`author in f`) or of rollout ids (`f.holds(id)`): True for every one
    added, rarely for others."""

    def __init__(self, data: bytearray, hashes: int = HASHES) -> None:
        self.data, self.hashes, self.bits = data, hashes, len(data) * 8

    @classmethod
    def of(cls, authors: Iterable[str]) -> HeardFilter:
        return cls._of_digests([_author_digest(a) for a in authors])

    @classmethod
    def of_rollouts(cls, ids: Iterable[bytes]) -> HeardFilter:
        """Of rollout ids (SHA-256 of the body, `SignedRollout.id`)."""
        return cls._of_digests(list(ids))

    @classmethod
    def _of_digests(cls, digests: list[bytes]) -> HeardFilter:
        made = cls(bytearray(size_for(len(digests))))
        data, bits, hashes = made.data, made.bits, made.hashes
        for digest in digests:
            for byte, mask in _spots(digest, bits, hashes):
                data[byte] |= mask
        return made

    def __contains__(self, author: str) -> bool:
        return self.holds(_author_digest(author))

    def holds(self, digest: bytes) -> bool:
        data = self.data
        for byte, mask in _spots(digest, self.bits, self.hashes):
            if not data[byte] & mask:
                return False
        return True

    def to_wire(self) -> dict[str, Any]:
        return {"k": self.hashes, "bits": b64url(bytes(self.data))}

    def to_query(self) -> str:
        """The K.BITS form of a GET /sample query parameter."""
        return f"{self.hashes}.{b64url(bytes(self.data))}"

    @classmethod
    def from_query(cls, text: str) -> HeardFilter | None:
        """Inverse of `to_query` (None for ""); ValueError when malformed."""
        k, _, bits = text.partition(".")
        return cls.from_wire({"k": int(k), "bits": bits}) if text else None

    @classmethod
    def from_wire(cls, value: Any) -> HeardFilter:
        """A pull's `heard` or `held` member; ValueError unless k is 1..16 and bits a power of two of
        64..2048 bytes."""
        if not isinstance(value, dict) or not isinstance(value.get("bits"), str):
            raise ValueError("filter")
        k = value.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_HASHES:
            raise ValueError("filter hashes")
        if len(value["bits"]) > MAX_BYTES * 4 // 3 + 4:
            raise ValueError("filter size")
        data = bytearray(unb64url(value["bits"]))
        if not MIN_BYTES <= len(data) <= MAX_BYTES or len(data) & (len(data) - 1):
            raise ValueError("filter size")
        return cls(data, k)
