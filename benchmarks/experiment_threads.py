"""How `swarm experiment` should run N nodes on a few cores: all in one process with one engine thread each,
or one process per node; and at how many engine threads.

Each variant trains the bundled model at its recommended settings (I = 32, L = 8), offline, for --rounds
rounds per node, and reports per node: the median round time (after two warm-up rounds), the CPU seconds
a round costs (in one process: the engine thread's time.thread_time, as swarm_app/experiment/cell.py
measures it; per process: the process's CPU time from round 2 to the end), and the swarm's throughput
(node-rounds per minute from the first round's start to the last round's end), with the load average
before and after. Variants:

    alone_t1     one `swarm run` process, 1 thread (the cost of a round with a core to itself)
    inproc_t1    N nodes in one process (`swarm experiment`), 1 engine thread each: what the command does
    inproc_t2    N nodes in one process, 2 threads each (oversubscribed)
    procs_t1     N `swarm run` processes, 1 thread each

    python benchmarks/experiment_threads.py [--nodes 4] [--rounds 10] [--variants ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

SWARM = [sys.executable, "-m", "swarm_app"]
WARMUP = 2


def run_processes(count: int, rounds: int, threads: int, out: Path) -> dict:
    """`count` `swarm run --offline` processes at once; CPU per round from round WARMUP to the end."""
    env = {**os.environ, "SWARM_TRAIN_CHECKPOINT_EVERY": str(rounds), "SWARM_TRAIN_EVAL_EVERY": "0"}
    procs, folders = [], []
    for i in range(count):
        folder = out / f"node-{i}"
        folders.append(folder)
        procs.append(subprocess.Popen([*SWARM, "run", "--offline", "--no-ui", "--fresh", "--threads", str(threads),
                                       "--rounds", str(rounds), "--seed", str(i), "--run-dir", str(folder)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    at_warmup: dict[int, float] = {}
    ends: dict[int, float] = {}
    while len(ends) < count:
        for i, proc in enumerate(procs):
            if i not in at_warmup and _rows(folders[i]) >= WARMUP:
                at_warmup[i] = _cpu(psutil.Process(proc.pid).cpu_times())
            if i not in ends and proc.pid:
                done, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if done:
                    ends[i] = usage.ru_utime + usage.ru_stime
                    proc.returncode = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    nodes = []
    for i, folder in enumerate(folders):
        rows = _read_rows(folder)
        nodes.append({"round_s": _median_round(rows), "cpu_s_per_round": (ends[i] - at_warmup[i]) / (rounds - WARMUP),
                      "rows": len(rows), "returncode": procs[i].returncode})
    return {"nodes": nodes, "node_rounds_per_min": _throughput([_read_rows(f) for f in folders])}


def run_in_process(count: int, rounds: int, threads: int, out: Path) -> dict:
    """`swarm experiment` with one 32/0 cell of `count` nodes."""
    subprocess.run([*SWARM, "experiment", "--nodes", str(count), "--configs", "32/0", "--seeds", "1", "--rounds",
                    str(rounds), "--eval-every", "0", "--eval-n", "8", "--eval-samples", "0", "--threads", str(threads),
                    "--out", str(out), "--no-ui"], check=True, stdout=subprocess.DEVNULL)
    (cell,) = json.loads((out / "results.json").read_text())["cells"]
    nodes = [{"round_s": _median_round(node["rows"]),
              "cpu_s_per_round": statistics.mean(r["cpu_s"] for r in node["rows"][WARMUP:]), "rows": len(node["rows"]),
              "engine_cpu_s": node["engine_cpu_s"]} for node in cell["nodes"]]
    return {"nodes": nodes, "node_rounds_per_min": _throughput([node["rows"] for node in cell["nodes"]]),
            "process_cpu_s": cell["process_cpu_s"]}


def _cpu(times) -> float:
    return times.user + times.system


def _rows(folder: Path) -> int:
    path = folder / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _read_rows(folder: Path) -> list[dict]:
    return [row for row in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "type" not in row]


def _median_round(rows: list[dict]) -> float:
    return statistics.median(r["round_s"] for r in rows[WARMUP:])


def _throughput(nodes: list[list[dict]]) -> float:
    start = min(rows[0]["time"] - rows[0]["round_s"] for rows in nodes)
    end = max(rows[-1]["time"] for rows in nodes)
    return 60.0 * sum(len(rows) for rows in nodes) / (end - start)


VARIANTS = {
    "alone_t1": lambda n, r, out: run_processes(1, r, 1, out),
    "inproc_t1": lambda n, r, out: run_in_process(n, r, 1, out),
    "inproc_t2": lambda n, r, out: run_in_process(n, r, 2, out),
    "procs_t1": lambda n, r, out: run_processes(n, r, 1, out),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="in this order; a variant may repeat (interleave them: the load of a shared machine drifts)")
    parser.add_argument("--out", type=Path, default=Path("out/experiment_threads"))
    args = parser.parse_args()
    results = {"nodes": args.nodes, "rounds": args.rounds, "cores": psutil.cpu_count(logical=False), "runs_in_order": []}
    for index, name in enumerate(args.variants):
        load_before = os.getloadavg()
        started = time.monotonic()
        result = VARIANTS[name](args.nodes, args.rounds, args.out / f"{index}-{name}")  # a folder per run: never resumed
        result.update(variant=name, wall_s=round(time.monotonic() - started, 1), load_before=load_before,
                      load_after=os.getloadavg())
        results["runs_in_order"].append(result)
        nodes = result["nodes"]
        print(f"{name:10s} round s {statistics.mean(n['round_s'] for n in nodes):6.2f}  CPU s/round "
              f"{statistics.mean(n['cpu_s_per_round'] for n in nodes):5.2f}  node-rounds/min "
              f"{result['node_rounds_per_min']:5.1f}  load {load_before[0]:.2f} -> {result['load_after'][0]:.2f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "experiment_threads.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
