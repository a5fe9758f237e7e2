"""A settled node with no proven link dials mostly vouched-for addresses, drops unproven links that outnumber
its proven ones, and in its first minute drops a useless link only for an address to try instead
(overlay.guarded_dials, outbound.py)."""

from __future__ import annotations

import random

from swarm_app.peer.core.actions import Close, Dial
from swarm_app.peer.core.addressbook import AddressState
from swarm_app.peer.core.overlay import guarded_dials, is_vouched, pick_dial
from swarm_app.peer.core.protocol import ProtocolConfig
from tests.peer.sim import Simulation

CONFIG = ProtocolConfig()


def test_only_named_or_tried_addresses_are_vouched_for():
    assert is_vouched(AddressState("10.0.0.1:1", "bootstrap")) and is_vouched(AddressState("10.0.0.1:1", "mdns"))
    assert is_vouched(AddressState("10.0.0.1:1", "exchange", useful=1.0))
    assert not is_vouched(AddressState("10.0.0.1:1", "exchange", verified=True)) and not is_vouched(None)
    heard = [AddressState(f"10.0.{k}.1:1", "exchange", network=f"10.0.{k}.0/24", verified=True) for k in range(9)]
    named = AddressState("10.1.0.1:1", "bootstrap", network="10.1.0.0/24")
    rng = random.Random(1)
    assert all(pick_dial(heard + [named], set(), rng, True, vouched_only=True) is named for _ in range(20))
    assert pick_dial(heard, set(), rng, True, vouched_only=True) is None


def test_guarded_dials_keep_most_places_for_vouched_addresses():
    # (dials, of which not vouched for) with `open_out` links, `untried` of them to unvouched addresses
    assert guarded_dials(open_out=0, dialing=0, untried=0, need=6, target=8, max_untried=3) == (8, 3)
    assert guarded_dials(open_out=3, dialing=0, untried=3, need=3, target=8, max_untried=3) == (5, 0)
    assert guarded_dials(open_out=6, dialing=0, untried=6, need=0, target=8, max_untried=3) == (2, 0)
    assert guarded_dials(open_out=8, dialing=0, untried=2, need=0, target=8, max_untried=3) == (0, 0)


def linked(n_links: int) -> Simulation:
    """Node 0 with outbound links to nodes 1..n_links, heard of by peer exchange; nobody publishes."""
    sim = Simulation(n_links + 4, CONFIG, seed=21)
    core = sim.nodes[0].core
    for k in range(1, n_links + 1):
        core.add_address(sim.nodes[k].addr, "exchange")
        assert sim.dial(0, sim.nodes[k].addr)
    return sim


def dials(sim: Simulation, at: float) -> list[str]:
    return [a.addr for a in sim.nodes[0].core.tick(at) if isinstance(a, Dial)]


def test_a_settled_node_with_no_proven_link_dials_only_vouched_addresses_past_three_untried_links():
    sim = linked(3)
    core, first = sim.nodes[0].core, sim.now
    core.tick(first)
    for k in (4, 5):
        core.add_address(sim.nodes[k].addr, "exchange")
    core.add_address(sim.nodes[6].addr, "bootstrap")
    assert set(dials(sim, first + CONFIG.settle_after_s + 1)) == {sim.nodes[6].addr}
    young = linked(3)
    young_core, first = young.nodes[0].core, young.now
    young_core.tick(first)
    for k in (4, 5):
        young_core.add_address(young.nodes[k].addr, "exchange")
    assert len(dials(young, first + 1)) == 2  # in its first minute: up to the low-water mark, whatever it heard


def test_a_node_that_knows_no_vouched_address_rotates_silent_links_to_what_it_heard():
    """Found by the DHT alone, with six links that answer pulls with nothing and lists naming only each other:
    the guard has no vouched address to keep places for, so the node replaces one silent link every
    `stalled_rotate_s` and dials an address it heard. With a bootstrap in its book (not due) it waits for it."""
    def stalled(bootstrap: bool) -> tuple[list[Close], list[str]]:
        sim = linked(6)
        core, first = sim.nodes[0].core, sim.now
        core.tick(first)
        for c in core.links.conns.values():
            c.answers = CONFIG.useless_after_answers
        core.add_address(sim.nodes[7].addr, "dht")
        if bootstrap:
            core.add_address("10.99.0.1:4747", "bootstrap")
            core.addresses.hold("10.99.0.1:4747", first + 3600)
        at = first + CONFIG.settle_after_s + 1
        actions = core.tick(at) + core.tick(at + 1)
        return [a for a in actions if isinstance(a, Close)], [a.addr for a in actions if isinstance(a, Dial)]

    closed, dialed = stalled(bootstrap=False)
    assert len(closed) == 1 and dialed == [linked(6).nodes[7].addr], (closed, dialed)
    assert stalled(bootstrap=True) == ([], [])


