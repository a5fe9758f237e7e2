"""Outgoing aiohttp calls to peers: dial a websocket and run the client side of the hello, and the
HTTP GETs (/info, /peers, /sample). One shared ClientSession (owned by the node) is passed in.

Every call has an explicit timeout and reads at most one frame's worth of bytes (a dial-back's answers
far less: peer/io/reachability.py). Failures surface as
`PeerUnavailable` (and `HandshakeError`/`MessageError` for a peer that answers wrongly) for the node
to record; nothing here retries, scores or logs above debug.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import aiohttp

from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import PULL_FILTERS, Bye, ClientHandshake, Hello, decode_frame, encode
from swarm_app.peer.core.wire import MAX_FRAME_BYTES, WS_MAX_MSG_SIZE

log = logging.getLogger(__name__)

PREFIX = "/rsp/v1"
MAX_HAVE_IN_QUERY = 100
"""Authors listed in a GET /sample query (keeps the request line under aiohttp's 8 KiB)."""


class PeerUnavailable(Exception):
    """A peer that could not be reached or answered with an HTTP error. `http_only`: it answered HTTP
    but refused the websocket upgrade, so HTTP fallback pulls may still work. `busy`: it is at its
    connection caps (HTTP 503), but its peer list is still worth asking for."""

    def __init__(self, message: str, http_only: bool = False, busy: bool = False) -> None:
        super().__init__(message)
        self.http_only, self.busy = http_only, busy


class Refused(PeerUnavailable):
    """The peer answered our hello with a bye: `reason` ("banned", "swarm", "version"), and with "swarm"
    the swarm it is in."""

    def __init__(self, addr: str, bye: Bye) -> None:
        detail = f"it is in swarm {bye.swarm!r}" if bye.reason == "swarm" else bye.reason
        super().__init__(f"{addr} refused the connection: {detail}")
        self.reason, self.swarm = bye.reason, bye.swarm


def base_url(addr: str) -> str:
    return f"http://{format_address(*parse_address(addr))}{PREFIX}"


async def dial(session: aiohttp.ClientSession, addr: str, identity: Identity, listen: str | None,
               timeout_s: float, heartbeat_s: float, swarm: str) -> tuple[aiohttp.ClientWebSocketResponse, Hello, float]:
    """Open a websocket to `addr` and complete the hello in `swarm`; the caller owns the returned socket. The
    float is the hello's round trip in seconds (our hello out, theirs back): the latency the views show.
    `Refused` when the peer answers with a bye, `SwarmMismatch` when its hello names another swarm."""
    handshake = ClientHandshake(identity, listen, swarm)
    try:
        async with asyncio.timeout(timeout_s):
            ws = await session.ws_connect(f"{base_url(addr)}/ws", max_msg_size=WS_MAX_MSG_SIZE, heartbeat=heartbeat_s,
                                          timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=timeout_s))
            try:
                await ws.send_str(encode(handshake.start()))
                sent = time.perf_counter()
                reply = await ws.receive()
                rtt_s = time.perf_counter() - sent
                if reply.type != aiohttp.WSMsgType.TEXT:
                    raise PeerUnavailable(f"{addr} closed during the hello ({reply.type.name})")
                answer = decode_frame(reply.data)
                if isinstance(answer, Bye):  # e.g. "banned", "swarm": not a broken peer, just a closed door
                    raise Refused(addr, answer)
                await ws.send_str(encode(handshake.on_server_hello(answer)))
            except BaseException:
                await ws.close()
                raise
    except aiohttp.WSServerHandshakeError as exc:
        raise PeerUnavailable(f"{addr} refused the websocket (HTTP {exc.status})",
                              http_only=exc.status in (400, 404, 405, 426), busy=exc.status == 503) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise PeerUnavailable(f"{addr} unreachable: {exc.__class__.__name__}") from None
    assert handshake.peer is not None
    return ws, handshake.peer, rtt_s


async def get_json(session: aiohttp.ClientSession, url: str, timeout_s: float, params: Any = None,
                   limit: int = MAX_FRAME_BYTES) -> Any:
    """GET a JSON document of at most `limit` bytes. PeerUnavailable on any failure."""
    return await _request_json(session, "GET", url, timeout_s, limit, params=params)


async def post_json(session: aiohttp.ClientSession, url: str, body: Any, timeout_s: float,
                    limit: int = MAX_FRAME_BYTES) -> Any:
    """POST a JSON body, read a JSON answer of at most `limit` bytes. PeerUnavailable on any failure."""
    return await _request_json(session, "POST", url, timeout_s, limit, json=body)


async def _request_json(session: aiohttp.ClientSession, method: str, url: str, timeout_s: float, limit: int,
                        **kwargs: Any) -> Any:
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False,
                                   **kwargs) as resp:
            if resp.status != 200:
                raise PeerUnavailable(f"{url}: HTTP {resp.status}", busy=resp.status in (429, 503))
            body = await read_limited(resp, limit)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise PeerUnavailable(f"{url}: {exc.__class__.__name__}") from None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise PeerUnavailable(f"{url}: not JSON") from None


async def read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    if resp.content_length is not None and resp.content_length > limit:
        raise PeerUnavailable(f"{resp.url}: body of {resp.content_length} bytes is over the limit")
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PeerUnavailable(f"{resp.url}: body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch_peers(session: aiohttp.ClientSession, addr: str, timeout_s: float) -> dict[str, Any]:
    """The GET /peers answer as it came ({} when it is not an object): the core checks its records."""
    data = await get_json(session, f"{base_url(addr)}/peers", timeout_s)
    return data if isinstance(data, dict) else {}


async def fetch_sample(session: aiohttp.ClientSession, addr: str, have: dict[str, int], limit: int,
                       timeout_s: float, heard: HeardFilter | None = None,
                       held: HeardFilter | None = None, recent: HeardFilter | None = None) -> list[Any]:
    """HTTP fallback pull. `have` is cut to the most recently heard MAX_HAVE_IN_QUERY authors; `heard`,
    `held` and `recent` go as K.BITS."""
    newest = sorted(have.items(), key=lambda kv: kv[1], reverse=True)[:MAX_HAVE_IN_QUERY]
    params = {"max": str(limit), "have": ",".join(f"{a}.{ts}" for a, ts in newest)}
    params.update({name: bloom.to_query() for name, bloom in zip(PULL_FILTERS, (heard, held, recent)) if bloom is not None})
    data = await get_json(session, f"{base_url(addr)}/sample", timeout_s, params)
    items = data.get("items", []) if isinstance(data, dict) else []
    return items if isinstance(items, list) else []


async def bye_and_close(ws: Any, reason: str, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await ws.send_str(encode({"t": "bye", "reason": reason}))
    except (ConnectionError, TimeoutError, aiohttp.ClientError) as exc:
        log.debug("could not say bye (%s): the peer left first", exc.__class__.__name__)
    await ws.close()
