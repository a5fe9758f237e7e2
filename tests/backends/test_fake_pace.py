"""The fake engine runs at full speed, or paced like a real one with SWARM_FAKE_ROUND_S (benchmarks/lan_mesh.py)."""

from __future__ import annotations

import time

from backends.base import Sampling
from backends.fake import ROUND_S_ENV, FakeBackend

PROMPT = [{"role": "user", "content": "1 + 1?"}]


def generations_take(backend: FakeBackend, calls: int) -> float:
    start = time.monotonic()
    for _ in range(calls):
        backend.generate([PROMPT], 2, Sampling(seed=1))
    return time.monotonic() - start


def test_paced_generations_are_a_round_apart(monkeypatch):
    monkeypatch.setenv(ROUND_S_ENV, "0.2")
    backend = FakeBackend()
    assert backend.round_s == 0.2 and generations_take(backend, 3) >= 0.4  # the first waits out the engine's start


def test_unpaced_or_badly_paced_runs_at_full_speed(monkeypatch):
    monkeypatch.delenv(ROUND_S_ENV, raising=False)
    assert FakeBackend().round_s == 0.0
    monkeypatch.setenv(ROUND_S_ENV, "soon")
    assert FakeBackend().round_s == 0.0
