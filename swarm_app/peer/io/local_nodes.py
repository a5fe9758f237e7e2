"""`swarm demo --nodes N`: N peer nodes in one process on 127.0.0.1, finding each other on their own.

The first node is the bootstrap of the others (its port is only known once it is bound); peer
exchange then spreads every address, so the swarm meshes without any address typed by hand. Each
node gets a fresh throwaway identity (the user's own key is not touched) and no peer table. This
module knows nothing of training: `run_demo` calls the `run_node(index, node)` coroutine the CLI
passes (a Session per node; see swarm_app/demo/local_swarm.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from swarm_app.peer.core.config import PeerConfig, local_config
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.stats import NodeStats
from swarm_app.peer.io.node import PeerNode

log = logging.getLogger(__name__)


def demo_config(pull_interval_s: float = 2.0) -> PeerConfig:
    """Loopback nodes that mesh within seconds: faster pulls and peer exchange than on a real network,
    no per-IP cap (every demo node connects from 127.0.0.1), and no verdict about being reachable from
    outside (the views say "not checked")."""
    config = local_config(pull_interval_s=pull_interval_s, exchange_interval_s=2.0, target_outbound=4,
                          max_inbound=256, max_inbound_per_ip=256, max_inbound_per_network=256)
    return dataclasses.replace(config, tick_s=0.1, local_only=True)


@asynccontextmanager
async def local_swarm(n: int, config: PeerConfig | None = None) -> AsyncIterator[list[PeerNode]]:
    """Start `n` nodes (node 0 first, the others bootstrapping from it); stop them all on exit."""
    if n < 1:
        raise ValueError("a swarm needs at least one node")
    config = config or demo_config()
    nodes = [PeerNode(config, Identity.generate())]
    try:
        await nodes[0].start()
        joined = dataclasses.replace(config, bootstrap=(nodes[0].address,))
        for _ in range(n - 1):
            nodes.append(PeerNode(joined, Identity.generate()))
            await nodes[-1].start()
        yield nodes
    finally:
        await asyncio.gather(*(node.stop() for node in nodes), return_exceptions=True)


async def wait_until_meshed(nodes: list[PeerNode], timeout_s: float = 30.0, min_neighbours: int = 1) -> bool:
    """True once every node has at least `min_neighbours` open connections (False on timeout)."""
    wanted = min(min_neighbours, len(nodes) - 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(node.stats().neighbours >= wanted for node in nodes):
            return True
        await asyncio.sleep(0.1)
    return False


async def run_demo(n: int, run_node: Callable[[int, PeerNode], Awaitable[Any]],
                   config: PeerConfig | None = None) -> list[NodeStats]:
    """Run `run_node(i, node)` for every node of a local swarm concurrently; return final stats.

    One node's failure is logged and does not stop the others (the demo shows a swarm that survives
    a member going away); cancellation (Ctrl-C) stops them all.
    """
    async with local_swarm(n, config) as nodes:
        if not await wait_until_meshed(nodes, timeout_s=15.0):
            log.warning("demo: not every node found a peer within 15 s; starting anyway (they keep trying)")
        results = await asyncio.gather(*(run_node(i, node) for i, node in enumerate(nodes)), return_exceptions=True)
        for i, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("demo node %d failed: %r", i, result)
        return [node.stats() for node in nodes]
