"""The node's outbound side on aiohttp: what it writes to its websockets, and the connections and HTTP calls
it opens. It carries out the core's `Send`, `Close`, `Dial`, `FetchPeers` and `HttpPull` actions (most of
them chosen by core/outbound.py and core/pulls.py), as core/reachability.py's verdicts are carried out by io/reachability.py.

- `SendQueues`: one bounded send queue and writer task per established websocket, inbound or outbound.
  A peer that stops reading is cut off (RST) and its queue freed, so a slow reader cannot grow memory.
- `Dialer`: dials an address and hands the connection to the node's `serve`, asks a peer for its peer
  list, pulls rollouts over HTTP; each outcome goes back to the core.

Neither decides anything: the calls are client.py's, the choices the core's.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp

from swarm_app.peer.core.actions import Action, HttpPull
from swarm_app.peer.core.addressbook import parse_address
from swarm_app.peer.core.messages import HandshakeError, MessageError, SwarmMismatch, encode
from swarm_app.peer.core.protocol import NodeCore
from swarm_app.peer.io import client, server

log = logging.getLogger(__name__)

SEND_QUEUE = 256
"""Messages waiting for one peer; beyond this they are dropped (a slow peer must not grow memory)."""
SEND_QUEUE_BYTES = 8 * 1024 * 1024
"""Bytes waiting for one peer: a peer that asks for samples and never reads gets nothing more."""
SEND_TOTAL_BYTES = 32 * 1024 * 1024
"""Bytes waiting for all peers together: beyond it the link with the most waiting is dropped. Without it 72
links (64 in, 8 out) of peers that read just fast enough to pass the write timeout could hold 8 MiB each."""


@dataclass
class Link:
    """One established websocket: its send queue (SEND_QUEUE messages, SEND_QUEUE_BYTES at most) and the
    writer task that empties it, each send within request_timeout_s. A peer whose queue overflows, or
    that takes longer than that to accept a message, has stopped reading: its connection is cut off
    (RST), its queue emptied, so that nothing it did not read stays in memory."""

    ws: Any
    queue: asyncio.Queue
    writer: asyncio.Task | None = None
    queued_bytes: int = 0
    dropped: bool = False
    """Cut off for not reading: no bye, no close handshake (they would wait behind what it did not read)."""


class SendQueues:
    """The send queue and writer of every established websocket, by the core's connection number."""

    def __init__(self, core: NodeCore, write_timeout_s: float) -> None:
        self.core, self.write_timeout_s = core, write_timeout_s
        self.links: dict[int, Link] = {}

    def open(self, conn: int, ws: Any) -> None:
        """A queue and its writer for a connection just established (on the loop)."""
        link = self.links[conn] = Link(ws, asyncio.Queue(maxsize=SEND_QUEUE))
        link.writer = asyncio.get_running_loop().create_task(self._writer(link))

    def remove(self, conn: int) -> asyncio.Task:
        """The connection ended: forget it and cancel its writer (whose finally frees what is left), returned
        to be awaited."""
        link = self.links.pop(conn)
        link.writer.cancel()
        return link.writer

    async def close_all(self, reason: str, wait_s: float) -> None:
        """Say `reason` to every peer and close each link, waiting up to `wait_s` for the writers."""
        for conn in list(self.links):
            self.close(conn, reason)
        writers = [link.writer for link in self.links.values() if link.writer is not None]
        if writers:
            await asyncio.wait(writers, timeout=wait_s)

    def send(self, conn: int, message: dict) -> None:
        link = self.links.get(conn)
        if link is None or link.dropped:
            return
        text = encode(message)
        if link.queued_bytes + len(text) > SEND_QUEUE_BYTES or link.queue.full():
            slowest = link  # it has stopped reading: drop the peer, not just this message
        elif sum(other.queued_bytes for other in self.links.values()) + len(text) > SEND_TOTAL_BYTES:
            slowest = max(self.links.values(), key=lambda other: other.queued_bytes)
        else:
            link.queue.put_nowait(text)
            link.queued_bytes += len(text)
            return
        self._drop(slowest)
        if slowest is not link:  # room was made for this message (at most one drop per link: this ends)
            self.send(conn, message)

    def _drop(self, slowest: Link) -> None:
        """Cut off a peer that stopped reading: its queue is freed now, its connection reset by its writer."""
        self.core.count("send_dropped")
        log.info("a peer stopped reading (%d messages, %d bytes waiting): disconnected", slowest.queue.qsize(),
                 slowest.queued_bytes)
        slowest.dropped = True
        while not slowest.queue.empty():  # freed now; the writer's finally cuts the connection
            slowest.queue.get_nowait()
        server.TRIMMER.freed(slowest.queued_bytes)  # and given back to the OS soon (net/memory.py)
        slowest.queued_bytes = 0
        if slowest.writer is not None:
            slowest.writer.cancel()

    def close(self, conn: int, reason: str) -> None:
        link = self.links.get(conn)
        if link is None:
            return
        try:
            if reason:
                link.queue.put_nowait(encode({"t": "bye", "reason": reason}))
            link.queue.put_nowait(None)
        except asyncio.QueueFull:  # no room for a bye: it is not reading anyway
            link.dropped = True
            if link.writer is not None:
                link.writer.cancel()  # its finally empties the queue and cuts the connection

    async def _writer(self, link: Link) -> None:
        polite = False
        try:
            while (text := await link.queue.get()) is not None:
                link.queued_bytes -= len(text)
                async with asyncio.timeout(self.write_timeout_s):  # a peer that stops reading is dropped
                    await link.ws.send_str(text)
                self.core.count("ws_bytes_out", len(text.encode("utf-8", "surrogatepass")))
            polite = not link.dropped  # a close asked for (bye sent, or none to send): the close handshake
        except (ConnectionError, TimeoutError, aiohttp.ClientError) as exc:
            log.debug("send failed: %r", exc)
            server.forget_frames(exc)  # else a cycle through asyncio's waiter keeps the unsent frame (<= 1 MiB) alive
        finally:
            while not link.queue.empty():  # what it will never be sent is freed now, not with the link
                link.queue.get_nowait()
            link.queued_bytes = 0
            try:
                if polite:  # aiohttp's close waits for the peer's close frame, unbounded while it drains ours
                    async with asyncio.timeout(self.write_timeout_s):
                        await link.ws.close()
            except (ConnectionError, TimeoutError, aiohttp.ClientError):
                polite = False
            except BaseException:  # cancelled mid-close: aiohttp would leave a graceful close flushing forever
                polite = False
                raise
            finally:
                if not polite:  # RST: asyncio's buffer and the kernel's send queue are freed at once
                    server.abort_websocket(link.ws)