def test_while_no_link_is_proven_the_dhts_checked_key_ranks_with_peers_lists():
    """An eclipse fills a book through the lists of the links it holds; until one link delivered, an address its
    own node announced under the checked key (after a dial-back reached it) is drawn as often."""
    listed = [AddressState(f"10.0.{k}.1:1", "exchange", network=f"10.0.{k}.0/24") for k in range(5)]
    announced = AddressState("10.1.0.1:1", "dht", network="10.1.0.0/24")
    rng = random.Random(2)
    assert all(pick_dial(listed + [announced], set(), rng, True) is not announced for _ in range(50))
    picks = [pick_dial(listed + [announced], set(), rng, True, nothing_proven=True) for _ in range(600)]
    assert 0.1 < sum(p is announced for p in picks) / 600 < 0.25  # one in six


def test_unproven_links_past_the_proven_ones_are_dropped_once_settled():
    sim = linked(4)
    core, first = sim.nodes[0].core, sim.now
    core.tick(first)
    links = [c for c in core.links.conns.values() if c.direction == "out"]
    links[0].delivered.add(1.0, first)  # one delivered a rollout admitted here: proven
    assert not [a for a in core.tick(first + 1) if isinstance(a, Close)]  # a newcomer keeps its trials
    closed = [a for a in core.tick(first + CONFIG.settle_after_s + 1) if isinstance(a, Close)]
    assert len(closed) == 3 - 1  # one proven link: one unproven one stays
    assert links[0].conn in core.links.conns


def test_a_young_node_drops_a_useless_link_only_when_another_address_is_due():
    sim = Simulation(5, CONFIG, seed=22)
    core = sim.nodes[0].core
    core.add_address(sim.nodes[1].addr, "bootstrap")
    for k in (2, 3):
        core.add_address(sim.nodes[k].addr, "exchange")
    for k in (1, 2, 3):
        assert sim.dial(0, sim.nodes[k].addr)
    first = sim.now
    core.tick(first)
    by_addr = {c.addr: c for c in core.links.conns.values()}
    by_addr[sim.nodes[3].addr].delivered.add(1.0, first)  # another link delivered
    for k in (1, 2):
        by_addr[sim.nodes[k].addr].answers = CONFIG.useless_after_answers  # these answered with nothing
    at = first + CONFIG.useless_min_age_s + 1
    core.add_address("10.77.0.1:4747", "inbound")  # announced by an inbound peer: no replacement
    assert not [a for a in core.tick(at) if isinstance(a, Close)]  # a young swarm: nothing else to try
    core.add_address(sim.nodes[4].addr, "exchange")
    assert len([a for a in core.tick(at + 1) if isinstance(a, Close)]) == 1  # one address due: one goes
    later = [a for a in core.tick(first + CONFIG.settle_after_s + 1) if isinstance(a, Close)]
    assert len(later) == 1  # settled: judged whatever is due


def test_a_newcomer_dials_at_most_three_addresses_that_only_inbound_peers_announced_while_others_are_due():
    """Sixty hellos can announce sixty servers that pass dial-back: in its first minute, while it fills 6 links
    without judging them, a node gives those at most 3 while other addresses are due; with nothing else
    due (nodes that join together hear of each other by their hellos first) it dials them all the same."""
    sim = Simulation(14, CONFIG, seed=23)
    core = sim.nodes[0].core
    others = {sim.nodes[k].addr for k in range(1, 4)}
    for addr in others:
        core.add_address(addr, "exchange")
    announced = [sim.nodes[k].addr for k in range(4, 14)]
    for addr in announced:
        core.add_address(addr, "inbound")
        core.addresses.get(addr).verified = True  # a server answered there: dial-back verified it
    first = dials(sim, sim.now)
    assert len(first) == CONFIG.low_outbound and others <= set(first), first
    assert len(set(first) & set(announced)) == CONFIG.low_outbound - len(others)
    alone = Simulation(14, CONFIG, seed=23)
    for addr in announced:
        alone.nodes[0].core.add_address(addr, "inbound")
    assert len(set(dials(alone, alone.now)) & set(announced)) == CONFIG.low_outbound
