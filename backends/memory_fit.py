"""Will this model fit? A check from the files on disk, before an engine spends a minute loading it.

The weights' size on disk and the dtype the checkpoint stores (config.json) give the parameter count;
times the bytes per parameter the engine will hold, plus a margin for activations, the KV cache, the
LoRA adapter and its optimizer, that is compared with the free memory the caller measured. A model
that cannot fit is a BackendError naming both figures and what to do instead. Imports nothing heavy.
"""

from __future__ import annotations

import json
from pathlib import Path

from backends.base import BackendError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
STORED_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
MARGIN = 1.3
"""Memory beyond the weights while training: activations, KV cache, LoRA weights with Adam moments.
Measured on the bundled model: 17 MB of weights, ~22 MB held by the engine after a round."""
GIB = 1024**3


def weights_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def stored_bytes_per_param(folder: Path) -> int:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 2
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16").removeprefix("torch.")
    return STORED_BYTES.get(dtype, 2)


def parameter_estimate(folder: Path) -> int:
    """The model's parameter count, from the weights' size on disk and the dtype the checkpoint stores."""
    return weights_bytes(folder) // stored_bytes_per_param(folder)


def needed_bytes(folder: Path, bytes_per_param: int) -> int:
    return int(parameter_estimate(folder) * bytes_per_param * MARGIN)


def check_fits(folder: Path, bytes_per_param: int, free_bytes: int, where: str) -> None:
    """Raise BackendError when the model in `folder` cannot fit in `free_bytes` of `where` ("the GPU", "RAM")."""
    need = needed_bytes(folder, bytes_per_param)
    if free_bytes and need > free_bytes:
        raise BackendError(
            f"{folder.name} needs about {need / GIB:.1f} GiB to train but {where} has {free_bytes / GIB:.1f} GiB "
            "free: choose a smaller model (swarm doctor says what fits here) or close what else uses the memory")
