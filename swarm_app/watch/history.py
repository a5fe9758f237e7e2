"""The replay a watcher that attaches late gets: a bounded history of a run's events as JSON text.

Pure data (no I/O, no aiohttp): `EventHistory.record(event)` keeps what a late watcher needs to draw the
same screen and returns the event's JSON text; `replay()` gives the kept texts in the order they happened.
"""

from __future__ import annotations

import json
from collections import deque
from itertools import count

from swarm_app.kernel.events import (
    CheckpointSaved,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    LogRecorded,
    ModelLoading,
    PeersUpdated,
    PhaseProgress,
    RoundFinished,
    RoundStarted,
    RunStarted,
    RunStopped,
    SharingChanged,
    SoloCurveFound,
    SwarmJoined,
    TrainingPaused,
    TrainingResumed,
)

ROUNDS_KEPT = 500
"""RoundFinished and EvaluationFinished replayed to a late watcher: enough for the whole chart of a
long run's recent past (a row is ~600 bytes of JSON, so 500 cost ~0.3 MB)."""
LOGS_KEPT = 200
LATEST_ONLY = (ModelLoading, RunStarted, SwarmJoined, RoundStarted, PhaseProgress, EvaluationStarted,
               CheckpointSaved, PeersUpdated, SharingChanged, SoloCurveFound, RunStopped)
"""Kinds where only the newest tells a view anything (what the node is doing, the swarm right now)."""
PAUSE_SLOT = (TrainingPaused, TrainingResumed)
"""One slot for both: the newest says whether training is paused."""


def encode(event: Event) -> str:
    return json.dumps(event.to_dict(), default=str)


class EventHistory:
    """The events a watcher that attaches late needs to draw the same screen, as JSON text, in the
    order they happened. Peer comings and goings and rejection reports are not kept: PeersUpdated
    already says who is there now."""

    def __init__(self, rounds: int = ROUNDS_KEPT, logs: int = LOGS_KEPT) -> None:
        self._sizes = {RoundFinished: rounds, EvaluationFinished: rounds, LogRecorded: logs}
        self._slots: dict[object, deque[tuple[int, str]]] = {}
        self._order = count()

    def record(self, event: Event) -> str:
        """Keep `event` if a late watcher needs it; returns its JSON text either way."""
        text = encode(event)
        slot, size = self._slot_of(type(event))
        if size:
            self._slots.setdefault(slot, deque(maxlen=size)).append((next(self._order), text))
        return text

    def replay(self) -> list[str]:
        kept = [entry for slot in self._slots.values() for entry in slot]
        return [text for _, text in sorted(kept)]

    def _slot_of(self, kind: type) -> tuple[object, int]:
        if kind in PAUSE_SLOT:
            return PAUSE_SLOT, 1
        if kind in LATEST_ONLY:
            return kind, 1
        return kind, self._sizes.get(kind, 0)
