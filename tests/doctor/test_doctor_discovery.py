"""`swarm doctor` names where peers come from, and what the DHT reveals, or how to turn it on."""

from __future__ import annotations

import pytest

from swarm_app.doctor.report import _discovery
from swarm_app.kernel.settings import Settings
from swarm_app.peer.io import dht


def test_the_discovery_lines_name_the_dht_and_what_it_reveals(monkeypatch):
    monkeypatch.setattr(dht, "installed", lambda: True)
    lines = _discovery(Settings(), "lab", [])
    assert lines[0].startswith("DHT: on") and "swarm 'lab'" in lines[0] and "members' addresses" in lines[0]
    assert [line.split(":")[0] for line in lines[1:]] == ["mDNS (this LAN)", "bootstrap and --peer", "peer table"]


def test_with_a_swarm_key_the_dht_line_says_it_reads_the_signed_record(monkeypatch):
    from swarm_app.peer.core.swarm_record import Signer

    monkeypatch.setattr(dht, "installed", lambda: True)
    settings, key = Settings(), Signer.generate().public_text
    settings.peer.swarm_key = key
    line = _discovery(settings, "lab", [])[0]
    assert f"record of hubs signed by {key[:12]}..." in line, line
    assert "record" not in _discovery(Settings(), "lab", [])[0]


def test_without_libtorrent_the_doctor_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(dht, "installed", lambda: False)
    assert _discovery(Settings(), "lab", [])[0] == 'DHT: off (libtorrent not installed: pip install "swarm-app[dht]")'


def test_no_dht_and_offline_turn_it_off():
    settings = Settings()
    settings.peer.dht = False
    assert _discovery(settings, "lab", [])[0].startswith("DHT: off (--no-dht")
    settings = Settings()
    settings.peer.enabled = False
    assert _discovery(settings, "lab", [])[0].startswith("DHT: off")


def test_dns_seeds_are_read_and_named_with_what_they_list_and_what_is_wrong(monkeypatch):
    """The doctor reads each `dns:` entry's records once, as a node would at start (a tiny DNS server on
    127.0.0.1), probes the addresses they list, and says what is wrong with an entry or its records."""
    pytest.importorskip("dns", reason="dnspython not installed (the [dns] extra)")
    from swarm_app.doctor import report
    from tests.peer.io.dns_zone import serving_in_thread

    monkeypatch.setattr(report, "DNS_TIMEOUT_S", 0.5)
    with serving_in_thread({("seeds.lab.test", "TXT"): ['"10.9.0.1:47470 nonsense"']}) as (zone, server):
        seeds = report._dns_seeds([f"dns:seeds.lab.test@{server}", "10.0.0.5:1", f"dns:gone.lab.test@{server}",
                                   "dns:@x", f"dns:seeds.lab.test@{server}"])
    assert ("seeds.lab.test", "TXT") in zone.asked and ("gone.lab.test", "SRV") in zone.asked
    assert [seed["text"] for seed in seeds] == [
        "DNS seed 'dns:@x': '' is not a DNS name; write it as dns:NAME or dns:NAME@IP:PORT, e.g. dns:_swarm._tcp.example.org",
        f"DNS seed dns:seeds.lab.test@{server}: 1 address; 1 entry skipped (not HOST:PORT: 'nonsense')",
        f"DNS seed dns:gone.lab.test@{server}: 0 addresses; no such name (NXDOMAIN)"]
    assert seeds[1]["addresses"] == ["10.9.0.1:47470"]
    settings = Settings()
    settings.peer.bootstrap = [f"dns:seeds.lab.test@{server}", "10.0.0.5:1"]
    lines = _discovery(settings, "lab", settings.peer.bootstrap, seeds[1:2])
    assert lines[2:4] == ["bootstrap and --peer: 1 address(es)", seeds[1]["text"]]
