"""Output budgets on a real node on loopback: a client that asks for big answers and does not read them
must not pin the node's memory.

- HTTP: slow readers of GET /rsp/v1/sample from one address get 503 beyond the per-address budget of
  answer bytes in flight, and an answer not drained within the write timeout is cut off (RST), while an
  honest client from another address is answered.
- Websocket: a peer that completes the hello, pulls far more than its send queue holds and reads nothing
  is dropped, and its connection closed (its buffers freed), within seconds.
The same over 60 s with RSS measured: the slow test at the end and benchmarks/slow_readers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
import tracemalloc

import pytest

from swarm_app.peer.core.identity import Identity
from swarm_app.peer.io import server
from tests.peer.io.test_connections import running, soft_descriptor_limit_at_least
from tests.peer.slow_clients import RawWebsocket, SlowHttpReader, fill_pool, sample_size

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs 127.x.y.z source addresses (Linux)")

ATTACKER = "127.0.0.2"


async def wait_for(predicate, seconds: float) -> bool:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def test_slow_sample_readers_get_503_beyond_the_budget_and_are_cut_off(monkeypatch):
    monkeypatch.setattr(server, "SAMPLE_WRITE_TIMEOUT_S", 2.0, raising=False)
    async with running(header_timeout_s=30.0) as node:  # the idle timeout is not what closes them here
        items, size = await fill_pool(node.address)
        readers = [await SlowHttpReader(node.address, ATTACKER).open() for _ in range(6)]
        await asyncio.sleep(0.5)
        honest = await sample_size(node.address, "127.0.0.3")
        statuses = await asyncio.gather(*(r.status(2.0) for r in readers))
        await asyncio.sleep(2.5)  # past the write timeout, and nothing more read
        ends = await asyncio.gather(*(r.drain_all(3.0) for r in readers))
        for r in readers:
            r.close()
        budget = node._runners[0].app.get(server.OUTPUT) if hasattr(server, "OUTPUT") else None
        settled = await wait_for(lambda: budget is not None and budget.used == 0, 2.0)
    print(f"\nanswers of {items} items, {size} bytes; slow readers: {statuses}, then {ends}; honest: {honest}")
    assert statuses.count(503) >= 3 and statuses.count(200) >= 1, statuses
    cut = [got for (got, end), status in zip(ends, statuses) if status == 200 and end != "open" and got < size]
    assert len(cut) == statuses.count(200), ends  # every answer in flight was cut off, not sent in full
    assert honest[0] >= 16 and settled


@contextlib.contextmanager
def no_cyclic_gc():
    """As on a busy node, where the next full pass of the cyclic GC can be minutes away."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_answers_not_taken_are_freed_without_waiting_for_the_cyclic_gc(monkeypatch):
    """A drain ended by the client's reset leaves a reference cycle (asyncio's waiter and the exception's
    frames) that held each answer's bytes until the GC's next full pass: 28 MiB after 100 slow readers had
    gone. Half the readers here hang up before the write timeout, half are cut off by it."""
    monkeypatch.setattr(server, "SAMPLE_WRITE_TIMEOUT_S", 1.0, raising=False)
    async with running(header_timeout_s=30.0) as node:
        items, size = await fill_pool(node.address)
        with no_cyclic_gc():
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                leaving = [await SlowHttpReader(node.address, f"127.0.0.{2 + i % 4}").open() for i in range(8)]
                await asyncio.sleep(0.5)
                for r in leaving:  # they hang up before the write timeout: the drain ends in a reset
                    r.close()
                staying = [await SlowHttpReader(node.address, f"127.0.0.{2 + i % 4}").open() for i in range(8)]
                await asyncio.sleep(2.0)  # every answer in flight is cut off after 1 s
                for r in staying:
                    r.close()
                await asyncio.sleep(0.5)
                kept = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
    print(f"\nanswers of {size} bytes; still allocated after the readers left: {kept / 2**20:.2f} MiB")
    assert kept < size, "answers no one took are still in memory"


@pytest.mark.parametrize("pulls", [40, 8], ids=["queue-overflow", "write-timeout"])
async def test_a_websocket_peer_that_stops_reading_is_dropped_and_its_connection_freed(pulls):
    """40 answers of ~1 MiB overflow its 8 MiB send queue: dropped at once. 8 fit in the queue but not in
    the socket buffers: the write timeout (2 s here) drops it."""
    with soft_descriptor_limit_at_least(1024):
        async with running(request_timeout_s=2.0) as node:
            await fill_pool(node.address)
            open_before = node.gate.open
            ws = await RawWebsocket.connect(node.address, ATTACKER)
            await ws.hello(Identity.generate())
            assert await wait_for(lambda: len(node.send_queues.links) == 1, 5.0)
            started = time.monotonic()
            for i in range(pulls):
                ws.send({"t": "pull", "id": i, "max": 64, "have": {}})
            dropped = await wait_for(lambda: not node.send_queues.links, 10.0)
            took = time.monotonic() - started
            freed = await wait_for(lambda: node.gate.open == open_before, 5.0)
            counters = node.core.tally.events()
            ws.abort()
    print(f"\nslow websocket reader of {pulls} answers dropped after {took:.1f} s; counters {json.dumps(counters)}")
    assert dropped and took < 8.0, "the peer that stopped reading is still connected"
    assert freed, "its TCP connection is still open on the node"


@pytest.mark.slow
def test_a_minute_of_slow_readers_leaves_rss_flat():
    """100 slow readers from 8 addresses for 60 s against a `swarm run --backend fake` node in a subprocess
    whose pool makes every answer ~0.9 MB (benchmarks/slow_readers.py, which also reports rounds/s)."""
    from benchmarks.slow_readers import build_parser, scenario

    args = build_parser().parse_args(["--baseline-s", "20", "--attack-s", "60", "--after-s", "30"])
    result = asyncio.run(scenario(args))
    print("\n" + json.dumps(result, indent=1))
    assert result["node_survived"]
    assert result["rss_during_over_baseline_mb"] < 100
    assert result["rss_after_over_baseline_pct"] < 10
