"""The local status endpoint that `swarm watch` attaches to: an aiohttp app on 127.0.0.1, any free port.

One route, `GET /events`, a websocket: the replay of recent events first (watch_service.EventHistory),
then every new event as one JSON text message. Every request must carry `Authorization: Bearer
<token>` (a random token that only watch.json, mode 0600, holds); without it the answer is 401 and
nothing else is served. It is read-only: whatever a watcher sends is read and dropped, nothing here
can call the session. Training never waits on a watcher: `broadcast` only appends to each watcher's
bounded queue; a writer task per watcher sends with a timeout. A watcher that falls behind loses the
oldest progress (replaceable) events first; one that would lose a fact is disconnected instead, so
what a watcher shows is never silently wrong.

The port has the peer port's door (swarm_app/net/gate.py): a 2 s header timeout, at most 24
connections per client address and 32 in all (that cap is counted in the process's descriptor budget),
and when it is full a new connection evicts the oldest one that has not sent the token: a local
process opening slow connections by the thousand can neither run the node out of descriptors nor keep
`swarm watch`, which sends its request with the token at once, out. This module must not open any
other port, and nothing a watcher sends may reach the session.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import secrets
from collections import deque
from pathlib import Path

import aiohttp
from aiohttp import web

from swarm_app.net.gate import WATCH_CONNECTIONS, ConnectionGate, GatedSite, gated_runner
from swarm_app.watch.file import WatchInfo, remove_watch_file, write_watch_file
from swarm_app.watch.history import EventHistory

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MAX_REQUEST_BYTES = 4096
"""No request body is read; the limit only bounds what a client can make the server buffer."""
MAX_INCOMING_MSG = 4096
"""Watchers send nothing that matters; anything larger is a protocol error that closes the socket."""
QUEUE_LIMIT = 1000
"""Live messages queued per watcher beyond the replay (a few minutes of fast fake-engine rounds)."""
MAX_WATCHERS = 16
PER_ADDRESS = 24
"""Connections from one client address (every watcher is local, most from 127.0.0.1: 16 watchers and 8
requests in progress); the total is net/gate.py's WATCH_CONNECTIONS, 32."""
HEADER_TIMEOUT_S = 2.0
"""A local client sends its request head within milliseconds; the peer port allows 5 s for the Internet."""
SEND_TIMEOUT_S = 10.0
HEARTBEAT_S = 20.0
DRAIN_S = 2.0
"""At stop: how long watchers get to receive what is queued (RunStopped included) before the close."""
CLOSE_SLOW = aiohttp.WSCloseCode.TRY_AGAIN_LATER
CLOSE_STOPPED = aiohttp.WSCloseCode.GOING_AWAY
AUTHORIZATION_LINE = re.compile(rb"(?im)^authorization:[ \t]*(.*?)[ \t]*\r?$")


class WatcherQueue:
    """One watcher's messages, bounded. `put` never waits; `get` returns None at the end."""

    def __init__(self, replay: list[str], limit: int = QUEUE_LIMIT) -> None:
        self._items: deque[tuple[str, bool]] = deque((text, False) for text in replay)
        self._limit = len(replay) + limit
        self._ready = asyncio.Event()
        self._ready.set()
        self.closed = False
        self.too_slow = False

    def put(self, text: str, replaceable: bool) -> None:
        if self.closed:
            return
        if len(self._items) >= self._limit and not self._drop_oldest_replaceable():
            self.too_slow = True  # it would miss a fact: better no view than a wrong one
            self._items.clear()
            self.close()
            return
        self._items.append((text, replaceable))
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def get(self) -> str | None:
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()[0]

    def __len__(self) -> int:
        return len(self._items)

    def _drop_oldest_replaceable(self) -> bool:
        for i, (_, replaceable) in enumerate(self._items):
            if replaceable:
                del self._items[i]
                return True
        return False


class Watchers:
    """The open watcher sockets, each with its queue and writer task."""

    def __init__(self, history: EventHistory) -> None:
        self.history = history
        self._queues: dict[web.WebSocketResponse, WatcherQueue] = {}
        self._writers: set[asyncio.Task] = set()

    @property
    def full(self) -> bool:
        return len(self._queues) >= MAX_WATCHERS

    def attach(self, ws: web.WebSocketResponse) -> asyncio.Task:
        """Replay and live stream in one step (no await between): nothing is missed or sent twice."""
        queue = self._queues[ws] = WatcherQueue(self.history.replay())
        writer = asyncio.ensure_future(send_all(ws, queue))
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)
        return writer

    def detach(self, ws: web.WebSocketResponse) -> None:
        self._queues.pop(ws, None)

    def broadcast(self, text: str, replaceable: bool) -> None:
        for queue in self._queues.values():
            queue.put(text, replaceable)

    async def finish(self) -> None:
        """Let every watcher receive what is queued, then close (DRAIN_S at most)."""
        for queue in self._queues.values():
            queue.close()
        if self._writers:
            await asyncio.wait(set(self._writers), timeout=DRAIN_S)


