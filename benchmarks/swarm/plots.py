"""PNG figures of one run (matplotlib, imported only when asked for): coverage, received rollouts per
minute, age at receipt, outbound links over time, and hubs' in-degree against the cap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.swarm.measure import FRESH_S, live_through

if TYPE_CHECKING:
    from benchmarks.swarm.scenario import Run


def draw(run: "Run", folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    rec, window, nodes = run.recorder, run.main, run.net.nodes
    receivers = live_through(nodes, window.start, window.end)
    authors = rec.authors([n for n in nodes if n.role == "honest"], window.start, window.end - FRESH_S)
    title = f"{run.s.nodes} nodes, {run.s.reachable:.0%} reachable"
    paths = []

    def save(fig, name: str) -> None:
        path = folder / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, group in (("reachable", [n for n in receivers if n.reachable]),
                         ("behind NAT", [n for n in receivers if not n.reachable])):
        shares = sorted(rec.coverage(window, group, authors))
        if shares:
            ax.plot(shares, [k / len(shares) for k in range(len(shares))], label=label)
    ax.axvline(0.9, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="author coverage over the last 10 min", ylabel="share of nodes (CDF)", title=f"Coverage: {title}")
    ax.legend()
    save(fig, "coverage_cdf.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, group in (("reachable", [n for n in receivers if n.reachable]),
                         ("behind NAT", [n for n in receivers if not n.reachable])):
        rates = [rec.per_minute(rec.received, n, window.start, window.end) for n in group]
        if rates:
            ax.hist(rates, bins=40, alpha=0.6, label=label)
    ax.axvline(300, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="rollouts received per minute", ylabel="nodes", title=f"Cost per node: {title}")
    ax.legend()
    save(fig, "rollouts_per_min.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(list(rec.ages), bins=60)
    ax.axvline(130, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="age at receipt (s)", ylabel="admitted rollouts", yscale="log", title=f"Rollout age: {title}")
    save(fig, "age_at_receipt.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    series = rec.outbound_series
    ax.plot([s[0] for s in series], [s[1] for s in series], label="min")
    ax.plot([s[0] for s in series], [s[2] for s in series], label="median")
    ax.plot([s[0] for s in series], [s[3] for s in series], label="max")
    ax.axhline(6, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="minute", ylabel="outbound links of honest nodes", title=f"Outbound links: {title}")
    ax.legend()
    save(fig, "outbound_links.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist([rec.max_inbound[n.index] for n in nodes if n.reachable and n.role == "honest"], bins=30)
    ax.axvline(run.net.config.max_inbound, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="largest in-degree of a reachable node", ylabel="nodes", title=f"Hub in-degree: {title}")
    save(fig, "hub_in_degree.png")
    return paths
