"""The authors a node heard from lately, as a Bloom filter a pull request carries (`heard`, docs/protocol.md §7).

A pull's `have` map names the authors heard from within the freshness window (120 s) with the newest
timestamp of each, so the answerer skips what the asker already holds. A node must hear from every
author over a longer span (the 10-minute coverage window), and a map covering it would grow with the
swarm. The filter covers that span in at most `MAX_BYTES` whatever the swarm's size: the answerer sends
authors outside both first, so a node behind NAT, whose only links are a few busy hubs, keeps meeting
authors it has not heard from instead of drawing the same popular ones again (a coupon collector).

A false positive only delays an author to the back of one answer; a filter that lies (a hostile asker)
only changes which honest rollouts it is sent. Positions come from SHA-256 of the node id (double hashing,
Kirsch and Mitzenmacher), so both sides agree without a shared seed.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Iterable

from swarm_app.peer.core.identity import b64url, unb64url

HASHES = 7
MIN_BYTES, MAX_BYTES = 64, 2048
"""Filter sizes (powers of two): ~10 bits an author up to 1,638 authors (false positives ~1%)."""
BITS_PER_AUTHOR = 10
MAX_HASHES = 16


@lru_cache(maxsize=65536)
def _positions(author: str, bits: int, hashes: int) -> tuple[tuple[int, int], ...]:
    """(byte, bit mask) of each of the author's positions (cached: a node asks about the same authors)."""
    d = hashlib.sha256(author.encode()).digest()
    h1, h2 = int.from_bytes(d[:8], "big"), int.from_bytes(d[8:16], "big") | 1
    return tuple(((p >> 3), 1 << (p & 7)) for p in ((h1 + i * h2) % bits for i in range(hashes)))


def size_for(count: int) -> int:
    """Bytes of a filter for `count` authors: the smallest power of two giving ~10 bits each, within bounds."""
    size = MIN_BYTES
    while size < MAX_BYTES and size * 8 < count * BITS_PER_AUTHOR:
        size *= 2
    return size


class HeardFilter:
    """A Bloom filter of node ids: `author in f` is True for every author added, rarely for others."""

    def __init__(self, data: bytearray, hashes: int = HASHES) -> None:
        self.data, self.hashes, self.bits = data, hashes, len(data) * 8

    @classmethod
    def of(cls, authors: Iterable[str]) -> HeardFilter:
        authors = list(authors)
        heard = cls(bytearray(size_for(len(authors))))
        for author in authors:
            for byte, mask in _positions(author, heard.bits, heard.hashes):
                heard.data[byte] |= mask
        return heard

    def __contains__(self, author: str) -> bool:
        data = self.data
        for byte, mask in _positions(author, self.bits, self.hashes):
            if not data[byte] & mask:
                return False
        return True

    def to_wire(self) -> dict[str, Any]:
        return {"k": self.hashes, "bits": b64url(bytes(self.data))}

    @classmethod
    def from_wire(cls, value: Any) -> HeardFilter:
        """The `heard` member of a pull; ValueError unless k is 1..16 and bits a power of two of 64..2048 bytes."""
        if not isinstance(value, dict) or not isinstance(value.get("bits"), str):
            raise ValueError("heard")
        k = value.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_HASHES:
            raise ValueError("heard hashes")
        if len(value["bits"]) > MAX_BYTES * 4 // 3 + 4:
            raise ValueError("heard size")
        data = bytearray(unb64url(value["bits"]))
        if not MIN_BYTES <= len(data) <= MAX_BYTES or len(data) & (len(data) - 1):
            raise ValueError("heard size")
        return cls(data, k)
