"""Backend names -> classes, imported only when chosen; the automatic choice; what each engine can do.

Automatic choice: CUDA > Apple MLX > llama.cpp > torch CPU, among the engines registered here and usable
on this machine (an engine's module imports nothing heavy, so reading its flags is cheap). Every engine
trains; a checkpoint resumes only on an engine with the same adapter format.
Cheap to import: swarm_app/kernel/settings.py lists ENGINES for `--backend`, and every `swarm` command
(`--help` too) imports the settings, so base.py (the contract's classes, most of them dataclasses) is
imported only once an engine is looked up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.base import Backend, Hardware, ModelSpec

ENGINES: dict[str, str] = {
    "torch": "backends.torch.engine:TorchBackend",
    "llama_cpp": "backends.llama_cpp.engine:LlamaCppBackend",
    "mlx": "backends.mlx.engine:MlxBackend",
    "fake": "backends.fake:FakeBackend",
}
"""Registered engines: name -> "module:Class"."""

KNOWN_ENGINES = ("torch", "mlx", "llama_cpp", "fake")
"""Every engine name the app knows of, registered here or not yet."""

AUTO_PREFERENCE: tuple[tuple[str, str], ...] = (("torch", "cuda"), ("mlx", "apple_silicon"), ("llama_cpp", ""),
                                                ("torch", ""))
"""(engine, the Hardware flag of the accelerator it must run on, "" for none) best first: torch on CUDA,
MLX on Apple silicon, llama.cpp, torch on CPU."""

@dataclass(frozen=True)
class Capabilities:
    """An engine's flags as the session and `swarm doctor` read them."""

    adapter_format: str


def names() -> list[str]:
    return list(ENGINES)


def backend_class(name: str) -> type[Backend]:
    from backends.base import BackendError

    if name not in ENGINES:
        raise BackendError(f"unknown backend {name!r}; choose one of: auto, {', '.join(ENGINES)}")
    module_name, _, class_name = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def capabilities(name: str) -> Capabilities:
    cls = backend_class(name)
    return Capabilities(cls.adapter_format)


def auto_order(hw: Hardware) -> list[str]:
    """Registered engines in the order `auto` tries them on `hw` (accelerated ones only where they are)."""
    order: list[str] = []
    for name, accelerator in AUTO_PREFERENCE:
        if name not in ENGINES or name in order:
            continue
        if accelerator and not backend_class(name).runs_accelerated(hw):
            continue
        order.append(name)
    return order


def choose(requested: str, hw: Hardware) -> tuple[str, str]:
    """(engine name, why) for `requested` ("auto" or a name)."""
    from backends.base import BackendError

    if requested != "auto":
        cls = backend_class(requested)
        ok, why = cls.is_available(hw)
        if not ok:
            raise BackendError(f"backend {requested!r} is not usable here: {why}")
        return requested, f"chosen with --backend ({why})"
    reasons = []
    for name in auto_order(hw):
        cls = backend_class(name)
        ok, why = cls.is_available(hw)
        if ok:
            return name, why + "".join(f"; {note}" for note in _unused_accelerator(hw))
        reasons.append(f"{name}: {why}")
    raise BackendError("no backend is usable: " + "; ".join(reasons) + "; run `swarm doctor` for install commands")


def _unused_accelerator(hw: Hardware) -> list[str]:
    """Why an engine that would run on this machine's GPU does not (a CPU build of torch beside an NVIDIA
    card, MLX not installed on Apple silicon), so the reason for a CPU engine says what to fix."""
    return [f"{name}: {backend_class(name).is_available(hw)[1]}" for name, accelerator in AUTO_PREFERENCE
            if accelerator and getattr(hw, accelerator) and name in ENGINES
            and not backend_class(name).runs_accelerated(hw)]


def resume_conflict(saved_engine: str, engine: str) -> str | None:
    """Why a checkpoint written by `saved_engine` cannot resume on `engine`, or None when it can."""
    if saved_engine == engine:
        return None
    if saved_engine not in ENGINES:
        return (f"the checkpoint was written by the {saved_engine!r} engine, which this version does not have; "
                "resume with that engine's version, or start over with --fresh")
    saved, now = capabilities(saved_engine).adapter_format, capabilities(engine).adapter_format
    if saved != now:
        return (f"the checkpoint holds a {saved} adapter (written by {saved_engine}) and {engine} uses {now}; "
                f"convert the run first (swarm convert --to {engine} --run-dir RUN), resume with --backend "
                f"{saved_engine}, or start over with --fresh")
    return None


def create(name: str) -> Backend:
    return backend_class(name)()


def load(name: str, spec: ModelSpec) -> Backend:
    """A created engine with `spec` loaded. An engine whose own libraries fail to import or load (a broken
    install, a missing shared library) raises EngineBroken; everything else the engine raises stays."""
    from backends.base import EngineBroken

    try:
        engine = create(name)
        engine.load(spec)
    except (ImportError, OSError) as exc:
        raise EngineBroken(f"the {name} engine is installed but does not load here ({type(exc).__name__}: "
                           f"{exc}); reinstall it (swarm doctor prints the command) or choose another with "
                           "--backend") from exc
    return engine
