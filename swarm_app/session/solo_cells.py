"""A solo curve with its engine CPU axis, built from `swarm experiment`'s files: the solo config's cell files
(`cells/<config>-seed<k>.json`: every node's round rows with `cpu_s` and `eval_cpu_s`, and its held-out points),
`base.json` (the untouched model's accuracy: round 0) and `experiment.json` (model, held-out items, settings).

Each node's axis is its cumulative engine-thread CPU without evaluations (the sum of `cpu_s - eval_cpu_s` over its
rounds; the figure `swarm experiment` compares configs at, and the one a node's rows carry as
`train_cpu_total_s`). A seed's point at round t is the mean over its nodes of accuracy and of CPU; the curve is
the mean over seeds, with the standard deviation over seeds (the seed is the unit, as in the experiment's
summary). Only rounds every node of every seed evaluated are kept.

Used by session/solo.py (a user's own experiments) and by tools/make_solo_curve.py (the curve shipped beside the
bundled model). Reads the keys `experiment/cell.py` writes; must not import the experiment package.
"""

from __future__ import annotations

import statistics
from typing import Any

from swarm_app.kernel.events import SoloCurveFound


def solo_curve_from_cells(setup: dict[str, Any], base: dict[str, Any], cells: list[dict[str, Any]], source: str,
                          config: str) -> SoloCurveFound | None:
    """The solo curve of `config` from its cells (see the module docstring); None when no round is common to
    all nodes or a cell lacks CPU figures. Raises KeyError/TypeError on files not as `swarm experiment` writes."""
    seeds = [_seed_curve(cell, float(base["accuracy"])) for cell in cells if cell["cell"]["config"] == config]
    seeds = [curve for curve in seeds if curve]
    if not seeds:
        return None
    rounds = sorted(set.intersection(*(set(curve) for curve in seeds)))
    if len(rounds) < 2:
        return None
    accuracy = [statistics.fmean(curve[t][1] for curve in seeds) for t in rounds]
    cpu = [statistics.fmean(curve[t][0] for curve in seeds) for t in rounds]
    spread = [statistics.stdev(curve[t][1] for curve in seeds) if len(seeds) > 1 else 0.0 for t in rounds]
    first = next(cell for cell in cells if cell["cell"]["config"] == config)
    return SoloCurveFound(f"{source}, config {config}, mean of {len(seeds)} seed(s)", tuple(rounds),
                          tuple(round(a, 6) for a in accuracy), tuple(round(c, 3) for c in cpu),
                          int(setup.get("eval_n") or base.get("n") or 0),
                          tuple(round(s, 6) for s in spread) if len(seeds) > 1 else (), len(seeds),
                          str(first.get("engine", "")), int(first.get("threads") or 0))


def _seed_curve(cell: dict[str, Any], base_accuracy: float) -> dict[int, tuple[float, float]]:
    """Round -> (mean engine CPU s, mean held-out accuracy) over the cell's nodes, at round 0 and every round
    all its nodes evaluated; {} when a round row lacks its CPU figure."""
    per_node = [_node_curve(node) for node in cell["nodes"]]
    if not per_node or any(curve is None for curve in per_node):
        return {}
    common = set.intersection(*(set(curve) for curve in per_node))
    curve = {t: (statistics.fmean(c[t][0] for c in per_node), statistics.fmean(c[t][1] for c in per_node))
             for t in sorted(common)}
    return {0: (0.0, base_accuracy), **curve}


def _node_curve(node: dict[str, Any]) -> dict[int, tuple[float, float]] | None:
    spent, total = {}, 0.0
    for row in sorted(node["rows"], key=lambda row: row["round"]):
        if row.get("cpu_s") is None:
            return None
        total += row["cpu_s"] - (row.get("eval_cpu_s") or 0.0)
        spent[row["round"]] = total
    return {p["round"]: (spent[p["round"]], float(p["accuracy"])) for p in node["heldout"]
            if p["round"] in spent and p.get("kind", "scheduled") == "scheduled"}
