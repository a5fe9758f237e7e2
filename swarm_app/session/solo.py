"""The solo curve a node that learns from peers is compared with: held-out accuracy of the same model and
task preset trained alone (J = 0), found in this user's data folder.

Two places are looked at, in this order:
- `experiments/*/results.json` (`swarm experiment`'s default --out is `experiments/default`): the solo
  config's held-out curve, the mean over its seeds (`summary.curves[summary.solo]`);
- `runs/*/` other than the node's own run folder: a run of the same model folder and preset whose every
  round trained on its own groups only (`n_external` 0 in each row of metrics.jsonl), with at least one
  held-out evaluation after round 0.
The newest match wins. Reading only: a file that is missing, unreadable or not as expected is skipped
(and said at debug level); nothing here can fail a run. Must not import the experiment package (it sits
above the session); the keys read here are the ones `experiment/runner.py` writes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from swarm_app.kernel.events import SoloCurveFound
from swarm_app.session.run_folder import RUN_FILE
from swarm_app.training.metrics_log import MetricsLog

log = logging.getLogger(__name__)


def find_solo_curve(data_dir: Path, model_id: str, model_folder: Path, preset: str,
                    run_dir: Path) -> SoloCurveFound | None:
    """The newest solo held-out curve of `model_id` on `preset` (see the module docstring); None when none."""
    found = _from_experiments(data_dir / "experiments", model_id, preset)
    if found is None:
        found = _from_runs(data_dir / "runs", model_folder, preset, run_dir)
    return found


def _from_experiments(folder: Path, model_id: str, preset: str) -> SoloCurveFound | None:
    for path in _newest_first(folder.glob("*/results.json")):
        results = _read_json(path)
        try:
            setup, summary = results["experiment"], results["summary"]
            if setup["model"] != model_id or setup["preset"] != preset or not summary.get("solo"):
                continue
            solo = summary["solo"]
            curve = summary["curves"][solo]
            points = list(zip(curve["heldout_rounds"], curve["heldout"]["mean"]))
            seeds = next(len(c["seeds"]) for c in summary["configs"] if c["config"] == solo)
        except (KeyError, TypeError, StopIteration) as exc:
            log.debug("%s: no solo curve (%s)", path, exc)
            continue
        if len(points) > 1:
            return _curve(f"swarm experiment in {path.parent}, config {solo}, mean of {seeds} seed(s)", points)
    return None


def _from_runs(folder: Path, model_folder: Path, preset: str, own: Path) -> SoloCurveFound | None:
    for run_file in _newest_first(folder.glob(f"*/{RUN_FILE}")):
        run = run_file.parent
        info = _read_json(run_file)
        if (_same_folder(run, own) or not isinstance(info, dict) or info.get("preset") != preset
                or not _same_folder(Path(str(info.get("model", ""))), model_folder)):
            continue
        points = _solo_points(MetricsLog(run / "metrics.jsonl"))
        if any(t > 0 for t, _ in points):
            return _curve(f"solo run {run}", points)
    return None


def _solo_points(metrics: MetricsLog) -> list[tuple[int, float]]:
    """(round, held-out accuracy) of a run that never trained on peers' groups; [] for any other run."""
    try:
        rows, evaluations = metrics.rows(), metrics.evaluations()
    except OSError as exc:
        log.debug("%s: unreadable (%s)", metrics.path, exc)
        return []
    if not rows or any(row.get("n_external") != 0 for row in rows):
        return []
    points = {row["round"]: row["heldout_acc"] for row in evaluations + rows
              if isinstance(row.get("heldout_acc"), (int, float))}
    return sorted(points.items())


def _curve(source: str, points: list[tuple[int, float]]) -> SoloCurveFound:
    return SoloCurveFound(source, tuple(int(t) for t, _ in points), tuple(float(a) for _, a in points))


def _newest_first(paths) -> list[Path]:
    def modified(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0
    return sorted(paths, key=modified, reverse=True)


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.debug("%s: not read (%s)", path, exc)
        return None
