"""The guest policy as the session drives it: the engine's thread count set round by round, and probes of more
threads only while other programs leave the CPUs free (injected readings: no real load, no timing)."""

from __future__ import annotations

from swarm_app.kernel.settings import ResourcesSettings
from swarm_app.resources.policy import GuestPolicy


def drive(free: list[float | None]) -> list[int]:
    """One round per reading (the CPUs other programs left free during it); the counts the engine was set to."""
    readings = iter([None, *free])  # the first reading opens the window
    policy = GuestPolicy(ResourcesSettings(), cores=2, free_cpus=lambda: next(readings))
    applied: list[int] = []
    policy.attach(lambda threads: applied.append(threads) or True, on_cpu=True)
    started = []
    for _ in free:
        policy.begin_round()
        started.append(applied[-1])
        policy.end_round(1000.0)
    return started


def test_no_probe_while_another_program_keeps_a_cpu_busy():
    assert drive([1.0] * 8) == [1] * 8


def test_a_probe_runs_once_the_cpus_are_free():
    assert drive([2.0, 2.0, 2.0]) == [1, 1, 2]  # the warm-up round, one measured round, the probe
    assert drive([1.0, 1.0, 1.0, 1.9, 1.9]) == [1, 1, 1, 1, 2]
