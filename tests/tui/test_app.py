"""Pilot tests of the TUI: keys steer a real Session (fake backend, real files, a real peer node on
127.0.0.1), and scripted events update the widgets they should."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from textual.widgets import DataTable

from backends.fake import FakeBackend
from swarm_app.kernel.events import EvaluationFinished, PhaseProgress, RoundFinished, RunStopped, SharingChanged, TrainingPaused
from swarm_app.kernel.tasks import heldout, preset
from swarm_app.session.session import Session
from swarm_app.training.checkpoint import Checkpoints
from swarm_app.tui.app import SwarmApp
from swarm_app.tui.dashboard import EngineBadge, RoundStatus
from swarm_app.tui.messages import SessionEvent
from swarm_app.tui.peers import PeersView
from tests.session.test_session import make_settings
from tests.tui.script import T0, dashboard_script, peer, peers_updated, scripted

SIZE = (100, 30)


def session_app(settings):
    session = Session(settings)
    events = []
    session.subscribe(events.append)

    async def source(deliver):
        session.subscribe(deliver)
        await session.run()

    return SwarmApp(source, session), session, events


async def wait_for(pilot, condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


def networked(settings):
    settings.peer.enabled, settings.peer.mdns, settings.peer.listen = True, False, "127.0.0.1:0"
    return settings


def rounds_done(events):
    return [e.metrics.round for e in events if isinstance(e, RoundFinished)]


async def test_p_pauses_new_rounds_while_the_node_keeps_serving_peers(stub_model, tmp_path):
    app, session, events = session_app(networked(make_settings(stub_model, tmp_path / "run", 0)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(rounds_done(events)) >= 2)
        await pilot.press("p")
        await wait_for(pilot, lambda: any(isinstance(e, TrainingPaused) for e in events))
        done = len(rounds_done(events))
        await pilot.pause(0.6)
        assert len(rounds_done(events)) == done  # no new round while paused
        async with aiohttp.ClientSession() as client:  # ...but the swarm side still answers
            async with client.get(f"http://{session.peer_node.address}/rsp/v1/info") as response:
                assert response.status == 200 and (await response.json())["node"] == session.peer_node.node_id
        assert "paused" in str(app.query_one(RoundStatus).render())
        await pilot.press("p")
        await wait_for(pilot, lambda: len(rounds_done(events)) > done)
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))
    assert app.return_code == 0


async def test_s_toggles_sharing_on_the_peer_node(stub_model, tmp_path):
    app, session, events = session_app(networked(make_settings(stub_model, tmp_path / "run", 0)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: session.peer_node is not None and rounds_done(events))
        await pilot.press("s")
        await wait_for(pilot, lambda: any(isinstance(e, SharingChanged) for e in events))
        assert session.peer_node.core.view.sharing is False
        await pilot.press("s")
        await wait_for(pilot, lambda: session.peer_node.core.view.sharing is True)
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))


async def test_e_runs_a_held_out_evaluation(stub_model, tmp_path):
    app, session, events = session_app(make_settings(stub_model, tmp_path / "run", 0, eval_n=10))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rounds_done(events))
        await pilot.press("e")
        await wait_for(pilot, lambda: any(isinstance(e, EvaluationFinished) for e in events))
        evaluation = next(e for e in events if isinstance(e, EvaluationFinished))
        done_before = [e.metrics.round for e in events[:events.index(evaluation)] if isinstance(e, RoundFinished)]
        assert evaluation.round == done_before[-1]  # the model as the last completed round left it
        correct = evaluation.accuracy * 10  # 10 held-out items, each right or wrong
        assert abs(correct - round(correct)) < 1e-9
        tasks_evaluated = {ref.dataset for ref in heldout(preset(session.settings.tasks.preset), 10)}
        assert set(evaluation.per_task) == tasks_evaluated
        assert app.states[0].curves.heldout[-1] == evaluation.accuracy  # and the chart got it
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))


async def test_q_leaves_a_loadable_checkpoint_and_exit_code_0(stub_model, tmp_path):
    app, session, events = session_app(make_settings(stub_model, tmp_path / "run", 0))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(rounds_done(events)) >= 3)
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))
    stopped = next(e for e in events if isinstance(e, RunStopped))
    assert app.return_code == 0 and stopped.reason == "interrupted"
    state, folder = Checkpoints(tmp_path / "run").load_latest()
    assert state.round == stopped.last_round == rounds_done(events)[-1]
    backend = FakeBackend()
    backend.load_adapter(folder)  # raises if it is not loadable
    assert backend.updates == session.trainer.backend.updates


async def test_scripted_events_reach_the_widgets():
    hold = asyncio.Event()
    app = SwarmApp(scripted(dashboard_script(), hold), clock=lambda: T0 + 25)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.flush()
        badge, status = str(app.query_one(EngineBadge).render()), str(app.query_one(RoundStatus).render())
        assert "torch" in badge and "model 17 MB · process 212 MB of 24 GB" in badge and "node abababababab" in badge
        assert "round 13/20" in status and "training 1/2" in status and "ETA 16 s" in status
        assert "no peer connected" in str(app.query_one("#notice").render())
        assert app.state.curves.heldout == [0.55, 0.6]
        await pilot.press("q")
    assert app.return_code == 0


async def test_a_peer_appearing_and_leaving_shows_in_the_table():
    events = [peers_updated([peer(1)])]
    app = SwarmApp(scripted(events, asyncio.Event()), clock=lambda: T0 + 25)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        app.flush()
        table = app.query_one(PeersView).query_one(DataTable)
        assert table.row_count == 1 and "010101010101" in str(table.get_row_at(0)[0])
        app.post_message(SessionEvent(peers_updated([peer(1), peer(2)])))
        await pilot.pause()
        app.flush()
        assert table.row_count == 2
        app.post_message(SessionEvent(peers_updated([peer(2)])))
        await pilot.pause()
        app.flush()
        assert table.row_count == 1 and "020202020202" in str(table.get_row_at(0)[0])


async def test_peer_supplied_text_cannot_drive_the_terminal():
    hostile = peer(1, address="1.2.3.4:5\x1b[2J\x1b]0;owned\x07", main_rejection="x\x1b[31m")
    app = SwarmApp(scripted([peers_updated([hostile])], asyncio.Event()), clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        row = app.state.peers[0]
        assert "\x1b" not in row.address and "\x07" not in row.address and "\x1b" not in row.main_rejection
        assert row.address.startswith("1.2.3.4:5\ufffd")


@pytest.mark.timeout(120)
async def test_a_stop_during_generation_returns_within_2_s_on_the_bundled_model(tmp_path):
    settings = make_settings("", tmp_path / "run", 0)
    settings.model.path, settings.model.backend, settings.model.threads = "", "torch", 1
    settings.model.max_new_tokens = 256  # a long generation, so the stop really lands inside one
    session = Session(settings)
    generating = asyncio.Event()
    session.subscribe(lambda e: generating.set() if isinstance(e, PhaseProgress) and e.phase == "generating"
                      and e.done >= 2 else None)
    run = asyncio.create_task(session.run())
    await asyncio.wait_for(generating.wait(), 90)
    asked = time.monotonic()
    session.stop()
    last = await asyncio.wait_for(run, 30)
    took = time.monotonic() - asked
    session.close()
    assert last == 0 and took < 2.0, f"the stop took {took:.2f} s"


# --- issue 29: the views' loose ends


async def test_offline_the_status_line_says_offline_not_sharing_on(stub_model, tmp_path):
    app, session, events = session_app(make_settings(stub_model, tmp_path / "run", 0))  # peer.enabled is off
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rounds_done(events))
        await pilot.pause(0.3)
        app.flush()
        status = str(app.query_one(RoundStatus).render())
        assert "offline" in status and "sharing on" not in status, status
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))


async def test_an_e_evaluation_is_a_row_of_metrics_jsonl(stub_model, tmp_path):
    import json

    app, session, events = session_app(make_settings(stub_model, tmp_path / "run", 0, eval_n=10))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rounds_done(events))
        await pilot.press("e")
        await wait_for(pilot, lambda: any(isinstance(e, EvaluationFinished) for e in events))
        await pilot.press("q")
        await wait_for(pilot, lambda: any(isinstance(e, RunStopped) for e in events))
    evaluation = next(e for e in events if isinstance(e, EvaluationFinished))
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in lines if row.get("type") == "eval"]
    assert [(r["kind"], r["round"], r["heldout_acc"], r["n"], r["per_task"]) for r in evals] == [
        ("requested", evaluation.round, evaluation.accuracy, 10, evaluation.per_task)]
    rounds = [row["round"] for row in lines if "type" not in row]  # round rows are as they were
    assert rounds == list(range(1, len(rounds) + 1))


async def test_the_status_line_shows_a_final_evaluation_with_its_progress():
    from swarm_app.kernel.events import EvaluationProgress, EvaluationStarted

    script = dashboard_script(3)[:-1] + [EvaluationStarted(3, 200, "final"), EvaluationProgress(3, 64, 200, "final")]
    app = SwarmApp(scripted(script, asyncio.Event()), clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.flush()
        assert "final evaluation 64/200" in str(app.query_one(RoundStatus).render())


async def test_help_lists_every_key_the_app_binds():
    from swarm_app.tui.app import HELP

    app = SwarmApp(scripted([], asyncio.Event()))
    keys = {b.key_display or b.key for b in app.BINDINGS if not b.key.startswith("ctrl+")}
    named = {"question_mark": "?", "f12": "F12"}
    listed = " ".join(line.split("  ")[0] for line in HELP.splitlines())
    assert {named.get(k, k) for k in keys} - {"?"} <= set(listed.split())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert any("F12" in str(n.message) and "1 2 3" in str(n.message) for n in app._notifications)
