"""Pool and seen-cache: hard caps, sampling with a per-author cap, pull answers, replay floors."""

from __future__ import annotations

import random
from collections import Counter

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import TaskRef
from swarm_app.peer.core.pool import PoolEntry, RolloutPool, SeenCache
from swarm_app.peer.core.wire import SignedRollout

NOW = 1_000_000_000


def entry(author: str, ts: int, n: int = 0, size: int = 10, source: str = "") -> PoolEntry:
    body = f"{author}-{ts}-{n}".encode().ljust(size, b".")
    rollout = Rollout(TaskRef("d", "c", 0, n), "q", "a", ("x",), "m", 0, author, ts)
    return PoolEntry(SignedRollout(body, b"s"), rollout, via=author, source=source)


def plain_pool(max_entries: int, max_bytes: int, max_age_ms: int) -> RolloutPool:
    """A pool without per-source shares or caps on new networks: the plain caps and the plain draw."""
    return RolloutPool("me", max_entries, max_bytes, max_age_ms, share=1.0, new_source_cap=10**6)


def test_pool_caps_entries_and_bytes_oldest_out():
    pool = plain_pool(max_entries=5, max_bytes=10_000, max_age_ms=60_000)
    evicted = sum(pool.insert(entry("a", NOW, i)) for i in range(8))
    assert len(pool) == 5 and evicted == 3
    pool = plain_pool(max_entries=100, max_bytes=1000, max_age_ms=60_000)
    for i in range(20):
        pool.insert(entry("a", NOW, i, size=300))
    assert pool.nbytes <= 1000 and len(pool) == 3


def test_sample_is_fresh_excludes_own_and_hands_each_out_once():
    pool = plain_pool(100, 10**6, max_age_ms=60_000)
    pool.insert(entry("me", NOW))
    pool.insert(entry("old", NOW - 120_000))
    for i in range(4):
        pool.insert(entry("b", NOW, i))
    rng = random.Random(0)
    first = pool.sample(10, NOW, rng)
    assert {r.author for r in first} == {"b"} and len(first) == 4
    assert pool.sample(10, NOW, rng) == []


def test_sample_caps_each_author_and_is_uniform_within():
    rng = random.Random(1)
    counts = Counter()
    for trial in range(300):
        pool = plain_pool(1000, 10**7, 60_000)
        for i in range(30):
            pool.insert(entry("big", NOW, i))
        for i in range(3):
            pool.insert(entry(f"small{i}", NOW, 100 + i))
        chosen = pool.sample(8, NOW, rng)
        by_author = Counter(r.author for r in chosen)
        assert len(chosen) == 8 and by_author["big"] == 5  # cap 5: 3 smalls give 1 each, big fills the rest
        counts.update(r.ref.index for r in chosen if r.author == "big")
    # every one of the big author's 30 rollouts is drawn about equally often
    assert min(counts.values()) > 0.4 * max(counts.values())


def test_explicit_per_author_cap():
    pool = plain_pool(1000, 10**7, 60_000)
    for i in range(10):
        pool.insert(entry("a", NOW, i))
    assert len(pool.sample(8, NOW, random.Random(0), per_author_cap=3)) == 3


def test_for_pull_one_per_author_unheard_first_and_newer_than_known():
    pool = plain_pool(1000, 10**7, 60_000)
    for author in "abcd":
        for k in range(3):
            pool.insert(entry(author, NOW - 1000 + k, ord(author) * 10 + k))
    have = {"a": NOW - 1000 + 2, "b": NOW - 1000, "c": NOW - 1000 + 1}
    answer = pool.for_pull(have, 10, NOW, requester="x", rng=random.Random(0))
    bodies = [s.body.decode().split("-")[0] for s in answer]
    assert bodies == ["d", "b", "c"]  # a: nothing newer; d unheard first; then b (heard longest ago)
    assert pool.for_pull({}, 2, NOW, requester="x", rng=random.Random(0)).__len__() == 2
    assert all(not s.body.startswith(b"d") for s in pool.for_pull({}, 10, NOW, requester="d", rng=random.Random(0)))


