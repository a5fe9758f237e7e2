"""The attacker of the eclipse tests (test_eclipse.py), as one who read docs/protocol.md would build it with
the project's own hello, probe and record code.

- `Hostile`: one attacker address. Its server completes the hello, answers every pull with nothing, answers
  /rsp/v1/peers with what `listing` gives (signed records, and the same addresses as unsigned `peers`
  entries marked verified) and answers dial-back probes, so that it passes as reachable. `besiege(victim)`
  adds a second key that says hello to the victim from the same address announcing that server, keeps the
  connection open (again a second after any drop) and asks the victim to dial the server back until it has.
- `hostile_crowd`: HOSTILE of them, each on its own /24 (127.66.i.1), each listing 32 of the others.
- `DeadAddresses`: listeners that answer every connection with a 502: addresses where no node answers.
Loopback only; nothing here is multicast or leaves 127.0.0.0/8.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import aiohttp
from aiohttp import web

from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import (
    ClientHandshake,
    HandshakeError,
    MessageError,
    Pull,
    ServerHandshake,
    decode_frame,
    encode,
)
from swarm_app.peer.core.reachability import new_token, probe_answer
from swarm_app.peer.core.records import MAX_ADDRS, MAX_RECORDS, NodeRecord, sign_record
from swarm_app.peer.core.wire import WS_MAX_MSG_SIZE

SWARM = "easy"
PREFIX = "/rsp/v1"
HOSTILE = 60


def now_ms() -> int:
    return int(time.time() * 1000)


async def next_frame(ws: Any) -> Any:
    msg = await ws.receive(timeout=5)
    if msg.type != aiohttp.WSMsgType.TEXT:
        raise HandshakeError(f"closed during the hello ({msg.type.name})")
    return decode_frame(msg.data)


async def answer_pulls_with_nothing(ws: Any) -> None:
    """Stay connected, push nothing, answer every pull with an empty sample."""
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            continue
        try:
            frame = decode_frame(msg.data)
        except MessageError:
            continue
        if isinstance(frame, Pull):
            await ws.send_str(encode({"t": "sample", "re": frame.id, "items": []}))


class Hostile:
    """One attacker address: its server (key `server`) and, for the eclipse, a door-knocker (key `door`)."""

    def __init__(self, host: str, listing: Callable[[Hostile], dict[str, list[Any]]], swarm: str = SWARM) -> None:
        self.host, self.listing, self.swarm = host, listing, swarm
        self.server, self.door = Identity.generate(), Identity.generate()
        self.addr = ""
        self.record: NodeRecord | None = None
        self.dialed_back = False
        self.linked = 0
        """Hellos its server completed: links a node dialed to it (the siege landed)."""
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(f"{PREFIX}/ws", self._serve_ws)
        app.router.add_get(f"{PREFIX}/peers", self._peers)
        app.router.add_get(f"{PREFIX}/probe", self._probe)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)  # its websockets never end on their own
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self.addr = format_address(self.host, self._runner.addresses[0][1])
        self.record = sign_record(self.server, self.swarm, [self.addr], True, now_ms())
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(self.host, 0), limit=0),
                                           timeout=aiohttp.ClientTimeout(total=10))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def besiege(self, victim: str) -> None:
        self._tasks.append(asyncio.create_task(self._keep_knocking(victim)))
        self._tasks.append(asyncio.create_task(self._get_dialed_back(victim)))

    async def _serve_ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=WS_MAX_MSG_SIZE)
        await ws.prepare(request)
        handshake = ServerHandshake(self.server, self.addr, self.swarm)
        try:
            await ws.send_str(encode(handshake.on_client_hello(await next_frame(ws))))
            handshake.on_client_proof(await next_frame(ws))
        except (MessageError, HandshakeError, TimeoutError):
            await ws.close()
            return ws
        self.linked += 1
        await answer_pulls_with_nothing(ws)
        return ws

    async def _peers(self, request: web.Request) -> web.Response:
        return web.json_response(self.listing(self))

    async def _probe(self, request: web.Request) -> web.Response:
        return web.json_response(probe_answer(self.server, request.query.get("nonce", "")))

    async def _keep_knocking(self, victim: str) -> None:
        """Hello to the victim from this address announcing the server; again a second after any drop."""
        assert self._http is not None
        while True:
            try:
                ws = await self._http.ws_connect(f"http://{victim}{PREFIX}/ws", max_msg_size=WS_MAX_MSG_SIZE)
                try:
                    handshake = ClientHandshake(self.door, self.addr, self.swarm)
                    await ws.send_str(encode(handshake.start()))
                    await ws.send_str(encode(handshake.on_server_hello(await next_frame(ws))))
                    await answer_pulls_with_nothing(ws)
                finally:
                    await ws.close()
            except (aiohttp.ClientError, OSError, TimeoutError, MessageError, HandshakeError):
                pass
            await asyncio.sleep(1.0)

    async def _get_dialed_back(self, victim: str) -> None:
        """Ask the victim to dial the server back (POST /dialback) until it did."""
        assert self._http is not None
        body = {"node": self.server.node_id, "port": parse_address(self.addr)[1]}
        while not self.dialed_back:
            try:
                async with self._http.post(f"http://{victim}{PREFIX}/dialback", json={**body, "token": new_token()}) as resp:
                    self.dialed_back = resp.status == 200 and (await resp.json()).get("reachable") is True
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
                pass
            await asyncio.sleep(1.0)


def listed(records: list[NodeRecord]) -> dict[str, list[Any]]:
    """A /peers answer naming `records`: signed, and as the unsigned entries older nodes read."""
    return {"records": [r.to_item() for r in records],
            "peers": [{"node": r.node, "addr": a, "verified": True} for r in records for a in r.addrs]}


@asynccontextmanager
async def hostile_crowd(victim: str, rng: random.Random) -> AsyncIterator[list[Hostile]]:
    """HOSTILE attackers on their own /24s, each listing 32 of the others and besieging `victim`."""
    def others(me: Hostile) -> dict[str, list[Any]]:
        pool = [h.record for h in crowd if h is not me and h.record is not None]
        return listed(rng.sample(pool, min(MAX_RECORDS, len(pool))))

    crowd = [Hostile(f"127.66.{i}.1", others) for i in range(1, HOSTILE + 1)]
    try:
        await asyncio.gather(*(h.start() for h in crowd))
        for hostile in crowd:
            hostile.besiege(victim)
        yield crowd
    finally:
        await asyncio.gather(*(h.stop() for h in crowd), return_exceptions=True)


class DeadAddresses:
    """Listeners where no node answers: each connection gets a 502 and is closed (not a bare close: aiohttp
    retries a GET once when the server closes without answering, which would count one dial twice)."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts
        self.addrs: list[str] = []
        self.dials = 0
        self._servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for host in self.hosts:
            server = await asyncio.start_server(self._no_node, host, 0)
            self._servers.append(server)
            self.addrs.append(format_address(host, server.sockets[0].getsockname()[1]))

    async def _no_node(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.dials += 1
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        writer.close()

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        await asyncio.gather(*(server.wait_closed() for server in self._servers), return_exceptions=True)

    def records(self) -> list[NodeRecord]:
        """Signed records of fresh keys, MAX_ADDRS dead addresses each."""
        chunks = [self.addrs[i:i + MAX_ADDRS] for i in range(0, len(self.addrs), MAX_ADDRS)]
        return [sign_record(Identity.generate(), SWARM, chunk, True, now_ms()) for chunk in chunks]
