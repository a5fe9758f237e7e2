"""Giving freed heap back to the operating system after big buffers are released.

glibc keeps what Python frees in its heaps: after slow readers held ~30 MB of /sample answers and socket
buffers, the node's RSS stayed ~27 MB above where it was, and glibc's `malloc_trim(0)` gave 27 MB back
(benchmarks/slow_readers.py). `HeapTrimmer` calls it once at least `THRESHOLD_BYTES` of big buffers have
been freed since the last call, at most every `INTERVAL_S`, and once more `INTERVAL_S` after the last
such release, so memory returns after an attack as well as during it. `TRIMMER` is the process's one.

Only glibc on Linux has malloc_trim: elsewhere (macOS, Windows, musl) this module does nothing. It must
not free or own anything itself; callers say how many bytes they let go of.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
import time
from typing import Callable

log = logging.getLogger(__name__)

THRESHOLD_BYTES = 8 * 1024 * 1024
"""Freed bytes that make a trim worth it: eight 1 MiB answers (a trim of a ~200 MB heap takes ~1-5 ms)."""
INTERVAL_S = 10.0
"""At most one trim per 10 s, however busy the releases."""


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only: musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class HeapTrimmer:
    """Counts bytes released by `freed` and trims the heap when they add up; see the module docstring."""

    def __init__(self, trim: Callable[[int], int] | None = None, clock: Callable[[], float] = time.monotonic,
                 threshold: int = THRESHOLD_BYTES, interval_s: float = INTERVAL_S) -> None:
        self.trim, self.clock = trim, clock
        self.threshold, self.interval_s = threshold, interval_s
        self.pending = 0
        self.trims = 0
        self._last = -interval_s
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def freed(self, nbytes: int) -> None:
        """`nbytes` of big buffers were let go of. Call it on an event loop."""
        if self.trim is None or nbytes <= 0:
            return
        self.pending += nbytes
        if self.pending < self.threshold or (self._timer is not None and self._timer_loop is not None
                                             and not self._timer_loop.is_closed()):
            return
        self._timer_loop = asyncio.get_running_loop()
        self._timer = self._timer_loop.call_later(max(0.0, self._last + self.interval_s - self.clock()), self.run)

    def run(self) -> None:
        """Trim now (the timer's callback)."""
        self._timer = self._timer_loop = None
        self.pending = 0
        self._last = started = self.clock()
        assert self.trim is not None
        self.trim(0)
        self.trims += 1
        log.debug("heap trimmed in %.1f ms", (self.clock() - started) * 1000)


TRIMMER = HeapTrimmer(_glibc_malloc_trim())
