"""Twenty real nodes in one process on loopback: every node hears from every author within 60 s."""

from __future__ import annotations

import asyncio
import time

from swarm_app.peer.io.local_nodes import local_swarm
from tests.peer.helpers import fast_config, make_rollout

N = 20


async def test_twenty_nodes_every_node_hears_every_author():
    config = fast_config(pull_interval_s=0.5, exchange_interval_s=1.0, target_outbound=4)
    async with local_swarm(N, config) as nodes:
        started = time.monotonic()
        for k, node in enumerate(nodes):
            for j in range(2):
                node.publish(make_rollout(seed=100 + k, index=j))
        authors = {node.node_id for node in nodes}

        def missing() -> int:
            return sum(len(authors - {node.node_id} - set(node.core.intake.heard)) for node in nodes)

        while missing() and time.monotonic() - started < 60:
            await asyncio.sleep(0.2)
        elapsed = time.monotonic() - started
        links = sum(node.stats().outbound for node in nodes)
        print(f"\n{N} nodes: every node heard every author after {elapsed:.1f} s "
              f"({links} outbound links, {sum(n.stats().accepted for n in nodes)} rollouts admitted)")
        assert missing() == 0, f"{missing()} (node, author) pairs still unheard after 60 s"
        assert all(not node.stats().rejected.get("bad_signature") for node in nodes)
