"""DNS seeds (`--bootstrap dns:NAME@IP:PORT`) against a real, tiny DNS server on 127.0.0.1 (UDP, any free port):
a node given nothing else links to the nodes its SRV and TXT records name, asks again later, and a name that
does not exist, a server that does not answer or entries that are not HOST:PORT cost a warning, never the node.

SRV targets here are IPs written as names (127.91.0.1.): a real zone names hosts, which the dialer resolves as
it does any --bootstrap name. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from swarm_app.peer.core.config import DnsSeed
from swarm_app.peer.io import dns_seeds
from swarm_app.peer.io.dns_seeds import resolve
from tests.peer.helpers import make_rollouts, wait_for
from tests.peer.io.nodes_on_loopback import linux_only, on, started

pytest.importorskip("dns", reason="dnspython not installed (the [dns] extra)")
from tests.peer.io.dns_zone import serving  # noqa: E402  (it builds answers with dnspython)

NAME = "_swarm._tcp.lab.test"


def srv(address: str) -> str:
    host, port = address.rsplit(":", 1)
    return f"0 0 {port} {host}."


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == dns_seeds.__name__ and r.levelno == logging.WARNING]


def closed_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_records_give_their_host_port_entries_and_skip_the_rest():
    records = {(NAME, "SRV"): [srv("127.91.0.1:4001"), "10 5 4002 node.lab.test.", "0 0 4003 ."],
               (NAME, "TXT"): ['"127.91.0.2:4004, 127.91.0.3:4005 nonsense" "127.91.0.1:4001"',
                               '"127.91.0.4:0 host:99999 [::1]:4006"']}
    async with serving(records) as (zone, server):
        found = await resolve(DnsSeed(NAME, server), timeout_s=2.0)
    assert sorted(zone.asked) == [(NAME, "SRV"), (NAME, "TXT")]
    assert sorted(found.addresses) == ["127.91.0.1:4001", "127.91.0.2:4004", "127.91.0.3:4005", "[::1]:4006",
                                       "node.lab.test:4002"]  # once each; the SRV target "." (no service) left out
    assert sorted(found.skipped) == ["127.91.0.4:0", "host:99999", "nonsense"]
    assert found.problem().startswith("3 entries skipped (not HOST:PORT: ") and "'nonsense'" in found.problem()


async def test_a_name_with_no_records_of_either_kind_says_so():
    async with serving({(NAME, "A"): ["127.0.0.1"]}) as (zone, server):
        found = await resolve(DnsSeed(NAME, server), timeout_s=2.0)
    assert zone.asked and found.error == "" and found.addresses == []
    assert found.problem() == "no SRV or TXT records"


@linux_only
async def test_a_node_given_only_a_dns_seed_links_to_the_nodes_its_records_name_and_receives_their_rollouts():
    async with started(on("127.91.0.1"), on("127.92.0.1")) as named:
        records = {(NAME, "SRV"): [srv(named[0].address)], (NAME, "TXT"): [f'"nonsense, {named[1].address}"']}
        async with serving(records) as (zone, server), \
                started(on("127.93.0.1", dns_seeds=(DnsSeed(NAME, server),))) as (newcomer,):
            assert newcomer.config.bootstrap == ()
            ids = {n.node_id for n in named}
            assert await wait_for(lambda: all(newcomer.core.view.is_linked(i) for i in ids), timeout_s=20), \
                newcomer.stats()
            sources = {s.addr: s.source for s in newcomer.core.addresses.entries()}
            assert sources[named[0].address] == sources[named[1].address] == "bootstrap"
            authors: set[str] = set()
            newcomer.add_listener(lambda entry, pushed: authors.add(entry.author))
            for i, node in enumerate(named):
                for rollout in make_rollouts(2, seed=900 + i):
                    node.publish(rollout)
            assert await wait_for(lambda: authors >= ids, timeout_s=20), authors


@linux_only
async def test_the_seed_is_asked_again_and_a_node_listed_later_is_linked():
    async with started(on("127.94.0.1"), on("127.95.0.1")) as (first, later):
        records = {(NAME, "TXT"): [f'"{first.address}"']}
        async with serving(records) as (zone, server), \
                started(on("127.96.0.1", dns_seeds=(DnsSeed(NAME, server),), dns_every_s=0.5)) as (newcomer,):
            assert await wait_for(lambda: newcomer.core.view.is_linked(first.node_id), timeout_s=20)
            assert not newcomer.core.view.is_linked(later.node_id)
            records[NAME, "TXT"] = [f'"{first.address} {later.address}"']  # the community adds a node
            assert await wait_for(lambda: newcomer.core.view.is_linked(later.node_id), timeout_s=20), newcomer.stats()
            assert zone.asked.count((NAME, "TXT")) >= 2


@linux_only
@pytest.mark.parametrize("case", ["nxdomain", "no answer"])
async def test_a_failing_seed_is_one_warning_and_the_node_keeps_its_other_sources(case, caplog):
    caplog.set_level(logging.INFO)
    async with serving({}) as (zone, server):
        seed = DnsSeed(NAME, server if case == "nxdomain" else f"127.0.0.1:{closed_udp_port()}")
        async with started(on("127.97.0.1")) as (other,), \
                started(on("127.98.0.1", other.address, dns_seeds=(seed,), dns_every_s=0.2, dns_timeout_s=0.5)) as (node,):
            assert node.dns_seeds is not None
            assert await wait_for(lambda: node.dns_seeds.rounds >= 3, timeout_s=20), node.dns_seeds.rounds
            assert bool(zone.asked) == (case == "nxdomain")  # the fault happened: the name was asked and refused
            assert node.dns_seeds.lookups[seed].error == ("no such name (NXDOMAIN)" if case == "nxdomain"
                                                          else "no answer within 0.5 s")
            said = warnings(caplog)
            assert len(said) == 1, said  # the same failure again is not repeated
            assert said[0].startswith(f"DNS seed {seed}: ") and node.dns_seeds.lookups[seed].error in said[0]
            assert await wait_for(lambda: node.core.view.is_linked(other.node_id), timeout_s=20)  # the node goes on


@linux_only
async def test_without_dnspython_the_node_warns_once_and_runs_on(monkeypatch, caplog):
    monkeypatch.setattr(dns_seeds, "installed", lambda: False)
    async with serving({(NAME, "TXT"): ['"127.99.0.9:1"']}) as (zone, server):
        seed = DnsSeed(NAME, server)
        async with started(on("127.97.0.1")) as (other,), \
                started(on("127.99.0.1", other.address, dns_seeds=(seed,), dns_every_s=0.2)) as (node,):
            assert await wait_for(lambda: node.core.view.is_linked(other.node_id), timeout_s=20)
            assert zone.asked == [] and node.dns_seeds.rounds == 0
            assert warnings(caplog) == [f'DNS seeds: {seed} not asked (dnspython not installed: pip install '
                                        '"swarm-app[dns]"); peers come from the other sources']
    assert (await resolve(seed, 1.0)).error == 'dnspython not installed (pip install "swarm-app[dns]")'


def test_the_seed_reads_back_as_typed():
    assert str(DnsSeed(NAME)) == f"dns:{NAME}" and str(DnsSeed(NAME, "127.0.0.1:53")) == f"dns:{NAME}@127.0.0.1:53"


async def test_a_bug_in_one_round_is_logged_and_the_next_round_runs(monkeypatch, caplog):
    calls = []
    real = dns_seeds.resolve

    async def buggy_once(seed, timeout_s):
        calls.append(seed)
        if len(calls) == 1:
            raise KeyError("bug")
        return await real(seed, timeout_s)

    monkeypatch.setattr(dns_seeds, "resolve", buggy_once)
    found: list[str] = []
    async with serving({(NAME, "TXT"): ['"127.91.0.7:4007"']}) as (zone, server):
        seeds = dns_seeds.DnsSeeds((DnsSeed(NAME, server),), found.append, every_s=0.1)
        task = asyncio.create_task(seeds.run())
        try:
            assert await wait_for(lambda: found, timeout_s=10)
        finally:
            task.cancel()
    assert len(calls) >= 2 and found[0] == "127.91.0.7:4007"
    assert any(r.getMessage() == "DNS seeds: resolving failed; asking again later" and r.exc_info for r in caplog.records)
