"""`swarm hub` under 64 inbound links: its RSS, CPU and bytes a minute, as a real process on loopback.

The hub is `python -m swarm_app hub` on 127.0.0.1 (no DHT, mDNS or UPnP; its own SWARM_HOME). The 64 client
nodes are PeerNodes (swarm_app/peer/io/node.py) with the default PeerConfig (real intervals and budgets, no
loopback trust), spread over `--procs` worker processes; client c listens and dials from 127.0.<10 + c//8>.<1 +
c%8>: 8 addresses in each of 8 /24s, within the hub's inbound caps (8 per address, 16 per /24). Each client
publishes a round of 8 valid groups (tests/peer/helpers.py make_rollout) every 10 to 60 s (uniform), as a real
node does. By default the clients are leaves behind NAT whose only reachable node is the hub (the hub's worst
case): each listens on 127.1.<10 + c//8>.<1 + c%8>, where nobody dials, while the hub sees it at its dialing
address, so the hub's dials and dial-backs to what it announces fail as they would at a NAT, its record names
no dialable address, and the peer lists it asks for (as every node does) hold no other client. `--mesh`: each
listens where it dials from, so the clients learn of each other from the hub's lists and link to each other
too (once they do, a client replaces its hub link when its neighbours deliver first: overlay.useless and
rotation, as with any neighbour that only relays duplicates). Once the hub holds
`--links` inbound links (or `--warmup` s passed), it is sampled every 5 s for `--minutes`: RSS (VmRSS) and CPU
time from /proc/PID, and its /metrics counters (rsp_ws_bytes_in/out: websocket message bytes; rsp_accepted;
rsp_rollouts_served); per-minute figures are the differences over each minute.

    nice -n 10 python -m benchmarks.hub_load --clients 64 --minutes 4

Writes benchmarks/results/hub_load.json (hub_load_mesh.json with --mesh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "hub_load.json"
SWARM = "hubload"
METRICS = ("rsp_ws_bytes_in_total", "rsp_ws_bytes_out_total", "rsp_accepted_total", "rsp_rollouts_served_total")


def client_ip(c: int) -> str:
    return f"127.0.{10 + c // 8}.{1 + c % 8}"


def behind_nat(c: int) -> str:
    """Where leaf `c` listens without --mesh: not the address it is seen at (`client_ip`), as behind a NAT
    without a forwarded port, so whatever dials what it announces fails (refused here, a timeout at a NAT)."""
    return f"127.1.{10 + c // 8}.{1 + c % 8}"


# --- a worker process: some of the client nodes


async def run_clients(first: int, count: int, hub: str, seconds: float, seed: int, mesh: bool) -> None:
    from swarm_app.peer.core.config import PeerConfig
    from swarm_app.peer.core.identity import Identity
    from swarm_app.peer.io.node import PeerNode
    from tests.peer.helpers import make_rollout

    rng = random.Random(seed)
    nodes = []
    for c in range(first, first + count):
        ip = client_ip(c)
        listen = ip if mesh else behind_nat(c)
        config = PeerConfig(listen=f"{listen}:0", source_ip=ip, swarm=SWARM, bootstrap=(hub,), mdns=False,
                            peer_table=False)
        node = PeerNode(config, Identity.generate(), rng=random.Random(rng.random()))
        await node.start()
        nodes.append(node)
        await asyncio.sleep(0.5)  # nodes join over a while, not in one burst

    async def publish_rounds(i: int, node) -> None:
        period = rng.uniform(10.0, 60.0)
        await asyncio.sleep(rng.uniform(0, period))
        for round_ in range(100_000):
            for g in range(8):
                node.publish(make_rollout(seed=1000 + first + i, index=g, round_=round_))
            await asyncio.sleep(period)

    tasks = [asyncio.create_task(publish_rounds(i, n)) for i, n in enumerate(nodes)]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    for node in nodes:
        await node.stop()


# --- the driver


def metrics(address: str) -> dict | None:
    """The hub's counters now; None when /metrics did not answer within 20 s (a busy hub: the sample is skipped)."""
    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=20).read().decode()
    except OSError:
        return None
    found = {name: float(m.group(1)) for name in METRICS
             if (m := re.search(rf"^{name} ([0-9.e+]+)$", text, re.M))}
    inbound = re.search(r'^rsp_neighbours\{direction="in"\} ([0-9.e+]+)$', text, re.M)
    outbound = re.search(r'^rsp_neighbours\{direction="out"\} ([0-9.e+]+)$', text, re.M)
    found["in"] = float(inbound.group(1)) if inbound else 0.0
    found["out"] = float(outbound.group(1)) if outbound else 0.0
    rejected = re.findall(r'^rsp_rejected_total\{reason="([^"]+)"\} ([0-9.e+]+)$', text, re.M)
    found["rejected"] = {reason: float(n) for reason, n in rejected}
    return found


