"""Simulate an RSP/1 swarm of N nodes with the real node core, and print what it measures as JSON.

    python benchmarks/swarm_sim.py --nodes 1000 --reachable 0.2 --minutes 13 --json --plot DIR

A discrete-event simulation (benchmarks/swarm/): a virtual clock, per-link latency and loss, NAT (only
a share `--reachable` of the honest nodes can be dialed), churn, a partition into halves, hostile nodes
("attack": bad signatures, replays, future and stale timestamps, wrong answers, floods; "eclipse":
announcing only each other), and how nodes find the swarm: the first `--bootstraps` nodes' addresses, and
with `--discovery dht` a simulated Mainline DHT (`--bootstraps 0`: that alone). Seeded: the same arguments
print the same figures (except `cpu_s`).
`--save NAME` also writes benchmarks/results/swarm_sim/NAME.json, with the command that made it.
Figures and their definitions: benchmarks/swarm/measure.py. Runs on one core; 1,000 nodes for 13
simulated minutes take a few minutes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (`python benchmarks/swarm_sim.py`): find the repository's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.swarm.dht import DhtModel  # noqa: E402
from benchmarks.swarm.hostile import MODES  # noqa: E402
from benchmarks.swarm.report import simulated  # noqa: E402
from benchmarks.swarm.scenario import DISCOVERY, Run, Scenario  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "swarm_sim"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python benchmarks/swarm_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--reachable", type=float, required=True, help="share of honest nodes that can be dialed")
    parser.add_argument("--minutes", type=float, required=True, help="simulated minutes")
    parser.add_argument("--churn", type=float, default=0.0, help="percent of nodes leaving (and joining) per minute")
    parser.add_argument("--hostile", type=float, default=0.0, help="share of hostile nodes")
    parser.add_argument("--hostile-mode", choices=MODES, default="attack")
    parser.add_argument("--partition-minutes", type=float, default=0.0, help="split into halves at minute 3 for this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss", type=float, default=0.01, help="share of messages lost")
    parser.add_argument("--round-s", type=float, default=60.0, help="a node's round length (seconds)")
    parser.add_argument("--groups", type=int, default=8, help="rollout groups a node publishes per round")
    parser.add_argument("--bootstraps", type=int, default=8,
                        help="every node starts with the first N nodes' addresses (0: none)")
    parser.add_argument("--discovery", choices=DISCOVERY, default="bootstrap",
                        help="dht: nodes also look the swarm up on a simulated Mainline DHT (benchmarks/swarm/dht.py)")
    parser.add_argument("--dht-miss", type=float, default=DhtModel.miss,
                        help="chance a DHT lookup misses a live announcement")
    parser.add_argument("--dht-dead", type=int, default=0, help="dead addresses announced on the DHT (poison)")
    parser.add_argument("--record-hubs", type=int, default=0,
                        help="hubs listed in the swarm's signed record on the DHT (with --discovery dht)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write PNG figures to DIR")
    parser.add_argument("--save", metavar="NAME", help=f"also write {RESULTS}/NAME.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    scenario = Scenario(args.nodes, args.reachable, args.minutes, args.churn, args.hostile, args.hostile_mode,
                        args.partition_minutes, args.seed, args.loss, args.round_s, args.groups,
                        bootstraps=args.bootstraps, discovery=args.discovery, dht_miss=args.dht_miss,
                        dht_dead=args.dht_dead, record_hubs=args.record_hubs)
    run = Run(scenario)
    figures = simulated(run)
    figures["command"] = "python benchmarks/swarm_sim.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.plot:
        from benchmarks.swarm.plots import draw

        figures["plots"] = [str(p) for p in draw(run, args.plot)]
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{args.save}.json").write_text(json.dumps(figures, indent=1) + "\n")
    if args.json:
        print(json.dumps(figures))
    else:
        print(", ".join(f"{k}={v}" for k, v in figures.items() if not isinstance(v, (list, dict))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
