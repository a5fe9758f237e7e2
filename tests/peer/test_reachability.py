"""The sans-IO side of dial-back (swarm_app/peer/core/reachability.py): verdicts from distinct witnesses,
which helper is asked when, the helper's rate limits, the probe's proof and the requester's tokens."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from swarm_app.peer.core.dht_timer import CHECKED, UNCHECKED
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.reachability import (
    DialbackDoor,
    DialbackLimits,
    ProbeTokens,
    Reachability,
    ReachabilityPolicy,
    new_nonce,
    new_token,
    parse_request,
    probe_answer,
    probe_proves,
)
from swarm_app.peer.core.sources import LAN
from swarm_app.peer.io.dht import node_announce_key


def state(**policy) -> Reachability:
    return Reachability(ReachabilityPolicy(**{"ask_every_s": 1.0, **policy}), random.Random(1))


def test_three_networks_dialing_back_make_a_node_reachable():
    s = state()
    assert s.on_answer("10.0.1.5", True, 0) is None
    assert s.on_answer("10.0.1.6", True, 1) is None  # the same /24: one witness, not two
    assert s.on_answer("10.0.2.5", True, 2) is None
    assert s.on_answer("10.0.3.5", True, 3) is True
    assert sorted(s.confirmed) == ["10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]


def test_on_loopback_distinct_addresses_are_distinct_witnesses():
    s = state(by_address=True)
    for i, ip in enumerate(("127.0.0.2", "127.0.0.3", "127.0.0.4")):
        s.on_answer(ip, True, i)
    assert s.status is True
    networks = state()
    for i, ip in enumerate(("127.0.0.2", "127.0.0.3", "127.0.0.4")):
        networks.on_answer(ip, True, i)
    assert networks.status is None and len(networks.confirmed) == 1


def test_reachable_from_private_helpers_only_is_reachable_on_this_network_only():
    """A helper dials the address it saw the request from: helpers at private addresses reach the node on its own
    network, which says nothing about the internet; one public helper among the witnesses does."""
    lan = Reachability(ReachabilityPolicy(), random.Random(1), LAN)
    for i, ip in enumerate(("192.168.1.5", "192.168.1.6", "10.0.0.7")):
        lan.on_answer(ip, True, i)
    assert lan.status is True and lan.lan_only
    mixed = Reachability(ReachabilityPolicy(), random.Random(1), LAN)
    for i, ip in enumerate(("192.168.1.5", "192.168.1.6", "203.0.113.9")):
        mixed.on_answer(ip, True, i)
    assert mixed.status is True and not mixed.lan_only
    taken_back = Reachability(ReachabilityPolicy(confirmations=3), random.Random(1), LAN)
    taken_back.on_answer("203.0.113.9", True, 0)
    taken_back.on_answer("203.0.113.10", False, 1)  # the same /24 now says no: its "yes" no longer counts
    for i, ip in enumerate(("192.168.1.5", "192.168.1.6", "10.0.0.7")):
        taken_back.on_answer(ip, True, 2 + i)
    assert taken_back.status is True and taken_back.lan_only
    assert not state().lan_only


def test_a_node_dialed_back_from_its_lan_only_stays_off_the_checked_key_and_asks_public_helpers():
    """The DHT's checked key lists nodes newcomers on the internet can dial: LAN helpers reach the node's LAN
    address, not its router's, so it stays on the unchecked key until a public helper confirms."""
    s = Reachability(ReachabilityPolicy(ask_every_s=1.0), random.Random(1), LAN)
    node = SimpleNamespace(dialback=SimpleNamespace(state=s), config=SimpleNamespace(local_only=False),
                           core=SimpleNamespace(reachable=None, confirmed=False), mapping=None)
    s.on_answer("192.168.1.5", True, 0)
    node.core.confirmed = True  # its first confirmation named an address (NodeCore.set_dialable)
    assert not s.reached_from_outside() and node_announce_key(node) == UNCHECKED
    for i, ip in enumerate(("192.168.1.6", "10.0.0.7")):
        s.on_answer(ip, True, 1 + i)
    node.core.reachable = s.status
    assert s.status is True and s.lan_only and node_announce_key(node) == UNCHECKED
    lan_helper, public_helper = ("192.168.1.9:1", "192.168.1.9"), ("203.0.113.9:1", "203.0.113.9")
    assert s.next_helper(5.0, [lan_helper]) is None  # after the verdict, only a public helper has news
    assert s.next_helper(5.0, [lan_helper, public_helper]) == "203.0.113.9:1"
    s.on_answer("203.0.113.9", True, 6.0)
    assert s.status is True and not s.lan_only and s.reached_from_outside()
    assert node_announce_key(node) == CHECKED
    assert s.next_helper(10.0, [("198.51.100.7:1", "198.51.100.7")]) is None  # a full verdict: asked again at the re-check

    early = Reachability(ReachabilityPolicy(), random.Random(1), LAN)
    early.on_answer("203.0.113.9", True, 0)  # one public confirmation, no verdict yet: checked at once
    assert early.status is None and early.reached_from_outside()
    loopback = state(by_address=True)
    loopback.on_answer("127.0.0.2", True, 0)  # on loopback the addresses stand for hosts anywhere
    assert loopback.reached_from_outside()


