"""One simulated swarm run: who the nodes are, when they join, leave and split, and the figures it gives.

The swarm: `nodes` nodes, of which `hostile` are hostile (hostile.py, all reachable: an attacker runs
servers); of the honest ones a share `reachable` can be dialed (the rest are behind NAT), always
including the first `bootstraps` nodes, whose addresses every node is started with (the shipped
bootstrap list). Nodes join over the first `join_s` seconds; each has an access latency drawn from a
lognormal (median 20 ms one way, so 40 ms between two nodes) and every message is lost with
probability `loss`. With `churn` R, R% of the honest non-bootstrap nodes leave per minute (checked every
10 s) and as many new ones join. With `partition_minutes` M, the nodes split into two random halves at
minute 3 for M minutes. With `discovery` "dht", every node also finds the swarm on a simulated Mainline
DHT (dht.py: lookups with latency, misses and poisoned answers, `dht_dead` dead addresses announced, and
`dht_miss` the chance a lookup misses an announcement); with `bootstraps` 0 that is the only way in: no
node starts with any address. With `record_hubs` H, the H nodes after the bootstraps (honest, reachable,
joined at the start) are the hubs of the swarm's signed record, which every lookup reads (dht.py).
Time is simulated; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.swarm.decode_once import decode_once
from benchmarks.swarm.dht import DhtModel, SimDht
from benchmarks.swarm.hostile import Hostile
from benchmarks.swarm.measure import Recorder, Window
from benchmarks.swarm.network import START, Network, SimNode, node_ip
from benchmarks.swarm.workload import Publisher, sim_score, sim_task
from swarm_app.peer.core.protocol import ProtocolConfig

SIM_CONFIG = ProtocolConfig(standing_refresh_s=60.0)
"""The shipped defaults, except that authors' standing (their weight in the training draw, which the
simulator does not run) is recomputed every minute instead of every 5 s: it costs a node 1 ms per
refresh with a thousand authors known, and changes nothing on the wire."""
PARTITION_AT_S = 180.0
DISCOVERY = ("bootstrap", "dht")
HEAL_WINDOW_S = 180.0


@dataclass(frozen=True)
class Scenario:
    nodes: int
    reachable: float
    minutes: float
    churn: float = 0.0
    hostile: float = 0.0
    hostile_mode: str = "attack"
    partition_minutes: float = 0.0
    seed: int = 0
    loss: float = 0.01
    round_s: float = 60.0
    groups: int = 8
    body_bytes: int = 2000
    bootstraps: int = 8
    join_s: float = 30.0
    tick_s: float = 1.0
    discovery: str = "bootstrap"
    """"bootstrap": the first `bootstraps` nodes' addresses only; "dht": and the simulated DHT (dht.py)."""
    dht_miss: float = DhtModel.miss
    dht_dead: int = 0
    record_hubs: int = 0
    """Hubs the swarm's signed record lists (swarm_app/peer/core/swarm_record.py); with "dht" discovery only."""


