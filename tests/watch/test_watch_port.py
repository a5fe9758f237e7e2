"""The `swarm watch` port under a slow-connection flood, against a real `swarm run` (fake engine) in a
subprocess whose soft descriptor limit is 1,024, as on a desktop.

1,100 connections from 127.0.0.1 send a partial request head and nothing more, and each is opened again
a second after the node drops it. The node must keep training (rounds keep landing in metrics.jsonl),
an honest watcher (NodeStream, as `swarm watch` uses it, from the same address) must attach and get
live events, and the node must stop cleanly without EMFILE. Before the watch port had a gate, the node
accepted every connection and ran out of descriptors.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from swarm_app.kernel.events import RoundFinished
from swarm_app.net.gate import WATCH_CONNECTIONS
from swarm_app.watch.client import NodeStream
from swarm_app.watch.endpoint import HEADER_TIMEOUT_S, PER_ADDRESS, StatusEndpoint
from swarm_app.watch.file import read_watch_file, watch_file_of
from swarm_app.watch.history import EventHistory

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs RLIMIT_NOFILE and /proc (Linux)")

ROOT = Path(__file__).resolve().parents[2]
SOFT_LIMIT = 1024
FLOOD = 1100
SLOW_HEAD = b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # never finished by a blank line
NODE = ("import resource, sys; _, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard)); "
        "from swarm_app.cli import main; raise SystemExit(main(sys.argv[2:]))")


def start_node(stub_model: Path, run_dir: Path, soft_limit: int = SOFT_LIMIT) -> subprocess.Popen:
    """`swarm run --backend fake`, headless, its peer port on 127.0.0.1 (no mDNS), under `soft_limit`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SWARM_PEER_ENABLED": "true"}
    command = [sys.executable, "-c", NODE, str(soft_limit), "run", "--backend", "fake", "--model", str(stub_model),
               "--run-dir", str(run_dir), "--no-ui", "--listen", "127.0.0.1:0", "--no-mdns", "--seed", "0"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rounds_done(run_dir: Path) -> int:
    try:
        return (run_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


async def wait_until(predicate, seconds: float, what: str) -> None:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def slow_connection(port: int, until: float, counts: dict) -> None:
    """One of the flood: a partial head, held until the node drops it, re-opened a second later."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            counts["failed"] += 1
            await asyncio.sleep(1.0)
            continue
        counts["opened"] += 1
        try:
            writer.write(SLOW_HEAD)
            await asyncio.wait_for(reader.read(1024), max(0.0, until - time.monotonic()))
        except (TimeoutError, ConnectionError):
            pass
        writer.transport.abort()
        await asyncio.sleep(1.0)


REPLAY_MARGIN = 3
"""Rounds the node may finish between the watcher's handshake and the moment the node takes its replay
(both happen before the first event arrives): rounds up to rows-at-attach + this margin may be replayed."""
ATTACH_WITHIN_S = 5.0
"""The watcher must be attached this soon under the flood: a token holder evicts a slow connection at its
first attempt (~0.1 s seen); the replay of the slow rounds it would miss while locked out is not counted."""


async def watch_live_rounds(run_dir: Path, rounds: int, within_s: float) -> tuple[int, float]:
    """Attach as `swarm watch` does and read until `rounds` live RoundFinished events: rounds the node
    finished after the watcher attached (the replay holds only rounds it had, and a row is written before
    its event goes out, so rounds at or below the rows counted at attach, plus REPLAY_MARGIN, may be
    replayed and are not counted); (rounds seen, seconds to attach)."""
    started = time.monotonic()
    seen = 0
    async with NodeStream(run_dir) as stream:
        attach_s, done_at_attach = time.monotonic() - started, rounds_done(run_dir)
        async with asyncio.timeout(within_s):
            async for event in stream.events():
                if isinstance(event, RoundFinished) and event.metrics.round > done_at_attach + REPLAY_MARGIN:
                    seen += 1
                    if seen >= rounds:
                        break
    return seen, attach_s


async def flood_and_watch(run_dir: Path) -> dict:
    port = read_watch_file(run_dir).port
    counts = {"opened": 0, "failed": 0}
    until = time.monotonic() + 14.0
    flood = [asyncio.create_task(slow_connection(port, until, counts)) for _ in range(FLOOD)]
    await wait_until(lambda: counts["opened"] + counts["failed"] >= FLOOD, 20, "the flood to open")
    rounds_at_start = rounds_done(run_dir)
    await asyncio.sleep(2.0)  # the node has had 2 s of it: long enough to run out of descriptors before
    live, attach_s = await watch_live_rounds(run_dir, rounds=20, within_s=10.0)  # ~0.2 s of an idle fake-engine run
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    rounds_during = rounds_done(run_dir) - rounds_at_start
    await asyncio.gather(*flood)
    return {**counts, "live": live, "attach_s": attach_s, "rounds_during": rounds_during}


def test_a_slow_connection_flood_on_the_watch_port_neither_stops_training_nor_locks_out_a_watcher(
        stub_model, tmp_path):
    import resource

    run_dir = tmp_path / "run"
    node = start_node(stub_model, run_dir)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))  # this side holds 1,100 ends
    try:
        asyncio.run(wait_until(lambda: watch_file_of(run_dir).exists() and rounds_done(run_dir) >= 3, 60,
                               "the node to start"))
        result = asyncio.run(flood_and_watch(run_dir))
        alive = node.poll() is None
        node.send_signal(signal.SIGINT)
        _, stderr = node.communicate(timeout=60)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if node.poll() is None:
            node.kill()
            node.wait()
    stderr = stderr.decode(errors="replace")
    print(f"\nflood of {FLOOD} on the watch port: {result['opened']} opened, {result['failed']} failed; the node "
          f"finished {result['rounds_during']} rounds in those 14 s; the watcher attached and saw {result['live']} "
          f"live rounds in {result['attach_s']:.1f} s")
    assert alive and node.returncode == 0, stderr[-3000:]
    assert result["attach_s"] <= ATTACH_WITHIN_S, result
    assert result["live"] >= 20 and result["rounds_during"] >= 50  # ~2,000 idle; 275-1,545 seen under the flood
    assert "Too many open files" not in stderr and "Traceback" not in stderr, stderr[-3000:]


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1024), seconds) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_the_endpoint_caps_slow_connections_and_a_token_holder_gets_in_first_time(tmp_path):
    """In process: 60 slow connections from 127.0.0.1 hold at most PER_ADDRESS slots; one with the token
    evicts the oldest of them at its first attempt, and stays past the header timeout; the slow ones are
    dropped within it."""

    async def scenario():
        async with StatusEndpoint(EventHistory(), tmp_path) as endpoint:
            port, token = endpoint.info.port, endpoint.info.token
            slow = []
            for _ in range(60):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(SLOW_HEAD)
                slow.append((reader, writer))
            await asyncio.sleep(0.2)
            held = endpoint.gate.open
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/events", headers={"Authorization": "Bearer no"}) as wrong:
                    await wrong.read()
                async with http.ws_connect(f"ws://127.0.0.1:{port}/events",
                                           headers={"Authorization": f"Bearer {token}"}) as ws:
                    await asyncio.sleep(HEADER_TIMEOUT_S + 0.5)
                    endpoint.broadcast('{"event": "LogRecorded"}', False)
                    message = await ws.receive(timeout=5)
                    dropped = await asyncio.gather(*(closed_within(r, 0.5) for r, _ in slow))
                    counts = held, endpoint.gate.open, endpoint.gate.evicted, wrong.status
            for _, writer in slow:
                writer.close()
        return message, dropped, counts

    message, dropped, (held, open_after, evicted, wrong_status) = asyncio.run(scenario())
    assert held == PER_ADDRESS <= WATCH_CONNECTIONS and evicted >= 60 - PER_ADDRESS + 1
    assert message.type == aiohttp.WSMsgType.TEXT and "LogRecorded" in message.data
    assert all(dropped) and open_after == 1 and wrong_status == 401


def test_a_watcher_waits_for_a_running_node_that_is_too_busy_to_accept_not_for_a_gone_one():
    from swarm_app.watch.client import busy

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    timed_out = aiohttp.ConnectionTimeoutError("connect timed out")
    assert busy(timed_out, os.getpid()) and not busy(timed_out, gone.pid)
    refused = aiohttp.ClientConnectorError(None, ConnectionRefusedError(111, "refused"))  # a full listen queue
    assert busy(refused, os.getpid()) and not busy(refused, gone.pid)
    assert not busy(ConnectionRefusedError(), os.getpid())  # not from a connect attempt: no waiting