def test_seen_cache_duplicate_replay_and_floor_after_eviction():
    seen = SeenCache(capacity=3, window_ms=60_000)
    seen.add(b"k", 1, b"id1", NOW)
    assert seen.check(b"k", 1, b"id1", NOW) == "duplicate"
    assert seen.check(b"k", 1, b"other", NOW) == "replay"
    assert seen.check(b"k", 2, b"id2", NOW + 1) is None
    for seq in range(2, 6):
        seen.add(b"k", seq, b"id%d" % seq, NOW + seq)
    assert len(seen) == 3
    # seq 1 and 2 were forgotten: their replays are refused by the author's floor
    assert seen.check(b"k", 1, b"id1", NOW) == "stale"
    assert seen.check(b"k", 2, b"id2", NOW + 2) == "stale"
    assert seen.check(b"other", 1, b"x", NOW) is None
    seen.expire(NOW + 120_000)
    assert len(seen) == 0


def test_a_seen_cache_entry_takes_under_300_bytes():
    import base64
    import hashlib
    import tracemalloc

    authors = [bytes([k]) * 32 for k in range(4)]
    seen = SeenCache(capacity=100_000, window_ms=600_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(10_000):  # a fresh key object per body, as parsing makes them
            key = base64.urlsafe_b64decode(base64.urlsafe_b64encode(authors[i % 4]))
            seen.add(key, 1_800_000_000_000_000 + i, hashlib.sha256(i.to_bytes(4, "big")).digest(), 1_800_000_000_000 + i)
        per_entry = (tracemalloc.get_traced_memory()[0] - before) / 10_000
    finally:
        tracemalloc.stop()
    print(f"\nseen-cache: {per_entry:.0f} bytes per entry")
    assert len(seen) == 10_000 and per_entry < 300  # the tuple layout took ~390: 48 MB for two full windows
    assert seen.check(authors[1], 1_800_000_000_000_001, hashlib.sha256((1).to_bytes(4, "big")).digest(), 0) == "duplicate"
    assert seen.check(authors[1], 1_800_000_000_000_001, b"\0" * 32, 0) == "replay"


def test_no_author_and_no_address_holds_more_than_its_share():
    pool = RolloutPool("me", max_entries=100, max_bytes=10**6, max_age_ms=60_000, share=0.25)
    for i in range(60):
        pool.insert(entry("honest", NOW, i, source="10.0.0.1"))
    for i in range(200):  # one flooder: its own oldest go, not the honest peer's
        pool.insert(entry(f"sybil-{i}", NOW, i, source="203.0.113.9"))
    authors = Counter(e.author for e in pool._entries.values())
    assert authors["honest"] == 25 and sum(n for a, n in authors.items() if a.startswith("sybil")) == 25
    big = RolloutPool("me", max_entries=100, max_bytes=10_000, max_age_ms=60_000, share=0.25)
    for i in range(20):
        big.insert(entry("honest", NOW, i, size=100, source="10.0.0.1"))
    for i in range(20):  # entries far beyond the usual size cost their bytes against their own source
        big.insert(entry("filler", NOW, i, size=1000, source="203.0.113.9"))
    held = Counter()
    for e in big._entries.values():
        held[e.author] += len(e.signed.body)
    assert held["honest"] == 2000 and held["filler"] <= 2500


def test_the_draw_favours_standing_and_caps_new_networks():
    pool = RolloutPool("me", max_entries=1000, max_bytes=10**7, max_age_ms=60_000)
    for i in range(20):
        pool.insert(entry("honest", NOW, i, source="10.0.0.1"))
    for k in range(4):
        for i in range(20):
            pool.insert(entry(f"sybil-{k}", NOW, 100 * k + i, source=f"203.0.113.{k}"))
    pool.set_standing({"honest": 1.0, **{f"sybil-{k}": 0.1 for k in range(4)}},
                      {"honest": "10.0.0.0/24", **{f"sybil-{k}": "203.0.113.0/24" for k in range(4)}})
    drawn = pool.sample(8, NOW, random.Random(3))
    sybils = [r for r in drawn if r.author.startswith("sybil")]
    assert len(drawn) == 8 and len(sybils) <= 2  # one network of fresh keys: 2 groups a draw at most
    unearned = RolloutPool("me", max_entries=1000, max_bytes=10**7, max_age_ms=60_000)
    for k in range(3):
        for i in range(10):
            unearned.insert(entry(f"new-{k}", NOW, 10 * k + i, source=f"10.{k}.0.1"))
    assert len(unearned.sample(6, NOW, random.Random(0))) == 6  # three new networks fill a draw of 6
