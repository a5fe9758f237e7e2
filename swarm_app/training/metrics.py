"""`metrics.jsonl`: one JSON object per completed round, appended and fsynced.

On resume the file is cut back to the rows the checkpoint accounts for, so every round appears
exactly once however the previous process ended.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from swarm_app.files import write_text_atomic


class MetricsLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break  # a torn last line from a crash mid-append
        return rows

    def truncate(self, keep: int) -> None:
        rows = self.rows()
        if len(rows) != keep or self._has_torn_tail():
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in rows[:keep]))

    def append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _has_torn_tail(self) -> bool:
        return self.path.exists() and not self.path.read_bytes().endswith(b"\n") and self.path.stat().st_size > 0
