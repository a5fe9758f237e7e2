"""The door of the RSP servers: which TCP connections aiohttp gets to read, and how it logs bad input.

aiohttp's server accepts every connection and keeps an idle or slow-header one for an hour
(keepalive_timeout 3,630 s): ~1,100 of them from one IP took a 1,024-descriptor process down with
EMFILE. This module owns the caps that prevent that:
- `ConnectionGate`: open server connections per client IP and in total. A connection over a cap is
  closed in `connection_made`, before aiohttp builds a handler or reads a byte.
- `GatedSite`: a TCPSite whose accepted connections go through the gate first, with a short listen
  backlog (every accepted socket holds a descriptor until the gate has looked at it).
- `descriptor_budget()`: the total cap from the process's soft RLIMIT_NOFILE.
- `QuietParseErrors`: the logger handed to aiohttp's request handlers; a malformed request is one
  debug line, while a bug in a handler keeps its traceback.
- `gated_runner()`: the AppRunner for it, whose keepalive_timeout (armed when the connection opens,
  not reset by partial data) is the header and idle timeout.
Nothing here knows the protocol.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from typing import Any, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

try:
    import resource
except ImportError:  # Windows: no RLIMIT_NOFILE; sockets there are not bounded by a descriptor table
    resource = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

RESERVED_DESCRIPTORS = 128
"""Kept out of the server's share: training's files (model shards, checkpoints, metrics.jsonl), outbound
peers (8 websockets and their HTTP side calls), the event loop, logging, and the accept backlog."""
FALLBACK_BUDGET = 256
"""Server connections where the descriptor limit cannot be read (Windows) or is unlimited."""
LISTEN_BACKLOG = 16
"""Kernel accept queue. asyncio accepts up to this many sockets per loop pass before the gate sees
them; a few passes in flight under a flood then hold ~4 x 16 descriptors, not 4 x 128."""


def soft_descriptor_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None where there is none (Windows) or it is unlimited."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def descriptor_budget(soft_limit: int | None) -> int:
    """Server connections allowed under a soft descriptor limit: half of what the reserve leaves
    (256 -> 64, 1,024 -> 448), at least 16."""
    if soft_limit is None:
        return FALLBACK_BUDGET
    return max(16, (soft_limit - RESERVED_DESCRIPTORS) // 2)


class ConnectionGate:
    """Counts open server connections; `admit` refuses one over `per_ip` for its IP or over `total`."""

    def __init__(self, per_ip: int, total: int) -> None:
        self.per_ip, self.total = per_ip, total
        self.by_ip: Counter[str] = Counter()
        self.open = 0
        self.peak = 0
        """Most connections open at once."""
        self.refused: Counter[str] = Counter()
        """Refusals by cap: "per_ip" or "total"."""

    def admit(self, ip: str) -> bool:
        if self.open >= self.total:
            self.refused["total"] += 1
            return False
        if self.by_ip[ip] >= self.per_ip:
            self.refused["per_ip"] += 1
            return False
        self.by_ip[ip] += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        return True

    def release(self, ip: str) -> None:
        self.open -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


class _Door(asyncio.Protocol):
    """First protocol of an accepted connection: passes everything to aiohttp's handler, or closes the
    connection at once when the gate refuses it (no handler is built, nothing is read)."""

    def __init__(self, gate: ConnectionGate, make_handler: Callable[[], asyncio.Protocol]) -> None:
        self.gate, self.make_handler = gate, make_handler
        self.inner: asyncio.Protocol | None = None
        self.ip = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self.gate.admit(self.ip):
            log.debug("connection from %s refused: %d open from it, %d in all", self.ip,
                      self.gate.by_ip[self.ip], self.gate.open)
            transport.abort()
            return
        self.inner = self.make_handler()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            inner, self.inner = self.inner, None
            self.gate.release(self.ip)
            inner.connection_lost(exc)


def gated_runner(app: web.Application, gate: ConnectionGate, header_timeout_s: float,
                 on_malformed: Callable[[], None]) -> web.AppRunner:
    """An AppRunner for a GatedSite: keepalive_timeout (armed when a connection opens, not reset by partial
    data) doubles as the header timeout; lingering on an unread request body is capped the same way."""
    quiet = QuietParseErrors(logging.getLogger("aiohttp.server"), on_malformed)
    return web.AppRunner(app, access_log=None, shutdown_timeout=2.0, logger=quiet,
                         keepalive_timeout=header_timeout_s, lingering_time=header_timeout_s)


class GatedSite(web.TCPSite):
    """`web.TCPSite` whose connections pass `gate` before the runner's aiohttp server sees them."""

    __slots__ = ("_gate",)

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: ConnectionGate) -> None:
        super().__init__(runner, host, port, backlog=LISTEN_BACKLOG)
        self._gate = gate

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner (TCPSite.start, minus the bind)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            functools.partial(_Door, self._gate, server), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def is_malformed_request(exc: BaseException | None) -> bool:
    """A client's fault: an unparsable request line, header or body (aiohttp answers 400 itself)."""
    while exc is not None:
        if isinstance(exc, (HttpProcessingError, RequestPayloadError)):
            return True
        exc = exc.__cause__
    return False


class QuietParseErrors(logging.LoggerAdapter):
    """aiohttp's server logger, minus the tracebacks of malformed requests (BadStatusLine, LineTooLong,
    InvalidHeader...; aiohttp logs them at error level, or debug with a traceback for a bad method):
    each becomes one debug line, and `on_malformed` counts it. Anything else passes unchanged."""

    def __init__(self, logger: logging.Logger, on_malformed: Callable[[], None]) -> None:
        super().__init__(logger, {})
        self.on_malformed = on_malformed

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, BaseException) and is_malformed_request(exc):
            self.on_malformed()
            self.logger.debug("malformed HTTP request refused (%s)", exc.__class__.__name__)
            return
        super().log(level, msg, *args, **kwargs)
