"""`GuestPolicy`: what the session asks before, during and after each round to stay a good guest.

It combines the level's caps (guest.limits), the adaptive thread count (threads.ThreadTuner, only for an
engine that computes on the CPU and can change its threads while loaded, and only when `--threads` does not
fix them) and the pause rules (guest.PauseRules). It is built before the model loads (a bad schedule is a
one-line error then); `attach` hands it the loaded engine's `set_threads`. The session calls `begin_round`
and `end_round` on the engine thread around each round, `during_round` from the round's progress reports
(a probe that runs long goes back to the best count mid-round), and `poll` every few seconds from a worker
thread (psutil readings). `end_round` also reads the CPUs other programs left free during the round
(`free_cpus`: guest.FreeCpus by default), so that the tuner probes more threads only when they are free.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.settings import ResourcesSettings
from swarm_app.resources.guest import FreeCpus, Limits, PauseRules, Readings, Verdict, limits, parse_schedule, read_sensors
from swarm_app.resources.threads import ThreadTuner

POLL_S = 5.0
"""Seconds between sensor readings (psutil: ~1 ms each)."""


class GuestPolicy:
    def __init__(self, resources: ResourcesSettings, cores: int, fixed_threads: int = 0,
                 sensors: Callable[[], Readings] = read_sensors,
                 free_cpus: Callable[[], float | None] | None = None) -> None:
        """`free_cpus()`: the CPUs other programs left free since the last call (None: unknown); by default
        psutil's CPU times over all logical CPUs."""
        try:
            parse_schedule(resources.schedule)
        except ValueError as exc:
            raise UsageError(f"resources.schedule: {exc}") from None
        self.limits: Limits = limits(resources.level, max(1, cores), resources.threads, resources.cpu_share)
        self.fixed = fixed_threads
        self.tuner: ThreadTuner | None = None
        self._set_threads: Callable[[int], bool] = lambda threads: False
        self.rules = PauseRules(on_battery=resources.pause_on_battery,
                                when_busy=resources.pause_when_busy or resources.level == "light",
                                busy_cpu_percent=resources.busy_cpu_percent, schedule=resources.schedule,
                                memory_bytes=int(resources.memory_gib * 2**30))
        self.sensors = sensors
        self.free_cpus = free_cpus
        self._round_started = 0.0
        self.round_threads = 0
        """The count the last round started on (0: the engine's own, not adjustable)."""

    def attach(self, set_threads: Callable[[int], bool], on_cpu: bool) -> None:
        """The engine is loaded: from now on its threads follow the level's cap, or adapt within it."""
        if not on_cpu or not set_threads(self.threads):
            return  # a GPU engine, or one that keeps its load-time count
        self._set_threads = set_threads
        if not self.fixed and self.limits.max_threads > 1:
            self.tuner = ThreadTuner(self.limits.max_threads)
            if self.free_cpus is None:
                self.free_cpus = FreeCpus(_logical_cpus()).read

    @property
    def threads(self) -> int:
        """The count the engine should run the next (or current) round on."""
        if self.fixed:
            return self.fixed
        return self.tuner.threads if self.tuner else self.limits.max_threads

    def begin_round(self) -> None:
        if self.tuner is not None and self._round_started == 0.0:
            self.free_cpus()  # the first reading opens the window the first round is read over
        self._round_started = time.perf_counter()
        self.round_threads = self.threads if self._set_threads(self.threads) else 0

    def during_round(self) -> None:
        """Called between decode steps: a probe round that runs long goes back to the best count now."""
        if self.tuner is not None and self.tuner.abort_probe(time.perf_counter() - self._round_started):
            self._set_threads(self.tuner.threads)

    def end_round(self, work: float) -> None:
        if self.tuner is not None:
            self.tuner.record(work, time.perf_counter() - self._round_started, self.free_cpus())

    def poll(self) -> Verdict:
        """Whether a rule pauses training now (blocking: reads the sensors)."""
        return self.rules.decide(self.sensors())

    def describe(self, level: str, priority: str) -> str:
        """One short line for the views: "level full, threads adapt 1-2, nice 10"."""
        if self.fixed:
            threads = f"{self.fixed} thread{'s' if self.fixed > 1 else ''} (--threads)"
        elif self.tuner is not None:
            threads = f"threads adapt 1-{self.limits.max_threads}"
        else:
            threads = f"{self.limits.max_threads} thread{'s' if self.limits.max_threads > 1 else ''}"
        return f"level {level}, {threads}, {priority}"


def _logical_cpus() -> int:
    import psutil

    return psutil.cpu_count() or os.cpu_count() or 1
