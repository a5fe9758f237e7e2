"""table.md: the experiment's summary as the paper's table, with the honest metrics beside it.

Owns the wording and layout of the markdown only; every figure comes from summary.py. Must not compute a
metric of its own nor touch a file.
"""

from __future__ import annotations

from typing import Any

from swarm_app.experiment.plan import Plan


def markdown(plan: Plan, setup: dict[str, Any], summary: dict[str, Any]) -> str:
    solo = summary["solo"]
    lines = [f"# swarm experiment: {plan.nodes} nodes, {plan.rounds} rounds, configs {', '.join(c.name for c in plan.configs)}",
             "", *_setup_lines(plan, setup, summary), "", *_main_table(summary["configs"], solo), "",
             *_notes(plan, solo), "", *_equal_compute_table(summary["configs"], solo), "",
             *_task_table(summary["configs"]), "", *_cell_table(summary["cells"])]
    return "\n".join(lines) + "\n"


def _setup_lines(plan: Plan, setup: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    done = len(summary["cells"])
    sampled = (f"; held-out sampled reward: {plan.eval_samples} completions per question at T = {setup['temperature']:g}"
               if plan.eval_samples else "")
    return [f"Model `{setup['model']}` on the {setup['engine']} engine, tasks `{setup['preset']}`, L = {setup['completions']} "
            f"completions per question; {done} of {len(plan.cells())} cells done.",
            f"Held-out: greedy accuracy on {plan.eval_n} items every {plan.eval_every or plan.rounds} rounds and at the end "
            f"(start: the base model){sampled}.",
            f"Threads: all nodes of a cell in one process, one engine thread each at {plan.threads} thread(s); "
            "the load average of every cell is in the last table."
            + (" CPU s per node-round counts the engine thread only: at more than one thread per node its helper "
               "threads are left out." if plan.threads > 1 else "")]


def _main_table(configs: list[dict[str, Any]], solo: str | None) -> list[str]:
    ref = solo or "I/0"
    lines = [f"| config I/J | seeds | cum. training reward (sum over nodes and rounds) | ratio to {ref} | "
             f"local reward per own question | held-out start | held-out end | gain (points) | gain minus {ref}'s (points) | "
             "sampled reward start -> end | cell wall (min) | rounds/hour per node | CPU s per node-round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in configs:
        vs = c.get("vs_solo", {})
        ratio = _pm(vs["cum_reward_ratio"], 2) if vs else ("1.00" if c["config"] == solo else "-")
        lines.append(f"| {c['config']} | {len(c['seeds'])} | {_pm(c['cum_reward'], 1)} | {ratio} | {_pm(c['local_reward'], 3)} "
                     f"| {_num(c['heldout_start'], 3)} | {_pm(c['heldout_end'], 3)} | {_pm(c['gain_points'], 1, sign=True)} "
                     f"| {_pm(vs['gain_points'], 1, sign=True) if vs else '-'} "
                     f"| {_num(c['sampled_start'], 3)} -> {_pm(c['sampled_end'], 3)} | {_pm(_minutes(c['wall_s']), 1)} "
                     f"| {_pm(c['rounds_per_hour'], 0)} | {_pm(c['cpu_s_per_node_round'], 2)} |")
    return lines


def _notes(plan: Plan, solo: str | None) -> list[str]:
    return ["Each figure is the mean +- the standard deviation over seeds (a seed's figure: the mean over its nodes; "
            "the cumulative reward: their sum). Cumulative training reward is the paper's metric: the rewards of every "
            "group a node trained on, own and external. Local reward per own question is the mean reward of a node's "
            "own completions. " + (f"Gains over {solo} are paired by seed (the same node seeds, equal rounds). " if solo
                                   else "No I/0 config ran: no gain over training alone. ")
            + "Rounds per hour leave the evaluations out; CPU s per node-round is the node's engine thread's CPU time "
            "of a round (evaluation left out), the basis for comparing configs at equal compute."]


def _equal_compute_table(configs: list[dict[str, Any]], solo: str | None) -> list[str]:
    shared = [c for c in configs if c.get("vs_solo")]
    if not shared:
        return []
    lines = [f"## Against {solo} at equal compute", "",
             "Both cells of a seed read where their nodes had spent the same engine CPU time (the smaller total): "
             "the cheaper config at its last round, the other at the earlier round with that CPU time, its held-out "
             "accuracy interpolated between evaluations.", "",
             f"| config | CPU s per node | its rounds | {solo}'s rounds | held-out gain (points) | {solo}'s gain | "
             f"difference | gain ratio | cum. reward ratio | local reward minus {solo}'s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes: list[str] = []
    for c in shared:
        e = c["vs_solo"]["equal_compute"]
        ratio = _num(e["gain_ratio"], 2)
        lines.append(f"| {c['config']} | {_pm(e['cpu_s_per_node'], 0)} | {_pm(e['rounds'], 0)} | {_pm(e['solo_rounds'], 0)} "
                     f"| {_pm(e['gain_points'], 1, sign=True)} | {_pm(e['solo_gain_points'], 1, sign=True)} "
                     f"| {_pm(e['gain_minus_solo'], 1, sign=True)} | {ratio} | {_pm(e['cum_reward_ratio'], 2)} "
                     f"| {_pm(e['local_reward'], 3, sign=True)} |")
        if c["vs_solo"].get("across_machines"):
            seeds = ", ".join(str(seed) for seed in c["vs_solo"]["across_machines"])
            notes += ["", f"**{c['config']}, seed(s) {seeds}: its cell and {solo}'s ran on different processors**, so "
                      "their CPU seconds differ in worth and the equal-compute reading of those seeds compares the "
                      "machines as much as the configs (the cells' `machines`). Run both cells of a seed on one machine."]
    return lines + notes


def _task_table(configs: list[dict[str, Any]]) -> list[str]:
    tasks = sorted({task for c in configs for task in c["per_task_end"]})
    if not tasks:
        return []
    lines = ["## Held-out accuracy per task at the end (start in the first row)", "",
             "| config | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks),
             "| start | " + " | ".join(_num(configs[0]["per_task_start"].get(t), 3) for t in tasks) + " |"]
    for c in configs:
        lines.append(f"| {c['config']} | " + " | ".join(_pm(c["per_task_end"].get(t), 3) for t in tasks) + " |")
    return lines


def _cell_table(cells: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["## Cells", "", "| cell | held-out end | gain (points) | cum. reward | wall (min) | load average start -> end |",
             "|---|---|---|---|---|---|"]
    for key, m in cells.items():
        load = m.get("load_average") or {}
        lines.append(f"| {key} | {_num(m['heldout_end'], 3)} | {_num(m['gain_points'], 1, sign=True)} | {m['cum_reward']:.1f} "
                     f"| {m['wall_s'] / 60:.1f} | {_load(load.get('start'))} -> {_load(load.get('end'))} |")
    return lines


def _pm(stat: dict[str, Any] | None, digits: int, sign: bool = False) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    text = _num(stat["mean"], digits, sign)
    return text + (f" +- {stat['std']:.{digits}f}" if stat.get("std") is not None else "")


def _num(value: float | None, digits: int, sign: bool = False) -> str:
    return "-" if value is None else f"{value:{'+' if sign else ''}.{digits}f}"


def _minutes(stat: dict[str, Any]) -> dict[str, Any]:
    return {key: (value / 60 if isinstance(value, (int, float)) else value) for key, value in stat.items() if key != "values"}


def _load(values: list[float] | None) -> str:
    return " ".join(f"{v:.2f}" for v in values) if values else "-"