def proc_sample(pid: int) -> tuple[float, float]:
    """(RSS in MiB, CPU seconds user + system) of `pid`."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss_kib / 1024, (int(fields[11]) + int(fields[12])) / ticks


def start_hub(root: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "SWARM_HOME": str(root / "hub-home"), "SWARM_PEER_ENABLED": "true"}
    argv = [sys.executable, "-m", "swarm_app", "hub", "--listen", f"127.0.0.1:{port}", "--swarm", SWARM,
            "--no-dht", "--no-mdns", "--no-upnp"]
    return subprocess.Popen(argv, env=env, stdout=open(root / "hub.log", "w"), stderr=subprocess.STDOUT)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3), "n": len(values)}


def drive(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="hub-load-"))
    port = free_port()
    hub_address = f"127.0.0.1:{port}"
    hub = start_hub(root, port)
    time.sleep(3)
    idle_rss, _ = proc_sample(hub.pid)
    per = -(-args.clients // args.procs)
    seconds = args.warmup + args.minutes * 60 + 30
    workers = [subprocess.Popen([sys.executable, "-m", "benchmarks.hub_load", "--worker", str(first),
                                 *(["--mesh"] if args.mesh else []),
                                 "--count", str(min(per, args.clients - first)), "--hub", hub_address,
                                 "--seconds", str(seconds)], stdout=open(root / f"worker-{first}.log", "w"),
                                stderr=subprocess.STDOUT)
               for first in range(0, args.clients, per)]
    started = time.time()
    try:
        while time.time() - started < args.warmup and (metrics(hub_address) or {"in": 0})["in"] < args.links:
            time.sleep(2)
        linked_after = time.time() - started
        samples = []
        end = time.time() + args.minutes * 60
        while time.time() < end + 0.1:
            rss, cpu = proc_sample(hub.pid)
            counters = metrics(hub_address)
            if counters is not None:
                samples.append({"t": time.time(), "rss_mib": rss, "cpu_s": cpu, **counters})
            time.sleep(5)
        load = os.getloadavg()
    finally:
        for w in workers:
            w.terminate()
        hub.terminate()
        hub.wait(timeout=30)
        for w in workers:
            w.wait(timeout=30)
    minutes = []
    for i, s in enumerate(samples):
        later = next((x for x in samples[i:] if x["t"] - s["t"] >= 59.5), None)
        if later is None or (minutes and s["t"] - minutes[-1]["from"] < 59.5):
            continue
        scale = 60.0 / (later["t"] - s["t"])
        minutes.append({"from": s["t"], "cpu_percent": 100 * (later["cpu_s"] - s["cpu_s"]) / (later["t"] - s["t"]),
                        **{k: scale * (later[m] - s[m]) for k, m in
                           (("bytes_in", METRICS[0]), ("bytes_out", METRICS[1]), ("admitted", METRICS[2]),
                            ("served", METRICS[3]))}})
    return {
        "command": " ".join(["python -m benchmarks.hub_load", *sys.argv[1:]]),
        "clients": args.clients, "procs": args.procs, "minutes": args.minutes, "mesh": args.mesh,
        "seconds_to_links": round(linked_after, 1), "hub_rss_idle_mib": round(idle_rss, 1),
        "inbound_links": summary([s["in"] for s in samples]) | {"min": min(s["in"] for s in samples)},
        "outbound_links": summary([s["out"] for s in samples]),
        "rss_mib": summary([s["rss_mib"] for s in samples]),
        "cpu_percent_per_minute": summary([m["cpu_percent"] for m in minutes]),
        "bytes_in_per_minute": summary([m["bytes_in"] for m in minutes]),
        "bytes_out_per_minute": summary([m["bytes_out"] for m in minutes]),
        "admitted_per_minute": summary([m["admitted"] for m in minutes]),
        "relayed_per_minute": summary([m["served"] for m in minutes]),
        "rejected_at_end": samples[-1]["rejected"],
        "loadavg_at_end": [round(x, 2) for x in load], "cpus": os.cpu_count(),
        "hub_log_tail": (root / "hub.log").read_text().splitlines()[-4:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--procs", type=int, default=4, help="worker processes the clients run in")
    parser.add_argument("--links", type=int, default=64, help="inbound links to wait for before measuring")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds to wait for them at most")
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--mesh", action="store_true", help="clients also link to each other through peer exchange "
                        "(default: a star, each client linked to the hub alone, as leaves behind NAT)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hub", default="", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        asyncio.run(run_clients(args.worker, args.count, args.hub, args.seconds, seed=args.worker, mesh=args.mesh))
        return
    result = drive(args)
    out = RESULTS.with_name("hub_load_mesh.json") if args.mesh else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
