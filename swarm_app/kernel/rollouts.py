"""`Rollout`: the one object the trainer and the peer module share.

A rollout is the whole group of L completions for one question, as plain text. It carries no reward:
every node re-scores what it trains on with its own verifier. JSON in and out, never pickle.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from swarm_app.kernel.tasks import TaskRef


@dataclass(frozen=True)
class Rollout:
    ref: TaskRef
    question: str
    answer: str
    completions: tuple[str, ...]
    model_id: str
    round: int
    author: str
    """Node id of the author; "" for this node's own rollouts before they are published."""
    created_ms: int


class RolloutExchange(Protocol):
    """What the trainer needs from the swarm. The peer module implements it; tests use an inbox.

    Both methods are called from the training thread and must be thread-safe and non-blocking.
    """

    def publish(self, rollout: Rollout) -> None:
        """Share one own rollout group (fire and forget)."""

    def sample(self, count: int) -> list[Rollout]:
        """Up to `count` admitted peer rollouts: fresh, uniform, with a per-author cap."""

    def record_used(self, rollout: Rollout, mean_advantage: float) -> None:
        """The trainer used this peer rollout; `mean_advantage` is the mean |A| of its group here."""

    def connected(self) -> bool:
        """Whether a peer is connected now: its groups may come."""


class Inbox:
    """A local `RolloutExchange`: keeps what is published, hands out what a test put in."""

    def __init__(self, pending: list[Rollout] | None = None, connected: bool = True) -> None:
        self.published: list[Rollout] = []
        self.pending: list[Rollout] = list(pending or [])
        self.peers = connected
        """What connected() says: a test may set it."""
        self.used: list[tuple[Rollout, float]] = []
        self._lock = threading.Lock()

    def publish(self, rollout: Rollout) -> None:
        with self._lock:
            self.published.append(rollout)

    def sample(self, count: int) -> list[Rollout]:
        with self._lock:
            taken, self.pending = self.pending[:count], self.pending[count:]
        return taken

    def record_used(self, rollout: Rollout, mean_advantage: float) -> None:
        with self._lock:
            self.used.append((rollout, mean_advantage))

    def connected(self) -> bool:
        return self.peers
