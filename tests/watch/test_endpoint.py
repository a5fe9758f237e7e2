"""The status endpoint of a running session: real aiohttp on 127.0.0.1, real files, the fake engine."""

import asyncio
import dataclasses
import json
import logging
import stat
import subprocess
import sys

import aiohttp
import pytest

from swarm_app.kernel.events import LogRecorded, PhaseProgress, RoundFinished, RoundStarted, TrainingPaused, TrainingResumed
from swarm_app.session.session import Session
from swarm_app.watch.endpoint import QUEUE_LIMIT, WatcherQueue
from swarm_app.watch.file import read_watch_file, watch_file_of
from swarm_app.watch.history import EventHistory
from swarm_app.watch.service import watched
from tests.kernel.test_events import sample
from tests.session.test_session import make_settings


async def wait_for(predicate, seconds=20.0):
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out waiting")


class RoundCounter:
    def __init__(self):
        self.rounds = 0

    def __call__(self, event):
        if isinstance(event, RoundFinished):
            self.rounds = event.metrics.round


async def open_node(settings):
    """A session running until stopped, offered to watchers; returns it once watch.json is written."""
    session = Session(settings)
    counter = RoundCounter()
    session.subscribe(counter)

    async def run():
        async with watched(session):
            return await session.run()

    task = asyncio.ensure_future(run())
    await wait_for(lambda: watch_file_of(session.run_dir).exists() and counter.rounds >= 3)
    return session, task, counter


async def read_all(ws):
    """Messages as dicts until the server closes; then the close code."""
    received = []
    async for message in ws:
        received.append(json.loads(message.data))
    return received, ws.close_code


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_a_late_watcher_gets_the_replay_then_every_live_round_once(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 0)

    async def scenario():
        session, task, counter = await open_node(settings)
        info = read_watch_file(session.run_dir)
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(info.url, headers=bearer(info.token)) as ws:
                attached_at = counter.rounds
                await wait_for(lambda: counter.rounds >= attached_at + 5)
                session.stop()
                received, code = await read_all(ws)
        return received, code, await task, attached_at

    received, code, last, attached_at = asyncio.run(scenario())
    names = [m["event"] for m in received]
    assert names[:2] == ["ModelLoading", "RunStarted"]  # the replay opens with the start-up facts
    rounds = [m["metrics"]["round"] for m in received if m["event"] == "RoundFinished"]
    assert rounds == list(range(1, last + 1))  # replay and live stream join without a gap or a repeat
    assert last >= attached_at + 5
    assert names[-1] == "RunStopped" and received[-1]["last_round"] == last
    assert code == aiohttp.WSCloseCode.GOING_AWAY


def test_no_token_or_a_wrong_one_gets_401_and_nothing_else(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 0)

    async def scenario():
        session, task, _ = await open_node(settings)
        info = read_watch_file(session.run_dir)
        base = f"http://127.0.0.1:{info.port}"
        statuses = {}
        async with aiohttp.ClientSession() as client:
            wrong = ("y" if info.token[0] == "x" else "x") + info.token[1:]
            for name, headers, path in [("none", {}, "/events"), ("wrong", bearer(wrong), "/events"),
                                        ("basic", {"Authorization": f"Basic {info.token}"}, "/events"),
                                        ("other path", {}, "/"), ("right token", bearer(info.token), "/nothing")]:
                async with client.get(base + path, headers=headers) as response:
                    statuses[name] = (response.status, "watch.json" in await response.text())
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(info.url, headers=bearer("nope"))
        session.stop()
        await task
        return statuses, refused.value.status

    statuses, ws_status = asyncio.run(scenario())
    assert statuses == {"none": (401, True), "wrong": (401, True), "basic": (401, True),
                        "other path": (401, True), "right token": (404, False)}
    assert ws_status == 401


def test_watch_file_is_private_and_gone_after_a_clean_stop(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 0)

    async def scenario():
        session, task, _ = await open_node(settings)
        path = watch_file_of(session.run_dir)
        mode = stat.S_IMODE(path.stat().st_mode)
        data = json.loads(path.read_text())
        session.stop()
        await task
        return mode, data, path.exists(), sorted(p.name for p in session.run_dir.iterdir())

    mode, data, exists_after, left = asyncio.run(scenario())
    assert mode == 0o600
    assert set(data) == {"port", "token", "pid"} and data["port"] > 0 and len(data["token"]) >= 43
    assert not exists_after
    assert not [name for name in left if name.startswith(".watch.json")]  # no temp file left behind


