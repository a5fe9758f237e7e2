"""The experiment across swarm sizes: each size's paired differences against solo, with t-based 95% intervals,
and the headline file `sizes.json`.

The rule, fixed here before any data: the headline policy is the adaptive config (`I/J:adaptive`) when the
experiment has one, else the sharing config with the most peers' groups (largest J); it is never picked from
the results. Every other sharing config is reported beside it in the same form. Per size and config:
- equal CPU: per seed, the config's held-out gain minus solo's where both nodes had spent the same engine CPU
  (summary.equal_compute); `ratio` is the config's mean gain over solo's mean gain at that budget (None where
  solo's is not above 0); `across_machines` (only where there are some) lists the seeds whose two cells ran on
  different processors, where CPU seconds are not one currency;
- equal rounds: per seed, the held-out gain at the last round minus solo's.
`diff_mean` is the mean over seeds and `diff_ci95` its 95% interval from Student's t with n - 1 degrees of
freedom (scipy's quantile where scipy is installed, else the table below); None with fewer than 2 seeds.
All figures are held-out points (0.01 accuracy = 1 point). Must not read or write files (runner.py does).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
"""Student's t 0.975 quantile by degrees of freedom (a df between rows takes the next smaller row: wider)."""


def t_quantile(df: int) -> float:
    """Student's t 0.975 quantile for `df` degrees of freedom."""
    try:
        from scipy import stats
    except ImportError:
        return T_975[max(k for k in T_975 if k <= df)] if df <= 120 else 1.960
    return float(stats.t.ppf(0.975, df))


def paired(values: list[float]) -> dict[str, Any]:
    """Per-seed differences: their mean and the t-based 95% interval of the mean."""
    n = len(values)
    mean = sum(values) / n if n else None
    if n < 2:
        return {"values": values, "diff_mean": mean, "diff_ci95": None}
    half = t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return {"values": values, "diff_mean": mean, "diff_ci95": [mean - half, mean + half]}


def headline_config(configs: list[str]) -> str | None:
    """The rule above: the adaptive config, else the sharing config with the largest J."""
    adaptive = [c for c in configs if c.endswith(":adaptive")]
    if adaptive:
        return adaptive[0]
    shared = [c for c in configs if not c.endswith("/0")]
    return max(shared, key=lambda c: int(c.split(":")[0].split("/")[1])) if shared else None


def size_entry(nodes: int, rounds: int, config: dict[str, Any]) -> dict[str, Any] | None:
    """One size's figures for one sharing config, from its summary.config_summary (None without a solo arm)."""
    vs = config.get("vs_solo")
    if not vs:
        return None
    equal = vs["equal_compute"]
    cpu = paired(equal["gain_minus_solo"]["values"])
    at_rounds = paired(vs["gain_points"]["values"])
    return {"nodes": nodes, "seeds": len(vs["seeds"]), "rounds": rounds, "seed_ids": vs["seeds"],
            "equal_cpu": {**cpu, "ratio": _ratio(equal["gain_points"]["mean"], equal["solo_gain_points"]["mean"]),
                          "gain": equal["gain_points"]["mean"],
                          "solo_gain": equal["solo_gain_points"]["mean"],
                          **({"across_machines": vs["across_machines"]} if vs.get("across_machines") else {})},
            "equal_rounds": at_rounds}


def _ratio(gain: float | None, solo_gain: float | None) -> float | None:
    """The config's mean gain over solo's; None where solo gained nothing (a ratio of it says nothing)."""
    return gain / solo_gain if gain is not None and solo_gain is not None and solo_gain > 0 else None


def sizes_file(by_size: dict[int, tuple[int, list[dict[str, Any]]]]) -> dict[str, Any] | None:
    """sizes.json from {nodes: (rounds, summary["configs"])}: the headline policy's entry per size, and every
    other sharing config's beside it."""
    names = sorted({c["config"] for _, configs in by_size.values() for c in configs})
    policy = headline_config(names)
    if policy is None:
        return None

    def entries(name: str) -> list[dict[str, Any]]:
        found = []
        for nodes in sorted(by_size):
            rounds, configs = by_size[nodes]
            entry = next((size_entry(nodes, rounds, c) for c in configs if c["config"] == name), None)
            if entry is not None:
                found.append(entry)
        return found

    beside = {name: entries(name) for name in names if name != policy and not name.endswith("/0")}
    return {"policy": policy, "units": "held-out points", "rule": "headline: the adaptive config, else the "
            "sharing config with the largest J; 95% intervals: Student's t over seeds, paired with solo by seed",
            "sizes": entries(policy), "beside": beside}
