"""`swarm doctor` names where peers come from, and what the DHT reveals, or how to turn it on."""

from __future__ import annotations

from swarm_app.doctor.report import _discovery
from swarm_app.kernel.settings import Settings
from swarm_app.peer.io import dht


def test_the_discovery_lines_name_the_dht_and_what_it_reveals(monkeypatch):
    monkeypatch.setattr(dht, "installed", lambda: True)
    lines = _discovery(Settings(), "lab", [])
    assert lines[0].startswith("DHT: on") and "swarm 'lab'" in lines[0] and "members' addresses" in lines[0]
    assert [line.split(":")[0] for line in lines[1:]] == ["mDNS (this LAN)", "bootstrap and --peer", "peer table"]


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
