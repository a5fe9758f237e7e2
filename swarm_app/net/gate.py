"""The door of this process's HTTP servers: which TCP connections aiohttp gets to read, and how it logs bad input.

aiohttp's server accepts every connection and keeps an idle or slow-header one for an hour
(keepalive_timeout 3,630 s): ~1,100 of them from one IP took a 1,024-descriptor process down with
EMFILE, through the peer port and through the `swarm watch` port alike. This module owns the caps that
prevent that, for both (swarm_app/peer/io/node.py and swarm_app/watch/endpoint.py use it):
- `ConnectionGate`: open server connections per client IP and in total. A connection over a cap is
  closed in `connection_made`, before aiohttp builds a handler or reads a byte. A slice of the total
  (`NEWCOMER_SHARE`) is kept for addresses that have opened few connections lately, so addresses that
  churn slow connections cannot keep a fresh one out; what "lately" remembers is a capped LRU.
  A site may also let a newcomer evict the oldest connection that has not proven itself (the watch
  port: a connection that has not sent the endpoint's token), instead of being refused.
- `GatedSite`: a TCPSite whose accepted connections go through the gate first, with a short listen
  backlog (every accepted socket holds a descriptor until the gate has looked at it).
- `descriptor_budget()`: the peer servers' total cap from the process's soft RLIMIT_NOFILE, after the
  reserve and the watch endpoint's cap (`WATCH_CONNECTIONS`).
- `abort_transport()`: close a connection now, unsent bytes discarded (RST), so that asyncio's and the
  kernel's send buffers are freed at once rather than when a slow reader gets round to reading.
- `QuietParseErrors`: the logger handed to aiohttp's request handlers; a malformed request is one
  debug line, while a bug in a handler keeps its traceback.
- `gated_runner()`: the AppRunner for it, whose keepalive_timeout (armed when the connection opens,
  not reset by partial data) is the header and idle timeout.
Nothing here knows a protocol or reads a request beyond looking for a site's proof in its first bytes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import struct
import sys
import time
from collections import Counter, OrderedDict
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
"""Kept out of the servers' share: training's files (model shards, checkpoints, metrics.jsonl), outbound
peers (8 websockets and their HTTP side calls), the event loop, logging, and the accept backlog."""
WATCH_CONNECTIONS = 32
"""Total cap of the `swarm watch` endpoint (16 watchers, swarm_app/watch/endpoint.py MAX_WATCHERS, and as
many again for connections still sending their request), taken out of the same descriptor budget."""
FALLBACK_BUDGET = 256
"""Server connections where the descriptor limit cannot be read (Windows) or is unlimited."""
LISTEN_BACKLOG = 16
"""Kernel accept queue. asyncio accepts up to this many sockets per loop pass before the gate sees
them; a few passes in flight under a flood then hold ~4 x 16 descriptors, not 4 x 128."""
NEWCOMER_SHARE = 0.15
"""Slice of a gate's total kept for newcomers: 64 of 432 connections at a 1,024-descriptor limit, 7 of 48
at 256. Enough for a fresh peer's hello and side calls while 70 churning addresses hold the rest."""
NEWCOMER_CONNECTIONS = 16
"""An address stays a newcomer for its first 16 connections in `RECENT_S`, refused ones included (a
joining peer opens ~3: its websocket, /info, /peers; an HTTP-only client pulling every 5 s opens 60 in
5 minutes and is no newcomer), so a fresh address is not locked out by its own first requests, while
an address churning slow connections or retrying in a loop spends that in seconds."""
RECENT_S = 300.0
"""How long an address's connections count against its newcomer status: "lately" is 5 minutes."""
RECENT_MEMORY = 4096
"""Addresses remembered for that (an LRU, ~150 bytes each: ~0.6 MB at most). An attacker with more
addresses than this can push an address out, which then looks new again: no worse than no reserve."""
PROOF_BYTES = 4096
"""How much of a connection's first bytes an evicting site looks at for its proof (a request head)."""


