"""One peer node in its own network namespace, for tests/peer/io/test_namespaces.py.

    python -m tests.peer.io.netns_node LISTEN STATUS_FILE SECONDS [BOOTSTRAP ...]

Runs a PeerNode on LISTEN with the default dial-back policy (distinct /24 networks as witnesses) and the
defaults' pull and exchange intervals shortened, publishes two rollouts of its own, and every half second
rewrites STATUS_FILE with what the test checks: its node id, whether it is reachable, its neighbours and
the authors whose rollouts it admitted. Exits after SECONDS.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.reachability import ReachabilityPolicy
from swarm_app.peer.core.sources import SourceLimits
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollouts


def config(listen: str, bootstrap: list[str]) -> PeerConfig:
    """Real-network budgets and dial-back rules; only the timings are shortened to fit a test."""
    base = PeerConfig(listen=listen, bootstrap=tuple(bootstrap), mdns=False, peer_table=False,
                      sources=SourceLimits(standing_age_s=1.0),
                      reachability=ReachabilityPolicy(ask_every_s=2.0, ask_again_s=30.0, timeout_s=6.0))
    return dataclasses.replace(base.with_protocol(pull_interval_s=2.0, exchange_interval_s=2.0), tick_s=0.1)


async def main(listen: str, status_file: Path, seconds: float, bootstrap: list[str]) -> None:
    node = PeerNode(config(listen, bootstrap), Identity.generate())
    authors: set[str] = set()
    node.add_listener(lambda entry, pushed: authors.add(entry.author))
    await node.start()
    try:
        published = False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            stats = node.stats()
            if not published and stats.neighbours:
                for rollout in make_rollouts(2, seed=abs(hash(node.node_id)) % 10_000):
                    node.publish(rollout)
                published = True
            status = {"node": node.node_id, "reachable": stats.reachable, "neighbours": stats.neighbours,
                      "witnesses": stats.witnesses, "unreached": stats.unreached, "authors": sorted(authors),
                      "time": time.time()}
            tmp = status_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(status))
            tmp.replace(status_file)
            await asyncio.sleep(0.5)
    finally:
        await node.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]))
