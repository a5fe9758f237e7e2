"""Hostile peers against a real node: forged, replayed, stale, oversized, malformed and flooding input.

For each attack: nothing is accepted, the node keeps serving, memory stays within the pool and
seen-cache caps, and an attacker that keeps at it is disconnected within 10 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import aiohttp
import pytest
import rfc8785

from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.messages import HELLO_VERSION, ClientHandshake, decode_frame, encode
from swarm_app.peer.core.wire import MAX_FRAME_BYTES, SIGNATURE_PREFIX, SignedRollout, body_dict, sign_rollout
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import fast_config, make_rollout, signed

NOW_MS = lambda: int(time.time() * 1000)  # noqa: E731


class Attacker:
    """A peer that completes the hello honestly, then sends whatever it likes."""

    def __init__(self, http: aiohttp.ClientSession, identity: Identity | None = None) -> None:
        self.http, self.identity = http, identity or Identity.generate()
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.refused: str | None = None

    async def connect(self, node: PeerNode, version: int = HELLO_VERSION) -> bool:
        self.ws = await self.http.ws_connect(f"http://{node.address}/rsp/v1/ws", max_msg_size=8 * 2**20)
        hs = ClientHandshake(self.identity, None)
        hello = hs.start()
        hello["v"] = version
        await self.ws.send_str(encode(hello))
        reply = await self.ws.receive(timeout=5)
        if reply.type != aiohttp.WSMsgType.TEXT:
            return False
        if json.loads(reply.data).get("t") == "bye":
            self.refused = json.loads(reply.data)["reason"]
            return False
        await self.ws.send_str(encode(hs.on_server_hello(decode_frame(reply.data))))
        return True

    async def push(self, *items: SignedRollout | dict) -> None:
        wire = [i.to_item() if isinstance(i, SignedRollout) else i for i in items]
        await self.send({"t": "push", "items": wire})

    async def send(self, message: dict | str) -> None:
        await self.ws.send_str(message if isinstance(message, str) else encode(message))

    async def disconnected_within(self, seconds: float) -> str | None:
        """The bye reason (or "closed") if the node hung up within `seconds`, else None."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = await self.ws.receive(timeout=deadline - time.monotonic())
            except TimeoutError:
                return None
            if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data).get("t") == "bye":
                return json.loads(msg.data)["reason"]
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                return "closed"
        return None


@pytest.fixture
async def node():
    config = dataclasses.replace(fast_config(), pool_max_entries=30, seen_capacity=60)
    peer = PeerNode(config, Identity.generate())
    await peer.start()
    yield peer
    await peer.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


async def assert_healthy(node: PeerNode, http: aiohttp.ClientSession, accepted: int = 0) -> None:
    stats = node.stats()
    assert stats.accepted == accepted
    assert stats.pool_size <= node.config.pool_max_entries and stats.seen_size <= node.config.seen_capacity
    async with http.get(f"http://{node.address}/rsp/v1/info") as resp:
        assert resp.status == 200 and (await resp.json())["node"] == node.node_id
    honest = Attacker(http)  # an honest newcomer still gets in and is heard
    assert await honest.connect(node)
    await honest.push(signed(honest.identity, make_rollout(seed=999, index=accepted)))
    deadline = time.monotonic() + 5
    while node.stats().accepted == accepted and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert node.stats().accepted == accepted + 1
    await honest.ws.close()