def test_three_networks_that_cannot_dial_back_make_it_unreachable():
    s = state()
    s.on_answer("10.0.1.5", False, 0)
    s.on_answer("10.0.2.5", True, 1)
    s.on_answer("10.0.3.5", False, 2)
    assert s.status is None
    assert s.on_answer("10.0.4.5", False, 3) is False


def test_a_later_answer_from_the_same_network_replaces_its_earlier_one():
    s = state()
    s.on_answer("10.0.1.5", False, 0)
    s.on_answer("10.0.1.9", True, 1)
    assert "10.0.1.0/24" in s.confirmed and "10.0.1.0/24" not in s.failed


def test_helpers_are_spaced_skip_answered_networks_and_are_not_asked_twice_soon():
    s = state(ask_again_s=100.0)
    candidates = [("10.0.1.5:1", "10.0.1.5"), ("10.0.2.5:1", "10.0.2.5")]
    first = s.next_helper(0.0, candidates)
    assert first is not None
    assert s.next_helper(0.5, candidates) is None  # one request per ask_every_s
    s.on_answer(first.rsplit(":", 1)[0], True, 0.6)
    second = s.next_helper(1.0, candidates)
    assert second is not None and second != first  # the answered network is skipped
    assert s.next_helper(2.0, candidates) is None  # both asked within ask_again_s
    assert s.next_helper(2.0, []) is None


def test_a_network_that_could_not_dial_back_is_asked_again_once_nobody_new_is_left():
    """Four public nodes each have three others to confirm them: one slow dial-back (a "no" from a busy host)
    must not leave a reachable node undecided until the re-check."""
    s = state(ask_again_s=30.0, ask_every_s=1.0)
    slow, fresh = ("10.0.1.5:1", "10.0.1.5"), ("10.0.2.5:1", "10.0.2.5")
    assert s.next_helper(0.0, [slow]) == "10.0.1.5:1"
    s.on_answer("10.0.1.5", False, 0.5)
    assert s.failed and s.next_helper(1.0, [slow]) is None  # not within ask_again_s
    assert s.next_helper(31.0, [slow, fresh]) == "10.0.2.5:1"  # a network not heard from first
    s.on_answer("10.0.2.5", True, 31.5)
    assert s.next_helper(32.0, [slow, fresh]) == "10.0.1.5:1"  # then the one that said no
    s.on_answer("10.0.1.5", True, 32.5)
    assert "10.0.1.0/24" in s.confirmed and not s.failed
    assert s.next_helper(63.0, [slow, fresh]) is None  # networks that confirmed are not asked again


def test_inbound_neighbours_are_asked_only_when_no_other_helper_is_left():
    s = state(ask_again_s=100.0, ask_every_s=1.0)
    helpers, inbound = [("10.0.1.5:1", "10.0.1.5")], [("10.0.7.5:1", "10.0.7.5"), ("10.0.8.5:1", "10.0.8.5")]
    assert s.next_helper(0.0, helpers, inbound) == "10.0.1.5:1"  # a helper first, though more are inbound
    s.on_answer("10.0.1.5", True, 0.5)
    asked = {s.next_helper(1.0, helpers, inbound), s.next_helper(2.0, helpers, inbound)}
    assert asked == {"10.0.7.5:1", "10.0.8.5:1"}  # then the inbound ones, each once
    assert s.next_helper(3.0, helpers, inbound) is None


