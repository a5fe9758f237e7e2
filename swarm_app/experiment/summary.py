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
each config over the I/0 config paired by seed (the same node seeds), at equal rounds and at equal compute:
both cells read where their nodes had spent the same engine CPU time per node (the smaller of the two
totals), the held-out curve interpolated between its evaluations.
The headline (`headline`, summary.json): the best sharing config, the one whose held-out gain is the most
above the solo arm's at equal compute (paired by seed), against the solo arm, and whether it met the goal.
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
            "curves": {name: curves(metrics) for name, metrics in by_config.items() if metrics},
            "headline": headline(plan, configs, solo)}


GOAL_RATIO = 1.3
"""The goal: the best sharing config's held-out gain at equal compute at least this many times the solo arm's."""


def headline(plan: Plan, configs: list[dict[str, Any]], solo: str | None) -> dict[str, Any] | None:
    """summary.json: the best sharing config against I/0: the largest mean held-out gain over the solo arm at
    equal compute, paired by seed. Each pair is read at its own budget (the cheaper cell's CPU time), so the
    gains of two configs are not compared to each other: each is compared to what the solo arm learnt for the
    same CPU time. The goal holds when that gain is at least GOAL_RATIO x the solo arm's at equal compute,
    the mean paired difference is larger than its spread over seeds, and at equal rounds the gain is not
    below solo's."""
    by_name = {c["config"]: c for c in configs}
    shared = [c for c in configs if c.get("vs_solo") and c["vs_solo"]["equal_compute"]["gain_minus_solo"]["mean"] is not None]
    if solo not in by_name or not shared:
        return None
    best = max(shared, key=lambda c: c["vs_solo"]["equal_compute"]["gain_minus_solo"]["mean"])
    equal = best["vs_solo"]["equal_compute"]
    gain, solo_gain = equal["gain_points"]["mean"], equal["solo_gain_points"]["mean"]
    difference = equal["gain_minus_solo"]
    at_rounds = best["vs_solo"]["gain_points"]
    checks = {"ratio_at_least": GOAL_RATIO,
              "ratio_met": solo_gain > 0 and gain >= GOAL_RATIO * solo_gain,
              "beyond_seed_spread": difference["std"] is not None and difference["mean"] > difference["std"],
              "not_below_solo_at_equal_rounds": at_rounds["mean"] is not None and at_rounds["mean"] >= 0}
    return {"best_config": best["config"], "solo_config": solo, "seeds": len(best["seeds"]), "rounds": plan.rounds,
            "nodes": plan.nodes,
            "solo_heldout_gain": by_name[solo]["gain_points"]["mean"], "best_heldout_gain": best["gain_points"]["mean"],
            "solo_heldout_gain_std": by_name[solo]["gain_points"]["std"], "best_heldout_gain_std": best["gain_points"]["std"],
            "equal_compute": {"best_heldout_gain": gain, "solo_heldout_gain": solo_gain, "gain_ratio": equal["gain_ratio"],
                              "gain_minus_solo": difference, "cpu_s_per_node": equal["cpu_s_per_node"],
                              "solo_rounds": equal["solo_rounds"], "rounds": equal["rounds"],
                              "cum_reward_ratio": equal["cum_reward_ratio"], "local_reward_minus_solo": equal["local_reward"]},
            "equal_rounds": {"gain_minus_solo": at_rounds, "cum_reward_ratio": best["vs_solo"]["cum_reward_ratio"],
                             "local_reward_minus_solo": best["vs_solo"]["local_reward"]},
            "goal": {**checks, "met": all(v for k, v in checks.items() if k != "ratio_at_least")}}


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
        "machines": cell.get("machines") or [],
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
            "equal_compute": _equal_compute_spread([equal_compute(m, s) for m, s in paired]),
            "seeds": [m["seed"] for m, _ in paired],
            "across_machines": [m["seed"] for m, s in paired if _across_machines(m, s)]}
    return summary


def equal_compute(m: dict[str, Any], s: dict[str, Any]) -> dict[str, float] | None:
    """A sharing cell `m` and the solo cell `s` of its seed where both had spent the same engine CPU time per
    node: the smaller of their totals (rounds x CPU s per node-round). The cell with more to spend is read at
    an earlier round: its held-out accuracy interpolated between evaluations, its cumulative reward summed to
    that round, its local reward averaged over the rounds before it. None without CPU times."""
    cpu_m, cpu_s = m["cpu_s_per_node_round"], s["cpu_s_per_node_round"]
    if not cpu_m or not cpu_s or not m["rounds"] or not s["rounds"]:
        return None
    budget = min(m["rounds"][-1] * cpu_m, s["rounds"][-1] * cpu_s)
    at_m, at_s = budget / cpu_m, budget / cpu_s
    gain_m = (_interpolate(m["heldout_curve"], at_m) - m["heldout_start"]) * POINTS
    gain_s = (_interpolate(s["heldout_curve"], at_s) - s["heldout_start"]) * POINTS
    cum_s = _interpolate([(0, 0.0), *zip(s["rounds"], s["cum_reward_curve"])], at_s)
    cum_m = _interpolate([(0, 0.0), *zip(m["rounds"], m["cum_reward_curve"])], at_m)
    return {"cpu_s_per_node": budget, "rounds": at_m, "solo_rounds": at_s, "gain_points": gain_m,
            "solo_gain_points": gain_s, "gain_minus_solo": gain_m - gain_s,
            "cum_reward_ratio": cum_m / cum_s if cum_s else None,
            "local_reward": _mean_to(m["rounds"], m["local_curve"], at_m) - _mean_to(s["rounds"], s["local_curve"], at_s)}


def _across_machines(m: dict[str, Any], s: dict[str, Any]) -> bool:
    """Whether the two cells of a seed ran on processors known to differ: their CPU seconds are then not one
    currency, and an equal-CPU reading of the pair compares two machines as much as two configs. Cells written
    before the machine was recorded have none and are not flagged."""
    return bool(m.get("machines") and s.get("machines") and set(m["machines"]) != set(s["machines"]))


def _equal_compute_spread(pairs: list[dict[str, float] | None]) -> dict[str, Any]:
    """Each figure's spread over the seeds, and `gain_ratio`: the mean gain over the solo arm's mean gain."""
    keys = ("cpu_s_per_node", "rounds", "solo_rounds", "gain_points", "solo_gain_points", "gain_minus_solo",
            "cum_reward_ratio", "local_reward")
    out: dict[str, Any] = {key: spread([p[key] if p else None for p in pairs]) for key in keys}
    gain, solo_gain = out["gain_points"]["mean"], out["solo_gain_points"]["mean"]
    out["gain_ratio"] = gain / solo_gain if gain is not None and solo_gain else None
    return out


def _interpolate(points: list[tuple[float, float]], x: float) -> float:
    """The piecewise-linear curve through `points` (sorted by x) at x, held flat beyond its ends."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]


def _mean_to(rounds: list[int], values: list[float], last: float) -> float:
    """The mean of `values` over the rounds up to `last` (at least the first round)."""
    kept = [v for t, v in zip(rounds, values) if t <= last] or values[:1]
    return mean(kept)


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
