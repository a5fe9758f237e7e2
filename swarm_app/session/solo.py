"""The solo curve a node that learns from peers is compared with at equal engine CPU (kernel/benefit.py): held-out
accuracy of the same model, task preset and learning settings trained alone (J = 0), with the engine CPU a
solo node had spent by each point.

Looked for, in this order:
1. `experiments/*/results.json` in the user's data folder (`swarm experiment`'s default --out is
   `experiments/default`): the solo config's cells (`cells` in results.json: per-round CPU and held-out points,
   session/solo_cells.py), the mean over its seeds;
2. `runs/*/` other than the node's own run folder: a run of the same model folder and preset whose every
   round trained on its own groups only (`n_external` 0 in each row of metrics.jsonl) and carries its engine
   CPU (`train_cpu_s`, written since the benefit meter), with at least one held-out evaluation after round 0;
3. the curve shipped beside the model (`SHIPPED`, e.g. the bundled model's, made by tools/make_solo_curve.py
   from the committed `benchmarks/results/experiment/` cells), when the user has neither.
Within 1 and 2 the newest wins, and one evaluated on as many held-out items as this node (`eval_n`) wins over
one that was not, so that both sides are scored on the same items where possible. A candidate whose learning
settings (`LEARNING`) differ from the node's is skipped; one without CPU figures is too (nothing to compare at
equal CPU). Reading only: a file that is missing, unreadable or not as expected is skipped (and said at debug
level); nothing here can fail a run. Must not import the experiment package (it sits above the session); the
keys read here are the ones `experiment/runner.py` and `experiment/cell.py` write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swarm_app.kernel.events import SoloCurveFound
from swarm_app.session.run_folder import RUN_FILE
from swarm_app.session.solo_cells import solo_curve_from_cells
from swarm_app.training.metrics_log import MetricsLog

log = logging.getLogger(__name__)

SHIPPED = "solo_curve.json"
"""In a model folder: a solo curve measured on that model (`SoloCurveFound` fields, plus model, preset, settings)."""
LEARNING = {"model": ("max_new_tokens", "temperature", "top_p"), "lora": ("rank", "alpha", "dropout", "target_modules"),
            "train": ("completions", "learning_rate", "weight_decay", "epochs", "minibatches", "clip_low", "clip_high",
                      "max_grad_norm", "negative_weight", "keep_zero_advantage_local"),
            "tasks": ("preset",)}
"""The settings that change what a solo node learns: two runs that differ in one are not the same recipe. A key
that one side does not record (an earlier version) is not a difference."""


def find_solo_curve(data_dir: Path, model_id: str, model_folder: Path, preset: str, run_dir: Path,
                    settings: dict[str, Any] | None = None, eval_n: int = 0) -> SoloCurveFound | None:
    """The solo curve to compare with (see the module docstring); None when none. `settings`: the node's
    (kernel.settings.describe); None skips the settings check."""
    found = [*_from_experiments(data_dir / "experiments", model_id, preset, settings),
             *_from_runs(data_dir / "runs", model_folder, preset, run_dir, settings)]
    same_items = [curve for curve in found if curve.n == eval_n]
    if same_items or found:
        return (same_items or found)[0]
    return _shipped(model_folder / SHIPPED, model_id, preset, settings)


def settings_differ(recorded: Any, own: dict[str, Any] | None) -> list[str]:
    """The `LEARNING` settings whose values differ ("train.learning_rate"); [] when `own` is None."""
    if own is None:
        return []
    if not isinstance(recorded, dict):
        return ["settings not recorded"]
    differ = []
    for section, names in LEARNING.items():
        theirs, ours = recorded.get(section) or {}, own.get(section) or {}
        differ += [f"{section}.{name}" for name in names if name in theirs and name in ours and theirs[name] != ours[name]]
    return differ


def _from_experiments(folder: Path, model_id: str, preset: str, settings: dict | None) -> Iterator[SoloCurveFound]:
    for path in _newest_first(folder.glob("*/results.json")):
        results = _read_json(path)
        fingerprint = _read_json(path.parent / "experiment.json") or {}
        try:
            setup, summary = results["experiment"], results["summary"]
            if setup["model"] != model_id or setup["preset"] != preset or not summary.get("solo"):
                continue
            differ = settings_differ(fingerprint.get("settings"), settings)
            if differ:
                log.debug("%s: other settings (%s)", path, ", ".join(differ))
                continue
            found = solo_curve_from_cells(setup, results["base"], results["cells"], f"swarm experiment in {path.parent}",
                                          summary["solo"])
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            log.debug("%s: no solo curve (%s)", path, exc)
            continue
        if found is not None:
            yield found


def _from_runs(folder: Path, model_folder: Path, preset: str, own: Path, settings: dict | None) -> Iterator[SoloCurveFound]:
    for run_file in _newest_first(folder.glob(f"*/{RUN_FILE}")):
        run = run_file.parent
        info = _read_json(run_file)
        if (_same_folder(run, own) or not isinstance(info, dict) or info.get("preset") != preset
                or not _same_folder(Path(str(info.get("model", ""))), model_folder)
                or settings_differ(info.get("settings"), settings)):
            continue
        found = _solo_run_curve(MetricsLog(run / "metrics.jsonl"), f"solo run {run}", str(info.get("backend", "")))
        if found is not None:
            yield found


def _solo_run_curve(metrics: MetricsLog, source: str, engine: str) -> SoloCurveFound | None:
    """The curve of a run that never trained on peers' groups and recorded its engine CPU per round (a single
    engine thread count); None for any other run."""
    try:
        rows, evaluations = metrics.rows(), metrics.evaluations()
    except OSError as exc:
        log.debug("%s: unreadable (%s)", metrics.path, exc)
        return None
    if not rows or any(row.get("n_external") != 0 or not isinstance(row.get("train_cpu_s"), (int, float))
                       for row in rows):
        return None
    threads = {row.get("threads") for row in rows}
    if len(threads) > 1:
        return None  # engine-thread CPU at 1 and at 2 threads are not the same measure
    spent, total = {0: 0.0}, 0.0
    for row in sorted(rows, key=lambda row: row["round"]):
        total += row["train_cpu_s"]
        spent[row["round"]] = total
    points = {row["round"]: (row["heldout_acc"], row.get("heldout_n") or row.get("n") or 0)
              for row in evaluations + rows if isinstance(row.get("heldout_acc"), (int, float)) and row["round"] in spent}
    if not any(t > 0 for t in points):
        return None
    rounds = sorted(points)
    return SoloCurveFound(source, tuple(rounds), tuple(float(points[t][0]) for t in rounds),
                          tuple(round(spent[t], 3) for t in rounds), min(int(points[t][1]) for t in rounds),
                          engine=engine, threads=int(threads.pop() or 0))


def _shipped(path: Path, model_id: str, preset: str, settings: dict | None) -> SoloCurveFound | None:
    data = _read_json(path)
    if not isinstance(data, dict) or data.get("model") != model_id or data.get("preset") != preset:
        return None
    differ = settings_differ(data.get("settings"), settings)
    if differ:
        log.debug("%s: measured at other settings (%s)", path, ", ".join(differ))
        return None
    try:
        return SoloCurveFound(str(data["source"]), tuple(int(t) for t in data["rounds"]),
                              tuple(float(a) for a in data["accuracy"]), tuple(float(c) for c in data["cpu_s"]),
                              int(data["n"]), tuple(float(s) for s in data.get("spread", ())), int(data["seeds"]),
                              str(data.get("engine", "")), int(data.get("threads") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        log.debug("%s: not a solo curve (%s)", path, exc)
        return None


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
