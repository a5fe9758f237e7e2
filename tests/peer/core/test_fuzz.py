"""Property-based fuzzing of decoding and admission: 11,000 generated inputs in the default run
(2,500 frames, 2,000 items, 3,500 mutated bodies, 2,000 near-valid bodies, 1,000 frames into the core).

Whatever arrives, the only outcomes are a typed message / `Accepted`, or the documented rejection
(`MessageError`, `WireError`, `Rejected` with a reason listed in REASONS). No other exception escapes.
"""

from __future__ import annotations

import json
import time

import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm_app.peer.core.actions import Action
from swarm_app.peer.core.admission import REASONS, Accepted, Admission, AdmissionLimits, Rejected
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.messages import MESSAGE_REASONS, MessageError, decode_frame
from swarm_app.peer.core.pool import RolloutPool, SeenCache
from swarm_app.peer.core.protocol import ProtocolConfig
from swarm_app.peer.core.scores import REASON_WEIGHTS
from swarm_app.peer.core.wire import SignedRollout, WireError, item_from_json
from tests.peer.helpers import make_rollout, signed
from tests.peer.sim import Simulation

AUTHOR = Identity.generate()
NOW = int(time.time() * 1000)
VALID = signed(AUTHOR, make_rollout(seed=5, index=5), seq=1, ts_ms=NOW)
VALID_DICT = json.loads(VALID.body)

FUZZ = settings(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=30)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def fresh_admission() -> Admission:
    return Admission(RolloutPool("me", 50, 10**6, 600_000), SeenCache(100, 600_000), AdmissionLimits())


def check_verdict(verdict) -> None:
    assert isinstance(verdict, (Accepted, Rejected))
    if isinstance(verdict, Rejected):
        assert verdict.reason in REASONS


@settings(FUZZ, max_examples=2500)
@given(st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["v", "key", "node", "nonce", "items", "id", "max", "have", "re", "reason",
                                     "sig", "listen", "proof"]), json_scalars | st.lists(json_scalars, max_size=3),
                    max_size=5)
    .flatmap(lambda d: st.sampled_from(["hello", "proof", "push", "pull", "sample", "bye", "x"]).map(
        lambda t: json.dumps({"t": t, **d})))))
def test_decode_frame_only_raises_message_error(text):
    try:
        decode_frame(text)
    except MessageError as exc:
        assert exc.reason in MESSAGE_REASONS


@settings(FUZZ, max_examples=2000)
@given(st.one_of(json_values, st.fixed_dictionaries({"body": json_values, "sig": json_values}),
                 st.fixed_dictionaries({"body": st.text(max_size=300), "sig": st.text(max_size=90)})))
def test_items_are_either_rejected_or_judged(item):
    try:
        candidate = item_from_json(item)
    except WireError as exc:
        assert exc.reason in REASONS
        return
    check_verdict(fresh_admission().admit(candidate, "fuzzer", NOW))


@settings(FUZZ, max_examples=3500)
@given(st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10**6), st.integers(0, 255)),
                min_size=1, max_size=4))
def test_mutated_valid_bodies_never_get_in(mutations):
    body = bytearray(VALID.body)
    for kind, where, value in mutations:
        at = where % (len(body) + 1)
        if kind == "flip" and at < len(body):
            body[at] ^= value or 1
        elif kind == "insert":
            body[at:at] = bytes([value])
        elif kind == "delete" and at < len(body):
            del body[at]
    verdict = fresh_admission().admit(SignedRollout(bytes(body), VALID.sig), "fuzzer", NOW)
    check_verdict(verdict)
    assert isinstance(verdict, Rejected) or bytes(body) == VALID.body


FIELD_VALUES = {
    "v": st.sampled_from([1, 2, 0, -1, 1.0, True, "1", None]),
    "author": st.sampled_from([VALID_DICT["author"], b64url(b"\0" * 32), "", "!!", b64url(b"x" * 31)]) | st.text(max_size=50),
    "seq": st.integers(-5, 2**60) | st.floats() | st.text(max_size=5),
    "ts_ms": st.sampled_from([NOW, NOW - 11 * 60_000, NOW + 3 * 60_000, 0, -1, 2**53]) | st.integers(0, 2**60),
    "task": json_values | st.fixed_dictionaries({"dataset": json_values, "config_digest": json_values,
                                                 "seed": json_values, "index": json_values}),
    "question": json_values, "answer": json_values, "completions": json_values, "model": json_values,
    "round": json_values,
}


@settings(FUZZ, max_examples=2000)
@given(st.dictionaries(st.sampled_from(sorted(FIELD_VALUES)), st.just(None), max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({k: FIELD_VALUES[k] for k in keys})),
    st.sampled_from(["jcs", "sorted", "loose"]), st.booleans())
def test_structured_near_valid_bodies_are_rejected_with_a_documented_reason(changes, spelling, drop_one):
    data = dict(VALID_DICT, **changes)
    if drop_one and changes:
        data.pop(next(iter(changes)))
    try:
        body = rfc8785.dumps(data) if spelling == "jcs" else json.dumps(
            data, sort_keys=spelling == "sorted", separators=(",", ":")).encode("utf-8", "surrogatepass")
    except (rfc8785.CanonicalizationError, ValueError, TypeError, OverflowError):
        body = json.dumps(data, default=str).encode("utf-8", "surrogatepass")
    sig = AUTHOR.sign(b"RSP/1 rollout\n" + body)  # validly signed: the other checks must hold the door
    verdict = fresh_admission().admit(SignedRollout(body, sig), "fuzzer", NOW)
    check_verdict(verdict)
    if isinstance(verdict, Accepted):  # only if every field still makes an honest rollout
        assert verdict.entry.rollout.question == VALID_DICT["question"]


SIM = Simulation(2, ProtocolConfig(max_inbound_per_ip=64), seed=0)
SIM.dial(1, SIM.nodes[0].addr)
HUB = SIM.nodes[0].core
HUB.peers.policy = type(HUB.peers.policy)(offense_limit=float("inf"))  # keep the connection to fuzz on


@settings(FUZZ, max_examples=1000)
@given(st.one_of(
    st.text(max_size=100),
    st.fixed_dictionaries({"t": st.just("push"), "items": st.lists(json_values | st.just(VALID.to_item()), max_size=3)}),
    st.fixed_dictionaries({"t": st.just("pull"), "id": json_values, "max": json_values, "have": json_values}),
    st.fixed_dictionaries({"t": st.just("sample"), "re": json_values, "items": json_values}),
).map(lambda m: m if isinstance(m, str) else json.dumps(m)))
def test_the_node_core_turns_any_frame_into_actions(text):
    conn = next(iter(HUB.links.conns))
    HUB.links.conns[conn].bucket.tokens = 1e9  # no rate limit while fuzzing
    actions = HUB.on_frame(conn, text, SIM.now)
    assert isinstance(actions, list) and all(isinstance(a, Action.__args__) for a in actions)
    assert set(HUB.tally.rejections()) <= set(REASONS) | set(MESSAGE_REASONS)
    assert set(HUB.tally.rejections()) <= set(REASON_WEIGHTS)
