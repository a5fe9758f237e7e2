"""What a running node offers `swarm watch`: the replay history and the status endpoint's life.

`watched(session)` wraps a run: it records every event from the first one, starts the endpoint
(endpoint.py) in the background, advertises it in `watch.json` once the run has begun (the run
folder is checked, an old run moved aside by --fresh, the model loaded), and stops it after the run.
It never fails or slows the run: an endpoint that cannot start is one warning, and events are handed
over synchronously as JSON text (sending is the endpoint's writer tasks' job). aiohttp is imported
only in the background task: its ~0.1 s import would double the time to the first headless line.
This module must not steer the session; it only listens.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator

from swarm_app.kernel.events import Event, RunStarted
from swarm_app.watch.history import EventHistory

if TYPE_CHECKING:
    from swarm_app.watch.endpoint import StatusEndpoint

log = logging.getLogger(__name__)


class WatchService:
    """One run's history and endpoint; see the module docstring."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.history = EventHistory()
        self.endpoint: StatusEndpoint | None = None
        self._run_started = False
        self._tasks: set[asyncio.Task] = set()

    def on_event(self, event: Event) -> None:
        """The session's subscriber (on the loop): record, hand to the watchers, never wait."""
        text = self.history.record(event)
        if self.endpoint is not None:
            self.endpoint.broadcast(text, event.replaceable)
        if isinstance(event, RunStarted) and not self._run_started:
            self._run_started = True
            self._advertise_when_ready()

    def start(self) -> None:
        self._spawn(self._start_endpoint())

    async def close(self) -> None:
        """After the run: the watchers get what is queued (RunStopped included), then the endpoint goes."""
        while self._tasks:
            done, _ = await asyncio.wait(set(self._tasks))
            self._tasks -= done
            for task in done:
                if not task.cancelled() and task.exception() is not None:  # a bug here must not end the run
                    log.error("the status endpoint failed", exc_info=task.exception())
        if self.endpoint is not None:
            await self.endpoint.stop()

    async def _start_endpoint(self) -> None:
        from swarm_app.watch.endpoint import StatusEndpoint

        endpoint = StatusEndpoint(self.history, self.run_dir)
        try:
            await endpoint.start()
        except OSError as exc:
            log.warning("swarm watch cannot attach to this run: the status endpoint did not start on 127.0.0.1 "
                        "(%s); training goes on", exc.strerror or exc)
            return
        self.endpoint = endpoint
        self._advertise_when_ready()

    def _advertise_when_ready(self) -> None:
        if self.endpoint is not None and self._run_started:
            self._spawn(self._advertise(self.endpoint))

    async def _advertise(self, endpoint: StatusEndpoint) -> None:
        try:
            await asyncio.to_thread(endpoint.advertise)
        except OSError as exc:
            log.warning("swarm watch cannot find this run: writing %s/watch.json failed (%s); training goes on",
                        self.run_dir, exc.strerror or exc)

    def _spawn(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


@asynccontextmanager
async def watched(session) -> AsyncIterator[WatchService]:
    """Offer `session` to `swarm watch` while the body runs (wrap `await session.run()`)."""
    service = WatchService(Path(session.run_dir))
    unsubscribe = session.subscribe(service.on_event)
    service.start()  # binds at the run's first await, after the first event is out
    try:
        yield service
    finally:
        unsubscribe()
        await service.close()
