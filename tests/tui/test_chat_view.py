"""The chat view: `c` opens it and a prompt gets the answer of a real `swarm chat --json-lines` process on a
run folder (fake engine); its look, fed by a scripted chat (no process, no clock)."""

from __future__ import annotations

import asyncio
import json
import time

from backends.base import Sampling
from backends.fake import FakeBackend
from swarm_app.chat.child import ChildChat
from swarm_app.chat.talk import prompt_messages
from swarm_app.kernel.events import ChatReplied
from swarm_app.training.checkpoint import Checkpoints, CheckpointState
from swarm_app.tui.app import SwarmApp
from swarm_app.tui.chat import ChatView
from tests.tui.script import dashboard_script, scripted

PROMPT = "What is 3 + 4?"


def fake_run(run_dir, model, updates: int) -> None:
    """A run folder as a fake-engine node leaves it after `updates` updates."""
    backend = FakeBackend()
    backend.updates = updates
    Checkpoints(run_dir).save(CheckpointState(updates, updates, "fake", "fake"), backend.save_adapter)
    (run_dir / "run.json").write_text(json.dumps({"model": str(model), "preset": "easy", "backend": "fake"}))


async def test_c_opens_the_chat_and_a_prompt_gets_the_checkpoint_s_answer(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, stub_model, updates=4)
    expected = FakeBackend()
    expected.updates = 4  # what the checkpoint's adapter answers (greedy); the base model answers otherwise
    answer = expected.generate([prompt_messages(PROMPT)], 1, Sampling(temperature=0.0))[0][0].text
    chat = ChildChat(run_dir, lambda: "fake")
    app = SwarmApp(scripted([]), chat=chat)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert app.query_one("TabbedContent").active == "chat"
        await pilot.press(*PROMPT, "enter")
        view = app.query_one(ChatView)
        deadline = time.monotonic() + 60
        while view.turns[-1][1] in ("…", ""):
            assert time.monotonic() < deadline, "no answer"
            await pilot.pause(0.1)
        assert view.turns == [(PROMPT, answer)]
        assert "round 4" in str(app.query_one("#chat-source").render())
        await chat.close()


class ScriptedChat:
    """Answers every prompt at once with a fixed text, as the chat process would when done."""

    def ask(self, prompt, reply) -> int:
        reply(ChatReplied(1, "I think it is 7. <answer>7</answer>", True, "the adapter of round 12 of /runs/demo"))
        return 1


def test_chat_view(snap_compare):
    app = SwarmApp(scripted(dashboard_script(external=2), asyncio.Event()), subtitle="/runs/demo", chat=ScriptedChat(),
                   clock=lambda: 0.0)

    async def run_before(pilot) -> None:
        await pilot.press("c")
        await pilot.press(*PROMPT, "enter")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
