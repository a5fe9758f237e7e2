"""Joining a swarm by name, from the settings: --swarm / [peer] swarm / SWARM_PEER_SWARM, the bootstrap list
(shipped, replaced by --bootstrap / [peer] bootstrap / SWARM_PEER_BOOTSTRAP, plus --peer), one clear line and
exit 2 for a bad name or address; and the reachability event the views print."""

from __future__ import annotations

import dataclasses

import pytest

from swarm_app.cli import build_parser, main
from swarm_app.commands.flags import load_settings_for
from swarm_app.kernel import swarms
from swarm_app.kernel.events import PeersUpdated, ReachabilityChanged
from swarm_app.peer.core.stats import NodeStats
from swarm_app.session.peer_events import PeerTracker
from swarm_app.session.peering import peer_config


def config_of(tmp_path, *argv: str, toml: str = ""):
    (tmp_path / "config.toml").write_text(toml)
    args = build_parser().parse_args(["run", *argv, "--config", str(tmp_path / "config.toml")])
    return peer_config(load_settings_for(args))


def test_the_default_is_the_public_swarm_of_the_task_preset_and_its_shipped_list(tmp_path, monkeypatch):
    config = config_of(tmp_path)
    assert config.swarm == "easy" and config.bootstrap == swarms.PUBLIC_BOOTSTRAP["easy"] == ()
    assert config_of(tmp_path, "--tasks", "paper").swarm == "paper"
    monkeypatch.setitem(swarms.PUBLIC_BOOTSTRAP, "easy", ("boot.example.org:47470",))
    assert config_of(tmp_path).bootstrap == ("boot.example.org:47470",)
    assert config_of(tmp_path, "--peer", "10.0.0.9:1").bootstrap == ("boot.example.org:47470", "10.0.0.9:1")
    assert config_of(tmp_path, "--bootstrap", "10.0.0.5:2").bootstrap == ("10.0.0.5:2",)  # given: replaces it
    assert config_of(tmp_path, "--swarm", "my-lab").bootstrap == ()  # a private swarm ships none


def test_flags_env_and_config_name_the_swarm_and_its_bootstrap(tmp_path, monkeypatch):
    config = config_of(tmp_path, "--swarm", "my-lab", "--bootstrap", "10.0.0.5:47470", "--bootstrap",
                       "node.example.org:47470", "--peer", "10.0.0.9:1", "--peer", "10.0.0.5:47470")
    assert config.swarm == "my-lab"
    assert config.bootstrap == ("10.0.0.5:47470", "node.example.org:47470", "10.0.0.9:1")  # duplicates once
    toml = '[peer]\nswarm = "lab3"\nbootstrap = ["10.0.0.8:3"]\n'
    assert (config_of(tmp_path, toml=toml).swarm, config_of(tmp_path, toml=toml).bootstrap) == ("lab3", ("10.0.0.8:3",))
    monkeypatch.setenv("SWARM_PEER_SWARM", "lab2")
    monkeypatch.setenv("SWARM_PEER_BOOTSTRAP", "10.0.0.6:1,10.0.0.7:2")
    config = config_of(tmp_path, toml=toml)
    assert config.swarm == "lab2" and config.bootstrap == ("10.0.0.6:1", "10.0.0.7:2")  # env over config.toml
    assert config_of(tmp_path, "--swarm", "lab1", toml=toml).swarm == "lab1"  # flag over env


def test_dns_seeds_are_bootstrap_entries_apart_from_the_addresses(tmp_path):
    from swarm_app.peer.core.config import DnsSeed

    config = config_of(tmp_path, "--bootstrap", "dns:_swarm._tcp.example.org", "--bootstrap", "10.0.0.5:1",
                       "--bootstrap", "dns:seeds.example.org@127.0.0.1:5353", "--peer", "dns:_swarm._tcp.example.org")
    assert config.bootstrap == ("10.0.0.5:1",)
    assert config.dns_seeds == (DnsSeed("_swarm._tcp.example.org"), DnsSeed("seeds.example.org", "127.0.0.1:5353"))
    assert config_of(tmp_path, toml='[peer]\nbootstrap = ["dns:seeds.example.org@[::1]:53"]\n').dns_seeds == \
        (DnsSeed("seeds.example.org", "[::1]:53"),)


