"""The LAN rule (sources.Networks): a private address counts as a network of its own, a public one as its /24,
and what that changes and does not.

A stranger's 100 addresses in one public /24 get exactly what they get without the rule (address book
entries, inbound slots, new authors, dial-back witnesses, groups in a draw); 100 addresses of one LAN get each
an address's share, and together no more than the LAN caps; a "no" from LAN helpers still counts per /24.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from swarm_app.peer.core.addressbook import AddressBook, format_address
from swarm_app.peer.core.connections import InboundSlots
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.pool import PoolEntry, RolloutPool
from swarm_app.peer.core.reachability import Reachability, ReachabilityPolicy
from swarm_app.peer.core.sources import LAN, PUBLIC, NewAuthorBudget, SourceLimits, is_private
from tests.peer.helpers import make_rollout, signed

STRANGER = [f"203.0.113.{i}" for i in range(1, 101)]
"""One public /24, a hundred addresses."""
LAN_MACHINES = [f"192.168.1.{i}" for i in range(1, 101)]


@pytest.mark.parametrize("ip", ["10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.0.7", "169.254.3.4", "127.0.0.5",
                                "::1", "fe80::1", "fd12:3456::1", "fc00::2", "::ffff:192.168.1.5"])
def test_private_addresses(ip):
    assert is_private(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "172.32.0.1", "100.64.0.1", "192.169.0.1", "11.0.0.1", "2001:db8::1",
                                "2a00:1450::1", "::ffff:8.8.8.8", "not-an-ip", ""])
def test_public_or_unparsable_addresses(ip):
    assert not is_private(ip)


def book_entries(networks, hosts) -> int:
    book = AddressBook(random.Random(1), networks=networks)
    for host in hosts:
        book.add(format_address(host, 4747), "inbound")
    return len(book)


def inbound_slots(networks, hosts, per_ip_tries: int = 1) -> int:
    config = ProtocolConfig()
    slots = InboundSlots(config.max_inbound, config.max_inbound_per_ip, config.max_inbound_per_network, networks,
                         config.max_inbound_lan)
    return sum(slots.reserve(host) for host in hosts for _ in range(per_ip_tries))


def new_authors(networks, hosts, pushed: bool) -> int:
    budget = NewAuthorBudget(SourceLimits(networks=networks))
    return sum(budget.take(host, pushed, 0.0) for host in hosts for _ in range(40))


def witnesses_make_reachable(networks, helpers) -> bool | None:
    state = Reachability(ReachabilityPolicy(), random.Random(1), networks)
    for host in helpers:
        state.on_answer(host, True, 0.0, "198.51.100.1:4747")
    return state.status


def drawn(networks, hosts) -> int:
    """Groups a draw of 50 takes from fresh authors, one each, each delivered from one of `hosts`."""
    pool = RolloutPool("me", 1000, 10**8, 600_000, networks=networks)
    for k, host in enumerate(hosts):
        identity, rollout = Identity.generate(), make_rollout(seed=171, index=k)
        mine = dataclasses.replace(rollout, author=identity.node_id)
        pool.insert(PoolEntry(signed(identity, rollout), mine, identity.node_id, host))
    return len(pool.sample(50, rollout.created_ms, random.Random(2)))


def test_a_strangers_hundred_addresses_in_one_public_slash24_get_what_they_got_without_the_lan_rule():
    config, limits = ProtocolConfig(), SourceLimits()
    got = {name: (book_entries(n, STRANGER), inbound_slots(n, STRANGER, 8), new_authors(n, STRANGER, True),
                  new_authors(n, STRANGER, False), witnesses_make_reachable(n, STRANGER), drawn(n, STRANGER))
           for name, n in (("lan", LAN), ("public", PUBLIC))}
    assert got["lan"] == got["public"] == (limits.addresses_per_network, config.max_inbound_per_network,
                                           int(limits.push_per_network[0]), int(limits.pull_per_network[0]), None,
                                           limits.new_source_cap)


def test_a_lans_machines_count_one_by_one_within_the_lan_caps():
    config, limits = ProtocolConfig(), SourceLimits()
    # the attack lands: without the rule, the hundred machines of one LAN are one /24
    assert book_entries(PUBLIC, LAN_MACHINES) == limits.addresses_per_network
    assert inbound_slots(PUBLIC, LAN_MACHINES) == config.max_inbound_per_network
    # with it, each is a source of its own, and all together stay within the LAN caps
    assert book_entries(LAN, LAN_MACHINES) == limits.lan_addresses
    assert inbound_slots(LAN, LAN_MACHINES[:6]) == 6
    assert inbound_slots(LAN, LAN_MACHINES, 8) == config.max_inbound_lan
    assert inbound_slots(LAN, LAN_MACHINES[:1], 20) == config.max_inbound_per_ip  # one machine: one address's share
    assert new_authors(LAN, LAN_MACHINES[:7], True) == 7 * int(limits.push_per_address[0])
    assert drawn(LAN, LAN_MACHINES[:7]) == 7


def test_lan_helpers_confirm_one_by_one_but_deny_per_slash24():
    assert witnesses_make_reachable(LAN, ["192.168.1.2", "192.168.1.3", "192.168.1.4"]) is True
    assert witnesses_make_reachable(PUBLIC, ["192.168.1.2", "192.168.1.3", "192.168.1.4"]) is None
    state = Reachability(ReachabilityPolicy(), random.Random(1), LAN)
    for host in ["192.168.1.2", "192.168.1.3", "192.168.1.4"]:  # a lying helper's "no" can be had per address
        state.on_answer(host, False, 0.0)
    assert state.status is None and len(state.failed) == 1
