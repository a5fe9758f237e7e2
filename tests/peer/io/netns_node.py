"""One peer node in its own network namespace, for tests/peer/io/test_namespaces.py.

    python -m tests.peer.io.netns_node LISTEN STATUS_FILE SECONDS [BOOTSTRAP ...] [--dht DHT_LISTEN SEED ...]

Runs a PeerNode on LISTEN with the default dial-back policy (distinct /24 networks as witnesses) and the
defaults' pull and exchange intervals shortened, publishes two rollouts of its own, and every half second
rewrites STATUS_FILE with what the test checks: its node id, whether it is reachable, its neighbours and
the authors whose rollouts it admitted. Exits after SECONDS. With `--dht`, it also takes part in a private
Mainline DHT (libtorrent; its UDP socket on DHT_LISTEN, seeded with the SEED DHT nodes, no public router):
it looks its swarm up there and announces itself while it may be reachable, as `swarm run` does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from swarm_app.peer.core.config import DhtConfig, PeerConfig
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.reachability import ReachabilityPolicy
from swarm_app.peer.core.sources import SourceLimits
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import make_rollouts


def config(listen: str, bootstrap: list[str], dht: list[str] | None = None) -> PeerConfig:
    """Real-network budgets and dial-back rules; only the timings are shortened to fit a test."""
    found = None if dht is None else DhtConfig(listen=dht[0], nodes=tuple(dht[1:]), routers=(), first_s=2.0,
                                               lookup_s=10.0, hungry_s=2.0, announce_s=10.0, early_announce_s=2.0)
    base = PeerConfig(listen=listen, bootstrap=tuple(bootstrap), mdns=False, peer_table=False, dht=found,
                      sources=SourceLimits(standing_age_s=1.0),
                      reachability=ReachabilityPolicy(ask_every_s=2.0, ask_again_s=30.0, timeout_s=6.0))
    return dataclasses.replace(base.with_protocol(pull_interval_s=2.0, exchange_interval_s=2.0), tick_s=0.1)


async def main(listen: str, status_file: Path, seconds: float, bootstrap: list[str], dht: list[str] | None) -> None:
    node = PeerNode(config(listen, bootstrap, dht), Identity.generate())
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
    rest = sys.argv[4:]
    cut = rest.index("--dht") if "--dht" in rest else len(rest)
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), rest[:cut], rest[cut + 1:] or None))
