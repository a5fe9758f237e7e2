"""What a chat reads of a run folder: what the run trains (run.json) and its newest complete checkpoint.

Read only, and without the run's lock: a node may be training in the folder at the same moment. That is
safe because a checkpoint is complete before `latest.json` names it (training/checkpoint.py) and the
newest two are kept, so the folder named stays on disk for at least one more checkpoint interval; a chat
that still loses the race (its load fails on a folder just pruned) reads `latest.json` again (talk.py).
Unlike `Checkpoints.restore`, nothing here sets a damaged checkpoint aside: that is the node's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from swarm_app.kernel.errors import CheckpointError, UsageError
from swarm_app.training.checkpoint import Checkpoints, read_state

RUN_FILE = "run.json"


@dataclass(frozen=True)
class RunInfo:
    """What the run was started with (run.json); None where the run wrote no run.json yet."""

    run_dir: Path
    model: str | None
    preset: str | None


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its round, folder and the engine that wrote its adapter."""

    round: int
    folder: Path
    engine: str


def read_run(run_dir: Path) -> RunInfo:
    """The run in `run_dir`; UsageError (exit 2) when the folder is missing or run.json is unreadable."""
    if not run_dir.is_dir():
        raise UsageError(f"no run folder {run_dir}: start one with `swarm run --run-dir {run_dir}`, pass the "
                         "--run-dir of an existing run, or --base to talk to the base model")
    path = run_dir / RUN_FILE
    if not path.exists():
        return RunInfo(run_dir, None, None)
    try:
        started = json.loads(path.read_text(encoding="utf-8"))
        return RunInfo(run_dir, str(started["model"]), str(started["preset"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is unreadable ({exc}); pass the --run-dir of another run, or --base") from None


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The checkpoint `latest.json` names, else the newest complete `round-*` folder; None before the first."""
    checkpoints = Checkpoints(run_dir)
    try:
        state, folder = checkpoints.load_latest()
        return Checkpoint(state.round, folder, state.backend)
    except CheckpointError:
        pass  # no latest.json yet (or a damaged one): look at the folders themselves
    for folder in sorted((p for p in checkpoints.folder.glob("round-*") if p.is_dir()), reverse=True):
        try:
            state = read_state(folder)
        except CheckpointError:
            continue
        return Checkpoint(state.round, folder, state.backend)
    return None
