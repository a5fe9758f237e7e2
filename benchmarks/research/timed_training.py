"""What benchmarks/research/sft_ceiling.py and benchmarks/research/weight_average.py share: the model loaded on its
recommended settings at one thread, and a loop of training steps for a fixed training time with
evaluations at chosen steps (their time not counted)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from backends import registry
from swarm_app.kernel.settings import Settings
from swarm_app.session.engine import model_spec
from swarm_app.session.recommendations import apply_recommendations


def recommended_settings(model: Path) -> tuple[Settings, dict]:
    """The app's settings with `model`'s swarm.toml applied, at one thread; and the values it applied."""
    settings = Settings()
    settings.model.threads = 1
    return settings, apply_recommendations(settings, model)


def load_torch(settings: Settings, model: Path):
    """The torch engine with `model` and the LoRA and optimizer of `settings`; and the spec it loaded."""
    spec = model_spec(settings, model)
    return registry.load("torch", spec), spec


def train_for(minutes: float, step: Callable[[int], None], eval_at: list[int],
              record: Callable[[int, float], None]) -> int:
    """Call step(1), step(2), ... until `minutes` of their time have passed; record(k, seconds so far)
    after each step k in `eval_at` and after the last one. Returns the number of steps."""
    train_s, k = 0.0, 0
    while train_s < minutes * 60:
        k += 1
        started = time.perf_counter()
        step(k)
        train_s += time.perf_counter() - started
        if k in eval_at:
            record(k, train_s)
    if k not in eval_at:
        record(k, train_s)
    return k
