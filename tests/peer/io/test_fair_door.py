"""Fair admission of newcomers at the peer port's TCP door, on a real node on loopback.

70 addresses (127.0.0.2-127.0.0.71) keep the total connection cap full with slow connections that they
close and re-open (a partial request head, held 0.3-1.2 s); a fresh address (127.0.1.5) then asks
/rsp/v1/info ten times, each on a new connection, and must be answered at least 9 times: the gate keeps
a slice of its total for addresses that opened few connections lately (swarm_app/net/gate.py).
"""

from __future__ import annotations

import asyncio
import random
import socket
import sys
import time

import aiohttp
import pytest

from swarm_app.peer.core.addressbook import parse_address
from tests.peer.io.test_connections import SLOW_HEADER, running, soft_descriptor_limit_at_least

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs 127.x.y.z source addresses (Linux)")

CHURNERS = [f"127.0.0.{i}" for i in range(2, 72)]
FRESH = "127.0.1.5"
PER_CHURNER = 4
"""Slow connections each churning address keeps going: 280 wanted, for a total cap of 128."""


async def churn(address: str, source: str, until: float, rng: random.Random) -> int:
    """Keep one slow connection from `source` open until `until` (monotonic): a partial head, held a while
    or until the server drops it, closed, re-opened. Returns how many were opened."""
    host, port = parse_address(address)
    opened = 0
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.05)
            continue
        opened += 1
        writer.write(SLOW_HEADER)
        try:
            dropped = await asyncio.wait_for(reader.read(1024), rng.uniform(0.3, 1.2)) == b""
        except (TimeoutError, ConnectionError):
            dropped = False
        writer.transport.abort()
        if dropped:  # refused at the door: try again soon, as an attacker would
            await asyncio.sleep(rng.uniform(0.02, 0.1))
    return opened


async def ask_info(address: str, source: str) -> int | str:
    """One GET /rsp/v1/info on a connection of its own; the status, or the error's name."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=4)) as http:
        try:
            async with http.get(f"http://{address}/rsp/v1/info") as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return type(exc).__name__


async def test_churning_addresses_cannot_lock_a_fresh_address_out():
    rng = random.Random(26)
    with soft_descriptor_limit_at_least(4096):
        async with running(max_connections=128, max_connections_per_ip=16, header_timeout_s=2.0) as node:
            until = time.monotonic() + 14.0
            churners = [asyncio.create_task(churn(node.address, ip, until, rng))
                        for ip in CHURNERS for _ in range(PER_CHURNER)]
            await asyncio.sleep(5.0)  # every churner has used up its newcomer allowance by now
            refused_before = node.gate.refused["total"]
            answers = []
            for _ in range(10):
                answers.append(await ask_info(node.address, FRESH))
                await asyncio.sleep(0.3)
            full_meanwhile = node.gate.refused["total"] - refused_before
            opened = sum(await asyncio.gather(*churners))
    print(f"\nfresh address: {answers}; churners opened {opened} connections, {full_meanwhile} refused at the "
          f"total cap while it asked; {getattr(node.gate, 'newcomers_admitted', 0)} admitted into the newcomers' slots")
    assert full_meanwhile > 50, "the churners did not keep the total cap full: the test proves nothing"
    assert answers.count(200) >= 9, answers


def test_loopback_source_addresses_are_usable():
    """127.0.1.5 must be bindable as a source, or the test above measures nothing."""
    with socket.socket() as s:
        s.bind((FRESH, 0))
