"""`swarm eval`: load a model (and optionally an adapter) through the run's code path and score it.

`say(line)` hears what happens while it runs (the engine loading, questions answered so far): an
evaluation of 200 questions takes a minute on a CPU, and the command shows that it is under way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backends.base import BackendError, Hardware, Sampling
from swarm_app.kernel import tasks
from swarm_app.kernel.errors import ModelError
from swarm_app.kernel.settings import Settings
from swarm_app.session.engine import open_with_adapter, prepare_model
from swarm_app.training.checkpoint import Checkpoints
from swarm_app.training.evaluation import EvalResult, SampledResult, evaluate, sampled_reward


@dataclass(frozen=True)
class EvalReport:
    """What was scored (the model folder, the adapter folder or None for the base model) and how well."""

    result: EvalResult
    model: Path
    adapter: Path | None
    sampled: SampledResult | None = None

    def to_dict(self) -> dict:
        return {**self.result.to_dict(), "model": str(self.model), "adapter": str(self.adapter) if self.adapter else None,
                "sampled": self.sampled.to_dict() if self.sampled else None}

    def heading(self) -> str:
        adapter = (f"adapter {self.adapter}" if self.adapter else
                   "no adapter: the base model as bundled, not a trained run (pass --adapter RUN_DIR to score one)")
        return f"model {self.model}, {adapter}"


def run_eval(settings: Settings, adapter: Path | None, n: int, hardware: Hardware, samples: int = 0,
             say: Callable[[str], None] = lambda line: None) -> EvalReport:
    """Greedy held-out accuracy on `n` questions; with `samples` > 0 also their mean reward over that many
    completions each at the rollout settings (temperature, top_p, length) of `settings`."""
    specs = tasks.preset(settings.tasks.preset)
    model = prepare_model(settings)  # the run's values, so its held-out scores compare with these
    adapter_dir = adapter_folder(adapter) if adapter else None
    backend = open_with_adapter(settings, model, adapter_dir, hardware, say).backend
    refs = tasks.heldout(specs, n)
    m = settings.model

    def answered(what: str):
        return lambda done, total: say(f"{what}: {done}/{total} questions")

    try:
        sampled = None
        if samples > 0:
            rollout = Sampling(max_new_tokens=m.max_new_tokens, temperature=m.temperature, top_p=m.top_p, seed=0)
            sampled = sampled_reward(backend, refs, rollout, samples, answered=answered(f"{samples} samples each"))
        greedy = evaluate(backend, refs, m.max_new_tokens, answered=answered("greedy"))
        return EvalReport(greedy, model.folder, adapter_dir, sampled)
    except BackendError as exc:
        raise ModelError(str(exc)) from None
    finally:
        backend.close()


def adapter_folder(path: Path) -> Path:
    """A checkpoint folder as given, or the newest checkpoint of a run folder."""
    if not path.is_dir():
        raise ModelError(f"--adapter {path} is not a folder; pass a checkpoint folder or a run folder")
    checkpoints = Checkpoints(path)
    if checkpoints.exists():
        return checkpoints.load_latest()[1]
    return path
