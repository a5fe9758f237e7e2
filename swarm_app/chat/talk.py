"""A chat's engine: opened on a run's newest checkpoint (or the base model), answering one prompt at a time.

The engine is opened as `swarm eval` opens one (session/engine.py: open_with_adapter), untrainable, on
the engine that wrote the checkpoint unless `--backend` names one. Before each answer `refresh` loads a
newer checkpoint if the node wrote one meanwhile, so a chat beside a training node talks to its current
adapter. A run with no checkpoint yet answers with the base model, and says so: a fresh LoRA adapter adds
nothing to the base model (its B matrices start at zero), so that is exactly the run's policy at round 0.
Greedy by default, as the held-out evaluation: the same prompt gets the same answer from the same adapter.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Callable

from backends import registry
from backends.base import BackendError, Completion, Hardware, OnText, Sampling
from swarm_app.chat.run import Checkpoint, RunInfo, latest_checkpoint
from swarm_app.kernel import tasks
from swarm_app.kernel.errors import ModelError, UsageError
from swarm_app.kernel.settings import Settings
from swarm_app.session.engine import OpenedEngine, open_with_adapter, prepare_model

log = logging.getLogger(__name__)

RETRIES = 3
"""Reads of latest.json when a checkpoint vanishes under a load (pruned by the node meanwhile)."""


def prompt_messages(text: str) -> list[dict[str, str]]:
    """A typed prompt in the format training uses (the tasks' system prompt, then the user's text)."""
    return [{"role": "system", "content": tasks.SYSTEM_PROMPT}, {"role": "user", "content": text}]


def chat_sampling(settings: Settings, max_tokens: int = 0, temperature: float = 0.0) -> Sampling:
    """How a chat decodes: greedy unless a temperature is given, up to the run's longest completion."""
    return Sampling(max_tokens or settings.model.max_new_tokens, temperature, settings.model.top_p)


def settings_for_run(settings: Settings, run: RunInfo | None) -> None:
    """The run's model and task preset in `settings`; a --model other than the run's is refused."""
    if run is None or run.model is None:
        return
    if "model.path" in settings.given and settings.model.path:
        if Path(settings.model.path).expanduser().resolve() != Path(run.model).resolve():
            raise UsageError(f"the run in {run.run_dir} trains {run.model}, not {settings.model.path}: leave "
                             "--model out to talk to the run's model, or pass --base with --model")
    settings.model.path = run.model
    settings.tasks.preset = run.preset or settings.tasks.preset


class Talker:
    """One engine, talking to a run's adapter (refreshed before each answer) or to the base model."""

    def __init__(self, settings: Settings, run_dir: Path | None, hardware: Hardware | None = None,
                 say: Callable[[str], None] = lambda line: None) -> None:
        """`run_dir` None: the base model of `settings` (--base)."""
        self.settings, self.run_dir, self.hardware, self.say = settings, run_dir, hardware, say
        self.model = prepare_model(settings)
        self.opened: OpenedEngine | None = None
        self.checkpoint: Checkpoint | None = None

    @property
    def source(self) -> str:
        """What answers, in words."""
        if self.run_dir is None:
            return f"the base model {self.model.model_id} (--base)"
        if self.checkpoint is None:
            return f"the base model {self.model.model_id}: the run has no checkpoint yet (its round-0 policy)"
        return f"the adapter of round {self.checkpoint.round} of {self.run_dir}"

    def open(self) -> None:
        """Load the engine on the newest checkpoint (the base model where there is none or --base)."""
        found = latest_checkpoint(self.run_dir) if self.run_dir is not None else None
        if found is not None and "model.backend" not in self.settings.given:
            self.settings.model.backend = found.engine  # the engine whose adapter format the checkpoint has
        for attempt in range(RETRIES):
            try:
                self._open_on(found)
                return
            except ModelError:
                newer = latest_checkpoint(self.run_dir) if found is not None else None
                if newer is None or newer.folder == found.folder or attempt == RETRIES - 1:
                    raise
                found = newer  # the node pruned it while we read: its successor is complete

    def _open_on(self, found: Checkpoint | None) -> None:
        if found is not None and (conflict := registry.resume_conflict(found.engine, self._engine_name())):
            raise UsageError(conflict)
        self.close()
        self.opened = open_with_adapter(self.settings, self.model, found.folder if found else None,
                                        self.hardware, self.say)
        self.checkpoint = found

    def _engine_name(self) -> str:
        return self.opened.name if self.opened else self.settings.model.backend

    def refresh(self) -> bool:
        """Load the run's newest checkpoint if it is newer than the one loaded; True when it changed."""
        if self.run_dir is None:
            return False
        found = latest_checkpoint(self.run_dir)
        if found is None or (self.checkpoint is not None and found.round <= self.checkpoint.round):
            return False
        if self.checkpoint is None:  # the first checkpoint: its LoRA shape may differ from the settings'
            self.open()
            return True
        try:
            self.opened.backend.load_adapter(found.folder)
            self.checkpoint = found
        except BackendError as exc:  # pruned under us, or damaged: keep the adapter loaded, say why
            log.warning("kept the adapter of round %d: cannot load %s (%s)", self.checkpoint.round, found.folder, exc)
            return False
        return True

    def answer(self, messages: list[dict[str, str]], sampling: Sampling, on_text: OnText) -> Completion:
        if self.opened is None:
            self.open()
        try:
            return self.opened.backend.stream(messages, sampling, on_text)
        except BackendError as exc:
            raise ModelError(str(exc)) from None

    def close(self) -> None:
        if self.opened is not None:
            self.opened.backend.close()
            self.opened = None


def pick_specs(preset: str, name: str) -> list[tasks.TaskSpec]:
    """The datasets `--task NAME` draws from: one dataset of the preset, or the preset's name for all of them."""
    specs = tasks.preset(preset)
    if name == preset:
        return specs
    chosen = [spec for spec in specs if spec.dataset == name]
    if not chosen:
        raise UsageError(f"--task {name}: not a task of the run's preset {preset!r}; choose one of: "
                         f"{', '.join([preset, *(s.dataset for s in specs)])}")
    return chosen


def draw_question(specs: list[tasks.TaskSpec], rng: random.Random) -> tasks.Task:
    """A held-out item of one of `specs` (never a training draw: held-out items are never trained on)."""
    spec = rng.choices(specs, weights=[s.weight for s in specs])[0]
    ref = tasks.TaskRef(spec.dataset, spec.digest, tasks.HELDOUT_SEED, rng.randrange(tasks.DATASET_SIZE))
    return tasks.regenerate(ref, heldout=True)
