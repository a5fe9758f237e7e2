"""The figures of one run, as one JSON-ready dictionary (definitions in measure.py)."""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from typing import Any

from benchmarks.swarm.measure import FRESH_S, live_through, quantile
from benchmarks.swarm.network import START, SimNode
from benchmarks.swarm.scenario import Run


def simulated(run: Run) -> dict[str, Any]:
    """Simulate `run` and return its figures."""
    run.simulate()
    return {**figures(run), "cpu_s": run.cpu_s}


def figures(run: Run) -> dict[str, Any]:
    out: dict[str, Any] = {"scenario": dataclasses.asdict(run.s)}
    out.update(coverage_figures(run))
    out.update(cost_figures(run))
    out.update(link_figures(run))
    out.update(hostile_figures(run))
    if run.dht is not None:
        out.update(dht_figures(run))
    if run.s.partition_minutes:
        out.update(partition_figures(run))
    return out


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def coverage_figures(run: Run) -> dict[str, Any]:
    rec, window, nodes = run.recorder, run.main, run.net.nodes
    honest = [n for n in nodes if n.role == "honest"]
    authors = rec.authors(honest, window.start, window.end - FRESH_S)
    receivers = live_through(nodes, window.start, window.end)
    shares = rec.coverage(window, receivers, authors)
    leaves = rec.coverage(window, [n for n in receivers if not n.reachable], authors)
    ages = list(rec.ages)
    return {
        "window_min": [_round((window.start - START) / 60, 2), _round((window.end - START) / 60, 2)],
        "authors": len(authors), "receivers": len(shares),
        "coverage_median": _round(statistics.median(shares) if shares else None),
        "coverage_p10": _round(quantile(shares, 0.10)),
        "coverage_min": _round(min(shares, default=None)),
        "leaf_coverage_median": _round(statistics.median(leaves) if leaves else None),
        "age_p50_s": _round(quantile(ages, 0.50), 1), "age_p99_s": _round(quantile(ages, 0.99), 1),
        "age_max_s": _round(max(ages, default=None), 1), "admitted": len(ages),
    }


def cost_figures(run: Run) -> dict[str, Any]:
    rec, window = run.recorder, run.main
    receivers = live_through(run.net.nodes, window.start, window.end)
    leaves = [n for n in receivers if not n.reachable]
    hubs = [n for n in receivers if n.reachable]

    def rates(table, group):
        return [rec.per_minute(table, n, window.start, window.end) for n in group]

    leaf_rollouts, hub_rollouts = rates(rec.received, leaves), rates(rec.received, hubs)
    leaf_bytes, hub_bytes = rates(rec.bytes, leaves), rates(rec.bytes, hubs)
    peaks = [rec.peak_minute(rec.received, n, window.start, window.end) for n in leaves]
    leaf_minutes = len(leaves) * (window.end - window.start) / 60 or 1
    return {
        "leaf_bytes_per_min_by_message": {k: round(v / leaf_minutes) for k, v in
                                          sorted(rec.leaf_bytes_by_message.items())},
        "leaf_rollouts_per_min_max": _round(max(leaf_rollouts, default=None), 1),
        "leaf_rollouts_per_min_median": _round(statistics.median(leaf_rollouts) if leaf_rollouts else None, 1),
        "leaf_rollouts_peak_minute_max": max(peaks, default=None),
        "leaf_pushed_peak_minute_max": max((rec.peak_minute(rec.pushed, n, window.start, window.end) for n in leaves),
                                           default=None),
        "reachable_rollouts_per_min_mean": _round(statistics.fmean(hub_rollouts) if hub_rollouts else None, 1),
        "reachable_rollouts_per_min_max": _round(max(hub_rollouts, default=None), 1),
        "rollouts_per_min_mean": _round(statistics.fmean(leaf_rollouts + hub_rollouts) if receivers else None, 1),
        "leaf_bytes_per_min_mean": _round(statistics.fmean(leaf_bytes) if leaf_bytes else None, 0),
        "hub_bytes_per_min_mean": _round(statistics.fmean(hub_bytes) if hub_bytes else None, 0),
        "hub_bytes_per_min_max": _round(max(hub_bytes, default=None), 0),
    }


def _slow_node(node: SimNode, longest_s: float, bootstraps: int) -> dict[str, Any]:
    """Which kind of node stayed below the low-water mark too long: what a fix must look at."""
    return {"index": node.index, "longest_s": _round(longest_s, 1), "reachable": node.reachable,
            "bootstrap": node.index < bootstraps, "joined_s": _round(node.joined - START, 1)}