def test_a_verdict_stands_until_the_recheck_then_the_check_starts_over():
    s = state(recheck_s=60.0, confirmations=1)
    s.on_answer("10.0.1.5", True, 0)
    assert s.status is True
    assert s.next_helper(30.0, [("10.0.2.5:1", "10.0.2.5")]) is None  # decided: nobody is asked
    assert s.next_helper(61.0, [("10.0.1.5:1", "10.0.1.5")]) == "10.0.1.5:1"  # the answered network again
    assert s.status is True and not s.confirmed  # the old verdict stands while new answers come
    s.on_answer("10.0.1.5", False, 62.0)
    s.on_answer("10.0.2.5", False, 63.0)
    assert s.on_answer("10.0.3.5", False, 64.0) is False


def test_no_answer_is_no_evidence_and_brings_the_next_ask_forward():
    s = state(ask_every_s=20.0)
    down = s.next_helper(0.0, [("10.0.1.5:1", "10.0.1.5")])
    s.on_no_answer(down, 1.0)
    assert s.status is None and not s.confirmed and not s.failed
    assert s.next_helper(6.1, [("10.0.1.5:1", "10.0.1.5")]) is None  # down: not again soon
    assert s.next_helper(6.1, [("10.0.2.5:1", "10.0.2.5")]) == "10.0.2.5:1"  # another one is, at once


def test_a_busy_helper_is_asked_again_soon():
    s = state(ask_every_s=20.0)
    busy = s.next_helper(0.0, [("10.0.1.5:1", "10.0.1.5")])
    s.on_no_answer(busy, 1.0, busy=True)
    assert s.next_helper(5.0, [("10.0.1.5:1", "10.0.1.5")]) is None  # a quarter of ask_every_s later
    assert s.next_helper(6.1, [("10.0.1.5:1", "10.0.1.5")]) == "10.0.1.5:1"


def test_the_helper_serves_a_few_dial_backs_per_requester_and_in_total():
    door = DialbackDoor(DialbackLimits(per_source=(2.0, 1 / 60), total=(3.0, 0.1), concurrent=8))
    assert door.admit("10.0.0.1", 0) and door.admit("10.0.0.1", 0)
    assert not door.admit("10.0.0.1", 0)  # its own budget is spent; the total is not touched by it
    assert door.admit("10.0.0.2", 0)
    assert not door.admit("10.0.0.3", 0)  # the total is spent
    assert door.admit("10.0.0.3", 10.0)  # 0.1/s refills one in 10 s
    assert door.refused == 2 and door.in_flight == 4


def test_the_helper_dials_at_most_so_many_at_once():
    door = DialbackDoor(DialbackLimits(per_source=(10.0, 1.0), total=(10.0, 1.0), concurrent=2))
    assert door.admit("a", 0) and door.admit("b", 0) and not door.admit("c", 0)
    door.done()
    assert door.admit("c", 0)


@pytest.mark.parametrize("body", [
    None, [], {"node": "x" * 32, "port": 0, "token": new_token()}, {"node": "x" * 32, "port": 70000, "token": new_token()},
    {"node": "x" * 32, "port": True, "token": new_token()}, {"node": "short", "port": 5, "token": new_token()},
    {"node": "x" * 32, "port": 5, "token": "AAAA"}, {"node": "x" * 32, "port": 5},
])
def test_malformed_dial_back_requests_are_refused(body):
    with pytest.raises(ValueError):
        parse_request(body)


def test_a_well_formed_dial_back_request():
    token = new_token()
    request = parse_request({"node": "x" * 32, "port": 47470, "token": token, "extra": 1})
    assert (request.port, request.token) == (47470, token)


def test_the_probe_proves_the_node_over_the_dialers_fresh_nonce():
    node, other = Identity.generate(), Identity.generate()
    nonce = new_nonce()
    answer = probe_answer(node, nonce)
    assert probe_proves(answer, node.node_id, nonce)
    assert not probe_proves(answer, node.node_id, new_nonce())  # a replayed answer to another nonce
    assert not probe_proves(answer, other.node_id, nonce)  # another node was expected
    assert not probe_proves({**probe_answer(other, nonce), "node": node.node_id}, node.node_id, nonce)
    assert not probe_proves({**answer, "proof": "!!"}, node.node_id, nonce)
    assert not probe_proves("nonsense", node.node_id, nonce)


def test_only_a_token_a_probe_brought_back_confirms():
    tokens = ProbeTokens(limit=3)
    given = tokens.issue()
    assert not tokens.seen(new_token())  # a stranger's token is not ours
    assert tokens.redeem(given) is False  # issued, never presented
    again = tokens.issue()
    assert tokens.seen(again) and tokens.redeem(again) is True
    assert tokens.redeem(again) is False  # spent
    for _ in range(10):
        tokens.issue()
    assert len(tokens.pending) == 3  # bounded
