"""This run's log records, filtered by level (`l` cycles the lowest level shown)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from swarm_app.kernel.events import LogRecorded
from swarm_app.tui.state import LEVELS, ViewState

STYLES = {"warning": "yellow", "error": "bold red", "critical": "bold red", "debug": "dim"}


class LogsView(Vertical):
    min_level = "info"

    def compose(self) -> ComposeResult:
        yield Static(id="log-filter")
        yield RichLog(id="log", wrap=True, max_lines=2000)

    def cycle_level(self, s: ViewState) -> None:
        shown = LEVELS[1:4]
        self.min_level = shown[(shown.index(self.min_level) + 1) % len(shown)]
        self.redraw(s)

    def redraw(self, s: ViewState) -> None:
        self.query_one("#log-filter", Static).update(f"showing {self.min_level} and above (l: change)")
        log = self.query_one(RichLog)
        log.clear()
        for record in s.logs:
            self.add(record)

    def add(self, record: LogRecorded) -> None:
        if LEVELS.index(record.level) < LEVELS.index(self.min_level):
            return
        stamp = time.strftime("%H:%M:%S", time.localtime(record.time))
        self.query_one(RichLog).write(Text.assemble((stamp + " ", "dim"), (f"{record.level}: ", STYLES.get(record.level, "")),
                                                    record.message))
