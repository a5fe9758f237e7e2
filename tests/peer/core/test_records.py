"""Signed node records in peer exchange: what a receiver refuses (forged, altered, expired, of another swarm,
too many), what a node relays (only records of peers whose address it verified, byte for byte), and when it
signs its own (only once dial-back reached it)."""

from __future__ import annotations

import json
import random

import pytest
import rfc8785

from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.protocol import ProtocolConfig
from swarm_app.peer.core.reachability import Reachability, ReachabilityPolicy
from swarm_app.peer.core.records import (
    MAX_RECORDS,
    RECORD_LIFETIME_MS,
    RECORD_PREFIX,
    RecordError,
    parse_record,
    sign_record,
)
from tests.peer.sim import START, Simulation

NOW_MS = int(START * 1000)
SWARM = "easy"


def forged(body: dict, signer: Identity) -> dict[str, str]:
    """A record item with `body` as given, signed by `signer` (whoever it names)."""
    raw = rfc8785.dumps(body)
    return {"body": raw.decode(), "sig": b64url(signer.sign(RECORD_PREFIX + raw))}


def body_of(identity: Identity, addr: str = "10.0.0.1:4747", **changes) -> dict:
    return {"v": 1, "node": identity.node_id, "key": b64url(identity.public_key), "swarm": SWARM, "addrs": [addr],
            "reachable": True, "issued_ms": NOW_MS, "expires_ms": NOW_MS + RECORD_LIFETIME_MS, **changes}


def reason(item: object, now_ms: int = NOW_MS, swarm: str = SWARM) -> str:
    with pytest.raises(RecordError) as refused:
        parse_record(item, swarm, now_ms)
    return refused.value.reason


def test_a_record_checks_out_and_travels_byte_for_byte():
    honest = Identity.generate()
    record = sign_record(honest, SWARM, ["10.0.0.1:4747", "[2001:db8::1]:4747"], True, NOW_MS)
    again = parse_record(json.loads(json.dumps(record.to_item())), SWARM, NOW_MS + 60_000)
    assert again == record and again.node == honest.node_id and again.addrs == ("10.0.0.1:4747", "[2001:db8::1]:4747")
    assert record.body.startswith(b'{"addrs":["10.0.0.1:4747"') and len(record.body) < 400


def test_forged_altered_stale_and_foreign_records_are_refused():
    honest, attacker = Identity.generate(), Identity.generate()
    genuine = sign_record(honest, SWARM, ["10.0.0.1:4747"], True, NOW_MS).to_item()
    assert reason(forged(body_of(honest, "10.66.0.1:4747"), attacker)) == "bad_signature"  # honest id, attacker's address
    honest_id_own_key = {**body_of(attacker, "10.66.0.1:4747"), "node": honest.node_id}
    assert reason(forged(honest_id_own_key, attacker)) == "wrong_node"  # the id is not the key's
    altered = {**genuine, "body": genuine["body"].replace("10.0.0.1:4747", "10.66.0.1:4747")}
    assert reason(altered) == "bad_signature"  # a relay changed the address
    assert reason(genuine, now_ms=NOW_MS + RECORD_LIFETIME_MS) == "expired"
    assert reason(forged(body_of(honest, issued_ms=NOW_MS + 300_000, expires_ms=NOW_MS + 900_000), honest)) == "future"
    assert reason(forged(body_of(honest, expires_ms=NOW_MS + 86_400_000), honest)) == "lifetime"
    assert reason(genuine, swarm="paper") == "swarm"
    assert reason(forged(body_of(honest, "node.example.org:4747"), honest)) == "address"  # never a name to resolve
    assert reason(forged(body_of(honest, "10.0.0.1:0"), honest)) == "address"
    assert reason(forged({**body_of(honest), "extra": 1}, honest)) == "schema"
    assert reason({"body": genuine["body"].replace(":", ": ", 1), "sig": genuine["sig"]}) == "not_canonical"
    assert reason({"body": genuine["body"] + " " * 1024, "sig": genuine["sig"]}) == "too_large"