def soft_descriptor_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None where there is none (Windows) or it is unlimited."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def descriptor_budget(soft_limit: int | None, others: int = WATCH_CONNECTIONS) -> int:
    """The peer servers' connections allowed under a soft descriptor limit: half of what the reserve and
    `others` (the watch endpoint's cap) leave (256 -> 48, 1,024 -> 432), at least 16. So peer cap + watch
    cap + reserve stay below the limit, with the other half for outbound connections and files."""
    if soft_limit is None:
        return FALLBACK_BUDGET
    return max(16, (soft_limit - RESERVED_DESCRIPTORS - others) // 2)


def abort_transport(transport: asyncio.BaseTransport | None) -> int:
    """Close a connection at once: SO_LINGER 0 makes the close an RST that drops the kernel's unsent
    bytes (a plain close leaves them queued, in an orphaned socket, for as long as the peer keeps its
    window shut), and abort() drops asyncio's buffer. Returns the bytes dropped from that buffer."""
    if transport is None:
        return 0
    buffered = transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0
    sock = transport.get_extra_info("socket")  # still there while a graceful close flushes its buffer
    if sock is not None:
        linger = struct.pack("HH" if sys.platform == "win32" else "ii", 1, 0)  # struct linger {on, 0 s}
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        except (OSError, ValueError):  # not a TCP socket, or already closed: abort() alone is enough
            pass
    transport.abort()
    return buffered


class ConnectionGate:
    """Counts open server connections; `admit` refuses one over `per_ip` for its IP or over `total`.

    Of `total`, `reserved` slots are for newcomers only (addresses with fewer than NEWCOMER_CONNECTIONS
    connections in the last RECENT_S). Connections registered as unproven (`admit(ip, door)` from an
    evicting site) may be evicted, oldest first, to make room for a new one instead of refusing it."""

    def __init__(self, per_ip: int, total: int, *, newcomer_share: float = NEWCOMER_SHARE,
                 clock: Callable[[], float] = time.monotonic, memory: int = RECENT_MEMORY) -> None:
        self.per_ip, self.total = per_ip, total
        self.reserved = int(total * newcomer_share)
        """Slots only newcomers may take (0 for a gate of fewer than 7)."""
        self.clock, self.memory = clock, memory
        self.by_ip: Counter[str] = Counter()
        self.open = 0
        self.peak = 0
        """Most connections open at once."""
        self.refused: Counter[str] = Counter()
        """Refusals by cap: "per_ip" or "total" (a known address refused from the newcomers' slots counts as
        "total": the part it may use is full)."""
        self.evicted = 0
        """Unproven connections closed to make room for a new one."""
        self.newcomers_admitted = 0
        """Connections admitted into the newcomers' slots."""
        self._recent: OrderedDict[str, list[float]] = OrderedDict()
        """ip -> [start of its window, connections in it], least recently admitted first."""
        self._unproven: dict[Any, str] = {}
        """Evictable connections -> their IP, oldest first (dicts keep insertion order)."""

    def admit(self, ip: str, door: Any = None) -> bool:
        """Count one connection of `ip` in, or refuse it. `door`, when given, is evictable (it has an
        `evict()` that closes it) until `prove(door)`."""
        now = self.clock()
        newcomer = self.is_newcomer(ip, now)
        self._remember(ip, now)  # refused attempts count too: an address retrying in a loop is no newcomer
        limit = self.total if newcomer else self.total - self.reserved
        full, ip_full = self.open >= limit, self.by_ip[ip] >= self.per_ip
        if full or ip_full:
            one_frees = self.open - 1 < limit or not full  # evicting one makes room (one of its own frees both caps)
            if not (one_frees and self._evict(ip if ip_full else None)):
                self.refused["total" if full else "per_ip"] += 1
                return False
        if self.open >= self.total - self.reserved:
            self.newcomers_admitted += 1
        self.by_ip[ip] += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        if door is not None:
            self._unproven[door] = ip
        return True

    def prove(self, door: Any) -> None:
        """`door` showed it is wanted (a watcher's token): it is no longer evicted for a newcomer."""
        self._unproven.pop(door, None)

    def release(self, ip: str, door: Any = None) -> None:
        if door is not None:
            self._unproven.pop(door, None)
        self.open -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]

    def is_newcomer(self, ip: str, now: float | None = None) -> bool:
        """Fewer than NEWCOMER_CONNECTIONS connections (admitted or not) from `ip` in the last RECENT_S."""
        window = self._recent.get(ip)
        now = self.clock() if now is None else now
        return window is None or now - window[0] > RECENT_S or window[1] < NEWCOMER_CONNECTIONS

    def _remember(self, ip: str, now: float) -> None:
        window = self._recent.get(ip)
        if window is None or now - window[0] > RECENT_S:
            self._recent[ip] = [now, 1]
        else:
            window[1] += 1
        self._recent.move_to_end(ip)
        while len(self._recent) > self.memory:
            self._recent.popitem(last=False)

    def _evict(self, ip: str | None) -> bool:
        """Close the oldest unproven connection (of `ip`, if given); False when there is none."""
        victim = next((door for door, owner in self._unproven.items() if ip is None or owner == ip), None)
        if victim is None:
            return False
        self.release(self._unproven[victim], victim)
        self.evicted += 1
        victim.evict()
        return True


