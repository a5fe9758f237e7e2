"""The sans-IO node core under a simulated clock: no sockets, deterministic randomness."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections import Counter

from swarm_app.kernel.tasks import HELDOUT_SEED
from swarm_app.peer.core.actions import Close, Dial, FetchPeers, HttpPull, Send
from swarm_app.peer.core.addressbook import AddressBook, parse_address
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.protocol import ProtocolConfig
from tests.peer.helpers import make_rollout, make_rollouts, signed
from tests.peer.sim import START, Simulation

FAST = ProtocolConfig(pull_interval_s=1.0, exchange_interval_s=2.0, target_outbound=4, max_inbound_per_ip=64)


def test_simulated_swarm_of_30_meshes_and_every_node_hears_every_author():
    sim = Simulation(30, FAST, seed=1)
    for node in sim.nodes[1:]:
        node.core.addresses.add(sim.nodes[0].addr, "bootstrap")
    sim.run(5)
    for k, node in enumerate(sim.nodes):
        sim.execute(k, node.core.publish(make_rollout(seed=300 + k), sim.now))
    authors = {n.core.node_id for n in sim.nodes}
    for _ in range(60):
        sim.run(1)
        if all(authors - {n.core.node_id} <= set(n.core.intake.heard) for n in sim.nodes):
            break
    assert all(authors - {n.core.node_id} <= set(n.core.intake.heard) for n in sim.nodes)
    print(f"\nsimulated 30 nodes: all authors heard {sim.now - START - 5:.1f} simulated s after publishing")
    assert sim.now - START < 70
    outbound = [sum(c.direction == "out" for c in n.core.links.conns.values()) for n in sim.nodes[1:]]
    assert min(outbound) >= 2 and max(outbound) <= FAST.target_outbound  # node 0, the bootstrap, only accepts


def test_backoff_grows_with_jitter_and_a_dead_peer_never_raises():
    times = {}
    for seed in (1, 2):
        sim = Simulation(1, FAST, seed=seed)
        core = sim.nodes[0].core
        core.addresses.add("10.9.9.9:4747", "bootstrap")  # nobody there
        dials = []
        now = START
        while now < START + 200:
            now += 0.1
            for action in core.tick(now):
                if isinstance(action, Dial):
                    dials.append(now)
                    core.on_dial_failed(action.addr, now)
        times[seed] = dials
        gaps = [b - a for a, b in zip(dials, dials[1:])]
        assert len(dials) >= 5
        for failures, gap in enumerate(gaps):  # base 1 s * 2**failures, times a factor in [0.5, 1], 0.1 s ticks
            full = min(300.0, 2.0 ** failures)
            assert 0.5 * full - 0.11 <= gap <= full + 0.11, (failures, gap)
        assert gaps[-1] > 8 * gaps[0]  # it grows: a fixed retry interval fails this
    assert times[1] != times[2]  # jitter: two nodes do not retry in step


def test_push_goes_to_two_random_neighbours_and_covers_them_all():
    sim = Simulation(6, FAST, seed=3)
    hub = sim.nodes[0].core
    for k in range(1, 6):
        sim.dial(k, sim.nodes[0].addr)
    assert len(hub.links.conns) == 5
    hit = Counter()
    for rollout in make_rollouts(40, seed=5):
        sends = [a for a in hub.publish(rollout, sim.now) if isinstance(a, Send)]
        assert len(sends) == 2 and sends[0].conn != sends[1].conn
        assert all(a.message["t"] == "push" for a in sends)
        hit.update(a.conn for a in sends)
    assert len(hit) == 5


def test_own_pushes_respect_the_rate_peers_accept():
    sim = Simulation(2, ProtocolConfig(own_push_rate=1.0, own_push_burst=5), seed=4)
    sim.dial(1, sim.nodes[0].addr)
    core = sim.nodes[0].core
    sends = sum(isinstance(a, Send) for r in make_rollouts(20, seed=6) for a in core.publish(r, sim.now))
    assert sends == 5 and core.tally["published"] == 20  # the rest is still served to pulls


def test_pulls_go_to_one_neighbour_per_interval_with_what_we_have():
    sim = Simulation(3, FAST, seed=5)
    sim.dial(1, sim.nodes[0].addr)
    sim.dial(2, sim.nodes[0].addr)
    hub = sim.nodes[0].core
    hub.intake.heard["someauthor"] = int(START * 1000)
    pulls = []
    now = START
    while now < START + 20:
        now += 0.1
        pulls += [(now, a) for a in hub.tick(now) if isinstance(a, Send) and a.message["t"] == "pull"]
    assert 17 <= len(pulls) <= 23  # every 1 s +-10%
    assert all(a.message["have"] == {} for _, a in pulls)  # the filters say it, in a size that does not grow
    assert all("someauthor" in HeardFilter.from_wire(a.message[name]) for _, a in pulls for name in ("heard", "recent"))
    assert all(not HeardFilter.from_wire(a.message["held"]).holds(bytes(32)) for _, a in pulls)
    assert len({a.conn for _, a in pulls}) == 2


def test_pulls_wait_while_the_last_minutes_answers_fill_the_intake_budget():
    """With `pulled_per_min_max` 40 and 20 a pull: two full answers within a minute hold the next pull back
    until the first of them is a minute old; a pull still awaited counts as a full answer."""
    sim = Simulation(2, dataclasses.replace(FAST, pulled_per_min_max=40), seed=5)
    sim.dial(0, sim.nodes[1].addr)
    sim.run(2.0)
    core, now = sim.nodes[0].core, sim.now  # from here on driven by hand: node 1 never sees the pulls
    conn = next(iter(core.links.conns))

    def pulls_until(end):
        nonlocal now
        sent = []
        while now < end:
            now += 0.1
            sent += [(now, a) for a in core.tick(now) if isinstance(a, Send) and a.message["t"] == "pull"]
        return sent

    def answer(pull, seed):
        items = [signed(Identity.generate(), make_rollout(seed=seed, index=k), ts_ms=int(now * 1000)).to_item()
                 for k in range(20)]
        core.on_frame(conn, json.dumps({"t": "sample", "re": pull.message["id"], "items": items}), now)

    first = pulls_until(now + 1.2)
    assert len(first) == 2  # a probe of the new neighbour and a pull: 2 x 20 awaited fill the 40
    assert pulls_until(now + 3.0) == []
    answer(first[0][1], 60)
    answer(first[1][1], 61)
    answered_at = now
    assert pulls_until(answered_at + 55.0) == []  # 40 rollouts came within the minute
    assert core.tally["pulls_deferred"] >= 50
    assert len(pulls_until(answered_at + 62.0)) >= 1  # they left the minute


def test_offenders_are_banned_with_growing_bans_and_refused_meanwhile():
    sim = Simulation(2, FAST, seed=6)
    sim.dial(1, sim.nodes[0].addr)
    hub, bad = sim.nodes[0].core, sim.nodes[1].core
    conn = next(iter(hub.links.conns))
    closes = []
    for k in range(20):
        closes += [a for a in hub.on_frame(conn, "junk", sim.now) if isinstance(a, Close)]
    assert closes and closes[0].reason == "offender"
    record = hub.peers.peek(bad.node_id)
    first_ban = record.banned_until - sim.now
    assert 48 <= first_ban <= 72
    sim.disconnect(0, conn)
    refusal, _ = hub.on_connected(99, bad.node_id, "in", None, "10.0.0.2", None, sim.now + 1)
    assert refusal == "banned"
    later = record.banned_until + 1
    assert hub.on_connected(100, bad.node_id, "in", None, "10.0.0.2", None, later)[0] is None
    for k in range(20):
        hub.on_frame(100, "junk", later)
    assert record.banned_until - later > 1.5 * first_ban * 0.8  # doubled (with jitter)


def test_duplicate_connections_both_ends_keep_the_same_one():
    sim = Simulation(2, FAST, seed=7)
    sim.dial(0, sim.nodes[1].addr)
    sim.dial(1, sim.nodes[0].addr)
    a, b = sim.nodes[0].core, sim.nodes[1].core
    assert len(a.links.conns) == 1 and len(b.links.conns) == 1
    keeper = min(a.node_id, b.node_id)
    kept_dialer = a.node_id if next(iter(a.links.conns.values())).direction == "out" else b.node_id
    assert kept_dialer == keeper


def test_rotation_replaces_one_outbound_neighbour():
    config = ProtocolConfig(target_outbound=2, rotate_interval_s=60, max_inbound_per_ip=64)
    sim = Simulation(4, config, seed=8)
    for node in sim.nodes[1:]:
        sim.nodes[0].core.addresses.add(node.addr, "exchange")
    sim.run(1)
    first = {c.peer for c in sim.nodes[0].core.links.conns.values() if c.direction == "out"}
    assert len(first) == 2
    sim.run(65)
    later = {c.peer for c in sim.nodes[0].core.links.conns.values() if c.direction == "out"}
    assert len(later) == 2 and later != first


def test_inbound_caps_per_ip_and_in_total():
    sim = Simulation(1, ProtocolConfig(max_inbound=3, max_inbound_per_ip=2), seed=9)
    core = sim.nodes[0].core
    assert core.reserve_inbound("1.1.1.1") and core.reserve_inbound("1.1.1.1")
    assert not core.reserve_inbound("1.1.1.1")
    assert core.reserve_inbound("2.2.2.2") and not core.reserve_inbound("3.3.3.3")
    core.release_inbound("1.1.1.1")
    assert core.reserve_inbound("3.3.3.3")


def test_http_fallback_pull_when_only_http_works():
    sim = Simulation(2, FAST, seed=10)
    a = sim.nodes[0].core
    sim.execute(1, sim.nodes[1].core.publish(make_rollout(seed=77), sim.now))
    a.addresses.add(sim.nodes[1].addr, "bootstrap")
    a.on_dial_failed(sim.nodes[1].addr, sim.now, http_only=True)
    actions = a.tick(sim.now + 0.5)
    pulls = [x for x in actions if isinstance(x, HttpPull)]
    assert len(pulls) == 1 and pulls[0].addr == sim.nodes[1].addr
    sim.execute(0, actions)
    assert a.tally["accepted"] == 1


def test_a_busy_node_is_still_asked_for_its_peers_and_exchange_fills_the_book():
    sim = Simulation(4, FAST, seed=11)
    a = sim.nodes[0].core
    assert a.on_dial_failed("10.0.0.2:4747", sim.now, busy=True) == [FetchPeers("10.0.0.2:4747")]
    sim.dial(2, sim.nodes[1].addr)
    sim.dial(3, sim.nodes[1].addr)
    sim.run(2 * FAST.exchange_interval_s)  # node 1 asks its two newcomers for their records
    a.on_peer_list(sim.nodes[1].core.peer_list(sim.now), sim.now)
    assert {sim.nodes[2].addr, sim.nodes[3].addr} <= {s.addr for s in a.addresses.entries()}
    junk = {"records": [{"body": "{}", "sig": ""}, "junk"], "peers": [{"node": a.node_id, "addr": "10.1.1.1:1"}]}
    assert a.on_peer_list(junk, sim.now) == 0


def test_address_book_parsing_trimming_and_table_round_trip():
    assert parse_address("[::1]:80") == ("::1", 80) and parse_address("host:1") == ("host", 1)
    for bad in ("nohost", ":80", "h:99999", "h:x"):
        try:
            parse_address(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
    book = AddressBook(random.Random(0), capacity=5)
    book.add("10.0.0.1:1", "bootstrap")
    for k in range(10):
        book.add(f"10.0.{k + 1}.1:1", "exchange")  # ten networks: at most 4 entries of one are kept
    assert len(book) == 5 and "10.0.0.1:1" in book
    book.succeeded("10.0.10.1:1", "nodeid", 5.0)
    book.note_useful("10.0.10.1:1")  # the peer table keeps only peers that delivered something
    other = AddressBook(random.Random(0))
    assert other.load_json(book.to_json()) == 1 and other.get("10.0.10.1:1").node_id == "nodeid"
    assert other.load_json("garbage") == 0 and other.load_json([{"addr": 5}, None]) == 0


def test_a_node_never_publishes_a_heldout_rollout(caplog):
    sim = Simulation(2, FAST, seed=12)
    sim.dial(1, sim.nodes[0].addr)
    core = sim.nodes[0].core
    rollout = make_rollout(seed=13)
    heldout = dataclasses.replace(rollout, ref=dataclasses.replace(rollout.ref, seed=HELDOUT_SEED))
    with caplog.at_level(logging.WARNING, logger="swarm_app.peer.core.protocol"):
        assert core.publish(heldout, sim.now) == [] and core.publish(heldout, sim.now) == []
    assert core.tally["heldout_dropped"] == 2 and core.tally["published"] == 0 and len(core.intake.pool) == 0
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "held-out" in caplog.records[0].getMessage()
    assert any(isinstance(a, Send) for a in core.publish(rollout, sim.now))  # an ordinary one still goes out
    sim.run(3)
    assert {e.rollout.ref.seed for e in sim.nodes[1].core.intake.pool._entries.values()} == {rollout.ref.seed}
