"""N real `swarm run` processes on loopback, all given the first one's address with --bootstrap, standing for a
LAN's machines (issue 41, item 2): how many neighbours each has after 30, 60 and 90 s, which peers were banned
(the nodes' logs), and whether each trained on others' rollouts (its metrics rows' `n_external`, `used_from`).

Layouts: `one` puts every node on one /24 (127.0.<net>.1 .. N, as on a home or lab LAN), `many` each on a /24 of
its own (127.<net + i>.0.1). Every node listens on its own address and one shared port and dials from its
address (a node listening on a loopback address other than 127.0.0.1 does: session/peering.py), with the fake
engine, one thread, no mDNS, DHT or UPnP (nothing leaves the machine), and --external 4 (J: peers' groups per
round). `--paced` runs the fake engine at a round a second (SWARM_FAKE_ROUND_S=1, as a real node), else at full
speed (hundreds of rounds a minute). Writes benchmarks/results/lan_mesh-<layout>-<pace>.json.

    nice -n 10 python -m benchmarks.lan_mesh --nodes 8 --layout one [--paced] [--marks 30 60 90]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.processes import stop_all

RESULTS = Path(__file__).parent / "results"
BANNED = re.compile(r"peer (\S+) banned for (\d+) s after repeated rejections \((.*)\)")


def hosts_of(layout: str, nodes: int, net: int) -> list[str]:
    return [f"127.0.{net}.{i + 1}" for i in range(nodes)] if layout == "one" else \
        [f"127.{net + i}.0.1" for i in range(nodes)]


def free_port(hosts: list[str]) -> int:
    """A port free on every host (tried from 47600 up)."""
    for port in range(47600, 48600):
        try:
            for host in hosts:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    raise SystemExit("no port free on every host")


def rows_of(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a row being written
        if "type" not in row:
            rows.append(row)
    return rows


def launch(i: int, host: str, port: int, bootstrap: str | None, root: Path,
           args: argparse.Namespace) -> tuple[subprocess.Popen, Path]:
    run_dir = root / f"run-{i}"
    env = {**os.environ, "SWARM_HOME": str(root / f"home-{i}"), "SWARM_PEER_ENABLED": "true",
           "SWARM_FAKE_ROUND_S": "1" if args.paced else "0"}
    argv = [sys.executable, "-m", "swarm_app", "run", "--no-ui", "--backend", "fake", "--no-mdns", "--no-dht",
            "--no-upnp", "--threads", "1", "--swarm", "lab", "--listen", f"{host}:{port}", "--external", "4",
            "--run-dir", str(run_dir), "--seed", str(i + 1)]
    if bootstrap:
        argv += ["--bootstrap", bootstrap]
    log = open(root / f"node-{i}.log", "w")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), run_dir


def snapshot(run_dirs: list[Path]) -> dict:
    """Each node's neighbours (its last row's `peers`), rounds, and the peers' groups it trained on so far."""
    out = {"neighbours": [], "rounds": [], "external_groups": [], "authors_used": []}
    for run_dir in run_dirs:
        rows = rows_of(run_dir)
        last = rows[-1] if rows else {}
        out["neighbours"].append(last.get("peers"))
        out["rounds"].append(len(rows))
        out["external_groups"].append(sum(r.get("n_external") or 0 for r in rows))
        out["authors_used"].append(len({a for r in rows for a in (r.get("used_from") or {})}))
    return out


def bans(root: Path, nodes: int) -> list[dict]:
    seen = []
    for i in range(nodes):
        text = (root / f"node-{i}.log").read_text(errors="replace")
        seen += [{"node": i, "peer": m[1], "seconds": int(m[2]), "rejected": m[3]} for m in BANNED.finditer(text)]
    return seen


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(args: argparse.Namespace) -> dict:
    hosts = hosts_of(args.layout, args.nodes, args.net)
    port = free_port(hosts)
    root = Path(tempfile.mkdtemp(prefix="lan-mesh-"))
    first = f"{hosts[0]}:{port}"
    procs = [launch(i, h, port, None if i == 0 else first, root, args) for i, h in enumerate(hosts)]
    start, marks = time.monotonic(), []
    result = {"layout": args.layout, "nodes": args.nodes, "paced": args.paced, "hosts": hosts, "port": port,
              "load_before": load(), "marks": marks, "logs": str(root)}
    try:
        for mark in args.marks:
            time.sleep(max(0.0, start + mark - time.monotonic()))
            snap = {"at_s": mark, **snapshot([d for _, d in procs]), "load": load()}
            marks.append(snap)
            print(f"{mark:4.0f} s: neighbours {snap['neighbours']}  rounds {snap['rounds']}  peers' groups trained on "
                  f"{snap['external_groups']}  authors used {snap['authors_used']}", flush=True)
    finally:
        stop_all(proc for proc, _ in procs)
    result["bans"] = bans(root, args.nodes)
    final = marks[-1] if marks else {"neighbours": [], "external_groups": []}
    want = min(6, args.nodes - 1)
    result["goal"] = {"every_node_at_least": want,
                      "met": bool(final["neighbours"]) and all((n or 0) >= want for n in final["neighbours"]),
                      "all_trained_on_peers": all(g > 0 for g in final["external_groups"]),
                      "no_bans": not result["bans"]}
    print(f"bans: {result['bans'] or 'none'}; goal {result['goal']}; logs in {root}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--layout", choices=("one", "many"), default="one", help="one /24, or a /24 per node")
    parser.add_argument("--paced", action="store_true", help="the fake engine at a round a second")
    parser.add_argument("--marks", type=float, nargs="+", default=[30.0, 60.0, 90.0])
    parser.add_argument("--net", type=int, default=90, help="127.0.NET.x (one) or 127.NET+i.0.1 (many)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = main(args)
    out = args.out or RESULTS / f"lan_mesh-{args.layout}-{'paced' if args.paced else 'full'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
