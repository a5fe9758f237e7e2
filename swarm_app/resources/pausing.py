"""Whether training waits before its next round, and why: the user paused it, or a pause rule holds it.

The user pauses from a view (`p` in the TUI, the status endpoint of `swarm watch`); the pause rules
(guest.PauseRules: on battery, the owner busy, outside the schedule, over the memory cap) are read every
POLL_S seconds by `watch_rules`. Either way the round under way finishes and the peer node keeps serving
its peers. `Pausing` holds both reasons and says what the views are told (`notice`): TrainingPaused each
time the reason to wait changes (the user's own pause names no rule, and goes before one), and
TrainingResumed once no reason is left. The session owns the loop that waits between rounds; `Pausing`
wakes it through `on_change`. Must not import the session or the trainer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from swarm_app.kernel.events import Event, TrainingPaused, TrainingResumed
from swarm_app.resources.guest import Verdict
from swarm_app.resources.policy import POLL_S, GuestPolicy

log = logging.getLogger(__name__)


class Pausing:
    def __init__(self, on_change: Callable[[], None]) -> None:
        """`on_change`: called (on the loop) when training may have to stop or start waiting."""
        self.by_user = False
        self.held: Verdict | None = None
        """A pause rule holding training (on battery, the owner busy, outside the schedule)."""
        self._on_change = on_change
        self._announced: str | None = None
        """The reason the views were last told of ("": the user's pause); None: they know training runs."""

    @property
    def waiting(self) -> bool:
        """No new round may start now."""
        return self.by_user or self.held is not None

    def pause(self) -> None:
        self.by_user = True

    def resume(self) -> None:
        if self.by_user:
            self.by_user = False
            self._on_change()

    def hold(self, verdict: Verdict) -> None:
        """The pause rules' latest verdict: a rule that starts or stops holding training calls on_change."""
        held = verdict if verdict.paused else None
        if held != self.held:
            self.held = held
            self._on_change()

    def notice(self, last_done: int) -> Event | None:
        """The event the views need now (between rounds, `last_done` the last completed one), or None."""
        if not self.waiting:
            announced, self._announced = self._announced, None
            return TrainingResumed() if announced is not None else None
        held = None if self.by_user else self.held
        reason = held.reason if held else ""
        if reason == self._announced:
            return None
        self._announced = reason
        return TrainingPaused(last_done, reason, held.resumes if held else "")

    async def watch_rules(self, policy: GuestPolicy) -> None:
        """The pause rules, every POLL_S seconds on a worker thread (psutil), until cancelled; sensors
        that cannot be read end the watch: training is then not paused by the rules."""
        while True:
            try:
                verdict = await asyncio.to_thread(policy.poll)
            except (OSError, RuntimeError) as exc:  # read_sensors turns psutil's errors into OSError
                log.warning("pause rules: the sensors cannot be read (%s); training is not paused by them", exc)
                return
            self.hold(verdict)
            await asyncio.sleep(POLL_S)
