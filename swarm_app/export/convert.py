"""`swarm convert --to ENGINE [--run-dir DIR]`: move a run to an engine with another adapter format.

The newest checkpoint's adapter (and Adam's moments) is converted (backends/adapter_convert.py: PEFT
for torch and llama_cpp, mlx-lm's format for mlx) into a new checkpoint of the same round written for
the target engine; the original folder is kept beside it as `<engine>-round-N`. Then
`swarm run --backend ENGINE` resumes where the run was. Nothing is loaded; only files are rewritten,
under the run folder's lock (a node running there is never converted under its feet).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.runlock import RunLock
from swarm_app.training.checkpoint import Checkpoints


def convert_run(run_dir: Path, target: str) -> tuple[int, Path, Path]:
    """(round, new checkpoint folder, where the original was kept). Raises UsageError."""
    from backends import registry

    if target not in registry.names() or target == "fake":
        raise UsageError(f"--to {target!r}: choose one of torch, llama_cpp, mlx")
    checkpoints = Checkpoints(run_dir)
    if not checkpoints.exists():
        raise UsageError(f"{run_dir} has no checkpoint to convert; pass the run folder with --run-dir")
    lock = RunLock.acquire(run_dir)
    try:
        return _convert(checkpoints, target)
    finally:
        lock.release()


def _convert(checkpoints: Checkpoints, target: str) -> tuple[int, Path, Path]:
    from backends import adapter_convert, registry
    from backends.base import BackendError

    state, folder = checkpoints.load_latest()
    source = registry.capabilities(state.backend).adapter_format if state.backend in registry.names() else "?"
    wanted = registry.capabilities(target).adapter_format
    if source == wanted:
        raise UsageError(f"the run's checkpoint is already in {wanted} format: swarm run --backend {target} resumes it")
    steps = {("peft", "mlx-lora"): adapter_convert.peft_to_mlx, ("mlx-lora", "peft"): adapter_convert.mlx_to_peft}
    if (source, wanted) not in steps:
        raise UsageError(f"no conversion from {source} (written by {state.backend}) to {wanted}")
    kept = folder.with_name(f"{state.backend}-{folder.name}")
    os.replace(folder, kept)  # out of the round-* names: the new checkpoint takes the round, pruning skips it
    try:
        new = checkpoints.save(dataclasses.replace(state, backend=target), lambda out: steps[source, wanted](kept, out))
    except BackendError as exc:
        os.replace(kept, folder)
        raise UsageError(f"cannot convert {folder}: {exc}") from None
    return state.round, new, kept
