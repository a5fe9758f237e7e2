"""Issue 30: what a peer's group gives a node next to one of its own, read from the round rows of finished runs.

Each node's metrics.jsonl rows carry the own-versus-external figures of training/diagnostics.py. This reads
the run folders of one `swarm demo` (node-0, node-1, ...) and writes, per node and over all nodes, the mean
of each figure over the rounds that have it, the rounds counted, and the held-out evaluations the runs
recorded (the demo's baseline and final ones, the scheduled ones); with --span N, also the means over each
N rounds (does a figure drift as the nodes' adapters move apart?). Nothing is run: it only reads.

    python -m benchmarks.research.own_vs_external RUN_DIR [RUN_DIR ...] --span 30 --out summary.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from swarm_app.experiment.summary import DIAGNOSTICS
from swarm_app.training.metrics_log import MetricsLog

FIGURES = (*DIAGNOSTICS, "reward_external", "n_external", "external_checked", "groups_with_signal")


def means(rows: list[dict]) -> dict:
    """Each figure's mean over the rows that have it (None where none has)."""
    out = {}
    for key in FIGURES:
        values = [row[key] for row in rows if row.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def node_summary(folder: Path, span: int) -> dict:
    log = MetricsLog(folder / "metrics.jsonl")
    rows = log.rows()
    figures = means(rows)
    heldout = [{"kind": e["kind"], "round": e["round"], "accuracy": e["heldout_acc"], "n": e["n"]} for e in log.evaluations()]
    heldout += [{"kind": "scheduled", "round": r["round"], "accuracy": r["heldout_acc"]} for r in rows
                if r.get("heldout_acc") is not None]
    spans = {}
    if span:
        last = max((row["round"] for row in rows), default=0)
        for start in range(1, last + 1, span):
            spans[f"{start}-{start + span - 1}"] = means([r for r in rows if start <= r["round"] < start + span])
    return {"node": folder.name, "rounds": len(rows), "means": figures, "heldout": heldout, "spans": spans}


def summary(run_dir: Path, span: int = 0) -> dict:
    nodes = [node_summary(folder, span) for folder in sorted(run_dir.glob("node-*"))]
    overall = {}
    for key in FIGURES:
        values = [n["means"][key] for n in nodes if n["means"][key] is not None]
        overall[key] = sum(values) / len(values) if values else None
    return {"run": str(run_dir), "nodes": nodes, "mean_over_nodes": overall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--span", type=int, default=0, help="also the means over each SPAN rounds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = [summary(run, args.span) for run in args.runs]
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
