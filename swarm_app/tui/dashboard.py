"""The dashboard: engine badge, round progress with ETA, the swarm (its name, peers, whether the node is
reachable from outside and how to make it so), what sharing did for the node (sharing.py), reward chart,
throughput, last warning.

Each widget draws itself from a `ViewState` in `show(state)`; none keeps state of its own.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static
from textual_plotext import PlotextPlot

from swarm_app.kernel.swarms import reachability_fix, reachability_short
from swarm_app.tui.sharing import SharingPanel
from swarm_app.tui.state import ViewState, moving_average, solo_at_node_cpu


def _mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n else "-"


def _memory(s: ViewState) -> str:
    """"model 17 MB · process 210 MB of 24 GB": what the engine holds, what the process uses, of what."""
    total = f" of {s.ram_total_bytes / 2**30:.0f} GB" if s.ram_total_bytes else ""
    process = f" · process {_mb(s.process_bytes)}{total}" if s.process_bytes else ""
    return f"model {_mb(s.memory_bytes)}{process}"


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


class EngineBadge(Static):
    def show(self, s: ViewState) -> None:
        if s.status in ("starting", "loading"):
            self.update(Text(f"{s.loading_step or 'starting'}: model {s.model or '-'}, engine {s.backend or 'auto'}"))
            return
        line1 = Text.assemble((f" {s.backend} ", "reverse bold"), f" {s.device or 'cpu'} · {_memory(s)}")
        why = Text(f"chosen: {s.backend_reason}" + (f" · {s.resources}" if s.resources else ""), style="dim")
        line2 = Text(f"model {s.model} · tasks {s.preset} · " + (f"node {s.node_id[:12]} on {s.address}"
                                                               if s.node_id else "offline (training alone)"))
        self.update(Text("\n").join([line1, why, line2]))  # no wrapping (swarm.tcss): a long reason is cut short


EVALUATION_LABELS = {"final": "finished · final evaluation", "baseline": "baseline evaluation (the untouched model)"}
"""What the status line calls an evaluation under way, by kind; any other is a held-out evaluation."""


class RoundStatus(Static):
    def show(self, s: ViewState) -> None:
        of = f"/{s.total_rounds}" if s.total_rounds else ""
        paused = f"paused: {s.pause_reason}" if s.pause_reason else "paused (the swarm keeps going)"
        doing = {"training": "training", "paused": paused, "stopped": s.stop_line,
                 "loading": "loading", "starting": "starting"}[s.status]
        if s.status in ("training", "paused") and s.evaluating:
            label = EVALUATION_LABELS.get(s.eval_kind, "held-out evaluation")
            doing = f"{label} {s.eval_done}/{s.eval_total}" if s.eval_total else label
        elif s.status == "training" and s.phase:
            doing = f"{s.phase} {s.phase_done}/{s.phase_total}" if s.phase_total else s.phase
        tokens = f"{s.tokens_per_s:,.0f} tok/s" if s.tokens_per_s else "- tok/s"
        sharing = "offline" if s.offline else f"sharing {'on' if s.sharing else 'off'}"
        self.update(f"round {s.round + (1 if s.phase else 0)}{of} · {doing} · {_seconds(s.last_round_s)}/round · "
                    f"{tokens} · ETA {_seconds(s.eta_s)} · {sharing}")


class SwarmLine(Static):
    """Which swarm, how many peers, whether peers outside can dial this node; when they cannot, that it
    still works and how to fix it (a participant behind a home router should not have to guess)."""

    def show(self, s: ViewState) -> None:
        if s.offline:
            self.update("offline: no swarm, nothing shared or received (--offline)")
            return
        if not s.swarm and not s.node_id:
            self.update("joining the swarm")
            return
        peers = sum(p.connected for p in s.peers)
        line = (f"swarm {s.swarm or '-'} · {peers} peer{'s' if peers != 1 else ''} · "
                f"{reachability_short(s.reachable, s.witnesses, s.witnesses_needed, s.port, s.lan_only)}")
        self.set_class(s.reachable is False, "-unreachable")
        self.update(line + (f"\n{reachability_fix(s.port, s.upnp)}" if s.reachable is False and s.port else ""))


class RewardChart(PlotextPlot):
    """Reward of own and of peers' groups as moving averages, held-out accuracy and, when a solo run was
    found to compare with, its held-out accuracy at the engine CPU this node had spent by each round; or
    held-out accuracy per task when `per_task` is on."""

    per_task = False

    def show(self, s: ViewState) -> None:
        plt, c = self.plt, s.curves
        plt.clear_data()
        plt.clear_figure()
        plt.ylim(0, 1)
        if self.per_task:
            plt.title("held-out accuracy per task")
            for task, points in sorted(c.per_task.items()):
                plt.plot([r for r, _ in points], [a for _, a in points], label=task[:18])
        else:
            plt.title(f"reward (moving average of {10} rounds)")
            if c.rounds:
                plt.plot(c.rounds, moving_average(c.local), label="own")
            if c.external_rounds:
                plt.plot(c.external_rounds, moving_average(c.external), label="from peers")
            if c.heldout_rounds:
                plt.plot(c.heldout_rounds, c.heldout, label="held-out", marker="dot")
            solo = solo_at_node_cpu(s)
            if solo:
                plt.plot([t for t, _ in solo], [a for _, a in solo], label="held-out, solo at equal CPU", marker="dot")
        plt.xlabel("round")
        self.refresh()


class Notice(Static):
    """The last warning or error with its next step (colours from the theme: readable light or dark)."""

    def show(self, s: ViewState) -> None:
        self.set_class(bool(s.last_warning), "-warning")
        self.update(Text(s.last_warning or "no warnings"))


class Dashboard(Vertical):
    def compose(self) -> ComposeResult:
        yield EngineBadge(id="engine")
        yield RoundStatus(id="round-status")
        yield SwarmLine(id="swarm-line")
        yield ProgressBar(id="round-progress", show_eta=False)
        yield SharingPanel(id="sharing")
        yield RewardChart(id="chart")
        yield Notice(id="notice")

    def show(self, s: ViewState) -> None:
        for widget in (self.query_one(EngineBadge), self.query_one(RoundStatus), self.query_one(SwarmLine),
                       self.query_one(SharingPanel), self.query_one(Notice)):
            widget.show(s)
        bar = self.query_one(ProgressBar)
        bar.update(total=max(s.phase_total, 1), progress=s.phase_done if s.phase else 0)

    def show_chart(self, s: ViewState) -> None:
        self.query_one(RewardChart).show(s)
