"""Being a good guest on a personal computer: resource levels and the rules that pause training.

The owner's machine comes first (BOINC's computing preferences and Folding@home's power levels settled
what participants expect):
- `Level`: light / medium / full, each a cap on threads and a scheduling priority; explicit caps in
  [resources] (threads, cpu_share) override the level's. `limits(settings, cores)` is what the session
  applies: the thread cap the adaptive tuner stays under, and the process's nice value.
- `PauseRules.decide(readings)`: whether training pauses now, and why, from sensor readings: on battery,
  the owner busy (other processes using more than `busy_cpu_percent` of the CPU for a while), outside the
  allowed hours (`schedule`), or over the memory cap. The node keeps serving its peers while paused.
- `read_sensors()`: the readings from psutil; tests inject their own.
- `FreeCpus`: how many CPUs other programs left free since the last reading (the thread probe's gate).
Pure except `read_sensors`, `cpu_sample` and `lower_priority`; the session calls them off the event loop.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import time as clock
from dataclasses import dataclass
from datetime import datetime, time
from typing import Callable

log = logging.getLogger(__name__)

LEVELS = {
    # name: (share of the physical cores, nice value)
    "light": (0.0, 19),  # one thread, lowest priority: the owner does not notice
    "medium": (0.5, 10),
    "full": (1.0, 10),
}
"""The levels' thread share (light: one thread) and POSIX nice value (Windows: below-normal priority)."""


@dataclass(frozen=True)
class Limits:
    max_threads: int
    nice: int
    reason: str


def limits(level: str, cores: int, threads_cap: int = 0, cpu_share: float = 0.0) -> Limits:
    """The thread cap and priority of `level` on `cores` physical cores, with explicit caps applied."""
    share, nice = LEVELS[level]
    cap = max(1, math.floor(cores * share)) if share else 1
    why = f"level {level}: up to {cap} of {cores} cores"
    if cpu_share:
        cap = min(cap, max(1, math.floor(cores * cpu_share / 100)))
        why += f", cpu_share {cpu_share:g}%"
    if threads_cap:
        cap = min(cap, threads_cap)
        why += f", threads cap {threads_cap}"
    return Limits(cap, nice, why)


def lower_priority(nice: int) -> str:
    """Run this process below normal priority: nice on POSIX, BELOW_NORMAL on Windows. Says what was done."""
    try:
        if sys.platform == "win32":
            import psutil

            psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
            return "below-normal priority"
        current = os.nice(0)
        if current < nice:
            os.nice(nice - current)
        return f"nice {max(current, nice)}"
    except (OSError, AttributeError, ImportError) as exc:
        log.info("could not lower the scheduling priority: %s", exc)
        return "normal priority"


@dataclass(frozen=True)
class Readings:
    on_battery: bool | None
    """None: no battery (a desktop, a server) or unknown."""
    others_cpu_percent: float
    """CPU use of every other process, in % of the whole machine."""
    rss_bytes: int
    now: datetime


@dataclass(frozen=True)
class Verdict:
    paused: bool
    reason: str = ""
    """e.g. "on battery"; "" when training may run."""
    resumes: str = ""
    """When training resumes, in words: "when the power is plugged in"."""


@dataclass
class PauseRules:
    on_battery: bool = True
    when_busy: bool = False
    busy_cpu_percent: float = 50.0
    busy_for: int = 2
    """Readings in a row above the threshold before pausing, and below it before resuming (no flapping)."""
    schedule: str = ""
    """Allowed hours, "HH:MM-HH:MM" (may wrap midnight); "" any time."""
    memory_bytes: int = 0
    """Pause when the process holds more than this; 0: no cap."""
    _busy_streak: int = 0
    _idle_streak: int = 0
    _busy: bool = False

    def decide(self, r: Readings) -> Verdict:
        self._track_busy(r.others_cpu_percent)
        if self.on_battery and r.on_battery:
            return Verdict(True, "on battery", "when the power is plugged in")
        if self.when_busy and self._busy:
            return Verdict(True, f"the computer is in use (other programs at {r.others_cpu_percent:.0f}% CPU)",
                           f"when they use less than {self.busy_cpu_percent:g}%")
        window = parse_schedule(self.schedule)
        if window is not None and not in_window(window, r.now.time()):
            return Verdict(True, f"outside the schedule {self.schedule}", f"at {window[0].strftime('%H:%M')}")
        if self.memory_bytes and r.rss_bytes > self.memory_bytes:
            return Verdict(True, f"over the memory cap ({r.rss_bytes / 2**30:.1f} GiB)", "when memory is freed")
        return Verdict(False)

    def _track_busy(self, percent: float) -> None:
        if percent > self.busy_cpu_percent:
            self._busy_streak, self._idle_streak = self._busy_streak + 1, 0
        else:
            self._busy_streak, self._idle_streak = 0, self._idle_streak + 1
        if self._busy_streak >= self.busy_for:
            self._busy = True
        elif self._idle_streak >= self.busy_for:
            self._busy = False


