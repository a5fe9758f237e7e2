"""HeapTrimmer: when freed bytes add up it trims, at most every INTERVAL_S, and once after the last burst."""

from __future__ import annotations

import asyncio
import sys

from swarm_app.net.memory import TRIMMER, HeapTrimmer


def test_trims_after_the_threshold_at_most_once_per_interval_and_after_the_last_burst():
    calls = []

    async def scenario():
        trimmer = HeapTrimmer(calls.append, threshold=100, interval_s=0.3)
        trimmer.freed(60)
        await asyncio.sleep(0.05)
        assert calls == []  # below the threshold
        trimmer.freed(60)
        await asyncio.sleep(0.05)
        assert calls == [0]  # at once: no trim for 0.3 s before
        for _ in range(5):  # a burst within the interval: one trim at its end, not five
            trimmer.freed(200)
        await asyncio.sleep(0.05)
        assert calls == [0]
        await asyncio.sleep(0.35)
        return trimmer.trims, trimmer.pending

    assert asyncio.run(scenario()) == (2, 0) and calls == [0, 0]


def test_a_timer_left_on_a_closed_loop_does_not_block_later_trims():
    calls = []
    trimmer = HeapTrimmer(calls.append, threshold=10, interval_s=60.0)

    async def release():
        trimmer.freed(100)
        return trimmer._timer_loop is asyncio.get_running_loop()

    asyncio.run(release())  # the first trim runs at once, on this loop
    assert calls == [0]
    assert asyncio.run(release())  # the next is 60 s away: this loop closes with the timer pending
    assert asyncio.run(release())  # so this one schedules its own, on the loop that runs


def test_glibc_is_found_on_linux():
    if sys.platform.startswith("linux"):
        assert TRIMMER.trim is not None and TRIMMER.trim(0) in (0, 1)
