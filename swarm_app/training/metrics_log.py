"""`metrics.jsonl`: one JSON object per completed round, appended and fsynced; and one per held-out
evaluation that is not a round's own (`e` in the TUI, `swarm demo`'s baseline and final ones).

A round's row is `RoundMetrics.to_row()` (a scheduled evaluation's result is on it). An evaluation row
says so: `{"type": "eval", "kind": ..., "round": <the last completed round>, "heldout_acc", "n",
"per_task", "eval_s", "time"}`; round rows carry no "type", so a reader that wants rounds skips rows
with one (`rows()` does, `evaluations()` gives the others).

On resume the file is cut back to the rounds the checkpoint accounts for (rows of later rounds are
the torn tail of a crash: those rounds run again and write their rows again), and rows are keyed by
round: where one round has several (two processes once wrote to one folder; the run folder's lock now
prevents it) the last written is kept, so every round appears exactly once however the previous
process ended. Nothing else is ever removed: a line that is not a metrics row (a torn write, something
a person appended) is moved to `metrics.rejected.jsonl` beside it, with a warning, and the rows after
it are kept.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from swarm_app.kernel.files import retry_on_descriptor_shortage, write_text_atomic

log = logging.getLogger(__name__)

REJECTED_SUFFIX = ".rejected.jsonl"


class MetricsLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def rejected_path(self) -> Path:
        return self.path.with_name(self.path.stem + REJECTED_SUFFIX)

    def rows(self) -> list[dict[str, Any]]:
        """The rows of completed rounds; lines that are not rows are skipped (see `keep_rounds`)."""
        return [row for row in self._read()[0] if "type" not in row]

    def all_rows(self) -> list[dict[str, Any]]:
        """Every row (rounds, evaluations, rollbacks) in the order written; lines that are not rows are skipped."""
        return self._read()[0]

    def evaluations(self) -> list[dict[str, Any]]:
        """The evaluation rows (`e`, the demo's baseline and final evaluations), in the order written."""
        return [row for row in self._read()[0] if row.get("type") == EVAL_ROW]

    def keep_rounds(self, last_round: int) -> None:
        """Keep the rows of rounds 1..last_round, one per round; set lines that are not rows aside (never
        drop them)."""
        rows, bad = self._read()
        kept = one_per_key([row for row in rows if row["round"] <= last_round])
        if bad:
            self._set_aside(bad)
        if bad or len(kept) != len(rows) or self._has_torn_tail():
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def append(self, row: dict[str, Any]) -> None:
        retry_on_descriptor_shortage(lambda: self._append(row), f"writing {self.path}")

    def _append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _read(self) -> tuple[list[dict[str, Any]], list[str]]:
        if not self.path.exists():
            return [], []
        rows, bad = [], []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            row = _parse_row(line)
            if row is not None:
                rows.append(row)
            elif line.strip():
                bad.append(line)
        return rows, bad

    def _set_aside(self, lines: list[str]) -> None:
        with open(self.rejected_path, "a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("%d line(s) of %s are not metrics rows: moved to %s", len(lines), self.path, self.rejected_path)

    def _has_torn_tail(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0 and not self.path.read_bytes().endswith(b"\n")


def _parse_row(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or type(row.get("round")) is not int:
        return None
    return row


EVAL_ROW = "eval"


def evaluation_row(round_index: int, kind: str, accuracy: float, n: int, per_task: dict[str, float],
                   seconds: float, when: float) -> dict[str, Any]:
    return {"type": EVAL_ROW, "kind": kind, "round": round_index, "heldout_acc": accuracy, "n": n,
            "per_task": per_task, "eval_s": seconds, "time": when}


def train_cpu_total(rows: list[dict[str, Any]]) -> float | None:
    """Engine CPU seconds the run's rounds spent, evaluations left out (each row's `train_cpu_s`); None when a
    row lacks the figure (written by an earlier version), since a partial sum would understate the compute."""
    spent = [row.get("train_cpu_s") for row in rows]
    return round(sum(spent), 4) if all(isinstance(s, (int, float)) for s in spent) else None


def add_cpu(total: float | None, spent: float | None) -> float | None:
    """`total` with one more round's `train_cpu_s`; unknown stays unknown."""
    return None if total is None or spent is None else round(total + spent, 4)


def row_key(row: dict[str, Any]) -> tuple:
    """What makes a row unique: its round (an evaluation row: its kind and round)."""
    return (row.get("type", "round"), row.get("kind", ""), row["round"])


def one_per_key(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row written for each key, in the order of those last rows."""
    last: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = row_key(row)
        last.pop(key, None)
        last[key] = row
    return list(last.values())
