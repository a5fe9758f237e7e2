"""Helpers of the conformance suite: which engines are installed, and one loaded engine per call."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from backends import registry
from backends.base import Backend, Hardware, ModelSpec

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "models" / "swarm-tiny"
ENGINE_MODULES = {"torch": ("torch", "transformers", "peft"), "llama_cpp": ("llama_cpp", "gguf", "torch", "peft"),
                  "mlx": ("mlx", "mlx_lm", "transformers")}
MARKS = {"llama_cpp": [pytest.mark.llamacpp], "mlx": [pytest.mark.mlx]}


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
