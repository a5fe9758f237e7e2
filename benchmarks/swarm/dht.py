"""The BitTorrent Mainline DHT as a discovery source of the simulator: announcements under the swarm's key,
and each node's lookups and announces on the real node's schedule.

What a node does is what swarm_app/peer/io/dht.py does, on the same schedule (swarm_app/peer/core/dht_timer.py
with `DhtConfig()`'s defaults): once its DHT has bootstrapped (a latency draw, at most `first_s`) it
announces its address while `may_announce` (the real rule: dial-back has not said "not reachable"; the
simulator has no port mappings; hostile nodes always announce) and looks the key up, then on the timer's
intervals, more often while it holds fewer than `hungry_below` links. Every address an answer brings that
was not handed on in the last `SEEN_AGAIN_S` goes to the core as `add_address(addr, "dht")`: unverified,
dialed within the core's unverified-dial budget, proven only by a hello.

What the DHT does, and nothing else (`DhtModel`):
- an announce is stored after a latency (the announce is a lookup of the closest nodes, then a store) and
  lives `ttl_s` (the Mainline DHT drops a peer about 30 minutes after its last announce): a node that left,
  or behind NAT announced before its verdict, stays listed until then;
- a lookup answers after a latency, uniform in `latency_s`, all at once (libtorrent's replies come as they
  arrive: all at the end is the slow case); each live announcement is missed with probability `miss` (the
  closest nodes that store it did not answer, or the lookup ended before reaching them), and of the rest at
  most `answer_max` come back, drawn at random (a get_peers reply carries at most ~100 peers);
- poisoned answers: `dead` addresses that nobody serves, announced for the whole run, each on its own /24
  (the worst case for the core's per-network caps), and, in a run with hostile nodes, theirs.
Seeded: the DHT draws from its own `random.Random`, each node's timer from another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchmarks.swarm.network import PORT, Network, SimNode
from swarm_app.peer.core.config import DhtConfig
from swarm_app.peer.core.dht_timer import DhtTimer
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


def dead_address(k: int) -> str:
    """The k-th poisoned address: public, one /24 each, in 30.0.0.0/8 and up (no simulated node is there)."""
    return f"{30 + k // 62_500}.{k // 250 % 250}.{k % 250}.1:{PORT}"


class SimDht:
    def __init__(self, network: Network, model: DhtModel = DhtModel(), config: DhtConfig = DhtConfig(),
                 seed: int = 0) -> None:
        self.net, self.model, self.config, self.seed = network, model, config, seed
        self.rng = random.Random(f"dht:{seed}")
        self.listed: dict[str, float] = {dead_address(k): float("inf") for k in range(model.dead)}
        """Address -> when its announcement under the swarm's key expires."""
        self.lookups = self.announces = self.handed_on = 0
        self._seen: dict[int, dict[str, float]] = {}
        """Node index -> address -> when it was last handed on."""

    def start(self, node: SimNode) -> None:
        """`node` starts its DHT now: the first lookup and announce once the DHT has bootstrapped."""
        bootstrap_s = min(self.config.first_s, self._latency())
        timer = DhtTimer(self.config, random.Random(f"dht:{self.seed}:{node.index}"), self.net.now + bootstrap_s)
        self._seen[node.index] = {}
        self.net.schedule(bootstrap_s, self._wake, node, timer)

    def may_announce(self, node: SimNode) -> bool:
        """peer/io/dht.py for_node: unless dial-back found it unreachable (no port mappings here)."""
        return node.role != "honest" or node.core.reachable is not False

    def _latency(self) -> float:
        return self.rng.uniform(*self.model.latency_s)

    def _wake(self, node: SimNode, timer: DhtTimer) -> None:
        if not node.online:
            return
        now = self.net.now
        if timer.announce_due(now) and self.may_announce(node):
            timer.announced()
            self.announces += 1
            self.net.schedule(self._latency(), self._stored, node.addr)
        if timer.lookup_due(now, node.core.view.links):
            self.lookups += 1
            self.net.schedule(self._latency(), self._answered, node, timer)
        self.net.schedule(max(0.05, timer.next_due - now), self._wake, node, timer)

    def _stored(self, addr: str) -> None:
        self.listed[addr] = max(self.listed.get(addr, 0.0), self.net.now + self.model.ttl_s)

    def answer(self) -> list[str]:
        """What one lookup returns now."""
        now, miss, rng = self.net.now, self.model.miss, self.rng
        live = [addr for addr, expires in self.listed.items() if expires > now and rng.random() >= miss]
        return rng.sample(live, min(len(live), self.model.answer_max))

    def _answered(self, node: SimNode, timer: DhtTimer) -> None:
        if not node.online:
            return
        now, seen = self.net.now, self._seen[node.index]
        for addr in self.answer():
            last = seen.get(addr)
            if last is not None and now - last < SEEN_AGAIN_S:
                continue
            seen[addr] = now
            timer.found()
            self.handed_on += 1
            node.core.add_address(addr, "dht")
