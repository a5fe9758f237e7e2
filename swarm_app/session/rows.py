"""`RunRows`: the run's metrics.jsonl as a session writes it.

Every row (a round's, an evaluation's, a rollback's) is appended, a failed write being the one-line disk
error (free space, run the same command again: it resumes), and folded into the participant's record
(record/ledger.py). Round rows are also counted for the checkpoint (`CheckpointState.metrics_rows`), carry the
engine CPU the run has spent so far (`train_cpu_total_s`, evaluations left out; None once a row lacks the
figure), and the last one is kept for /metrics. `reopen` derives all of that from the rows a run kept.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from swarm_app.kernel.events import RoundMetrics
from swarm_app.record.ledger import Ledger
from swarm_app.session.run_folder import write_failed
from swarm_app.training.metrics_log import MetricsLog, add_cpu, train_cpu_total


class RunRows:
    def __init__(self, path: Path) -> None:
        self.log = MetricsLog(path)
        self.ledger = Ledger()
        """The run's participant record, folded from every row written."""
        self.rounds = 0
        """Round rows written so far (what a checkpoint records)."""
        self.last_round: dict[str, Any] = {}
        self.cpu_spent: float | None = 0.0
        """Engine CPU seconds of the run's rounds so far, evaluations left out (None: a row lacks the figure)."""

    def reopen(self) -> None:
        """Derive the record, the round count and the CPU spent from the rows on disk (after keep_rounds)."""
        rows = self.log.rows()
        self.ledger = Ledger.of_rows(self.log.all_rows())
        self.rounds, self.cpu_spent = len(rows), train_cpu_total(rows)

    def append(self, row: dict[str, Any]) -> None:
        try:
            self.log.append(row)
        except OSError as exc:
            raise write_failed(self.log.path, exc) from None
        self.ledger.fold(row)

    def with_cpu_total(self, metrics: RoundMetrics, **figures: Any) -> RoundMetrics:
        """A finished round's metrics with the run's CPU total (and `figures`), before its row is written."""
        self.cpu_spent = add_cpu(self.cpu_spent, metrics.train_cpu_s)
        return dataclasses.replace(metrics, train_cpu_total_s=self.cpu_spent, **figures)

    def add_round(self, row: dict[str, Any]) -> None:
        self.append(row)
        self.last_round = row
        self.rounds += 1
