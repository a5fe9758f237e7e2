"""A run folder as the session uses it: where it is, whether an existing run there matches, the run's seed,
`--fresh`, `run.json`, and the one-line error for a write that failed.

Pure functions of the settings and the folder (no session state). Each check raises a SwarmError naming
the fix; nothing here writes except `move_old_run_aside` and `write_run_file`, which the session calls
once input is good. The engine's part of a run (hardware, model spec, a checkpoint's adapter) is in
engine.py, the peer node's (its config and listen address) in peering.py.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path

from swarm_app.kernel import tasks
from swarm_app.kernel.errors import CheckpointError, SwarmError, UsageError
from swarm_app.kernel.files import write_text_atomic
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.runlock import LOCK_FILE
from swarm_app.kernel.settings import Settings, describe

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
"""What a run was started with; a resume with another model or preset is refused."""


def write_failed(path: Path, exc: OSError) -> SwarmError:
    return SwarmError(f"cannot write {path} ({exc.strerror or exc}); free disk space or fix its permissions, "
                      "then run the same command again: it resumes from the last checkpoint", title="Disk")


def run_dir_of(settings: Settings) -> Path:
    return Path(settings.run.run_dir).expanduser() if settings.run.run_dir else user_dirs().default_run


def run_seed(settings: Settings, started: dict) -> int:
    """The run's seed: the flag or setting, else the one the run started with, else a new random one."""
    if settings.train.seed >= 0:
        return settings.train.seed
    if "seed" in started:
        return int(started["seed"])
    return random.SystemRandom().randrange(tasks.HELDOUT_SEED)


def check_run_matches(run_dir: Path, model_dir: Path, preset: str, fresh: bool) -> dict:
    """What the existing run was started with ({} for a new run); refuses a different model or preset."""
    path = run_dir / RUN_FILE
    if fresh or not path.exists():
        return {}
    try:
        started = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is unreadable ({exc}); start over with --fresh or choose another --run-dir") from None
    mismatches = [f"{key} {started.get(key)!r} (now {now!r})"
                  for key, now in (("model", str(model_dir)), ("preset", preset))
                  if started.get(key) != now]
    if mismatches:
        raise UsageError(f"the run in {run_dir} was started with {', '.join(mismatches)}; "
                         "resume it with the same settings, start over with --fresh, or choose another --run-dir")
    return started


def move_old_run_aside(run_dir: Path) -> bool:
    """`--fresh`: rename a run folder that holds a run (more than its lock file); True when it moved."""
    if not run_dir.exists() or not any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        return False
    aside = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.rename(aside)
    log.info("moved the previous run to %s", aside)
    return True


def write_run_file(run_dir: Path, model_dir: Path, settings: Settings, seed: int, backend: str) -> None:
    path = run_dir / RUN_FILE
    if path.exists():
        return
    info = {"model": str(model_dir), "preset": settings.tasks.preset, "seed": seed,
            "backend": backend,
            "created": time.time(), "settings": describe(settings)}
    write_text_atomic(path, json.dumps(info, indent=2))
