"""Opening an engine: the one way every command that loads a model does it (run, demo, eval, doctor --pace).

`prepare_model(settings)` resolves `--model` to a local folder and applies the model's own recommended
settings (its `swarm.toml`, below every layer the user set), so whatever is loaded next, and whatever is
reported, uses the values the run uses. `open_engine(...)` then chooses the engine (`--backend`, or the
best that works here), sizes its threads once, and loads it: with `--backend auto` an engine that is
installed but broken is skipped for the next one (saying so); an engine the user named is never swapped.
Engine errors become one-line ModelErrors, and so does anything else a load raises (a damaged weights
file surfaces as the file format library's own exception): the line names the model's files and the
fix, the traceback goes to the log file only. Also what a run needs of its engine: the machine's hardware,
the model spec from the settings, and a checkpoint's adapter loaded into it. Nothing here writes a file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backends import registry
from backends.adapter_convert import adapter_shape
from backends.base import Backend, BackendError, EngineBroken, Hardware, LoraConfig, ModelSpec, OptimConfig
from swarm_app.kernel.errors import CheckpointError, ModelError, UsageError
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.settings import Settings
from swarm_app.kernel.sizing import Recommendation, recommend
from swarm_app.session.model import ResolvedModel, resolve
from swarm_app.session.recommendations import apply_recommendations
from swarm_app.training.checkpoint import read_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenedEngine:
    """A loaded engine and how it was chosen, for the views and the run file."""

    backend: Backend
    name: str
    reason: str
    """Why this engine (the flag, the automatic choice, or a fallback and why)."""
    model: ResolvedModel
    advice: Recommendation
    threads: int
    hardware: Hardware

    def machine_line(self, settings: Settings) -> str:
        """The sizing advice with the batch this run uses, saying so where model.threads overrides it."""
        t, m = settings.train, settings.model
        line = f"{self.advice.reason}; runs I = {t.local}, L = {t.completions}, up to {m.max_new_tokens} new tokens"
        if m.threads and m.threads != self.advice.threads:
            line += f"; running {m.threads} thread{'s' if m.threads > 1 else ''} as set (model.threads)"
        return line


def prepare_model(settings: Settings) -> ResolvedModel:
    """`--model` as a local folder, with its recommended settings applied to `settings`."""
    model = resolve(settings.model.path)
    apply_recommendations(settings, model.folder)
    return model


def engine_threads(settings: Settings, advice: Recommendation) -> int:
    """model.threads where set, else the sizing advice (one per physical core)."""
    return settings.model.threads or advice.threads


def open_engine(settings: Settings, hardware: Hardware | None = None, *, trainable: bool = True,
                model: ResolvedModel | None = None,
                on_attempt: Callable[[str], None] | None = None) -> OpenedEngine:
    """Choose, size and load the engine for `settings` (prepared with `prepare_model` unless `model` is
    given). `on_attempt(name)` is called before each engine starts loading (the session shows it)."""
    model = model or prepare_model(settings)
    requested = settings.model.backend
    hardware = hardware or detect_hardware(requested)
    try:
        name, reason = registry.choose(requested, hardware)
        fallbacks = [n for n in registry.auto_order(hardware) if n != name] if requested == "auto" else []
        while True:
            if on_attempt is not None:
                on_attempt(name)
            advice = recommend(hardware, name)
            threads = engine_threads(settings, advice)
            spec = model_spec(settings, model.folder, trainable, model_id=model.model_id, threads=threads)
            try:
                return OpenedEngine(_load(name, spec, model), name, reason, model, advice, threads, hardware)
            except EngineBroken as exc:
                if not fallbacks:
                    raise
                log.warning("%s; using the %s engine instead", exc, fallbacks[0])
                name = fallbacks.pop(0)
                reason = f"fallback: the engine auto chose first does not load ({exc})"
    except BackendError as exc:
        raise ModelError(str(exc)) from None


def _load(name: str, spec, model: ResolvedModel) -> Backend:
    """registry.load, with what no engine anticipated (a damaged file) as a one-line ModelError."""
    try:
        return registry.load(name, spec)
    except BackendError:
        raise
    except Exception as exc:
        log.info("loading %s on the %s engine failed", model.folder, name, exc_info=True)  # the log file keeps it
        raise ModelError(f"cannot load the model in {model.folder} on the {name} engine ({type(exc).__name__}: "
                         f"{_first_line(exc)}); {_weights_hint(model)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


def _weights_hint(model: ResolvedModel) -> str:
    """The fix: the model's weight files are the usual suspect once config and tokenizer passed their checks."""
    weights = sorted(p.name for p in model.folder.glob("*") if p.suffix in (".safetensors", ".bin", ".pt"))
    files = f"its weights ({', '.join(weights[:3])}{', ...' if len(weights) > 3 else ''})" if weights else "its weights"
    return (f"{files} may be damaged or incomplete: download or copy the model again, or pass another --model "
            "(the traceback is in swarm.log)")


def model_spec(settings: Settings, model_dir: Path, trainable: bool = True, *, model_id: str = "",
               threads: int = 0) -> ModelSpec:
    """What a backend needs to load the model with this run's LoRA and optimizer settings.
    `threads` 0: the setting, or 1 where the setting is 0 (auto) and no recommendation was made."""
    lora, t = settings.lora, settings.train
    return ModelSpec(str(model_dir), LoraConfig(lora.rank, lora.alpha, lora.dropout, tuple(lora.target_modules)),
                     OptimConfig(t.learning_rate, t.weight_decay, t.epochs, t.minibatches, t.clip_low, t.clip_high,
                                 t.max_grad_norm),
                     threads=threads or settings.model.threads or 1, trainable=trainable, model_id=model_id,
                     cache_dir=str(user_dirs().cache), precision=settings.model.precision,
                     gpu_memory_fraction=settings.resources.gpu_memory_fraction)



def load_checkpoint_adapter(backend, engine: str, folder: Path) -> None:
    """Load a checkpoint's adapter; damage is a CheckpointError (the caller tries an older one), a
    checkpoint of another engine's adapter format a UsageError (an older one would not fit either)."""
    conflict = registry.resume_conflict(read_state(folder).backend, engine)
    if conflict:
        raise UsageError(conflict)
    try:
        backend.load_adapter(folder)
    except BackendError as exc:
        raise CheckpointError(str(exc)) from None


def detect_hardware(backend: str) -> Hardware:
    """What this machine has; nothing is probed for the fake engine, which needs nothing."""
    if backend == "fake":
        return Hardware()
    from swarm_app.kernel.hardware import detect

    return detect()


def open_with_adapter(settings: Settings, model: ResolvedModel, adapter_dir: Path | None, hardware: Hardware | None,
                      say: Callable[[str], None] = lambda line: None) -> OpenedEngine:
    """An engine that only generates (eval, chat), with `adapter_dir`'s adapter loaded (None: the base model).
    The LoRA shape is the adapter's own, whatever the LoRA settings say; a bad adapter is a ModelError and
    the engine is closed again."""
    try:
        shape = adapter_shape(adapter_dir) if adapter_dir is not None else None
    except BackendError as exc:
        raise ModelError(str(exc)) from None
    if shape is not None:
        settings.lora.rank, settings.lora.alpha = shape
    opened = open_engine(settings, hardware, trainable=False, model=model,
                         on_attempt=lambda name: say(f"loading {model.model_id} on the {name} engine"))
    if adapter_dir is not None:
        try:
            opened.backend.load_adapter(adapter_dir)
        except BackendError as exc:
            opened.backend.close()
            raise ModelError(str(exc)) from None
    return opened
