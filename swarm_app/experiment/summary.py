"""The experiment's metrics, side by side, and the markdown table: from the cell files, nothing else.

Per cell (one config, one seed; `cell_metrics`):
- the paper's metric: cumulative training reward, the rewards of every group trained on (own and
  external, L completions each) summed over the cell's nodes and rounds;
- local-only reward per own question: the mean reward of a node's own completions (each own question's
  group mean, averaged), so configs with different I compare;
- held-out greedy accuracy at the start (the base model, base.json), along the way and at the end (the
  nodes' own evaluations, mean over nodes), per task, and the held-out sampled reward at start and end;
- wall time, training rounds per hour per node (evaluations left out), engine CPU seconds per node-round;
- own versus external: the mean of each round row's diagnostics (training/diagnostics.py) over the cell.
Per config (`config_summary`): the mean and spread (sample standard deviation) over seeds, and the gain of
each config over the I/0 config paired by seed (equal rounds, the same node seeds).
Must not read or write files, nor draw (plots.py draws from `curves`).
"""

from __future__ import annotations

import statistics
from typing import Any

from swarm_app.experiment.plan import Plan

POINTS = 100.0
"""Accuracy gains are in points (0.01 accuracy = 1 point)."""


def summarize(plan: Plan, base: dict[str, Any], cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of results.json: per cell, per config, and the curves per config."""
    per_cell = {c["cell"]["key"]: cell_metrics(c, base, plan) for c in cells}
    by_config = {config.name: [m for m in per_cell.values() if m["config"] == config.name] for config in plan.configs}
    solo = plan.solo.name if plan.solo else None
    configs = [config_summary(name, metrics, by_config.get(solo, []), solo) for name, metrics in by_config.items() if metrics]
    return {"cells": per_cell, "configs": configs, "solo": solo,
            "curves": {name: curves(metrics) for name, metrics in by_config.items() if metrics}}


def cell_metrics(cell: dict[str, Any], base: dict[str, Any], plan: Plan) -> dict[str, Any]:
    nodes = cell["nodes"]
    rounds = sorted({row["round"] for node in nodes for row in node["rows"]})
    cum, total = [], 0.0
    for t in rounds:
        total += sum(_trained_reward(row) for node in nodes for row in node["rows"] if row["round"] == t)
        cum.append(total)
    local = [mean([row["reward_local"] for node in nodes for row in node["rows"] if row["round"] == t]) for t in rounds]
    heldout = _heldout_curve(nodes, base)
    end = nodes_mean([node["heldout"][-1]["accuracy"] if node["heldout"] else None for node in nodes])
    return {
        "config": cell["cell"]["config"], "seed": cell["cell"]["seed"], "rounds": rounds,
        "cum_reward_curve": cum, "cum_reward": total, "local_curve": local,
        "local_reward": mean([row["reward_local"] for node in nodes for row in node["rows"]]),
        "heldout_curve": heldout, "heldout_start": base["accuracy"], "heldout_end": end,
        "gain_points": (end - base["accuracy"]) * POINTS if end is not None else None,
        "per_task_end": _per_task_end(nodes), "per_task_start": base.get("per_task", {}),
        "sampled_start": (base.get("sampled") or {}).get("mean_reward"),
        "sampled_end": nodes_mean([(node.get("sampled_end") or {}).get("mean_reward") for node in nodes]),
        "external_per_round": mean([row["n_external"] for node in nodes for row in node["rows"]]),
        "external_signal_share": _signal_share(nodes),
        "own_vs_external": _own_vs_external(nodes),
        "wall_s": cell["wall_s"], "train_wall_s": cell["train_wall_s"],
        "rounds_per_hour": _rounds_per_hour(nodes),
        "cpu_s_per_node_round": nodes_mean([_train_cpu_per_round(node) for node in nodes]),
        "load_average": cell.get("load_average"),
    }


def _trained_reward(row: dict[str, Any]) -> float:
    """The rewards of the groups the round trained on: own and external (the paper's reward)."""
    return row["reward_local_sum"] + row["reward_external_sum"]


def _heldout_curve(nodes: list[dict[str, Any]], base: dict[str, Any]) -> list[tuple[int, float]]:
    """(round, mean held-out accuracy over the nodes) at round 0 (the base model) and every round that every
    node evaluated."""
    by_node = [{p["round"]: p["accuracy"] for p in node["heldout"]} for node in nodes]
    common = sorted(set.intersection(*(set(points) for points in by_node))) if by_node else []
    return [(0, base["accuracy"])] + [(t, mean([points[t] for points in by_node])) for t in common if t > 0]


def _per_task_end(nodes: list[dict[str, Any]]) -> dict[str, float]:
    tasks = sorted({task for node in nodes if node["heldout"] for task in node["heldout"][-1].get("per_task", {})})
    return {task: nodes_mean([node["heldout"][-1].get("per_task", {}).get(task) if node["heldout"] else None
                              for node in nodes]) for task in tasks}


def _signal_share(nodes: list[dict[str, Any]]) -> float | None:
    """The share of the updates' learning signal (groups with a reward spread) that came from peers."""
    signal = sum(row["groups_with_signal"] for node in nodes for row in node["rows"])
    external = sum(row["n_external"] for node in nodes for row in node["rows"])
    return external / signal if signal else None


DIAGNOSTICS = ("logp_own", "logp_external", "clipped_own", "clipped_external", "advantage_own", "advantage_external",
               "signal_own", "signal_external", "reward_local", "reward_local_on_external_tasks")
"""The round rows' own-versus-external figures (training/diagnostics.py), with the local reward to compare."""


def _own_vs_external(nodes: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each figure's mean over the cell's round rows that have it (None where none has)."""
    out = {}
    for key in DIAGNOSTICS:
        values = [row[key] for node in nodes for row in node["rows"] if row.get(key) is not None]
        out[key] = mean(values) if values else None
    return out


def _rounds_per_hour(nodes: list[dict[str, Any]]) -> float | None:
    """Rounds a node trains in an hour, its evaluations left out (mean over nodes)."""
    seconds = nodes_mean([sum(r.get("round_s", 0.0) - (r.get("eval_s") or 0.0) for r in node["rows"]) for node in nodes])
    rounds = mean([len(node["rows"]) for node in nodes])
    return 3600.0 * rounds / seconds if seconds else None


def _train_cpu_per_round(node: dict[str, Any]) -> float | None:
    """Engine-thread CPU seconds of a node's round, its evaluation left out."""
    spent = [row["cpu_s"] - (row.get("eval_cpu_s") or 0.0) for row in node["rows"] if row.get("cpu_s") is not None]
    return sum(spent) / len(spent) if spent else None


def config_summary(name: str, metrics: list[dict[str, Any]], solo: list[dict[str, Any]], solo_name: str | None) -> dict[str, Any]:
    """One config over its seeds; gains over the I/0 config paired by seed."""
    summary = {"config": name, "seeds": sorted(m["seed"] for m in metrics)}
    for key in ("cum_reward", "local_reward", "heldout_end", "gain_points", "sampled_end", "wall_s",
                "rounds_per_hour", "cpu_s_per_node_round", "external_per_round", "external_signal_share"):
        summary[key] = spread([m[key] for m in metrics])
    summary["heldout_start"] = metrics[0]["heldout_start"]
    summary["sampled_start"] = metrics[0]["sampled_start"]
    summary["per_task_end"] = {task: spread([m["per_task_end"].get(task) for m in metrics])
                               for task in sorted({t for m in metrics for t in m["per_task_end"]})}
    summary["per_task_start"] = metrics[0]["per_task_start"]
    if solo_name and name != solo_name:
        paired = _paired(metrics, solo)
        summary["vs_solo"] = {
            "gain_points": spread([_minus(m["gain_points"], s["gain_points"]) for m, s in paired]),
            "cum_reward_ratio": spread([m["cum_reward"] / s["cum_reward"] if s["cum_reward"] else None for m, s in paired]),
            "local_reward": spread([m["local_reward"] - s["local_reward"] for m, s in paired]),
            "seeds": [m["seed"] for m, _ in paired]}
    return summary


def _paired(metrics: list[dict[str, Any]], solo: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    by_seed = {s["seed"]: s for s in solo}
    return [(m, by_seed[m["seed"]]) for m in sorted(metrics, key=lambda m: m["seed"]) if m["seed"] in by_seed]


def curves(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round, over the seeds of one config: cumulative training reward, local reward, held-out accuracy."""
    return {"rounds": _common([m["rounds"] for m in metrics]),
            "cum_reward": _over_seeds([dict(zip(m["rounds"], m["cum_reward_curve"])) for m in metrics]),
            "local_reward": _over_seeds([dict(zip(m["rounds"], m["local_curve"])) for m in metrics]),
            "heldout_rounds": _common([[t for t, _ in m["heldout_curve"]] for m in metrics]),
            "heldout": _over_seeds([dict(m["heldout_curve"]) for m in metrics])}


def _common(lists: list[list[int]]) -> list[int]:
    return sorted(set.intersection(*(set(values) for values in lists))) if lists else []


def _over_seeds(series: list[dict[int, float]]) -> dict[str, list[float]]:
    rounds = _common([list(s) for s in series])
    stats = [spread([s[t] for s in series]) for t in rounds]
    return {"mean": [s["mean"] for s in stats], "std": [s["std"] or 0.0 for s in stats]}


def spread(values: list[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation over seeds (std None with fewer than two values)."""
    known = [v for v in values if v is not None]
    return {"mean": mean(known) if known else None, "std": statistics.stdev(known) if len(known) > 1 else None,
            "values": known}


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def nodes_mean(values: list[float | None]) -> float | None:
    """The mean over nodes; None when a node lacks the figure."""
    return None if not values or any(v is None for v in values) else mean(values)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
