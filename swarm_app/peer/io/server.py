"""The RSP/1 aiohttp server: app factory, routes under /rsp/v1, the server side of the hello.

Routes: GET /rsp/v1/info, /rsp/v1/peers, /rsp/v1/sample (HTTP fallback pull), /rsp/v1/ws, and
/metrics (loopback clients only; a separate bind is `metrics_app`). Handlers only translate between
HTTP/websocket and the node: every decision is the node core's. No request body is ever read, so
client_max_size is tiny; websocket messages are capped at 1 MiB, uncompressed (no inflate bombs).
Background tasks belong to the app (cleanup_ctx) and are cancelled on cleanup.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from typing import Any, AsyncIterator, Callable, Protocol

import aiohttp
from aiohttp import web

from swarm_app import __version__
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.messages import HandshakeError, Hello, MessageError, ServerHandshake, decode_frame, encode
from swarm_app.peer.core.protocol import NodeCore
from swarm_app.peer.core.ratelimit import BucketMap
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

    @property
    def node_id(self) -> str: ...

    def background(self, app: web.Application) -> AsyncIterator[None]: ...

    def reserve_inbound(self, ip: str) -> bool: ...

    async def serve(self, ws: Any, hello: Hello, direction: str, dialed: str | None, ip: str,
                    rtt_s: float | None = None) -> None: ...


NODE: web.AppKey[ServedNode] = web.AppKey("rsp_node")
HTTP_LIMITS: web.AppKey[BucketMap[str]] = web.AppKey("rsp_http_limits", BucketMap)
PREFIX = "/rsp/v1"
MAX_REQUEST_BYTES = 4096


def create_app(node: ServedNode) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app[NODE] = node
    app[HTTP_LIMITS] = BucketMap(node.config.http_rate, node.config.http_burst, capacity=4096)
    app.router.add_get(f"{PREFIX}/info", info)
    app.router.add_get(f"{PREFIX}/peers", peers)
    app.router.add_get(f"{PREFIX}/sample", sample)
    app.router.add_get(f"{PREFIX}/ws", websocket)
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
        "protocol": "RSP/1", "v": PROTOCOL_VERSION, "node": node.node_id, "key": b64url(node.identity.public_key),
        "listen": node.address, "time_ms": int(node.clock() * 1000), "share": node.config.share,
        "software": f"swarm-app/{__version__}"})


async def peers(request: web.Request) -> web.Response:
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    return web.json_response({"peers": request.app[NODE].core.peer_list()})


async def sample(request: web.Request) -> web.Response:
    """GET /sample?max=N&have=AUTHOR.TS,...: the pull answer over plain HTTP."""
    if _limited(request):
        return web.json_response({"error": "rate limited"}, status=429)
    node = request.app[NODE]
    try:
        limit = int(request.query.get("max", "20"))  # the core keeps it within 1..pull_max
        have = {}
        for pair in filter(None, request.query.get("have", "").split(",")[:100]):
            author, _, ts = pair.partition(".")
            have[author[:64]] = int(ts)
    except ValueError:
        return web.json_response({"error": "max must be an integer; have is AUTHOR.TS,..."}, status=400)
    return web.json_response({"items": node.core.serve_http_sample(have, limit, node.clock())})


async def websocket(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    ip = request.remote or "?"
    if node.stopping or not node.reserve_inbound(ip):
        return web.json_response({"error": "busy: connection limit reached"}, status=503)
    try:
        ws = web.WebSocketResponse(max_msg_size=WS_MAX_MSG_SIZE, heartbeat=node.config.heartbeat_s,
                                   compress=False, timeout=node.config.request_timeout_s)
        await ws.prepare(request)
        done = await handshake(ws, node)
        if done is not None:
            await node.serve(ws, done[0], "in", None, ip, rtt_s=done[1])
        else:
            await ws.close()
    finally:
        node.core.release_inbound(ip)
    return ws


async def handshake(ws: web.WebSocketResponse, node: ServedNode) -> tuple[Hello, float] | None:
    """Server side of the hello: the peer's hello and the round trip of ours (seconds). None (counted
    as a "handshake" rejection) when it fails."""
    hs = ServerHandshake(node.identity, node.address)
    try:
        async with asyncio.timeout(node.config.handshake_timeout_s):
            hello = await _text(ws)
            if isinstance(hello, Hello) and node.core.peers.is_banned(hello.node, node.clock()):
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
