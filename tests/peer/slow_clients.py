"""Clients that stop reading, and the big valid rollouts that make their answers big, for the output-budget
tests (tests/peer/io/test_output_budgets.py) and benchmarks/slow_readers.py.

- `big_rollout`: a valid group (right answers and wrong ones, so it has a reward spread) padded with
  filler to ~48 KB of body, under the 64 KiB limit.
- `PoolFiller`, `fill_pool`: push such rollouts to a node from many authors, each author from a source
  address of its own /24 (127.0.N.1), so per-address and per-network budgets at admission are not what
  limits it; `keep_fresh` keeps pushing, for a node whose own rollouts turn its pool over.
- `SlowHttpReader`: asks GET /rsp/v1/sample and never reads the answer (receive buffer 4 KiB).
- `RawWebsocket`: a websocket client over asyncio streams that completes the hello and then reads only
  when told to; aiohttp's client would read everything into memory, which is not what an attacker does.
Nothing here is used by the app.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time

import aiohttp

from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.addressbook import parse_address
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import ClientHandshake, decode_frame, encode
from swarm_app.peer.core.wire import sign_rollout

FILLER_COMPLETIONS = 32
FILLER_CHARS = 1400
"""32 completions of ~1,400 characters: ~48 KB a body, so 20 of them fill a 1 MiB answer."""
SMALL_RCVBUF = 4096
PUSH_ITEMS = 16
"""Rollouts per push message: 16 x ~48 KB stays under the 1 MiB frame limit."""
POOL_FULL_PER_AUTHOR = 64
"""24 authors x 64 x ~45 KB = ~69 MB: past the pool's 64 MiB byte cap, so that pushing more evicts as
much as it adds and the node's memory has a steady state to measure against."""


