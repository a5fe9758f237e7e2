"""The `heard` filter a pull carries: no false negatives, few false positives, a fixed size whatever the
swarm's size, strict decoding, and pull answers that bring authors outside it first."""

from __future__ import annotations

import random

import pytest

from swarm_app.peer.core.heard import MAX_BYTES, HeardFilter
from swarm_app.peer.core.identity import b64url
from swarm_app.peer.core.messages import MessageError, decode_frame, encode
from tests.peer.core.test_pool import NOW, entry, plain_pool


def ids(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(32)) for _ in range(n)]


@pytest.mark.parametrize("count", [0, 1, 50, 300, 1024])
def test_every_author_added_is_in_and_few_others_are(count):
    added, others = ids(count, seed=1), ids(4000, seed=2)
    heard = HeardFilter.of(added)
    assert all(a in heard for a in added)
    assert sum(a in heard for a in others) / len(others) < 0.02


def test_the_size_stops_growing_with_the_swarm():
    sizes = [len(HeardFilter.of(ids(n)).to_wire()["bits"]) for n in (10, 100, 1000, 1024)]
    assert sizes == sorted(sizes) and sizes[-1] <= MAX_BYTES * 4 // 3 + 1
    # a node keeps at most 1,024 authors (MAX_HAVE): the filter is at most 2 KB however many exist
    assert len(HeardFilter.of(ids(5000)).data) == MAX_BYTES


def test_it_travels_in_a_pull_and_back():
    heard = HeardFilter.of(ids(40))
    pull = decode_frame(encode({"t": "pull", "id": 1, "max": 20, "have": {}, "heard": heard.to_wire()}))
    assert pull.heard is not None and pull.heard.data == heard.data and pull.heard.hashes == heard.hashes
    assert decode_frame(encode({"t": "pull", "id": 1, "max": 20, "have": {}})).heard is None  # older nodes


@pytest.mark.parametrize("heard", [
    "x", {"k": 7}, {"k": 0, "bits": b64url(bytes(64))}, {"k": 17, "bits": b64url(bytes(64))},
    {"k": True, "bits": b64url(bytes(64))}, {"k": 7, "bits": b64url(bytes(32))},
    {"k": 7, "bits": b64url(bytes(96))}, {"k": 7, "bits": b64url(bytes(4096))}, {"k": 7, "bits": "not base64!"},
])
def test_a_malformed_filter_is_a_bad_message(heard):
    with pytest.raises(MessageError) as err:
        decode_frame(encode({"t": "pull", "id": 1, "max": 20, "have": {}, "heard": heard}))
    assert err.value.reason == "bad_message"


def test_pull_answers_leave_out_what_the_asker_holds():
    pool = plain_pool(1000, 10**7, 60_000)
    older, newer, other = entry("a", NOW - 2000, 1), entry("a", NOW - 1000, 2), entry("b", NOW - 1000, 3)
    for e in (older, newer, other):
        pool.insert(e)
    held = HeardFilter.of_rollouts([newer.signed.id, other.signed.id])
    answer = pool.for_pull({}, 10, NOW, requester="x", rng=random.Random(0), held=held)
    assert answer == [older.signed]  # a's newest is held: its older one comes instead; b's only one is held
    asker = plain_pool(1000, 10**7, 60_000)
    asker.insert(entry("c", NOW - 500, 4))
    asker.insert(entry("d", NOW - 90_000, 5))
    assert asker.held_ids(NOW - 60_000) == [entry("c", NOW - 500, 4).signed.id]  # only the fresh ones


def test_pull_answers_bring_authors_outside_the_filter_first():
    pool = plain_pool(1000, 10**7, 60_000)
    authors = ids(30, seed=3)
    for k, author in enumerate(authors):
        pool.insert(entry(author, NOW - 1000, k))
    heard = HeardFilter.of(authors[:25])  # heard from minutes ago: no longer in `have`
    answer = pool.for_pull({}, 5, NOW, requester="x", rng=random.Random(0), heard=heard)
    assert {s.body.decode().split("-")[0] for s in answer} == set(authors[25:])
    # nothing else left: the ones heard longest ago still come, after those
    assert len(pool.for_pull({}, 10, NOW, requester="x", rng=random.Random(0), heard=heard)) == 10


def test_among_authors_heard_those_not_heard_lately_come_first():
    """After a partition heals, the other half was heard minutes ago: inside `heard`, outside `recent`."""
    pool = plain_pool(1000, 10**7, 60_000)
    authors = ids(30, seed=4)
    for k, author in enumerate(authors):
        pool.insert(entry(author, NOW - 1000, k))
    heard, recent = HeardFilter.of(authors), HeardFilter.of(authors[:20])
    for seed in range(5):
        answer = pool.for_pull({}, 10, NOW, requester="x", rng=random.Random(seed), heard=heard, recent=recent)
        assert {s.body.decode().split("-")[0] for s in answer} == set(authors[20:])
    unheard = HeardFilter.of(authors[5:])  # never heard beats heard long ago
    answer = pool.for_pull({}, 5, NOW, requester="x", rng=random.Random(0), heard=unheard, recent=recent)
    assert {s.body.decode().split("-")[0] for s in answer} == set(authors[:5])