@pytest.mark.parametrize("argv, env, words", [
    (["--swarm", "My Lab"], {}, "swarm name 'My Lab': use 1 to 64 lowercase letters"),
    ([], {"SWARM_PEER_SWARM": "-x"}, "swarm name '-x'"),
    (["--bootstrap", "nonsense"], {}, "bootstrap address 'nonsense': address 'nonsense' is not HOST:PORT"),
    (["--bootstrap", "10.0.0.1:0"], {}, "bootstrap address '10.0.0.1:0': port 0 cannot be dialed"),
    ([], {"SWARM_PEER_BOOTSTRAP": "a b:5"}, "'a b' is neither an IP address nor a host name"),
    (["--peer", "10.0.0.1:99999"], {}, "peer address '10.0.0.1:99999': port 99999 out of range"),
    (["--bootstrap", "dns:"], {}, "bootstrap DNS seed 'dns:': '' is not a DNS name; write it as dns:NAME or "
     "dns:NAME@IP:PORT"),
    (["--bootstrap", "dns:seeds.example.org@bad"], {}, "the DNS server 'bad' is not IP:PORT"),
    (["--bootstrap", "dns:seeds.example.org@ns.example.org:53"], {}, "the DNS server 'ns.example.org:53' is not IP:PORT"),
    (["--peer", "dns:a b.org"], {}, "peer DNS seed 'dns:a b.org': 'a b.org' is not a DNS name"),
    ([], {"SWARM_PEER_BOOTSTRAP": "dns:x.org@10.0.0.1:0"}, "'dns:x.org@10.0.0.1:0': port 0 cannot be asked"),
    ([], {"SWARM_PEER_DHT": "true", "SWARM_PEER_DHT_NODES": "127.1.0.1"},
     "peer.dht_nodes address '127.1.0.1': address '127.1.0.1' is not HOST:PORT"),
])
def test_a_bad_swarm_name_or_address_is_one_line_and_exit_2(argv, env, words, stub_model, tmp_path, capsys,
                                                             monkeypatch):
    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run_dir = tmp_path / "run"
    code = main(["run", "--no-ui", "--backend", "fake", "--model", str(stub_model), "--run-dir", str(run_dir),
                 "--rounds", "1", "--no-mdns", "--listen", "127.0.0.1:0", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert "Traceback" not in err[0] and not (run_dir / "metrics.jsonl").exists()


def test_the_dht_is_on_with_public_routers_and_off_with_no_dht_offline_or_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("SWARM_PEER_DHT")  # the tests' own default: off
    config = config_of(tmp_path)
    assert config.dht is not None and config.dht.routers == swarms.DHT_ROUTERS and config.dht.nodes == ()
    assert config.dht.state_path is not None and config.dht.state_path.name == "dht-nodes.json"
    assert config_of(tmp_path, "--no-dht").dht is None
    assert config_of(tmp_path, toml="[peer]\ndht = false\n").dht is None
    private = config_of(tmp_path, toml='[peer]\ndht_nodes = ["127.1.0.1:6881"]\ndht_routers = []\ndht_listen = "127.2.0.1:0"\n')
    assert (private.dht.nodes, private.dht.routers, private.dht.listen) == (("127.1.0.1:6881",), (), "127.2.0.1:0")
    args = build_parser().parse_args(["run", "--offline", "--config", str(tmp_path / "config.toml")])
    assert not load_settings_for(args).peer.enabled  # --offline: no node is built, so no DHT either


def stats(reachable, neighbours=2) -> NodeStats:
    return NodeStats("n" * 32, "127.0.0.1:1", True, 0, neighbours, 0, 0, 0, 0, 0, 0, 0, {}, 0, (), swarm="easy",
                     reachable=reachable, public_port=47470, witnesses=1, witnesses_needed=3, upnp="missing")


def test_the_tracker_says_when_dial_back_reaches_or_changes_its_verdict():
    tracker = PeerTracker()
    first = tracker.update(stats(None))
    assert [type(e) for e in first] == [PeersUpdated]
    assert (first[0].swarm, first[0].reachable, first[0].port, first[0].witnesses) == ("easy", None, 47470, 1)
    assert tracker.update(stats(False))[1:] == [ReachabilityChanged(False, 47470, 2, "easy", "missing")]
    assert tracker.update(stats(False))[1:] == []  # told once
    assert tracker.update(dataclasses.replace(stats(True), outbound=3))[1:] == [
        ReachabilityChanged(True, 47470, 3, "easy", "missing")]


@pytest.mark.parametrize(("listen", "source"), [("127.0.0.5:0", "127.0.0.5"), ("127.3.0.1:47470", "127.3.0.1"),
                                                ("127.0.0.1:0", None), ("[::1]:0", None), ("0.0.0.0:47470", None),
                                                ("192.168.1.5:47470", None)])
def test_a_node_listening_on_a_loopback_address_of_its_own_dials_from_it(tmp_path, listen, source):
    """So that nodes of one machine standing for a LAN's machines are seen each at its own address."""
    assert config_of(tmp_path, "--listen", listen).source_ip == source
