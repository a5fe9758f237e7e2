"""The RSP/1 aiohttp server: app factory, routes under /rsp/v1, the server side of the hello.

Routes: GET /rsp/v1/info, /rsp/v1/peers (signed node records, core/exchange.py), /rsp/v1/sample (HTTP
fallback pull), /rsp/v1/ws, POST /rsp/v1/dialback and GET /rsp/v1/probe (reachability,
peer/io/reachability.py), and /metrics (loopback clients only; a separate bind is `metrics_app`). A
hello from another swarm is refused with bye `swarm`, one of version 1 with bye `version`, before this side
signs anything. Handlers only translate between HTTP/websocket and the node: every decision is the node
core's. No request body is ever read, so client_max_size is tiny; websocket messages are capped at 1 MiB,
uncompressed (no inflate bombs). Background tasks belong to the app (cleanup_ctx) and are cancelled on cleanup.

Output budgets (`OutputBudget`): a /sample answer (up to 1 MiB) counts its bytes as "in flight" from when
it is built until the client has taken all but the socket's small send buffer of it. Beyond 16 MiB in
flight in all, or 2 MiB for one client address, the answer is 503; one not drained within 10 s is cut
off (RST: asyncio's and the kernel's buffers are freed at once). So clients that ask and never read pin
at most ~16 MiB of answers plus 256 KiB of kernel buffer per connection, and only for 10 s; they get
nothing else from this module, which decides nothing about the protocol. Released answer bytes are
reported to net/memory.py's TRIMMER, which gives glibc's freed heap back to the OS.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
import traceback
from collections import Counter
from typing import Any, AsyncIterator, Callable, Protocol

import aiohttp
from aiohttp import web

from swarm_app import __version__
from swarm_app.net.gate import abort_transport
from swarm_app.net.memory import TRIMMER
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.messages import (
    HELLO_VERSION,
    PULL_FILTERS,
    HandshakeError,
    Hello,
    MessageError,
    OlderHello,
    ServerHandshake,
    SwarmMismatch,
    decode_frame,
    encode,
    swarm_refusal,
    version_refusal,
)
from swarm_app.peer.core.protocol import NodeCore
from swarm_app.peer.core.ratelimit import BucketMap
from swarm_app.peer.core.records import RECORD_VERSION
from swarm_app.peer.core.wire import PROTOCOL_VERSION, WS_MAX_MSG_SIZE

log = logging.getLogger(__name__)


class ServedNode(Protocol):
    """What the routes need of the node that serves them (peer/io/node.py's PeerNode): its core to ask,
    its identity for the hello, and the connection loop for an accepted websocket."""

    core: NodeCore
    identity: Identity
    config: Any
    address: str | None
    stopping: bool
    metrics: Any
    clock: Callable[[], float]
    dialback: Any
    """peer/io/reachability.py's DialBack: serves POST /dialback and GET /probe."""
    session: Any
    """The node's aiohttp ClientSession (None until it runs): dial-backs go out through it."""

    @property
    def announced(self) -> str | None: ...

    def refused(self, reason: str, where: str) -> None: ...

    @property
    def node_id(self) -> str: ...

    def background(self, app: web.Application) -> AsyncIterator[None]: ...

    def reserve_inbound(self, ip: str) -> bool: ...

    async def serve(self, ws: Any, hello: Hello, direction: str, dialed: str | None, ip: str,
                    rtt_s: float | None = None) -> None: ...


SAMPLE_BYTES_IN_FLIGHT = 16 * 1024 * 1024
"""/sample answer bytes not yet drained, all clients together: 16 answers of the largest size (1 MiB), as
many HTTP-fallback peers pulling at the same instant as a node with 64 inbound websockets would see."""
SAMPLE_BYTES_PER_IP = 2 * 1024 * 1024
"""The same per client address: two full answers (two peers behind one NAT pulling at once)."""
SAMPLE_WRITE_TIMEOUT_S = 10.0
"""An answer not drained by then is cut off: 1 MiB in 10 s is 100 KiB/s, a slow but working link."""
SAMPLE_SNDBUF = 256 * 1024
"""Kernel send buffer of a connection that gets a /sample answer (Linux books twice this). Loopback
autotuning grows it to 4 MiB, which would take a whole answer off the budget's books while it still sits
in the kernel; 256 KiB carries 1.25 MiB/s at a 200 ms round trip."""


class OutputBudget:
    """Bytes of answers in flight, in all and per client address; see the module docstring."""

    def __init__(self, total: int, per_ip: int) -> None:
        self.total, self.per_ip = total, per_ip
        self.used = 0
        self.by_ip: Counter[str] = Counter()
        self.refused = 0
        """Answers refused with 503 (the core's counters are its own: these live here)."""
        self.cut_off = 0
        """Answers aborted at the write timeout."""

    def has_room(self, ip: str, size: int) -> bool:
        """Room for `size` more bytes from `ip`; a refusal is counted."""
        if self.used + size > self.total or self.by_ip[ip] + size > self.per_ip:
            self.refused += 1
            return False
        return True

    def take(self, ip: str, size: int) -> None:
        self.used += size
        self.by_ip[ip] += size

    def give(self, ip: str, size: int) -> None:
        self.used -= size
        self.by_ip[ip] -= size
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


NODE: web.AppKey[ServedNode] = web.AppKey("rsp_node")
HTTP_LIMITS: web.AppKey[BucketMap[str]] = web.AppKey("rsp_http_limits", BucketMap)
OUTPUT: web.AppKey[OutputBudget] = web.AppKey("rsp_output", OutputBudget)
PREFIX = "/rsp/v1"
MAX_REQUEST_BYTES = 4096


def create_app(node: ServedNode) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app[NODE] = node
    app[HTTP_LIMITS] = BucketMap(node.config.http_rate, node.config.http_burst, capacity=4096)
    app[OUTPUT] = OutputBudget(SAMPLE_BYTES_IN_FLIGHT, SAMPLE_BYTES_PER_IP)
    app.router.add_get(f"{PREFIX}/info", info)
    app.router.add_get(f"{PREFIX}/peers", peers)
    app.router.add_get(f"{PREFIX}/sample", sample)
    app.router.add_get(f"{PREFIX}/ws", websocket)
    app.router.add_post(f"{PREFIX}/dialback", dialback)
    app.router.add_get(f"{PREFIX}/probe", probe)
    app.router.add_get("/metrics", metrics_loopback)
    app.cleanup_ctx.append(node.background)
    return app


def metrics_app(node: ServedNode) -> web.Application:
    """A separate app serving only /metrics, for `metrics_listen`."""
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app[NODE] = node
    app.router.add_get("/metrics", metrics)
    return app


def _limited(request: web.Request) -> bool:
    return not request.app[HTTP_LIMITS].take(request.remote or "?", time.monotonic())


async def info(request: web.Request) -> web.Response:
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    node = request.app[NODE]
    return web.json_response({
        "protocol": "RSP/1", "v": PROTOCOL_VERSION, "hello": HELLO_VERSION, "record": RECORD_VERSION,
        "swarm": node.config.swarm,
        "node": node.node_id, "key": b64url(node.identity.public_key), "listen": node.address,
        "reachable": node.core.view.reachable, "time_ms": int(node.clock() * 1000), "share": node.core.view.sharing,
        "software": f"swarm-app/{__version__}"})


async def peers(request: web.Request) -> web.Response:
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    node = request.app[NODE]
    return web.json_response(node.core.peer_list(node.clock()))


async def dialback(request: web.Request) -> web.Response:
    """POST /dialback {"node", "port", "token"}: dial the requester back at its own IP (rate limited)."""
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    node = request.app[NODE]
    return await node.dialback.serve_dialback(request, node.session)


async def probe(request: web.Request) -> web.Response:
    """GET /probe?token=..&nonce=..: this node's id and key, signed over the dialer's nonce."""
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    return await request.app[NODE].dialback.serve_probe(request)


async def sample(request: web.Request) -> web.Response:
    """GET /sample?max=N&have=AUTHOR.TS,...&heard=K.BITS&held=K.BITS&recent=K.BITS: the pull answer over
    plain HTTP."""
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    node = request.app[NODE]
    try:
        limit = int(request.query.get("max", "20"))  # the core keeps it within 1..pull_max
        have = {}
        for pair in filter(None, request.query.get("have", "").split(",")[:100]):
            author, _, ts = pair.partition(".")
            have[author[:64]] = int(ts)
        heard, held, recent = (HeardFilter.from_query(request.query.get(name, "")) for name in PULL_FILTERS)
    except ValueError:
        return web.json_response({"error": "max must be an integer; have is AUTHOR.TS,...; heard, held and recent are K.BITS "
                                  "(a filter of 64-2048 bytes, base64url)"}, status=400)
    budget, ip = request.app[OUTPUT], request.remote or "?"
    if not budget.has_room(ip, WS_MAX_MSG_SIZE):  # checked at the largest answer, before building one costs work
        return web.json_response({"error": "busy: too many answers in flight; try again later"}, status=503,
                                 headers={"Retry-After": "10"})
    body = json.dumps({"items": node.core.serve_http_sample(have, limit, node.clock(), heard, held, recent)}).encode()
    budget.take(ip, len(body))  # fits: nothing was awaited since the check, and an answer is at most 1 MiB
    try:
        return await send_bounded(request, body, budget)
    finally:
        budget.give(ip, len(body))
        TRIMMER.freed(len(body))  # glibc keeps freed answers in its heap unless asked (net/memory.py)


async def send_bounded(request: web.Request, body: bytes, budget: OutputBudget) -> web.Response:
    """Write `body` as the answer; a client that has not taken it within SAMPLE_WRITE_TIMEOUT_S is cut off."""
    response = web.Response(body=body, content_type="application/json")
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SAMPLE_SNDBUF)
        except OSError:  # not fatal: the write timeout still bounds how long the answer is held
            pass
    try:
        async with asyncio.timeout(SAMPLE_WRITE_TIMEOUT_S):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError as exc:
        budget.cut_off += 1
        log.debug("a /sample answer was not taken within %.0f s: connection from %s cut off",
                  SAMPLE_WRITE_TIMEOUT_S, request.remote)
        abort_transport(transport)
        forget_frames(exc)
    except ConnectionError as exc:  # the client left first: nothing to log (aiohttp would log a traceback)
        forget_frames(exc)
    return response  # aiohttp's own write_eof after this is a no-op, or a quiet ConnectionError when cut off


