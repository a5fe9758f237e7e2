"""The BitTorrent Mainline DHT as a discovery source of the simulator: announcements under the swarm's key,
and each node's lookups and announces on the real node's schedule.

What a node does is what swarm_app/peer/io/dht.py does, on the same schedule (swarm_app/peer/core/dht_timer.py
with `DhtConfig()`'s defaults): once its DHT has bootstrapped (a latency draw, at most `first_s`) it
announces its address under the key `announce_key` names (the real rule, core/dht_timer.announce_key: the
checked key once a peer dialed it back, the unchecked key before, none after a "not reachable" verdict; the
simulator has no port mappings; hostile nodes always announce under the checked key) and looks the swarm up
(the unchecked key too while it holds fewer than `hungry_below` links), then on the timer's intervals, more
often while it is short of links. Every address an answer brings that was not handed on in the last
`SEEN_AGAIN_S` goes to the core as `add_address(addr, "dht")` ("dht-unchecked" from the unchecked key):
unverified, dialed within the core's unverified-dial budget, proven only by a hello.

What the DHT does, and nothing else (`DhtModel`):
- an announce is stored after a latency (the announce is a lookup of the closest nodes, then a store) and
  lives `ttl_s` (the Mainline DHT drops a peer about 30 minutes after its last announce): a node that left,
  or behind NAT announced (unchecked) before its verdict, stays listed until then;
- a lookup answers after a latency, uniform in `latency_s`, all at once (libtorrent's replies come as they
  arrive: all at the end is the slow case); each live announcement is missed with probability `miss` (the
  closest nodes that store it did not answer, or the lookup ended before reaching them), and of the rest at
  most `answer_max` come back, drawn at random (a get_peers reply carries at most ~100 peers);
- poisoned answers: `dead` addresses that nobody serves, announced under the checked key for the whole run,
  each on its own /16 (the worst case for the core's per-network caps and spread), and, in a run with hostile nodes,
  theirs;
- the swarm's signed record (`record`: its hubs' addresses; core/swarm_record.py): read with every lookup of
  the checked key, after its own latency, missed with the same probability as an announcement; its hubs go to
  the core as bootstrap addresses (peer/io/node.py `_found_in_record`), once per `SEEN_AGAIN_S`. Nobody but
  the creator can write it, so poison does not reach it.
Seeded: the DHT draws from its own `random.Random`, each node's timer from another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchmarks.swarm.network import PORT, Network, SimNode
from swarm_app.peer.core.config import DhtConfig
from swarm_app.peer.core.dht_timer import CHECKED, UNCHECKED, DhtTimer, announce_key, looks_unchecked
from swarm_app.peer.io.dht import SEEN_AGAIN_S


@dataclass(frozen=True)
class DhtModel:
    latency_s: tuple[float, float] = (1.0, 10.0)
    """A lookup's (and an announce's, and the DHT bootstrap's) duration, uniform in this range."""
    miss: float = 0.2
    """Chance that a lookup misses a given live announcement."""
    answer_max: int = 100
    """Addresses one lookup brings at most."""
    ttl_s: float = 1800.0
    """How long an announcement stays listed after it was made."""
    dead: int = 0
    """Announced addresses nobody serves (poison)."""
    record: tuple[str, ...] = ()
    """The hubs of the swarm's signed record (none: the swarm has no record)."""


def dead_address(k: int) -> str:
    """The k-th poisoned address: public, one /16 each, 120.<k % 250>.0.1 and up (no simulated node is there):
    a poisoned answer may name any address, so the attacker's best case against the core's spread of dials
    over /16s and /24s."""
    return f"{120 + k // 250}.{k % 250}.0.1:{PORT}"


class SimDht:
    def __init__(self, network: Network, model: DhtModel = DhtModel(), config: DhtConfig = DhtConfig(),
                 seed: int = 0) -> None:
        self.net, self.model, self.config, self.seed = network, model, config, seed
        self.rng = random.Random(f"dht:{seed}")
        self.listed: dict[str, dict[str, float]] = {
            CHECKED: {dead_address(k): float("inf") for k in range(model.dead)}, UNCHECKED: {}}
        """Key -> address -> when its announcement under the swarm's key expires."""
        self.lookups = self.announces = self.handed_on = 0
        self._seen: dict[int, dict[tuple[str, bool], float]] = {}
        """Node index -> (address, checked) -> when it was last handed on."""
        self._record_handed: dict[int, float] = {}
        """Node index -> when the record's hubs were last handed on."""

    def start(self, node: SimNode) -> None:
        """`node` starts its DHT now: the first lookup and announce once the DHT has bootstrapped."""
        bootstrap_s = min(self.config.first_s, self._latency())
        timer = DhtTimer(self.config, random.Random(f"dht:{self.seed}:{node.index}"), self.net.now + bootstrap_s)
        self._seen[node.index] = {}
        self.net.schedule(bootstrap_s, self._wake, node, timer)

    def announce_key(self, node: SimNode) -> str | None:
        """peer/io/dht.py for_node (no port mappings here); a hostile node claims the checked key."""
        if node.role != "honest":
            return CHECKED
        return announce_key(node.core.reachable, node.core.confirmed, False)

    def listed_addresses(self) -> set[str]:
        """Every address listed under either key, expired or not."""
        return {addr for listed in self.listed.values() for addr in listed}

    def _latency(self) -> float:
        return self.rng.uniform(*self.model.latency_s)

    def _wake(self, node: SimNode, timer: DhtTimer) -> None:
        if not node.online:
            return
        now = self.net.now
        key = self.announce_key(node)
        if timer.announce_due(now, key):
            timer.announced(key)
            self.announces += 1
            self.net.schedule(self._latency(), self._stored, key, node.addr)
        links = node.core.discovery_links(now)
        if timer.lookup_due(now, links):
            self.lookups += 1
            self.net.schedule(self._latency(), self._answered, node, timer, CHECKED)
            if self.model.record:
                self.net.schedule(self._latency(), self._record_read, node)
            if looks_unchecked(links, self.config.hungry_below):
                self.net.schedule(self._latency(), self._answered, node, timer, UNCHECKED)
        self.net.schedule(max(0.05, timer.wake_after(now)), self._wake, node, timer)

    def _record_read(self, node: SimNode) -> None:
        if not node.online or self.rng.random() < self.model.miss:
            return
        if self.net.now - self._record_handed.get(node.index, -1e18) < SEEN_AGAIN_S:
            return
        self._record_handed[node.index] = self.net.now
        for addr in self.model.record:
            node.core.add_address(addr, "bootstrap")

    def _stored(self, key: str, addr: str) -> None:
        listed = self.listed[key]
        listed[addr] = max(listed.get(addr, 0.0), self.net.now + self.model.ttl_s)

    def answer(self, key: str = CHECKED) -> list[str]:
        """What one lookup of `key` returns now."""
        now, miss, rng = self.net.now, self.model.miss, self.rng
        live = [addr for addr, expires in self.listed[key].items() if expires > now and rng.random() >= miss]
        return rng.sample(live, min(len(live), self.model.answer_max))

    def _answered(self, node: SimNode, timer: DhtTimer, key: str) -> None:
        if not node.online:
            return
        now, seen, checked = self.net.now, self._seen[node.index], key == CHECKED
        for addr in self.answer(key):
            last = seen.get((addr, checked))
            if last is not None and now - last < SEEN_AGAIN_S:
                continue
            seen[addr, checked] = now
            timer.found()
            self.handed_on += 1
            node.core.add_address(addr, "dht" if checked else "dht-unchecked")