class Dialer:
    """Carries out `Dial`, `FetchPeers` and `HttpPull` through the node's ClientSession (run each as a task);
    `execute` carries out the actions the core answers with."""

    def __init__(self, node: server.ServedNode, execute: Callable[[list[Action]], None]) -> None:
        self.node, self.execute = node, execute

    @property
    def core(self) -> NodeCore:
        return self.node.core

    async def dial(self, addr: str) -> None:
        """Dial `addr`, run the hello, then serve the connection until it closes; a failure is the core's to note."""
        node, clock = self.node, self.node.clock
        config = node.config
        assert node.session is not None
        try:
            ws, hello, rtt_s = await client.dial(node.session, addr, node.identity, node.announced,
                                                 config.handshake_timeout_s, config.heartbeat_s, config.swarm)
        except client.Refused as exc:  # a closed door ("banned", another swarm, a newer version): back off
            self._note_refusal(addr, exc)
            self.core.count("dial_failures")
            self.execute(self.core.on_dial_failed(addr, clock()))
            log.debug("%s", exc)
            return
        except SwarmMismatch as exc:
            node.refused(str(exc), addr)
            self.core.count("dial_failures")
            self.execute(self.core.on_dial_failed(addr, clock()))
            return
        except client.PeerUnavailable as exc:
            self.core.count("dial_failures")
            self.execute(self.core.on_dial_failed(addr, clock(), exc.http_only, exc.busy))
            log.debug("%s", exc)
            return
        except (HandshakeError, MessageError) as exc:
            self.core.on_handshake_failed()
            self.core.on_dial_failed(addr, clock())
            log.info("peer at %s failed the hello: %s", addr, exc)
            return
        await node.serve(ws, hello, "out", addr, parse_address(addr)[0], rtt_s=rtt_s)

    def _note_refusal(self, addr: str, exc: client.Refused) -> None:
        swarm = self.node.config.swarm
        if exc.reason == "swarm":
            self.node.refused(f"swarm {exc.swarm!r} != {swarm!r}: it is in another swarm (join it with "
                              f"--swarm {exc.swarm}, or drop the address)", addr)
        elif exc.reason == "version":
            self.node.refused("it refused our hello as an unknown version: it runs a newer swarm-app; update "
                              "(re-run install.sh / install.ps1, or pip install -U swarm-app)", addr)

    async def fetch_peers(self, addr: str) -> None:
        assert self.node.session is not None
        try:
            answer = await client.fetch_peers(self.node.session, addr, self.node.config.request_timeout_s)
        except client.PeerUnavailable as exc:
            log.debug("peer exchange with %s failed: %s", addr, exc)
            return
        self.core.on_peer_list(answer, self.node.clock(), addr)

    async def http_pull(self, action: HttpPull) -> None:
        node = self.node
        assert node.session is not None
        try:
            items = await client.fetch_sample(node.session, action.addr, action.have, action.max,
                                              node.config.request_timeout_s, action.heard, action.held,
                                              action.recent)
        except client.PeerUnavailable as exc:
            log.debug("HTTP pull from %s failed: %s", action.addr, exc)
            self.core.on_dial_failed(action.addr, node.clock())
            return
        self.execute(self.core.on_http_sample(action.addr, items, node.clock()))

