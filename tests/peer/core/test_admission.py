"""Admission, sans-IO: every rejection reason, in a fixed order, with nothing filed on rejection."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import rfc8785

from swarm_app.kernel import tasks
from swarm_app.kernel.tasks import HELDOUT_SEED, Task, TaskRef
from swarm_app.peer.core.admission import REASONS, Accepted, Admission, AdmissionLimits, Rejected
from swarm_app.peer.core.config import LOOPBACK_TRUST
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.pool import RolloutPool, SeenCache
from swarm_app.peer.core.sources import SourceLimits
from swarm_app.peer.core.wire import SignedRollout, sign_rollout
from tests.peer.helpers import make_rollout, signed

AUTHOR = Identity.generate()
NOW = int(time.time() * 1000)


def admission(sources: SourceLimits = LOOPBACK_TRUST, **limits) -> Admission:
    pool = RolloutPool("me", 100, 10**7, 600_000)
    return Admission(pool, SeenCache(1000, 600_000), AdmissionLimits(**limits), sources=sources)


def reason(verdict) -> str:
    return verdict.reason if isinstance(verdict, Rejected) else "accepted"


def test_a_valid_rollout_is_accepted_and_sampled_with_its_author():
    adm = admission()
    rollout = make_rollout()
    verdict = adm.admit(signed(AUTHOR, rollout, ts_ms=NOW), "via", NOW)
    assert isinstance(verdict, Accepted) and verdict.entry.via == "via"
    [got] = adm.pool.sample(5, NOW, __import__("random").Random(0))
    assert got.author == AUTHOR.node_id and got.completions == rollout.completions and got.ref == rollout.ref


def test_forgeries_are_refused():
    adm = admission()
    good = signed(AUTHOR, ts_ms=NOW)
    other_key = SignedRollout(good.body, Identity.generate().sign(b"RSP/1 rollout\n" + good.body))
    data = json.loads(good.body)
    data["completions"][0] += "!"
    altered = SignedRollout(rfc8785.dumps(data), good.sig)
    for forged in (other_key, altered, SignedRollout(good.body, b"\0" * 64), SignedRollout(good.body, b"short")):
        assert reason(adm.admit(forged, "x", NOW)) == "bad_signature"
    assert len(adm.pool) == 0 and len(adm.seen) == 0
    assert reason(adm.admit(good, "x", NOW)) == "accepted"  # forged copies did not poison the seen-cache


def test_ground_truth_is_rederived_from_the_task_ref():
    adm = admission()
    rollout = make_rollout(index=3)
    wrong_answer = dataclasses.replace(rollout, answer=rollout.answer + "1")
    wrong_question = dataclasses.replace(rollout, question="What is 2+2?")
    other_ref = dataclasses.replace(rollout, ref=dataclasses.replace(rollout.ref, index=rollout.ref.index + 1))
    for i, forged in enumerate((wrong_answer, wrong_question, other_ref)):
        assert reason(adm.admit(sign_rollout(AUTHOR, forged, i, NOW), "x", NOW)) == "ground_truth"
    unknown = dataclasses.replace(rollout, ref=TaskRef(rollout.ref.dataset, "0" * 16, 1, 2))
    assert reason(adm.admit(sign_rollout(AUTHOR, unknown, 9, NOW), "x", NOW)) == "unknown_task"
    no_dataset = dataclasses.replace(rollout, ref=TaskRef("no_such_dataset", rollout.ref.config_digest, 1, 2))
    assert reason(adm.admit(sign_rollout(AUTHOR, no_dataset, 10, NOW), "x", NOW)) == "unknown_task"
    assert len(adm.pool) == 0


@pytest.mark.parametrize("offset_ms, expected", [
    (-10 * 60_000 - 1, "stale"), (-10 * 60_000 + 1000, "accepted"),
    (2 * 60_000 + 1, "future"), (2 * 60_000 - 1000, "accepted"),
])
def test_timestamp_window(offset_ms, expected):
    assert reason(admission().admit(signed(AUTHOR, ts_ms=NOW + offset_ms), "x", NOW)) == expected


def test_duplicates_and_replays():
    adm = admission()
    first = signed(AUTHOR, make_rollout(index=1), seq=5, ts_ms=NOW)
    assert reason(adm.admit(first, "x", NOW)) == "accepted"
    assert reason(adm.admit(first, "y", NOW)) == "duplicate"
    same_seq = signed(AUTHOR, make_rollout(index=2), seq=5, ts_ms=NOW)
    assert reason(adm.admit(same_seq, "x", NOW)) == "replay"
    forged_same_seq = SignedRollout(same_seq.body, first.sig)
    assert reason(adm.admit(forged_same_seq, "x", NOW)) == "bad_signature"
    assert len(adm.pool) == 1


def test_author_rate_limit_counts_only_verified_rollouts():
    adm = admission(author_rate=0.0, author_burst=3)
    for i in range(5):  # forged copies do not drain the author's bucket
        good = signed(AUTHOR, make_rollout(index=i), seq=i, ts_ms=NOW)
        adm.admit(SignedRollout(good.body, b"\1" * 64), "x", NOW)
    verdicts = [reason(adm.admit(signed(AUTHOR, make_rollout(index=i), seq=i, ts_ms=NOW), "x", NOW)) for i in range(5)]
    assert verdicts == ["accepted"] * 3 + ["author_rate"] * 2
    assert reason(adm.admit(signed(Identity.generate(), make_rollout(index=9), ts_ms=NOW), "x", NOW)) == "accepted"


def test_every_reason_is_documented():
    assert {"too_large", "malformed", "schema", "version", "not_canonical", "future", "stale", "duplicate",
            "replay", "bad_signature", "author_rate", "unknown_task", "ground_truth", "heldout_seed", "no_signal",
            "new_author"} == set(REASONS)


def test_a_heldout_seed_is_refused_before_regeneration_even_with_the_right_answer():
    asked: list[TaskRef] = []

    def regenerate(ref: TaskRef) -> Task:  # a node that could regenerate held-out items (the landed code could)
        asked.append(ref)
        return tasks.regenerate(dataclasses.replace(ref, seed=rollout.ref.seed))

    rollout = make_rollout(index=4)
    adm = Admission(RolloutPool("me", 100, 10**7, 600_000), SeenCache(1000, 600_000), AdmissionLimits(), regenerate,
                    LOOPBACK_TRUST)
    assert reason(adm.admit(signed(AUTHOR, rollout, ts_ms=NOW), "x", NOW)) == "accepted"  # the stub works
    asked.clear()
    # the wire schema caps seeds at 2**31-1 (tasks.HELDOUT_SEED), so this is the only held-out seed
    heldout = dataclasses.replace(rollout, ref=dataclasses.replace(rollout.ref, seed=HELDOUT_SEED))
    assert reason(adm.admit(signed(AUTHOR, heldout, ts_ms=NOW + 1), "x", NOW)) == "heldout_seed"
    assert asked == [] and len(adm.pool) == 1 and len(adm.seen) == 1  # nothing regenerated, nothing filed


def test_a_group_without_a_reward_spread_is_never_pooled():
    adm = admission()
    rollout = make_rollout(index=5)
    all_right = dataclasses.replace(rollout, completions=(rollout.completions[0],) * 4)
    assert reason(adm.admit(signed(AUTHOR, all_right, ts_ms=NOW), "x", NOW)) == "no_signal"
    assert reason(adm.admit(signed(AUTHOR, rollout, ts_ms=NOW + 1), "x", NOW)) == "accepted"
    assert len(adm.pool) == 1


def test_fresh_keys_from_one_place_introduce_a_few_authors_only():
    adm = admission(SourceLimits())  # the defaults a real node runs with

    def push(key: Identity, ip: str, i: int) -> str:
        return reason(adm.admit(signed(key, make_rollout(index=i), ts_ms=NOW + i), key.node_id, NOW, ip, pushed=True))

    one_address = [push(Identity.generate(), "203.0.113.7", i) for i in range(20)]
    assert one_address.count("accepted") == 2 and set(one_address[2:]) == {"new_author"}
    one_network = [push(Identity.generate(), f"198.51.100.{i}", i) for i in range(20)]
    assert one_network.count("accepted") == 4  # ten addresses of one /24 are one network
    assert push(Identity.generate(), "192.0.2.1", 30) == "accepted"  # another network has its own budget
    known = Identity.generate()
    assert push(known, "192.0.2.2", 31) == "accepted"
    assert push(known, "192.0.2.2", 32) == "accepted"  # an admitted author is no longer new