def parse_schedule(text: str) -> tuple[time, time] | None:
    """"22:00-07:00" -> (start, end); "" -> None. Raises ValueError for anything else."""
    if not text.strip():
        return None
    start, sep, end = text.strip().partition("-")
    if not sep:
        raise ValueError(f"schedule {text!r}: write it as HH:MM-HH:MM, e.g. 22:00-07:00")
    return time.fromisoformat(start.strip()), time.fromisoformat(end.strip())


def in_window(window: tuple[time, time], now: time) -> bool:
    start, end = window
    return start <= now < end if start <= end else now >= start or now < end


def read_sensors(own_pid: int | None = None) -> Readings:
    """Battery, other processes' CPU use (since the last call) and this process's memory, from psutil."""
    import psutil

    try:
        battery = psutil.sensors_battery()
    except (RuntimeError, NotImplementedError, OSError):
        battery = None
    try:
        process = _process(own_pid)
        total = psutil.cpu_percent(interval=None)
        own = process.cpu_percent(interval=None) / max(psutil.cpu_count() or 1, 1)
        rss = process.memory_info().rss
    except psutil.Error as exc:
        raise OSError(f"psutil: {exc}") from None
    return Readings(None if battery is None else not battery.power_plugged, max(0.0, total - own), rss, datetime.now())


@functools.cache
def _process(pid: int | None):
    """One psutil.Process per pid, kept: its cpu_percent counts since the previous call on the same object, so
    a new object each reading said 0% every time and the node's own work counted as other programs' load."""
    import psutil

    return psutil.Process(pid)


def process_memory() -> int:
    """This process's resident memory in bytes (0 where psutil cannot tell): shown live, kept per round."""
    import psutil

    try:
        return _process(None).memory_info().rss
    except psutil.Error:
        return 0


def cpu_sample() -> tuple[float, float, float]:
    """(a monotonic clock, CPU seconds the whole machine has been busy, CPU seconds this process used), from psutil."""
    import psutil

    machine = psutil.cpu_times()
    idle = machine.idle + getattr(machine, "iowait", 0.0)
    guests = getattr(machine, "guest", 0.0) + getattr(machine, "guest_nice", 0.0)  # already counted in user, nice
    own = psutil.Process().cpu_times()
    return clock.monotonic(), sum(machine) - idle - guests, own.user + own.system


class FreeCpus:
    """The CPUs other programs left free between two readings: all of them, less the machine's busy CPU time
    that was not this process's, over the time between. The first reading has no window yet (None)."""

    def __init__(self, cpus: int, sample: Callable[[], tuple[float, float, float]] = cpu_sample) -> None:
        self.cpus = cpus
        self._sample = sample
        self._last: tuple[float, float, float] | None = None

    def read(self) -> float | None:
        try:
            now = self._sample()
        except (OSError, ImportError) as exc:  # psutil's errors are OSErrors
            log.info("cannot read the CPU times (%s): probes run unchecked", exc)
            return None
        last, self._last = self._last, now
        if last is None or now[0] <= last[0]:
            return None
        others = max(0.0, (now[1] - last[1]) - (now[2] - last[2])) / (now[0] - last[0])
        return max(0.0, self.cpus - others)
