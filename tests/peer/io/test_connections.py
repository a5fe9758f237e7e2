"""The server's door against a real node on 127.0.0.1: per-IP and total connection caps, the header
timeout, malformed requests (no traceback), and 1,000 idle connections under a 256-descriptor limit.

Attackers connect from 127.0.0.1 and honest clients from 127.0.0.2 (both loopback on Linux), so a
per-IP cap can tell them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from pathlib import Path

import aiohttp
import pytest

from swarm_app.net.gate import RESERVED_DESCRIPTORS, WATCH_CONNECTIONS, descriptor_budget
from swarm_app.peer.core.addressbook import parse_address
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import ClientHandshake, decode_frame, encode
from swarm_app.peer.core.wire import item_from_json
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import fast_config, make_rollout, signed

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs 127.0.0.2 and /proc (Linux)")

ROOT = Path(__file__).resolve().parents[3]
SLOW_HEADER = b"GET /rsp/v1/info HTTP/1.1\r\nHost: x\r\n"  # never finished by a blank line
HONEST = "127.0.0.2"


@contextlib.asynccontextmanager
async def running(**changes):
    node = PeerNode(dataclasses.replace(fast_config(), **changes), Identity.generate())
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


async def open_raw(address: str, source: str = "127.0.0.1", first: bytes = SLOW_HEADER):
    host, port = parse_address(address)
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    if first:
        writer.write(first)
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader, within_s: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(65536), within_s) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def honest_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(HONEST, 0), limit=0),
                                 timeout=aiohttp.ClientTimeout(total=20))


async def honest_exchange(address: str) -> None:
    """An honest peer from 127.0.0.2: /info answers, a pushed rollout is admitted and served back."""
    identity = Identity.generate()
    rollout = signed(identity, make_rollout(seed=77))
    async with honest_session() as http:
        async with http.get(f"http://{address}/rsp/v1/info") as resp:
            assert resp.status == 200 and (await resp.json())["protocol"] == "RSP/1"
        async with http.ws_connect(f"http://{address}/rsp/v1/ws") as ws:
            hs = ClientHandshake(identity, None)
            await ws.send_str(encode(hs.start()))
            await ws.send_str(encode(hs.on_server_hello(decode_frame((await ws.receive(timeout=10)).data))))
            await ws.send_str(encode({"t": "push", "items": [rollout.to_item()]}))
            for _ in range(100):
                async with http.get(f"http://{address}/rsp/v1/sample", params={"max": "5"}) as resp:
                    items = (await resp.json())["items"] if resp.status == 200 else []
                if items:
                    break
                await asyncio.sleep(0.1)
    assert [item_from_json(i).body for i in items] == [rollout.body]


def test_the_total_cap_follows_the_descriptor_limit():
    assert descriptor_budget(256) == (256 - RESERVED_DESCRIPTORS - WATCH_CONNECTIONS) // 2 == 48
    assert descriptor_budget(1024) == 432 and descriptor_budget(100) == 16
    assert descriptor_budget(None) == 256  # Windows, or no limit


async def test_connections_over_the_per_ip_cap_are_closed_at_once():
    async with running(max_connections_per_ip=4, header_timeout_s=30.0) as node:
        idle = [await open_raw(node.address) for _ in range(10)]
        closed = await asyncio.gather(*(closed_by_server(r, 1.0) for r, _ in idle))
        assert sorted(closed) == [False] * 4 + [True] * 6
        assert node.gate.refused["per_ip"] == 6 and node.gate.by_ip["127.0.0.1"] == 4
        await honest_exchange(node.address)  # another address is not held up by them
        for _, writer in idle:
            writer.close()
        await asyncio.sleep(0.2)
        assert node.gate.by_ip.get("127.0.0.1", 0) == 0


async def test_connections_over_the_total_cap_are_closed_at_once():
    async with running(max_connections=5, header_timeout_s=30.0) as node:
        idle = [await open_raw(node.address) for _ in range(5)]
        assert not any(await asyncio.gather(*(closed_by_server(r, 0.5) for r, _ in idle)))
        reader, _ = await open_raw(node.address, source=HONEST)
        assert await closed_by_server(reader, 1.0) and node.gate.refused["total"] == 1
        for _, writer in idle:
            writer.close()
        await asyncio.sleep(0.2)
        await honest_exchange(node.address)


async def test_idle_and_slow_header_clients_are_dropped_after_the_header_timeout():
    async with running(header_timeout_s=1.0) as node:
        idle, _ = await open_raw(node.address, first=b"")
        slow, slow_writer = await open_raw(node.address)
        for _ in range(20):  # a header line every 0.2 s: partial data must not reset the clock
            if slow.at_eof():
                break
            slow_writer.write(b"X-Slow: 1\r\n")
            await asyncio.sleep(0.2)
        assert await closed_by_server(slow, 1.0) and await closed_by_server(idle, 1.0)
        assert node.gate.open <= 1  # the honest /info of the next line may be the only one left
        await honest_exchange(node.address)


GARBAGE = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32) + b"\r\n\r\n",  # a TLS hello on the HTTP port
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /rsp/v1/info HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
    b"GET /rsp/v1/info HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /rsp/v1/info HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n",
]


async def test_malformed_requests_are_refused_without_a_traceback(caplog):
    caplog.set_level(logging.DEBUG)
    async with running() as node:
        for data in GARBAGE:
            reader, writer = await open_raw(node.address, first=data)
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer == b"" or answer.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4")), (data[:30], answer[:60])
        await honest_exchange(node.address)
        noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
        assert noisy == [], [(r.name, r.levelname, r.getMessage()) for r in noisy]
        assert node.core.tally["http_malformed"] >= len(GARBAGE) - 1  # the chunked one may end as a 200


@contextlib.contextmanager
def soft_descriptor_limit_at_least(n: int):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_thousand_idle_connections_leave_a_256_descriptor_node_serving(tmp_path):
    node = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.peer.fd_node", "256", str(tmp_path), cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        started = json.loads(await asyncio.wait_for(node.stdout.readline(), 60))
        metrics = tmp_path / "metrics.jsonl"
        with soft_descriptor_limit_at_least(1500):  # this process holds the 1,000 client ends
            idle = await asyncio.gather(*(asyncio.wait_for(open_raw(started["address"]), 60) for _ in range(1000)))
            lines_before = len(metrics.read_text().splitlines())
            await honest_exchange(started["address"])  # while all 1,000 client ends are still open
            await asyncio.sleep(0.5)
            lines_after = len(metrics.read_text().splitlines())
            for _, writer in idle:
                writer.close()
        node.stdin.write(b"done\n")
        report = json.loads(await asyncio.wait_for(node.stdout.readline(), 30))
        stderr = (await asyncio.wait_for(node.stderr.read(), 30)).decode(errors="replace")
    finally:
        if node.returncode is None:
            node.kill()
        await node.wait()
    print(f"\n1,000 idle connections, soft limit 256: {report['refused']} refused, at most {report['peak_open']} "
          f"open at once, at most {report['peak_fds']} descriptors in use, {report['writes']} file writes")
    assert len(idle) == 1000 and report["limit"] == 256
    assert report["errors"] == [] and lines_after > lines_before  # the stand-in for training kept writing
    # never more than the per-IP cap from the attacker (+3 for the honest client's ws and GETs)
    assert report["refused"]["per_ip"] > 500 and report["peak_open"] <= started["gate_per_ip"] + 3
    assert report["peak_fds"] < 256 and report["accepted"] == 1
    assert "Too many open files" not in stderr and "Traceback" not in stderr, stderr[-2000:]