def test_a_run_goes_on_when_the_endpoint_cannot_start(stub_model, tmp_path, monkeypatch, caplog):
    from swarm_app.watch import endpoint as status_endpoint

    async def refuse(self):
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(status_endpoint.StatusEndpoint, "start", refuse)
    session = Session(make_settings(stub_model, tmp_path / "run", 3))

    async def run():
        async with watched(session):
            return await session.run()

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(run()) == 3
    assert "swarm watch cannot attach to this run" in caplog.text and "Address already in use" in caplog.text
    assert not watch_file_of(session.run_dir).exists()


def test_a_finished_run_writes_no_watch_file(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 2)
    for _ in range(2):  # the second run only says it is finished: nothing to watch
        session = Session(settings)

        async def run():
            async with watched(session):
                return await session.run()

        assert asyncio.run(run()) == 2
    assert not watch_file_of(session.run_dir).exists()


def label(message):
    detail = message.get("metrics", {}).get("round") or message.get("round") or message.get("message")
    return message["event"], detail


def test_history_keeps_what_a_late_view_needs_in_order():
    history = EventHistory(rounds=3, logs=2)
    metrics = sample(RoundFinished).metrics
    for r in range(1, 6):
        history.record(RoundStarted(r))
        history.record(PhaseProgress(r, "generating", 1, 8))
        history.record(RoundFinished(dataclasses.replace(metrics, round=r)))
        history.record(LogRecorded("info", f"log {r}", float(r)))
    history.record(TrainingPaused(5))
    history.record(TrainingResumed())
    replay = [label(json.loads(text)) for text in history.replay()]
    assert replay == [("RoundFinished", 3), ("RoundFinished", 4), ("LogRecorded", "log 4"), ("RoundStarted", 5),
                      ("PhaseProgress", 5), ("RoundFinished", 5), ("LogRecorded", "log 5"), ("TrainingResumed", None)]


def test_a_full_queue_drops_the_oldest_progress_first_then_gives_up_on_the_watcher():
    async def scenario():
        queue = WatcherQueue(["replay"], limit=3)
        queue.put("progress 1", True)
        queue.put("fact 1", False)
        queue.put("progress 2", True)
        queue.put("fact 2", False)  # full: progress 1 goes
        kept = [await queue.get() for _ in range(4)]
        for i in range(5):  # room for 4 (the replay's share stays), the fifth does not fit: no progress to drop
            queue.put(f"fact {i + 3}", False)
        return kept, queue.too_slow, queue.closed, await queue.get()

    kept, too_slow, closed, after = asyncio.run(scenario())
    assert kept == ["replay", "fact 1", "progress 2", "fact 2"]
    assert too_slow and closed and after is None
    assert QUEUE_LIMIT >= 500  # a watcher of a fast node (fake engine: ~100 rounds/s) is not dropped at once


def test_the_run_commands_do_not_import_aiohttp_before_the_first_line():
    code = ("import sys, swarm_app.cli, swarm_app.watch.service; "
            "print(sorted(m for m in ('aiohttp', 'textual', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_what_a_watcher_sends_steers_nothing(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 0)

    async def scenario():
        session, task, counter = await open_node(settings)
        info = read_watch_file(session.run_dir)
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(info.url, headers=bearer(info.token)) as ws:
                for request in ("stop", "pause", json.dumps({"request": "stop"})):
                    await ws.send_str(request)
                sent_at = counter.rounds
                await wait_for(lambda: counter.rounds >= sent_at + 5)  # still training
                paused, stopping = session.paused, task.done()
                await ws.send_str("x" * 5000)  # over the 4 KiB a watcher may send: the socket closes
                _, code = await asyncio.wait_for(read_all(ws), 10)
                closed = ws.closed, code
        session.stop()
        await task
        return paused, stopping, closed

    paused, stopping, closed = asyncio.run(scenario())
    assert (paused, stopping) == (False, False)
    assert closed == (True, aiohttp.WSCloseCode.MESSAGE_TOO_BIG)