class _Door(asyncio.Protocol):
    """First protocol of an accepted connection: passes everything to aiohttp's handler, or closes the
    connection at once when the gate refuses it (no handler is built, nothing is read).

    With `proof` (a test of the first bytes), the connection stays evictable until they pass it."""

    def __init__(self, gate: ConnectionGate, make_handler: Callable[[], asyncio.Protocol],
                 proof: Callable[[bytes], bool] | None = None) -> None:
        self.gate, self.make_handler, self.proof = gate, make_handler, proof
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.ip = "?"
        self.head: bytearray | None = bytearray() if proof is not None else None
        """What the connection sent so far, while it has not proven itself (PROOF_BYTES at most)."""
        self.evicted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self.transport = transport
        if not self.gate.admit(self.ip, self if self.proof is not None else None):
            log.debug("connection from %s refused: %d open from it, %d in all", self.ip,
                      self.gate.by_ip[self.ip], self.gate.open)
            transport.abort()
            return
        self.inner = self.make_handler()
        self.inner.connection_made(transport)

    def evict(self) -> None:
        """The gate gave this connection's slot to a newer one: close it now (counted out already)."""
        self.evicted = True
        log.debug("unproven connection from %s evicted for a newer one", self.ip)
        abort_transport(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.head is not None and not self.evicted:
            self.head += data[:PROOF_BYTES - len(self.head)]
            assert self.proof is not None
            if self.proof(bytes(self.head)):
                self.head = None
                self.gate.prove(self)
            elif len(self.head) >= PROOF_BYTES:
                self.head = None  # no proof in the first 4 KiB: it stays evictable for good
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
            if not self.evicted:
                self.gate.release(self.ip, self)
            inner.connection_lost(exc)


def gated_runner(app: web.Application, gate: ConnectionGate, header_timeout_s: float,
                 on_malformed: Callable[[], None]) -> web.AppRunner:
    """An AppRunner for a GatedSite: keepalive_timeout (armed when a connection opens, not reset by partial
    data) doubles as the header timeout; lingering on an unread request body is capped the same way."""
    quiet = QuietParseErrors(logging.getLogger("aiohttp.server"), on_malformed)
    return web.AppRunner(app, access_log=None, shutdown_timeout=2.0, logger=quiet,
                         keepalive_timeout=header_timeout_s, lingering_time=header_timeout_s)


class GatedSite(web.TCPSite):
    """`web.TCPSite` whose connections pass `gate` before the runner's aiohttp server sees them.

    With `proof`, a full gate evicts the oldest connection whose first bytes have not passed it, rather
    than refusing the new one: a slow-header flood then cannot keep out a client that sends its request
    at once (a local `swarm watch`, with its token)."""

    __slots__ = ("_gate", "_proof")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: ConnectionGate,
                 proof: Callable[[bytes], bool] | None = None) -> None:
        super().__init__(runner, host, port, backlog=LISTEN_BACKLOG)
        self._gate, self._proof = gate, proof

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner (TCPSite.start, minus the bind)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            functools.partial(_Door, self._gate, server, self._proof), self._host, self._port, backlog=self._backlog,
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
