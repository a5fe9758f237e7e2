"""N real `swarm run` processes that know no address at all (no --bootstrap, no --peer, no mDNS) find each
other on a private Mainline DHT on loopback, and how many neighbours each has after a while.

A seed DHT session runs in this process on 127.40.0.1; every node listens on its own /24 (127.<50+i>.0.1,
so libtorrent's IP restrictions keep their defaults), is seeded with the seed's address
(`[peer] dht_nodes`) and asks no public router (`dht_routers` empty): nothing leaves the machine. Each
node's neighbours are read from the `peers` column of its `metrics.jsonl` (one row per round, fake engine).

    python -m benchmarks.dht_join --nodes 10 --seconds 60 [--no-dht]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.processes import stop_all
from swarm_app.peer.core.config import DhtConfig
from swarm_app.peer.io.dht import DhtDiscovery


def last_row(run_dir: Path) -> dict:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return {}
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [r for r in rows if "type" not in r]
    return rows[-1] if rows else {}


def launch(i: int, root: Path, seed_port: int, args: argparse.Namespace) -> tuple[subprocess.Popen, Path]:
    home, run_dir = root / f"home-{i}", root / f"run-{i}"
    env = {**os.environ, "SWARM_HOME": str(home), "SWARM_PEER_ENABLED": "true", "SWARM_PEER_DHT": "true",
           "SWARM_PEER_DHT_ROUTERS": "",
           "SWARM_PEER_DHT_NODES": f'["127.40.0.1:{seed_port}"]', "SWARM_PEER_UPNP": "false"}
    argv = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--backend", "fake", "--no-mdns", "--threads", "1",
            "--swarm", "dht-lab", "--listen", f"127.{50 + i}.0.1:47470", "--run-dir", str(run_dir), "--seed", str(i)]
    if args.no_dht:
        argv.append("--no-dht")
    log = open(root / f"node-{i}.log", "w")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), run_dir


async def main(args: argparse.Namespace) -> None:
    seed = DhtDiscovery(DhtConfig(routers=()), "seed", "127.40.0.1", lambda: None, lambda: None, lambda: 0,
                        lambda addr, checked: None)
    assert await seed.start()
    root = Path(tempfile.mkdtemp(prefix="dht-join-"))
    procs = [launch(i, root, seed.listen_port, args) for i in range(args.nodes)]
    start = time.monotonic()
    try:
        for mark in args.marks:
            await asyncio.sleep(max(0.0, start + mark - time.monotonic()))
            rows = [last_row(run_dir) for _, run_dir in procs]
            peers = [r.get("peers", "-") for r in rows]
            accepted = [r.get("rollouts_accepted", "-") for r in rows]
            print(f"{mark:4.0f} s: neighbours {peers}; rollouts accepted {accepted}", flush=True)
    finally:
        stop_all(proc for proc, _ in procs)
        await seed.stop()
        print(f"logs in {root}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--marks", type=float, nargs="+", default=[30.0, 60.0, 90.0])
    parser.add_argument("--no-dht", action="store_true")
    asyncio.run(main(parser.parse_args()))
