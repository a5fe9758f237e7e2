"""Wire format: canonical signed bodies, ids, strict decoding."""

from __future__ import annotations

import hashlib
import json

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import TaskRef
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.wire import (
    MAX_BODY_BYTES,
    SIGNATURE_PREFIX,
    SignedRollout,
    WireError,
    body_dict,
    canonical_json,
    item_from_json,
    parse_body,
    sign_rollout,
    signature_valid,
)
from tests.peer.helpers import make_rollout, signed

IDENT = Identity.generate()


def test_signed_body_is_rfc8785_and_id_is_its_sha256():
    rollout = make_rollout()
    item = sign_rollout(IDENT, rollout, seq=7, ts_ms=1_700_000_000_000)
    assert item.body == rfc8785.dumps(json.loads(item.body))
    assert item.id == hashlib.sha256(item.body).digest()
    parsed = parse_body(item.body)
    assert parsed.seq == 7 and parsed.ts_ms == 1_700_000_000_000 and parsed.author_key == IDENT.public_key
    assert parsed.rollout.author == IDENT.node_id and parsed.rollout.created_ms == 1_700_000_000_000
    assert parsed.rollout.completions == rollout.completions and parsed.rollout.ref == rollout.ref
    assert signature_valid(parsed, item)
    assert IDENT.sign(SIGNATURE_PREFIX + item.body) == item.sig  # Ed25519 is deterministic


def test_items_travel_byte_for_byte_through_json():
    item = signed(IDENT)
    relayed = item_from_json(json.loads(json.dumps({"x": item.to_item()}, ensure_ascii=True))["x"])
    assert relayed == item and relayed.id == item.id


def test_no_floats_in_signed_fields():
    rollout = make_rollout()
    data = body_dict(rollout, IDENT.public_key, 1, 2)
    data["round"] = 1.5
    with pytest.raises(WireError) as err:
        parse_body(rfc8785.dumps(data))
    assert err.value.reason == "schema"


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d.update(v=2), "version"),
    (lambda d: d.update(v=True), "version"),
    (lambda d: d.pop("model"), "schema"),
    (lambda d: d.update(extra=1), "schema"),
    (lambda d: d.update(seq=-1), "schema"),
    (lambda d: d.update(seq=2**53), "schema"),
    (lambda d: d.update(completions=[]), "schema"),
    (lambda d: d.update(completions=["x"] * 65), "schema"),
    (lambda d: d.update(author="short"), "schema"),
    (lambda d: d["task"].update(seed="1"), "schema"),
])
def test_schema_violations_have_their_reason(mutate, reason):
    data = body_dict(make_rollout(), IDENT.public_key, 1, 2)
    mutate(data)
    with pytest.raises(WireError) as err:
        parse_body(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    assert err.value.reason == reason


def test_non_canonical_spellings_are_refused():
    body = signed(IDENT).body
    data = json.loads(body)
    data["question"] += "\u00e9"  # escaped by json.dumps' default, raw in RFC 8785
    body = rfc8785.dumps(data)
    for variant in (json.dumps(data).encode(),  # whitespace and \u escapes
                    json.dumps(dict(reversed(data.items())), separators=(",", ":"), ensure_ascii=False).encode(),
                    body.replace(b'"v":1', b'"v":1.0'),                           # number spelling
                    body[:-1] + b',"v":1}'):                                      # duplicate key
        with pytest.raises(WireError) as err:
            parse_body(variant)
        assert err.value.reason in ("not_canonical", "schema", "version")


def test_size_and_encoding_limits():
    with pytest.raises(WireError, match="too_large"):
        parse_body(b" " * (MAX_BODY_BYTES + 1))
    with pytest.raises(WireError, match="too_large"):
        item_from_json({"body": "x" * (MAX_BODY_BYTES + 1), "sig": "AA"})
    with pytest.raises(WireError, match="too_large"):  # 4-byte characters: short string, big body
        item_from_json({"body": "\U0001F600" * (MAX_BODY_BYTES // 4 + 1), "sig": "AA"})
    for bad in ({"body": "\ud800", "sig": "AA"}, {"body": "{}", "sig": "A"}):
        with pytest.raises(WireError, match="malformed"):
            item_from_json(bad)
    for bad in (None, [], {"body": 1, "sig": "AA"}, {"body": "{}"}, {"body": "{}", "sig": "AA", "x": 1}):
        with pytest.raises(WireError, match="schema"):
            item_from_json(bad)
    with pytest.raises(WireError, match="malformed"):
        parse_body(b"[" * 60_000)  # deep nesting: RecursionError inside json is a rejection


def test_an_own_rollout_over_the_limit_is_refused_at_signing():
    big = make_rollout()
    big = Rollout(big.ref, big.question, big.answer, ("y" * 40_000, "z" * 40_000), "m", 0, "", 0)
    with pytest.raises(WireError):
        sign_rollout(IDENT, big, 1, 1)


def test_altered_body_fails_the_signature():
    item = signed(IDENT)
    data = json.loads(item.body)
    data["answer"] = data["answer"] + "0"
    forged = SignedRollout(rfc8785.dumps(data), item.sig)
    assert not signature_valid(parse_body(forged.body), forged)


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None, database=None)
@given(question=text, answer=text, completions=st.lists(text, min_size=1, max_size=4),
       model=text, seq=st.integers(0, 2**53 - 1), ts=st.integers(0, 2**53 - 1), dataset=text)
def test_fast_canonical_form_equals_rfc8785(question, answer, completions, model, seq, ts, dataset):
    rollout = Rollout(TaskRef(dataset, "abc", 1, 2), question, answer, tuple(completions), model, 3, "", 0)
    data = body_dict(rollout, IDENT.public_key, seq, ts)
    assert canonical_json(data) == rfc8785.dumps(data)
    assert parse_body(rfc8785.dumps(data)).rollout.question == question
