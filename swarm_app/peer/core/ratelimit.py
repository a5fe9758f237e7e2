"""Token buckets and a bounded map of them. Sans-IO: every call takes `now` in seconds.

Owns only arithmetic and bounded memory; it never reads a clock, sleeps or logs.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


class TokenBucket:
    """`rate` tokens per second up to `burst`; starts full."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, now

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Spend `cost` tokens if there are enough; False (and nothing spent) otherwise."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True


class BucketMap(Generic[K]):
    """One bucket per key, at most `capacity` keys (least recently used out)."""

    def __init__(self, rate: float, burst: float, capacity: int) -> None:
        self.rate, self.burst, self.capacity = rate, burst, capacity
        self._buckets: OrderedDict[K, TokenBucket] = OrderedDict()

    def take(self, key: K, now: float, cost: float = 1.0) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, now)
            while len(self._buckets) > self.capacity:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now, cost)

    def peek(self, key: K, now: float) -> float:
        """Tokens `key` has now (a key never seen has a full bucket); changes nothing."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return self.burst
        return min(bucket.burst, bucket.tokens + max(0.0, now - bucket.stamp) * bucket.rate)

    def __len__(self) -> int:
        return len(self._buckets)


class LeakyScore:
    """Offense points that leak away at `leak` per second; `add` says when `limit` is reached."""

    __slots__ = ("leak", "points", "stamp")

    def __init__(self, leak: float, now: float) -> None:
        self.leak, self.points, self.stamp = leak, 0.0, now

    def value(self, now: float) -> float:
        self.points = max(0.0, self.points - max(0.0, now - self.stamp) * self.leak)
        self.stamp = max(self.stamp, now)
        return self.points

    def add(self, points: float, now: float) -> float:
        self.points = self.value(now) + points
        return self.points