def link_figures(run: Run) -> dict[str, Any]:
    rec, nodes = run.recorder, run.net.nodes
    honest = [n for n in nodes if n.role == "honest"]
    longest = [rec.longest_low[n.index] for n in honest]
    hubs = [n for n in honest if n.reachable]
    return {
        "below_6_outbound_longest_s": _round(max(longest, default=None), 1),
        "below_6_outbound_p99_s": _round(quantile(longest, 0.99), 1),
        "nodes_below_6_over_30s": sum(t > 30 for t in longest),
        "nodes_below_6_over_60s": sum(t > 60 for t in longest),
        "reachable_nodes_below_6_over_60s": sum(rec.longest_low[n.index] > 60 for n in hubs),
        "nodes_below_6_links_over_60s": sum(rec.longest_low_all[n.index] > 60 for n in honest),
        "below_6_links_longest_s": _round(max((rec.longest_low_all[n.index] for n in honest), default=None), 1),
        **time_to_6_figures(rec, honest),
        "below_6_over_30s_nodes": [_slow_node(n, rec.longest_low[n.index], rec.bootstraps) for n in honest
                                   if rec.longest_low[n.index] > 30][:10],
        "below_6_outbound_after_3min_longest_s": _round(max((rec.longest_low_warm[n.index] for n in honest), default=None), 1),
        "nodes_below_6_over_30s_after_3min": sum(rec.longest_low_warm[n.index] > 30 for n in honest),
        "dials_to_unreachable_per_node_min": _round(rec.dials_to_unreachable / max(1, len(honest)) / run.s.minutes),
        "advertised_unreachable": rec.advertised_unreachable,
        "hub_in_degree_max": max((rec.max_inbound[n.index] for n in hubs), default=0),
        "in_degree_cap": run.net.config.max_inbound,
        "outbound_series": [[_round(m, 2), lo, med, hi] for m, lo, med, hi in rec.outbound_series],
    }


def time_to_6_figures(rec: Any, honest: list[SimNode]) -> dict[str, Any]:
    """Seconds from each honest node's join to its first sample with 6 outbound links; nodes that never got
    there are counted apart."""
    times = [rec.time_to_low_water[n.index] for n in honest if n.index in rec.time_to_low_water]
    to_honest = [rec.time_to_honest[n.index] for n in honest if n.index in rec.time_to_honest]
    return {"time_to_6_outbound_p50_s": _round(quantile(times, 0.5), 1),
            "time_to_6_outbound_p90_s": _round(quantile(times, 0.9), 1),
            "time_to_6_outbound_max_s": _round(max(times, default=None), 1),
            "never_6_outbound": len(honest) - len(times),
            "time_to_6_honest_links_p50_s": _round(quantile(to_honest, 0.5), 1),
            "time_to_6_honest_links_max_s": _round(max(to_honest, default=None), 1),
            "nodes_6_honest_links_after_60s": sum(t > 60 for t in to_honest) + len(honest) - len(to_honest)}


def dht_figures(run: Run) -> dict[str, Any]:
    """What the simulated DHT did (benchmarks/swarm/dht.py)."""
    dht, nodes = run.dht, run.net.nodes
    assert dht is not None
    by_source: Counter[str] = Counter()
    for n in nodes:
        if n.role == "honest":
            by_source.update(s.source for s in n.core.addresses.entries())
    listed = {key: [a for a, expires in entries.items() if expires > run.net.now] for key, entries in dht.listed.items()}
    return {"dht_lookups": dht.lookups, "dht_announces": dht.announces, "dht_handed_on": dht.handed_on,
            "dht_listed_end": {key: len(addrs) for key, addrs in listed.items()},
            "dht_listed_unreachable_end": {key: sum(not getattr(run.net.by_addr.get(a), "reachable", False) for a in addrs)
                                           for key, addrs in listed.items()},
            "address_book_sources_end": dict(sorted(by_source.items()))}


def hostile_figures(run: Run) -> dict[str, Any]:
    rec = run.recorder
    figures: dict[str, Any] = {"hostile_accepted": rec.hostile_accepted}
    if run.hostile is not None:
        figures.update({"hostile_items_sent": run.hostile.sent,
                        "hostile_outbound_share_max": _round(rec.hostile_outbound_max),
                        "hostile_outbound_share_end_max": _round(rec.hostile_outbound_end),
                        "hostile_saved_share_max": _round(rec.hostile_saved_max)})
    refused: Counter[str] = sum((n.core.exchange.rejected for n in run.net.nodes if n.role == "honest"), Counter())
    if refused:
        figures["records_refused"] = dict(sorted(refused.items()))
    return figures


def partition_figures(run: Run) -> dict[str, Any]:
    rec, nodes = run.recorder, run.net.nodes
    split, heal = (next(w for w in rec.windows if w.name == name) for name in ("partition", "heal"))
    figures: dict[str, Any] = {}
    healed, receivers, heard_after = 0, 0, []
    for side in (0, 1):
        mine = [n for n in nodes if n.side == side]
        theirs = [n for n in nodes if n.side != side]
        authors = rec.authors([n for n in mine if n.role == "honest"], split.start, split.end - FRESH_S)
        shares = rec.coverage(split, [n for n in live_through(mine, split.start, split.end)], authors)
        figures[f"partition_half{side}_coverage_median"] = _round(statistics.median(shares) if shares else None)
        figures[f"partition_half{side}_coverage_p10"] = _round(quantile(shares, 0.10))
        other = rec.authors([n for n in theirs if n.role == "honest"], heal.start, heal.end - 60.0)
        after = rec.coverage(heal, live_through(mine, heal.start, heal.end), other)
        healed += sum(s >= 0.8 for s in after)
        receivers += len(after)
        heard_after += after
    figures["heal_share_hearing_80pct_of_other_half_3min"] = _round(healed / receivers if receivers else None)
    figures["heal_other_half_heard_3min_median"] = _round(statistics.median(heard_after) if heard_after else None)
    return figures

