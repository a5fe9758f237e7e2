"""The experiment folder (`--out DIR`): what is kept, where, and what makes a cell count as done.

    experiment.json       the fingerprint of the run (plan.fingerprint): a later run must match it
    base.json             the base model's held-out scores (the start of every curve)
    cells/<cell>.json     one finished (config, seed) cell: every node's rows, evaluations, CPU time
    runs/<cell>/node-i/   the nodes' run folders (metrics.jsonl, the last checkpoint); a cell that did not
                          finish goes on from them where it can (cell.resume_point), else is started again
                          from nothing, its old run folders removed first
    results.json, table.md, *.png   written from the cells after each cell (summary.py, plots.py)
    summary.json          the headline: the best sharing config against I/0 and the goal (summary.headline)

Every file is written atomically (kernel/files.py), a cell file only once the cell finished, so a killed
experiment leaves whole cell files and the run folders of at most one cell under way. One experiment per
folder: an OS lock on DIR/node.lock (kernel/runlock.py).
Must not decide what to run (runner.py) nor compute any metric.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from swarm_app.experiment.plan import Cell, differences
from swarm_app.kernel.errors import RunFolderBusy, UsageError
from swarm_app.kernel.files import check_writable_folder, write_text_atomic
from swarm_app.kernel.runlock import RunLock

log = logging.getLogger(__name__)


class ExperimentDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.plan_file = root / "experiment.json"
        self.base_file = root / "base.json"
        self.cells_dir = root / "cells"
        self.runs_dir = root / "runs"
        self.results_file = root / "results.json"
        self.table_file = root / "table.md"
        self.summary_file = root / "summary.json"

    def lock(self) -> RunLock:
        check_writable_folder(self.root, "--out")
        try:
            return RunLock.acquire(self.root)
        except RunFolderBusy:
            raise UsageError(f"--out {self.root} is in use by another swarm experiment; wait for it to end, "
                             "or choose another --out") from None

    def check_plan(self, fingerprint: dict[str, Any]) -> bool:
        """Record the fingerprint, or check it against the one recorded; True when cells may exist already."""
        fingerprint = json.loads(json.dumps(fingerprint))
        old = read_json(self.plan_file)
        if old is None:
            write_json(self.plan_file, fingerprint)
            return False
        changed = differences(old, fingerprint)
        if changed:
            raise UsageError(f"--out {self.root} holds an experiment with other settings: {'; '.join(changed[:3])}"
                             f"{' ...' if len(changed) > 3 else ''}; run it as it was, or choose another --out")
        return True

    def cell_file(self, cell: Cell) -> Path:
        return self.cells_dir / f"{cell.key}.json"

    def read_cell(self, cell: Cell) -> dict[str, Any] | None:
        return read_json(self.cell_file(cell))

    def write_cell(self, cell: Cell, data: dict[str, Any]) -> None:
        write_json(self.cell_file(cell), data)

    def cell_folder(self, cell: Cell) -> Path:
        """The cell's run folders' folder, as an earlier run left it (it may not exist)."""
        return self.runs_dir / cell.key

    def scratch(self, cell: Cell) -> Path:
        """An empty folder for the cell's run folders (what a killed run left there is removed)."""
        folder = self.runs_dir / cell.key
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        return folder

    def read_base(self) -> dict[str, Any] | None:
        return read_json(self.base_file)

    def write_base(self, data: dict[str, Any]) -> None:
        write_json(self.base_file, data)


def read_json(path: Path) -> Any:
    """The JSON in `path`; None when there is none. A file that does not parse (written by hand: ours are
    atomic) is set aside as `<name>.damaged`, said in the log, and counts as missing."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        aside = path.with_name(path.name + ".damaged")
        path.replace(aside)
        log.warning("%s is not valid JSON: moved to %s, and made again", path, aside)
        return None


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
