"""The core tests' simulator: benchmarks/swarm/network.py (the one simulator of this repository, shared
with benchmarks/swarm_sim.py), started with `n` reachable nodes a fixed latency apart and 0.1 s ticks.

Node i's address is `node_ip(i):4747`, one /16 each, as members at home on many providers.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.swarm.network import START, Network, SimNode
from swarm_app.kernel.tasks import regenerate
from swarm_app.peer.core.admission import AdmissionLimits
from swarm_app.peer.core.protocol import ProtocolConfig

__all__ = ["START", "SimNode", "Simulation"]


class Simulation(Network):
    def __init__(self, n: int, config: ProtocolConfig, seed: int = 0, latency_s: float = 0.01,
                 regenerate_task: Callable = regenerate, limits: AdmissionLimits = AdmissionLimits(),
                 **network: object) -> None:
        super().__init__(config, seed, regenerate_task=regenerate_task, limits=limits, **network)
        for _ in range(n):
            self.add_node(delay_s=latency_s / 2)

    def index(self, node: SimNode) -> int:
        return node.index

    def run(self, seconds: float) -> None:
        self.run_until(self.now + seconds)
