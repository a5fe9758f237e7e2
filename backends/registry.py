"""Backend names -> classes, imported only when chosen, and the automatic choice.

Detection order: CUDA > Apple MLX > llama.cpp > torch CPU. Each engine's module is imported lazily so
that choosing `fake` never imports torch.
"""

from __future__ import annotations

import importlib

from backends.base import Backend, BackendError, Hardware

ENGINES: dict[str, str] = {
    "torch": "backends.torch_lora:TorchBackend",
    "fake": "backends.fake:FakeBackend",
}
"""Registered engines: name -> "module:Class"."""

AUTO_ORDER = ("torch",)
"""Engines tried by `auto`, best first (mlx and llama_cpp join when they exist)."""


def names() -> list[str]:
    return list(ENGINES)


def backend_class(name: str) -> type[Backend]:
    if name not in ENGINES:
        raise BackendError(f"unknown backend {name!r}; choose one of: auto, {', '.join(ENGINES)}")
    module_name, _, class_name = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def choose(requested: str, hw: Hardware) -> tuple[str, str]:
    """(engine name, why) for `requested` ("auto" or a name)."""
    if requested != "auto":
        cls = backend_class(requested)
        ok, why = cls.is_available(hw)
        if not ok:
            raise BackendError(f"backend {requested!r} is not usable here: {why}")
        return requested, f"chosen with --backend ({why})"
    reasons = []
    for name in AUTO_ORDER:
        ok, why = backend_class(name).is_available(hw)
        if ok:
            return name, why
        reasons.append(f"{name}: {why}")
    raise BackendError("no backend is usable: " + "; ".join(reasons))


def create(name: str) -> Backend:
    return backend_class(name)()