def big_rollout(seed: int, index: int) -> Rollout:
    """A group that passes every admission check, half right, half wrong, each completion padded."""
    from tests.peer.helpers import fast_specs

    for attempt in range(100):
        ref = tasks.draw(fast_specs(), seed, index + attempt * 100_000, 1)[0]
        task = tasks.regenerate(ref)
        texts = tuple(f"step {i}: " + "the sum is worked out digit by digit. " * (FILLER_CHARS // 38)
                      + f"<answer>{task.answer if i % 2 == 0 else 'no'}</answer>" for i in range(FILLER_COMPLETIONS))
        if len({tasks.score(task, text) for text in texts}) > 1:
            break
    return Rollout(ref, task.question, task.answer, texts, "test-model", 0, "", int(time.time() * 1000))


def source_of(author: int) -> str:
    """Author i's source address: one per /24, 127.0.(40 + i).1 (127.0.0.x and 127.0.1.x are the tests')."""
    return f"127.0.{40 + author}.1"


async def push_as(address: str, source: str, identity: Identity, rollouts: list[Rollout]) -> None:
    """Dial `address` from `source` as `identity`, complete the hello, push `rollouts` signed, hang up."""
    now_ms = int(time.time() * 1000)
    items = [sign_rollout(identity, r, now_ms * 1000 + i, now_ms).to_item() for i, r in enumerate(rollouts)]
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.ws_connect(f"http://{address}/rsp/v1/ws", max_msg_size=0) as ws:
            hs = ClientHandshake(identity, None)
            await ws.send_str(encode(hs.start()))
            await ws.send_str(encode(hs.on_server_hello(decode_frame((await ws.receive(timeout=10)).data))))
            for start in range(0, len(items), PUSH_ITEMS):
                await ws.send_str(encode({"t": "push", "items": items[start:start + PUSH_ITEMS]}))
            await asyncio.sleep(0.5)  # let the node read the pushes before the close


async def sample_size(address: str, source: str = "127.0.0.3") -> tuple[int, int]:
    """(items, bytes) of one honest GET /rsp/v1/sample?max=20 from `source`."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(f"http://{address}/rsp/v1/sample", params={"max": "20"}) as resp:
            body = await resp.read()
            return (len(json.loads(body)["items"]) if resp.status == 200 else -resp.status), len(body)


class PoolFiller:
    """`authors` fresh keys, each pushing big rollouts from its own /24. `fill` pushes `per_author` each
    and waits until a sample answer holds `want_items` items; `keep_fresh` pushes one more each every
    `every_s` until `until` (monotonic), so that a node whose own rollouts turn its pool over (the fake
    engine makes ~1,000 a second) still answers with them."""

    def __init__(self, address: str, authors: int = 24) -> None:
        self.address = address
        self.identities = [Identity.generate() for _ in range(authors)]
        self.pushed = 0

    async def push_round(self, per_author: int) -> None:
        start, self.pushed = self.pushed, self.pushed + per_author
        await asyncio.gather(*(push_as(self.address, source_of(a), identity,
                                       [big_rollout(seed=7, index=a * 100_000 + start + i) for i in range(per_author)])
                               for a, identity in enumerate(self.identities)))

    async def fill(self, per_author: int = POOL_FULL_PER_AUTHOR, want_items: int = 16) -> tuple[int, int]:
        await self.push_round(per_author)
        for _ in range(100):
            items, size = await sample_size(self.address)
            if items >= want_items:
                return items, size
            await asyncio.sleep(0.1)
        raise AssertionError(f"the pool did not fill: a sample answer holds {items} items")

    async def keep_fresh(self, until: float, every_s: float = 3.0) -> None:
        while time.monotonic() < until:
            await asyncio.sleep(every_s)
            await self.push_round(1)


async def fill_pool(address: str, authors: int = 24, per_author: int = 4, want_items: int = 16) -> tuple[int, int]:
    """Push `per_author` big rollouts from each of `authors` fresh keys; wait until a sample answer holds
    `want_items` items. Returns that answer's (items, bytes)."""
    return await PoolFiller(address, authors).fill(per_author, want_items)


def small_buffer_socket(source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)  # before connect: the window stays small
    sock.bind((source, 0))
    sock.setblocking(False)
    return sock


async def open_small(address: str, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = parse_address(address)
    sock = small_buffer_socket(source)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, limit=SMALL_RCVBUF)


class SlowHttpReader:
    """One connection that asks for `requests` sample answers (pipelined) and reads none of them."""

    def __init__(self, address: str, source: str, requests: int = 1) -> None:
        self.address, self.source, self.requests = address, source, requests
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> SlowHttpReader:
        self.reader, self.writer = await open_small(self.address, self.source)
        request = f"GET /rsp/v1/sample?max=20 HTTP/1.1\r\nHost: {self.address}\r\n\r\n".encode()
        self.writer.write(request * self.requests)
        return self

    async def status(self, within_s: float = 5.0) -> int | str:
        """Read just the first status line: 200, 503, or how the connection ended."""
        assert self.reader is not None
        try:
            line = await asyncio.wait_for(self.reader.readline(), within_s)
        except TimeoutError:
            return "no answer"
        except ConnectionError:
            return "reset"
        return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else "closed"

    async def drain_all(self, within_s: float) -> tuple[int, str]:
        """Read until the end: (bytes read, "eof" or "reset" or "open")."""
        assert self.reader is not None
        got, deadline = 0, time.monotonic() + within_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                chunk = await asyncio.wait_for(self.reader.read(65536), left)
                if not chunk:
                    return got, "eof"
                got += len(chunk)
        except TimeoutError:
            return got, "open"
        except ConnectionError:
            return got, "reset"
        return got, "open"

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()


class RawWebsocket:
    """A websocket client frame by frame over asyncio streams: reads only in `receive`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, address: str, source: str) -> RawWebsocket:
        reader, writer = await open_small(address, source)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(f"GET /rsp/v1/ws HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"no upgrade: {head[:60]!r}")
        return cls(reader, writer)

    async def hello(self, identity: Identity) -> None:
        hs = ClientHandshake(identity, None)
        self.send(hs.start())
        self.send(hs.on_server_hello(decode_frame(await self.receive())))

    def send(self, message: dict) -> None:
        payload, mask = encode(message).encode(), os.urandom(4)
        n = len(payload)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  struct.pack("!BH", 0x80 | 126, n) if n < 65536 else struct.pack("!BQ", 0x80 | 127, n))
        self.writer.write(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    async def receive(self, within_s: float = 10.0) -> str:
        """The next text frame's text (pings and other control frames skipped)."""
        async with asyncio.timeout(within_s):
            while True:
                first, second = await self.reader.readexactly(2)
                n = second & 0x7F
                if n == 126:
                    n = struct.unpack("!H", await self.reader.readexactly(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
                payload = await self.reader.readexactly(n)
                if first & 0x0F == 0x1:
                    return payload.decode()
                if first & 0x0F == 0x8:
                    raise ConnectionError("closed by the server")

    def abort(self) -> None:
        self.writer.transport.abort()
