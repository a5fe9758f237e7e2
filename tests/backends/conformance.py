"""Helpers of the conformance suite: which engines are installed, and one loaded engine per call."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from backends import registry
from backends.base import Backend, Hardware, ModelSpec, TrainSample

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "models" / "swarm-tiny"
ENGINE_MODULES = {"torch": ("torch", "transformers", "peft"), "llama_cpp": ("llama_cpp", "gguf", "torch", "peft"),
                  "mlx": ("mlx", "mlx_lm", "transformers")}
MARKS = {"llama_cpp": [pytest.mark.llamacpp], "mlx": [pytest.mark.mlx]}
QUESTION = [{"role": "user", "content": "What is 3 + 4?"}]
BATCH = [
    TrainSample(QUESTION, "<answer>7</answer>", 1.2),
    TrainSample(QUESTION, "3 + 4 = 8 <answer>8</answer>", -0.4),
    TrainSample(QUESTION, "<answer>12</answer>", -0.8),
    TrainSample(QUESTION, "It is 7.", 0.0),
]
"""A fixed batch on one prompt: mixed advantages, one of them 0."""


def installed(name: str) -> bool:
    return name in registry.ENGINES and all(importlib.util.find_spec(m) for m in ENGINE_MODULES[name])


def engine_params() -> list:
    """pytest params, one per real engine; absent ones are skipped with the reason."""
    return [pytest.param(name, marks=[*MARKS.get(name, []),
                                      pytest.mark.skipif(not installed(name), reason=f"{name} not installed")])
            for name in ENGINE_MODULES]


def load_engine(name: str, model_dir: Path = BUNDLED, **spec_fields) -> Backend:
    backend = registry.create(name)
    ok, why = backend.is_available(Hardware())
    if not ok:
        pytest.skip(f"{name}: {why}")
    backend.load(ModelSpec(path=str(model_dir), threads=1, **spec_fields))
    return backend


def padded(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample log-prob lists as (values, mask) arrays for the NumPy reference."""
    width = max(map(len, rows))
    values = np.array([r + [0.0] * (width - len(r)) for r in rows])
    return values, np.arange(width)[None, :] < np.array([len(r) for r in rows])[:, None]
