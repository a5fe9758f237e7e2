"""`EventBus`: the session's events to any number of subscribers, from the loop or from a thread.

Subscribers run on the asyncio loop, in subscription order; one that raises is logged and kept, and
never stops the others or the run. Events from the training thread cross with call_soon_threadsafe.
Replaceable (progress) events of one kind are coalesced: at most one every `min_interval_s` reaches
the subscribers, plus every last step (done == total). `LogForwarder` turns this run's log records
into `LogRecorded` events. This module owns delivery only; it decides nothing about what to publish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from swarm_app.kernel.events import Event, LogRecorded, RunStopped

log = logging.getLogger(__name__)

Subscriber = Callable[[Event], None]


class EventBus:
    def __init__(self, min_interval_s: float = 0.1) -> None:
        self.min_interval_s = min_interval_s
        self._subscribers: list[Subscriber] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_sent: dict[type, float] = {}
        self.closed = False

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns the function that removes it."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber) if subscriber in self._subscribers else None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that subscribers run on (set when the session starts running)."""
        self._loop = loop

    def publish(self, event: Event) -> None:
        """Deliver now. Call on the loop thread (or before the loop runs). RunStopped is the last event
        anyone receives: a loading thread abandoned by a stop may still log after it."""
        if self.closed or (event.replaceable and self._too_soon(event)):
            return
        self.closed = isinstance(event, RunStopped)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:  # a view's bug must not end the run
                log.exception("a view failed on %s", type(event).__name__)

    def publish_threadsafe(self, event: Event) -> None:
        """Deliver from any thread, on the loop; dropped once the loop is gone (the run is over)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self.publish, event)
        except RuntimeError:  # the loop closed between the check and the call
            pass

    def _too_soon(self, event: Event) -> bool:
        now = time.monotonic()
        final = getattr(event, "done", 0) >= getattr(event, "total", 1)  # progress events: the last step always shows
        if not final and now - self._last_sent.get(type(event), -1e9) < self.min_interval_s:
            return True
        self._last_sent[type(event)] = now
        return False


class LogForwarder(logging.Handler):
    """Records of the app's loggers (swarm_app, backends) at INFO and above, as LogRecorded events."""

    PREFIXES = ("swarm_app", "backends")

    def __init__(self, bus: EventBus) -> None:
        super().__init__(logging.INFO)
        self.bus = bus

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(self.PREFIXES) or record.name == __name__:
            return
        self.bus.publish_threadsafe(LogRecorded(record.levelname.lower(), record.getMessage(), record.created))