def forget_frames(exc: BaseException | None) -> None:
    """Clear the locals of the finished frames in `exc`'s tracebacks, and in those of its causes.

    A drain interrupted by a timeout or a reset leaves a cycle (the exception's traceback holds asyncio's
    waiter future, which holds the exception), and through those frames the answer's bytes: they would
    stay allocated until the cyclic GC's next full pass, which on a busy node can be minutes away (16
    answers, 13.5 MiB, were still alive 15 s after the slow readers had gone)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)  # skips a frame still running (the caller's)
        exc = exc.__cause__ or exc.__context__


def abort_websocket(ws: Any) -> None:
    """Cut a websocket's TCP connection now, server or client side (net/gate.py abort_transport): for a
    peer that stopped reading, whose close frame would wait behind everything it has not read."""
    TRIMMER.freed(abort_transport(getattr(getattr(ws, "_writer", None), "transport", None)))  # both sides keep it there


async def websocket(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    ip = request.remote or "?"
    if node.stopping or not node.reserve_inbound(ip):
        return web.json_response({"error": "busy: connection limit reached"}, status=503)
    try:
        ws = web.WebSocketResponse(max_msg_size=WS_MAX_MSG_SIZE, heartbeat=node.config.heartbeat_s,
                                   compress=False, timeout=node.config.request_timeout_s)
        await ws.prepare(request)
        done = await handshake(ws, node, ip)
        if done is not None:
            await node.serve(ws, done[0], "in", None, ip, rtt_s=done[1])
        else:
            await ws.close()
    finally:
        node.core.release_inbound(ip)
    return ws


async def handshake(ws: web.WebSocketResponse, node: ServedNode, ip: str) -> tuple[Hello, float] | None:
    """Server side of the hello: the peer's hello and the round trip of ours (seconds). None when it fails
    (counted as a "handshake" rejection) or is refused (another swarm, an older hello: `node.refused`)."""
    hs = ServerHandshake(node.identity, node.announced, node.config.swarm)
    try:
        async with asyncio.timeout(node.config.handshake_timeout_s):
            try:
                hello = await _text(ws)
                hs.check_swarm(hello)
            except OlderHello:  # not an offence: a node from before swarm names, told so before we sign
                node.refused("an older swarm-app (hello v1, before swarm names): it needs an update", ip)
                await ws.send_str(encode(version_refusal()))
                return None
            except SwarmMismatch as exc:  # not an offence either: it dialed a node of another swarm
                node.refused(str(exc), ip)
                await ws.send_str(encode(swarm_refusal(node.config.swarm)))
                return None
            if isinstance(hello, Hello) and node.core.view.is_banned(hello.node, node.clock()):
                await ws.send_str(encode({"t": "bye", "reason": "banned"}))  # before spending a signature
                return None
            await ws.send_str(encode(hs.on_client_hello(hello)))
            sent = time.perf_counter()
            proof = await _text(ws)
            return hs.on_client_proof(proof), time.perf_counter() - sent
    except (TimeoutError, MessageError, HandshakeError, ConnectionError, aiohttp.ClientError) as exc:
        log.debug("inbound hello failed: %s", exc)
        node.core.on_handshake_failed()
        return None



async def _text(ws: web.WebSocketResponse):
    msg = await ws.receive()
    if msg.type != aiohttp.WSMsgType.TEXT:
        raise MessageError("handshake", f"expected a text frame, got {msg.type.name}")
    return decode_frame(msg.data)


async def metrics_loopback(request: web.Request) -> web.Response:
    """/metrics on the RSP port answers loopback clients only (the port may face the LAN)."""
    try:
        loopback = ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return web.Response(status=403, text="metrics are served to localhost only; see --metrics-listen\n")
    return await metrics(request)


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[NODE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})
