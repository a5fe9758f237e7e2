"""Checkpoints of one run: atomic on disk, loud when unreadable, never overwritten silently.

Layout inside `<run>/checkpoints/`: `round-000006/` (the backend's adapter files and optimizer state,
plus `state.json`) and `latest.json` naming the newest complete one. A checkpoint is written into a
`.partial-*` folder, fsynced and renamed; only then does `latest.json` move (atomically) to it. A kill
at any moment therefore leaves `latest.json` pointing at a complete checkpoint; one damaged later (a
truncated file, a bad disk) is set aside on resume and the one before it is used (`restore`). No RNG
state is kept: every random draw of round t derives from (seed, t), so a resumed round t redraws exactly.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from swarm_app.kernel.errors import CheckpointError
from swarm_app.kernel.files import fsync_dir, retry_on_descriptor_shortage, write_text_atomic

log = logging.getLogger(__name__)

KEEP = 2
"""Complete checkpoints kept on disk (the newest and one before it); the best-evaluated one is kept besides."""


@dataclass(frozen=True)
class CheckpointState:
    round: int
    """The last completed round."""
    metrics_rows: int
    """Rows of metrics.jsonl that belong to rounds up to `round`."""
    model_id: str
    backend: str


class Checkpoints:
    def __init__(self, run_dir: Path) -> None:
        self.folder = run_dir / "checkpoints"

    @property
    def latest_file(self) -> Path:
        return self.folder / "latest.json"

    @property
    def best_file(self) -> Path:
        return self.folder / "best.json"

    def rounds(self) -> set[int]:
        """The rounds of the complete checkpoints on disk."""
        return {int(p.name.split("-")[1]) for p in self.folder.glob("round-*") if p.is_dir()
                and p.name.split("-")[1].isdigit()}

    def folder_of(self, round_index: int) -> Path:
        return self.folder / f"round-{round_index:06d}"

    def mark_best(self, round_index: int, accuracy: float, n: int) -> None:
        """Name the checkpoint of `round_index` (complete on disk) the best evaluated; the previous best may
        then be pruned."""
        write_text_atomic(self.best_file, json.dumps({"dir": self.folder_of(round_index).name, "round": round_index,
                                                      "heldout_acc": accuracy, "n": n}))
        self._prune(keep=set())

    def best_round(self) -> int | None:
        """The round `best.json` names (None: no best yet, or the file is unreadable)."""
        try:
            return int(json.loads(self.best_file.read_text(encoding="utf-8"))["round"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def exists(self) -> bool:
        """Whether the run has any checkpoint (a lost latest.json still leaves its folders)."""
        return self.latest_file.exists() or any(p.is_dir() for p in self.folder.glob("round-*"))

    def save(self, state: CheckpointState, write_adapter: Callable[[Path], None]) -> Path:
        """Write a checkpoint of `state`; a write that fails for want of a descriptor starts over."""
        return retry_on_descriptor_shortage(lambda: self._save(state, write_adapter), f"checkpoint {state.round}")

    def _save(self, state: CheckpointState, write_adapter: Callable[[Path], None]) -> Path:
        name = f"round-{state.round:06d}"
        partial, final = self.folder / f".partial-{name}", self.folder / name
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        write_adapter(partial)
        (partial / "state.json").write_text(json.dumps(asdict(state)), encoding="utf-8")
        _fsync_tree(partial)
        if final.exists():  # left by a crash after the rename but before latest.json moved
            shutil.rmtree(final)
        os.replace(partial, final)
        fsync_dir(self.folder)
        write_text_atomic(self.latest_file, json.dumps({"dir": name, "round": state.round}))
        self._prune(keep={name})
        return final

    def load_latest(self) -> tuple[CheckpointState, Path]:
        """The checkpoint `latest.json` names. Raises CheckpointError when it exists but is unreadable."""
        try:
            pointer = json.loads(self.latest_file.read_text(encoding="utf-8"))
            folder = self.folder / str(pointer["dir"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise corrupted(self.folder, exc) from None
        return read_state(folder), folder

    def restore(self, load: Callable[[Path], None]) -> tuple[CheckpointState, Path]:
        """Load the newest intact checkpoint with `load(folder)` (which raises CheckpointError when the
        folder's files are damaged). A damaged one is renamed `damaged-<name>` (kept, never deleted) and
        the one before it is tried; `latest.json` then names the one that loaded."""
        failures = []
        for folder in self._newest_first():
            try:
                state = read_state(folder)
                load(folder)
            except CheckpointError as exc:
                aside = self._set_aside(folder)
                failures.append(f"{folder.name} ({exc.message})")
                log.warning("checkpoint %s is damaged (%s); kept as %s", folder.name, exc.message, aside.name)
                continue
            if failures:
                log.warning("resuming from the intact checkpoint of round %d instead", state.round)
            if self._named() != folder.name:
                write_text_atomic(self.latest_file, json.dumps({"dir": folder.name, "round": state.round}))
            return state, folder
        raise CheckpointError(
            f"no intact checkpoint in {self.folder}: {'; '.join(failures) or 'none found'}. The damaged ones were "
            "kept aside. Start over with --fresh (the old run is moved aside, not deleted) or choose another --run-dir",
            title="Checkpoint unreadable")

    def _newest_first(self) -> list[Path]:
        """The folder latest.json names (when readable), then every other complete one, newest first."""
        folders = sorted((p for p in self.folder.glob("round-*") if p.is_dir()), reverse=True)
        named = self._named()
        if named is None:
            log.warning("%s is unreadable; looking for the newest intact checkpoint", self.latest_file)
            return folders
        return [self.folder / named] + [f for f in folders if f.name != named]

    def _named(self) -> str | None:
        try:
            return str(json.loads(self.latest_file.read_text(encoding="utf-8"))["dir"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _set_aside(self, folder: Path) -> Path:
        aside = folder.with_name(f"damaged-{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        if folder.exists():
            os.replace(folder, aside)
        return aside

    def _prune(self, keep: set[str]) -> None:
        complete = sorted(p for p in self.folder.glob("round-*") if p.is_dir())
        best = self.best_round()
        if best is not None:
            keep = keep | {self.folder_of(best).name}
        for old in complete[:-KEEP]:
            if old.name not in keep:
                shutil.rmtree(old, ignore_errors=True)


def read_state(folder: Path) -> CheckpointState:
    try:
        data = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        return CheckpointState(int(data["round"]), int(data["metrics_rows"]), str(data["model_id"]),
                               str(data["backend"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise corrupted(folder, exc) from None


def corrupted(folder: Path, cause: object) -> CheckpointError:
    return CheckpointError(
        f"the checkpoint in {folder} cannot be loaded ({cause}); it was left as it is. "
        "Start over with --fresh (the old run is moved aside, not deleted) or choose another --run-dir",
        title="Checkpoint unreadable",
    )


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
    fsync_dir(folder)
