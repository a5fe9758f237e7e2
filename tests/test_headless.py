"""The headless view's swarm lines: the start line names the swarm and where peers come from; the
reachability line says what dial-back found, what it means, and how to fix it."""

from __future__ import annotations

import io

from swarm_app.headless import HeadlessView
from swarm_app.kernel.events import PeersUpdated, ReachabilityChanged, SoloCurveFound, SwarmJoined


def lines(*events) -> list[str]:
    out = io.StringIO()
    view = HeadlessView(stream=out)
    for event in events:
        view(event)
    return out.getvalue().splitlines()


def test_the_start_line_names_the_swarm_and_says_reachability_is_being_checked():
    said = lines(SwarmJoined("ab" * 16, "0.0.0.0:47470", "easy", 2, 47470))
    assert said[0].startswith("swarm 'easy': node " + "ab" * 16 + " listening on 0.0.0.0:47470; dialing 2 bootstrap")
    assert "0 peers so far" in said[0]
    assert said[1] == "reachable from outside: checking (asking peers to dial port 47470 back)"


def test_without_a_bootstrap_address_it_says_none_ships_and_where_it_looks():
    (line, _) = lines(SwarmJoined("ab" * 16, "0.0.0.0:47470", "my-lab", 0, 47470))
    assert "no bootstrap address (none ships: give one with --bootstrap HOST:PORT)" in line
    assert "LAN" in line and "peer table" in line and "DHT" not in line
    (line, _) = lines(SwarmJoined("ab" * 16, "0.0.0.0:47470", "my-lab", 0, 47470, dht=True))
    assert "looking on the DHT by the swarm's name, the LAN and the saved peer table" in line


def test_the_start_line_names_dns_seeds_with_or_without_bootstrap_addresses():
    (line, _) = lines(SwarmJoined("ab" * 16, "0.0.0.0:47470", "my-lab", 0, 47470, dns_seeds=1))
    assert "; asking 1 DNS seed for addresses (now and every 10 minutes); looking on the LAN" in line
    assert "no bootstrap address" not in line
    (line, _) = lines(SwarmJoined("ab" * 16, "0.0.0.0:47470", "my-lab", 2, 47470, dns_seeds=2))
    assert "dialing 2 bootstrap addresses and asking 2 DNS seeds for addresses" in line


def test_unreachable_says_it_still_works_and_what_to_forward():
    said = lines(ReachabilityChanged(False, 47470, 5, "easy"))
    assert said[0] == ("swarm 'easy', 5 peers: reachable from outside: no (peers cannot dial port 47470 here); it "
                       "still works: it dials out, and rollouts flow both ways over those links")
    assert said[1] == ("  to accept peers too: forward TCP port 47470 on your router to this computer, or enable UPnP "
                       "there")
    (_, missing) = lines(ReachabilityChanged(False, 47470, 5, "easy", "missing"))
    assert missing.endswith('or enable UPnP there (and pip install "swarm-app[upnp]")')
    (_, mapped) = lines(ReachabilityChanged(False, 47470, 5, "easy", "mapped"))
    assert "the router says it forwards port 47470 (UPnP), yet peers cannot dial it" in mapped


def test_reachable_is_one_line_and_the_per_second_snapshots_are_not_printed():
    assert lines(ReachabilityChanged(True, 47470, 1, "easy")) == [
        "swarm 'easy', 1 peer: reachable from outside: yes (peers dialed it back on port 47470)"]
    assert lines(PeersUpdated((), True, 0, 0, 0, 0, 0, "easy", True, 47470, 3, 3)) == []
    assert lines(ReachabilityChanged(True, 47470, 3, "easy", lan_only=True)) == [
        "swarm 'easy', 3 peers: reachable from outside: on this network only (peers here dialed it back on port "
        "47470; none from the internet yet)"]


def test_a_solo_run_to_compare_with_is_one_line_with_its_cpu_axis():
    (line,) = lines(SoloCurveFound("solo run /runs/alone", (0, 5, 10), (0.25, 0.3, 0.375), (0.0, 9.5, 1234.5), 64))
    assert line == ("held-out compared at equal engine CPU with: solo run /runs/alone (0.375 at round 10, "
                    "1,234 engine CPU s, 64 items)")
    (line,) = lines(SoloCurveFound("solo run /runs/old", (0, 5, 10), (0.25, 0.3, 0.375)))
    assert line == ("solo curve: solo run /runs/old (0.375 at round 10); it has no engine CPU figures, "
                    "so nothing is compared")