async def test_bad_signatures_get_the_sender_disconnected(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    started = time.monotonic()
    for i in range(10):
        good = signed(bad.identity, make_rollout(index=i))
        await bad.push(SignedRollout(good.body, Identity.generate().sign(SIGNATURE_PREFIX + good.body)))
    assert await bad.disconnected_within(10) == "offender"
    print(f"\nforger disconnected after {time.monotonic() - started:.2f} s")
    assert node.stats().rejected["bad_signature"] >= 5
    again = Attacker(http, bad.identity)
    assert not await again.connect(node) and again.refused == "banned"  # refused before the node signs anything
    await assert_healthy(node, http)


async def test_altered_bodies_are_forgeries(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    victim = Identity.generate()
    for i in range(6):
        original = signed(victim, make_rollout(index=i))
        data = json.loads(original.body)
        data["completions"][0] = "<answer>poisoned</answer>"
        await bad.push(SignedRollout(rfc8785.dumps(data), original.sig))
    assert await bad.disconnected_within(10) == "offender"
    assert node.stats().rejected["bad_signature"] >= 5
    await assert_healthy(node, http)


async def test_replays_and_duplicates_are_dropped(node, http):
    relay = Attacker(http)
    assert await relay.connect(node)
    author = Identity.generate()
    original = signed(author, make_rollout(index=1), seq=77)
    await relay.push(original)
    for _ in range(30):  # the same bytes again and again: dropped, and not an offence (gossip repeats)
        await relay.push(original)
    await relay.push(signed(author, make_rollout(index=2), seq=77))  # same seq, other body: replay
    await relay.push(signed(author, make_rollout(index=3), ts_ms=NOW_MS() - 11 * 60_000))  # old capture
    await asyncio.sleep(0.5)
    stats = node.stats()
    assert stats.rejected["duplicate"] == 30 and stats.rejected["replay"] == 1 and stats.rejected["stale"] == 1
    await assert_healthy(node, http, accepted=1)  # only the original


async def test_ground_truth_mismatch_is_a_forgery(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    for i in range(6):
        rollout = make_rollout(index=i)
        await bad.push(signed(bad.identity, dataclasses.replace(rollout, answer=rollout.answer + "7")))
    assert await bad.disconnected_within(10) == "offender"
    assert node.stats().rejected["ground_truth"] >= 5
    await assert_healthy(node, http)


async def test_unknown_task_config_is_rejected(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    rollout = make_rollout()
    unknown = dataclasses.replace(rollout, ref=dataclasses.replace(rollout.ref, config_digest="f" * 16))
    await bad.push(signed(bad.identity, unknown))
    await asyncio.sleep(0.3)
    assert node.stats().rejected["unknown_task"] == 1
    await assert_healthy(node, http)


async def test_future_and_stale_timestamps(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    for i in range(3):
        await bad.push(signed(bad.identity, make_rollout(index=i), ts_ms=NOW_MS() + 3 * 60_000))
        await bad.push(signed(bad.identity, make_rollout(index=10 + i), ts_ms=NOW_MS() - 11 * 60_000))
    await asyncio.sleep(0.3)
    assert node.stats().rejected["future"] == 3 and node.stats().rejected["stale"] == 3
    await assert_healthy(node, http)


async def test_oversized_body_and_oversized_frame(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    await bad.push({"body": "x" * (64 * 1024 + 1), "sig": b64url(b"\0" * 64)})
    await asyncio.sleep(0.2)
    assert node.stats().rejected["too_large"] == 1
    await bad.send("x" * (1024 * 1024 + 10))
    assert await bad.disconnected_within(10) is not None  # aiohttp closes with 1009 (message too big)
    await asyncio.sleep(0.2)
    assert node.stats().rejected["frame_too_large"] == 1
    await assert_healthy(node, http)


async def test_malformed_frames_and_bodies(node, http):
    bad = Attacker(http)
    assert await bad.connect(node)
    for _ in range(2):
        for frame in ("{not json", "[]", '{"t":"push","items":"x"}', '{"t":"launch"}', '{"t":"sample","re":5,"items":[]}'):
            await bad.send(frame)
        await bad.ws.send_bytes(b"\x00\x01")
        await bad.push({"body": "not json", "sig": b64url(b"\0" * 64)}, {"body": "{}", "sig": "!!"})
    assert await bad.disconnected_within(10) == "offender"
    rejected = node.stats().rejected
    assert rejected["bad_message"] >= 5 and rejected.get("malformed", 0) >= 1
    await assert_healthy(node, http)


async def test_unknown_protocol_version(node, http):
    bad = Attacker(http)
    data = body_dict(make_rollout(), bad.identity.public_key, 1, NOW_MS())
    data["v"] = 2
    body = rfc8785.dumps(data)
    assert await bad.connect(node)
    await bad.push(SignedRollout(body, bad.identity.sign(SIGNATURE_PREFIX + body)))
    await asyncio.sleep(0.3)
    assert node.stats().rejected["version"] == 1
    assert not await Attacker(http).connect(node, version=3)  # a hello of an unknown version gets no session
    older = Attacker(http)
    assert not await older.connect(node, version=1) and older.refused == "version"  # one from before swarm names
    await assert_healthy(node, http)


@pytest.mark.parametrize("kind", ["pull", "duplicate push"])
async def test_a_flood_at_ten_times_the_rate_limit_is_cut_off(node, http, kind):
    rate = node.config.protocol.conn_rate
    bad = Attacker(http)
    assert await bad.connect(node)
    item = signed(Identity.generate()).to_item()
    started = time.monotonic()

    async def flood() -> None:
        k = 0
        while True:
            k += 1
            await bad.send({"t": "pull", "id": k, "max": 20, "have": {}} if kind == "pull" else
                           {"t": "push", "items": [item]})
            await asyncio.sleep(1 / (10 * rate))

    flooding = asyncio.create_task(flood())
    try:
        reason = await bad.disconnected_within(10)
    finally:
        flooding.cancel()
        await asyncio.gather(flooding, return_exceptions=True)
    print(f"\n{kind} flooder at {10 * rate:.0f} msg/s disconnected after {time.monotonic() - started:.2f} s")
    assert reason == "offender"
    assert node.stats().rejected["conn_rate"] > 0
    await assert_healthy(node, http, accepted=0 if kind == "pull" else 1)  # the one rollout, once


async def test_memory_stays_within_the_caps_under_a_sybil_flood(node, http):
    sybils = [Attacker(http) for _ in range(4)]
    for s in sybils:
        assert await s.connect(node)
    for round_ in range(3):  # 45 pushed rollouts per connection: within its burst
        for k, s in enumerate(sybils):
            items = [sign_rollout(s.identity, make_rollout(seed=200 + k, index=round_ * 15 + i),
                                  NOW_MS() * 1000 + round_ * 15 + i, NOW_MS()) for i in range(15)]
            await s.push(*items)
    await asyncio.sleep(1.0)
    stats = node.stats()
    assert stats.accepted == 180  # valid rollouts from fresh keys are not an attack in themselves...
    assert stats.pool_size == node.config.pool_max_entries  # ...but memory stays bounded
    assert stats.seen_size <= node.config.seen_capacity
    assert stats.pool_bytes <= node.config.pool_max_bytes


@pytest.mark.parametrize("size", [MAX_FRAME_BYTES, MAX_FRAME_BYTES + 1])
async def test_a_frame_of_exactly_one_mib_is_read_and_one_byte_more_is_refused(node, http, size):
    peer = Attacker(http)
    assert await peer.connect(node)
    head, tail = '{"t":"pull","id":7,"max":1,"have":{},"pad":"', '"}'  # unknown members are ignored
    frame = head + "x" * (size - len(head) - len(tail)) + tail
    assert len(frame.encode("utf-8")) == size
    await peer.send(frame)
    if size == MAX_FRAME_BYTES:  # "at most 1 MiB" (docs/protocol.md §6): answered like any pull
        reply = await peer.ws.receive(timeout=5)
        assert reply.type == aiohttp.WSMsgType.TEXT and json.loads(reply.data) == {"t": "sample", "re": 7, "items": []}
        assert "frame_too_large" not in node.stats().rejected
    else:
        assert await peer.disconnected_within(5) == "closed"
        assert node.stats().rejected["frame_too_large"] == 1
    await assert_healthy(node, http)
