"""Plain dataclass events that a session publishes; the TUI and the headless view both subscribe.

Events are past-tense facts. They cross from the training thread to the asyncio loop, so they hold
only plain values (no models, no tensors).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    def to_dict(self) -> dict[str, Any]:
        return {"event": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class RunStarted(Event):
    run_dir: str
    backend: str
    backend_reason: str
    model_id: str
    preset: str
    start_round: int
    """The first round this process will run (1 for a new run)."""
    total_rounds: int
    """0: until stopped."""


@dataclass(frozen=True)
class SwarmJoined(Event):
    node_id: str
    address: str


@dataclass(frozen=True)
class RoundFinished(Event):
    metrics: dict[str, Any] = field(default_factory=dict)
    """The row just written to metrics.jsonl."""


@dataclass(frozen=True)
class CheckpointSaved(Event):
    round: int
    path: str


@dataclass(frozen=True)
class RunStopped(Event):
    last_round: int
    reason: str
    """"finished", "interrupted" or "error"."""