def test_a_node_takes_good_records_and_counts_the_bad_ones():
    sim = Simulation(1, ProtocolConfig(), seed=1)
    core, attacker = sim.nodes[0].core, Identity.generate()
    honest = [Identity.generate() for _ in range(3)]
    good = [sign_record(h, SWARM, [f"10.1.{k}.1:4747"], True, NOW_MS).to_item() for k, h in enumerate(honest)]
    bad = [forged(body_of(honest[0], "10.66.0.1:4747"), attacker), sign_record(attacker, "paper", ["10.66.1.1:4747"],
                                                                               True, NOW_MS).to_item()]
    assert core.on_peer_list({"records": good + bad, "peers": [{"addr": "10.66.2.1:4747", "verified": True}]},
                             START) == 3
    assert {s.addr: s.node_id for s in core.addresses.entries()} == {
        f"10.1.{k}.1:4747": h.node_id for k, h in enumerate(honest)}  # no forged, foreign or unsigned address
    assert core.exchange.rejected == {"bad_signature": 1, "swarm": 1}


def test_more_than_32_records_in_one_message_are_refused_whole():
    sim = Simulation(1, ProtocolConfig(exchange_take=64), seed=2)
    core = sim.nodes[0].core
    records = [sign_record(Identity.generate(), SWARM, [f"10.2.{k}.1:4747"], True, NOW_MS).to_item()
               for k in range(MAX_RECORDS + 1)]
    assert core.on_peer_list({"records": records}, START) == 0 and len(core.addresses) == 0
    assert core.exchange.rejected == {"too_many": 1}
    assert core.on_peer_list({"records": records[:MAX_RECORDS]}, START) == MAX_RECORDS


def test_a_node_relays_only_records_of_peers_whose_address_it_verified_unchanged():
    sim = Simulation(3, ProtocolConfig(), seed=3, dialback_checks=0)
    hub, one, two = (n.core for n in sim.nodes)
    one_node, two_node = sim.nodes[1], sim.nodes[2]
    assert hub.peer_list(START) == {"records": [], "peers": []}  # not reached by dial-back yet: nothing of its own
    for node in (one_node, two_node):
        node.core.set_dialable([node.addr])
    answer = {"records": [one.peer_list(START)["records"][0], two.peer_list(START)["records"][0]]}
    assert hub.on_peer_list(answer, START) == 2
    assert hub.peer_list(START)["records"] == []  # heard of, never reached: not passed on
    sim.dial(0, one_node.addr)  # the hub completes a hello at node 1's address
    listed = hub.peer_list(sim.now)
    assert listed["records"] == [one.exchange.own.to_item()]
    assert listed["peers"] == [{"node": one.node_id, "addr": one_node.addr, "verified": True}]
    assert hub.peer_list(START + RECORD_LIFETIME_MS / 1000)["records"] == []  # expired: a departed node fades


def test_a_node_signs_its_record_once_dial_back_reached_it_and_re_signs_before_expiry():
    sim = Simulation(1, ProtocolConfig(), seed=4)
    core = sim.nodes[0].core
    core.set_dialable([])
    assert core.exchange.own_record(START) is None
    core.set_dialable(["10.0.0.1:4747", "not an address"])
    first = core.exchange.own_record(START)
    assert first is not None and first.addrs == ("10.0.0.1:4747",) and not first.reachable
    core.set_reachable(True)
    signed = core.exchange.own_record(START + 1)
    assert signed.reachable and signed.issued_ms == NOW_MS + 1000  # what it says changed: signed anew
    half = START + 1 + RECORD_LIFETIME_MS / 2000
    assert core.exchange.own_record(half - 1) is signed
    assert core.exchange.own_record(half).issued_ms == int(half * 1000)
    core.set_reachable(False)  # helpers in three networks could not dial it: nothing dialable to advertise
    assert core.exchange.own_record(half) is None and core.peer_list(half)["records"] == []


def test_the_record_names_the_address_most_helpers_reached_and_none_when_unreachable():
    state = Reachability(ReachabilityPolicy(), random.Random(0))
    assert state.dialable() == []
    state.on_answer("10.0.1.1", True, 1.0, "10.9.9.9:4747")  # one helper, maybe lying: its word for now
    assert state.dialable() == ["10.9.9.9:4747"]
    state.on_answer("10.0.2.1", True, 2.0, "10.5.5.5:4747")
    state.on_answer("10.0.3.1", True, 3.0, "10.5.5.5:4747")
    assert state.status is True and state.dialable() == ["10.5.5.5:4747"]  # outvoted
    down = Reachability(ReachabilityPolicy(), random.Random(0))
    down.on_answer("10.0.1.1", True, 1.0, "10.5.5.5:4747")
    for k in range(2, 5):
        down.on_answer(f"10.0.{k}.1", False, float(k))
    assert down.status is False and down.dialable() == []