async def send_all(ws: web.WebSocketResponse, queue: WatcherQueue) -> None:
    try:
        while (text := await queue.get()) is not None:
            await asyncio.wait_for(ws.send_str(text), SEND_TIMEOUT_S)
    except (TimeoutError, ConnectionError) as exc:
        log.info("a watcher stopped reading (%s): disconnected", type(exc).__name__)
        await ws.close(code=CLOSE_SLOW, message=b"not reading")
        return
    if queue.too_slow:
        log.info("a watcher fell %d messages behind: disconnected", QUEUE_LIMIT)
        await ws.close(code=CLOSE_SLOW, message=b"fell behind; run swarm watch again")
    else:
        await ws.close(code=CLOSE_STOPPED, message=b"the node stopped")


TOKEN: web.AppKey[str] = web.AppKey("watch_token", str)
WATCHERS: web.AppKey[Watchers] = web.AppKey("watchers", Watchers)


def create_app(token: str, watchers: Watchers) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[require_token])
    app[TOKEN] = token
    app[WATCHERS] = watchers
    app.router.add_get("/events", events)
    return app


@web.middleware
async def require_token(request: web.Request, handler):
    expected = f"Bearer {request.app[TOKEN]}".encode()
    given = request.headers.get("Authorization", "").encode("utf-8", "replace")
    if not hmac.compare_digest(given, expected):
        raise web.HTTPUnauthorized(text="a token is required: swarm watch reads it from watch.json\n",
                                 headers={"WWW-Authenticate": "Bearer"})
    return await handler(request)


async def events(request: web.Request) -> web.WebSocketResponse:
    watchers = request.app[WATCHERS]
    if watchers.full:
        raise web.HTTPServiceUnavailable(text=f"{MAX_WATCHERS} watchers already attached\n")
    ws = web.WebSocketResponse(max_msg_size=MAX_INCOMING_MSG, heartbeat=HEARTBEAT_S, compress=False)
    await ws.prepare(request)
    writer = watchers.attach(ws)
    try:
        async for message in ws:  # read-only: nothing a watcher sends is acted on
            log.debug("ignored a %s message from a watcher", message.type.name)
    finally:
        watchers.detach(ws)
        writer.cancel()
    return ws


class StatusEndpoint:
    """`await start()` binds 127.0.0.1:0; `advertise()` writes watch.json; `await stop()` undoes both."""

    def __init__(self, history: EventHistory, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.watchers = Watchers(history)
        self.info: WatchInfo | None = None
        self._token = secrets.token_urlsafe(32)
        self._runner: web.AppRunner | None = None
        self._advertised = False
        self.gate = ConnectionGate(PER_ADDRESS, WATCH_CONNECTIONS, newcomer_share=0)
        """No newcomers' slots: the attacker and the watcher share 127.0.0.1; eviction serves instead."""
        self.malformed = 0
        """Requests refused as malformed (400 or a close)."""
        self._authorization = f"Bearer {self._token}".encode()

    def _count_malformed(self) -> None:
        self.malformed += 1

    def _sent_token(self, head: bytes) -> bool:
        """A connection's first bytes hold the Authorization header with this endpoint's token."""
        match = AUTHORIZATION_LINE.search(head)
        return match is not None and hmac.compare_digest(match.group(1), self._authorization)

    async def start(self) -> None:
        runner = gated_runner(create_app(self._token, self.watchers), self.gate, HEADER_TIMEOUT_S, self._count_malformed)
        await runner.setup()
        site = GatedSite(runner, HOST, 0, self.gate, proof=self._sent_token)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        port = runner.addresses[0][1]
        self.info = WatchInfo(port, self._token, os.getpid())
        log.debug("status endpoint on %s:%d (swarm watch --run-dir %s)", HOST, port, self.run_dir)

    def advertise(self) -> Path:
        """Blocking (fsync): call it in a thread."""
        assert self.info is not None, "start() first"
        path = write_watch_file(self.run_dir, self.info)
        self._advertised = True
        return path

    def broadcast(self, text: str, replaceable: bool) -> None:
        self.watchers.broadcast(text, replaceable)

    async def stop(self) -> None:
        if self._advertised and self.info is not None:
            remove_watch_file(self.run_dir, self.info)  # first: no new watcher tries a closing endpoint
        await self.watchers.finish()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> StatusEndpoint:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()
