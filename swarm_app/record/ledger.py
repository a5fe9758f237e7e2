"""Folding metrics.jsonl rows into a participant's record (kernel/record.py); the one source is the rows.

Round rows carry per-round figures (`shared`, `pushed`, `served`, `used_from`: events.RoundMetrics), so
the sums are right however many times the node restarted; on resume the rows of rounds after the last
checkpoint are cut, and so are their figures. Held-out accuracy comes from the scheduled evaluations on
round rows and from evaluation rows (the demo's baseline of the untouched model, final and requested
ones), in the order written; rollback rows are counted. The session folds each row as it writes it
(`Ledger.fold`); `swarm stats` reads a run folder (`load`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.record import TOP_PEERS, ParticipantRecord
from swarm_app.training.metrics_log import EVAL_ROW, MetricsLog
from swarm_app.training.rollback import ROLLBACK_ROW


class Ledger:
    def __init__(self) -> None:
        self.rounds = self.online_rounds = self.shared = self.pushed = self.served = self.rollbacks = 0
        self.used: Counter[str] = Counter()
        self.first: tuple[int, float] | None = None
        self.latest: tuple[int, float] | None = None

    @classmethod
    def of_rows(cls, rows: list[dict[str, Any]]) -> "Ledger":
        ledger = cls()
        for row in rows:
            ledger.fold(row)
        return ledger

    def fold(self, row: dict[str, Any]) -> None:
        kind = row.get("type")
        if kind is None:
            self._fold_round(row)
        elif kind == EVAL_ROW and isinstance(row.get("heldout_acc"), (int, float)):
            self._evaluated(row["round"], row["heldout_acc"])
        elif kind == ROLLBACK_ROW:
            self.rollbacks += 1

    def _fold_round(self, row: dict[str, Any]) -> None:
        self.rounds += 1
        if row.get("shared") is not None:
            self.online_rounds += 1
            self.shared += int(row["shared"])
            self.pushed += int(row.get("pushed") or 0)
            self.served += int(row.get("served") or 0)
        for author, groups in (row.get("used_from") or {}).items():
            self.used[str(author)] += int(groups)
        if isinstance(row.get("heldout_acc"), (int, float)):
            self._evaluated(row["round"], row["heldout_acc"])

    def _evaluated(self, round_index: int, accuracy: float) -> None:
        if self.first is None:
            self.first = (round_index, accuracy)
        self.latest = (round_index, accuracy)

    def record(self) -> ParticipantRecord:
        first, latest = self.first or (None, None), self.latest or (None, None)
        top = dict(sorted(self.used.items(), key=lambda item: (-item[1], item[0]))[:TOP_PEERS])
        return ParticipantRecord(self.rounds, self.online_rounds, self.shared, self.pushed, self.served,
                                 sum(self.used.values()), len(self.used), top, first[0], first[1], latest[0],
                                 latest[1], self.rollbacks)


def load(run_dir: Path) -> ParticipantRecord:
    """The record of the run in `run_dir`; UsageError when there is no run there."""
    log = MetricsLog(run_dir / "metrics.jsonl")
    if not log.path.is_file():
        raise UsageError(f"no run in {run_dir} (no metrics.jsonl): give the folder of a run with --run-dir")
    return Ledger.of_rows(log.all_rows()).record()