class Run:
    def __init__(self, scenario: Scenario, config: ProtocolConfig = SIM_CONFIG, share_decoding: bool = True) -> None:
        """`share_decoding`: decode and verify each distinct rollout once (decode_once.py), not per node."""
        self.s, self.share_decoding = scenario, share_decoding
        self.rng = random.Random(f"scenario:{scenario.seed}")
        self.net = Network(config, scenario.seed, regenerate_task=sim_task, score_task=sim_score,
                           tick_s=scenario.tick_s, loss=scenario.loss)
        self.publisher = Publisher(self.rng, scenario.round_s, scenario.groups, scenario.body_bytes)
        self.hostile = Hostile(self.net, scenario.hostile_mode, self.rng) if scenario.hostile > 0 else None
        if scenario.discovery not in DISCOVERY:
            raise ValueError(f"discovery {scenario.discovery!r}: one of {', '.join(DISCOVERY)}")
        hubs = tuple(f"{node_ip(i)}:4747" for i in range(scenario.bootstraps, scenario.bootstraps + scenario.record_hubs))
        self.dht = (SimDht(self.net, DhtModel(miss=scenario.dht_miss, dead=scenario.dht_dead, record=hubs),
                           seed=scenario.seed) if scenario.discovery == "dht" else None)
        self.bootstrap = tuple(f"{node_ip(i)}:4747" for i in range(scenario.bootstraps))
        self.end = START + scenario.minutes * 60
        self.partition_at = START + PARTITION_AT_S
        self.heal_at = self.partition_at + scenario.partition_minutes * 60
        self.main = Window("main", max(START + 120.0, self.end - 600.0), self.end)
        windows = [self.main]
        if scenario.partition_minutes:
            windows += [Window("partition", self.partition_at, self.heal_at),
                        Window("heal", self.heal_at, self.heal_at + HEAL_WINDOW_S)]
        self.recorder = Recorder(self.net, windows, self.main, bootstraps=scenario.bootstraps)
        self.cpu_s = 0.0
        """CPU seconds `simulate` took."""
        self._churn_debt = 0.0

    # --- building the swarm

    def roles(self) -> list[tuple[str, bool]]:
        """(role, reachable) of every initial node, bootstraps first, the rest shuffled."""
        s = self.s
        hostile = round(s.nodes * s.hostile)
        honest = s.nodes - hostile
        first = s.bootstraps + s.record_hubs
        reachable = max(first, round(honest * s.reachable))
        rest = [("honest", True)] * (reachable - first) + [("honest", False)] * (honest - reachable)
        rest += [(s.hostile_mode, True)] * hostile
        self.rng.shuffle(rest)
        return [("honest", True)] * first + rest

    def start(self) -> None:
        for k, (role, reachable) in enumerate(self.roles()):
            delay = 0.0 if k < self.s.bootstraps + self.s.record_hubs else self.rng.uniform(0, self.s.join_s)
            self.net.schedule(delay, self.join, role, reachable)
        if self.s.churn:
            self.net.schedule(60.0, self._churn)
        if self.s.partition_minutes:
            self.net.schedule(PARTITION_AT_S, self._split)
            self.net.schedule(PARTITION_AT_S + self.s.partition_minutes * 60, self.net.heal)

    def join(self, role: str, reachable: bool) -> SimNode:
        delay = min(0.3, max(0.002, self.rng.lognormvariate(math.log(0.02), 0.6)))
        node = self.net.add_node(reachable=reachable, role=role, delay_s=delay, bootstrap=self.bootstrap)
        if self.dht is not None:
            self.dht.start(node)
        if role == "honest":
            self.publisher.start(self.net.schedule, lambda rollout: self._publish(node, rollout), node.index)
        elif self.hostile is not None:
            self.hostile.start(node, self.net.nodes[0].core.identity)
        return node

    def _publish(self, node: SimNode, rollout: Any) -> bool:
        if not node.online:
            return False
        actions = node.core.publish(dataclasses.replace(rollout, created_ms=int(self.net.now * 1000)), self.net.now)
        self.recorder.published_by(node)
        self.net.execute(node.index, actions)
        return True

    def _churn(self) -> None:
        """Every 10 s: churn% / 6 of the honest non-bootstrap nodes leave, as many new ones join."""
        movable = [n for n in self.net.nodes if n.online and n.role == "honest" and n.index >= self.s.bootstraps]
        self._churn_debt += len(movable) * self.s.churn / 100 / 6
        leaving = self.rng.sample(movable, min(len(movable), int(self._churn_debt)))
        self._churn_debt -= len(leaving)
        for node in leaving:
            self.net.leave(node)
            self.join("honest", self.rng.random() < self.s.reachable)
        self.net.schedule(10.0, self._churn)

    def _split(self) -> None:
        sides = {n.index: self.rng.randrange(2) for n in self.net.nodes}
        self.net.partition(sides)

    # --- running and the figures

    def simulate(self) -> None:
        """Run the scenario to its end; report.py turns what was recorded into figures."""
        began = time.process_time()
        self.start()
        with decode_once() if self.share_decoding else contextlib.nullcontext():
            self.net.run_until(self.end)
        self.recorder.finish()
        self.cpu_s = round(time.process_time() - began, 1)
