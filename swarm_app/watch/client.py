"""The watcher's side of `swarm watch`: a node's event stream, read-only.

`NodeStream` reads `watch.json` in the run folder (port and token), opens the node's status endpoint
(endpoint.py) and yields its events; the command (swarm_app/commands/watch.py) shows them in the TUI
or as headless lines. It can only receive: nothing here calls the node. Problems before the stream
opens (no node, a stale watch.json, a refused token) are one-line UsageErrors (exit 2); a message a
newer node sends that this version cannot read is skipped. A connection the node drops before answering
(its watch port evicts the oldest connection that has not shown the token when a flood fills it:
swarm_app/net/gate.py) is tried again a few times; nothing listening is an error at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import psutil

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.events import Event, RunStopped, event_from_dict
from swarm_app.watch.file import WatchInfo, read_watch_file, watch_file_of

log = logging.getLogger(__name__)

MAX_MSG_BYTES = 16 * 1024 * 1024
"""A PeersUpdated of a large swarm is the biggest message (~200 bytes a peer); the replay is many
small messages, not one."""
CONNECT_TIMEOUT_S = 5.0
RETRY_DELAYS_S = (0.1, 0.25, 0.5, 1.0, 2.0)
"""Waits before the attempts after a dropped one: six attempts in ~4 s, for a node whose watch port is
flooded (each attempt there loses a race only if a few dozen connections arrive before our request)."""
HEARTBEAT_S = 20.0


class NodeStream:
    """The websocket to one node's status endpoint, read as events. `async with` opens it."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.stopped = False
        """True once the node said it stopped (RunStopped): the stream then ends as it should."""
        self.close_reason = ""
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> NodeStream:
        info = read_watch_file(self.run_dir)
        timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S)
        self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            for delay in (*RETRY_DELAYS_S, None):
                try:
                    self._ws = await self._session.ws_connect(info.url, headers={"Authorization": f"Bearer {info.token}"},
                                                              heartbeat=HEARTBEAT_S, max_msg_size=MAX_MSG_BYTES)
                    break
                except (aiohttp.ClientError, OSError) as exc:
                    if delay is None or not (dropped(exc) or busy(exc, info.pid)):
                        raise
                    log.debug("the node did not answer (%s); again in %.2f s", exc, delay)
                    await asyncio.sleep(delay)
        except BaseException as exc:
            await self._session.close()
            if isinstance(exc, (aiohttp.ClientError, OSError, TimeoutError)):
                raise self._connect_error(info, exc) from None
            raise
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()

    async def events(self) -> AsyncIterator[Event]:
        """Every event the node sends, until it closes the stream."""
        assert self._ws is not None, "async with NodeStream(...) first"
        while True:
            message = await self._ws.receive()
            if message.type == aiohttp.WSMsgType.BINARY:
                log.debug("skipped a binary message from the node")
                continue
            if message.type != aiohttp.WSMsgType.TEXT:
                self.close_reason = self._describe_end(message)
                return
            event = decode(message.data)
            if event is not None:
                self.stopped = self.stopped or isinstance(event, RunStopped)
                yield event

    def _describe_end(self, message: aiohttp.WSMessage) -> str:
        if message.type == aiohttp.WSMsgType.ERROR:
            return f"error: {message.data}"
        return str(message.extra or "") or f"code {self._ws.close_code if self._ws else '?'}"

    def _connect_error(self, info: WatchInfo, exc: Exception) -> UsageError:
        path = watch_file_of(self.run_dir)
        if isinstance(exc, aiohttp.WSServerHandshakeError) and exc.status == 401:
            return UsageError(f"the program on 127.0.0.1:{info.port} refused the token in {path}: the file is "
                              "stale (its node is gone and another program has the port); start the node with swarm run")
        if isinstance(exc, aiohttp.WSServerHandshakeError):
            return UsageError(f"the node in {self.run_dir} refused the watcher ({exc.status} {exc.message}); "
                              "try again later")
        return UsageError(f"no node answers on 127.0.0.1:{info.port}: {path} is stale (node process "
                          f"{info.pid} is gone?); start one with swarm run")


def dropped(exc: BaseException) -> bool:
    """The connection was made and then closed or reset before the answer; not "nothing listens here"."""
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable: no node on that port
        return False
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionError))


def busy(exc: BaseException, pid: int) -> bool:
    """The connection timed out, or was refused, while the watch file's node process runs: too busy to accept
    yet (a flood of connections on its port fills the listen queue), not gone. Retried a few seconds; a node
    that is gone (no such process) is said so at once."""
    return isinstance(exc, (TimeoutError, aiohttp.ClientConnectorError)) and psutil.pid_exists(pid)


def decode(text: str) -> Event | None:
    """One message as an event; None (logged at debug) for one this version does not know."""
    try:
        return event_from_dict(json.loads(text))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError too
        log.debug("skipped a message from the node: %s", exc)
        return None
