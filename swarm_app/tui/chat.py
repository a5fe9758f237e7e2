"""The chat view (`c`): a prompt line and the streamed answer of the node's newest checkpoint.

It knows the chat only as a `Chat` (app.py): `ask(prompt, reply)`, whose ChatReplied events arrive as
ChatAnswer messages. The answer grows in place; earlier prompts and answers stay above it.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from swarm_app.kernel.events import ChatReplied

IDLE = "Ask the node's newest checkpoint (one question a line; Enter sends, Esc leaves the line)."


class ChatView(Vertical):
    def compose(self) -> ComposeResult:
        yield Static(IDLE, id="chat-source")
        yield Static("", id="chat-log")
        yield Input(placeholder="What is 3 + 4?", id="chat-input")

    def on_mount(self) -> None:
        self.turns: list[tuple[str, str]] = []
        """(prompt, answer so far), oldest first."""

    def asked(self, prompt: str) -> None:
        self.turns.append((prompt, "…"))
        self._draw()

    def replied(self, event: ChatReplied) -> None:
        if not self.turns:
            return
        prompt, _ = self.turns[-1]
        answer = event.text + (f"  [{event.error}]" if event.error else "")
        self.turns[-1] = (prompt, answer or ("(no answer)" if event.done else "…"))
        if event.source:
            self.query_one("#chat-source", Static).update(f"talking to {event.source}")
        self._draw()

    def _draw(self) -> None:
        text = Text()
        for prompt, answer in self.turns[-8:]:
            text.append("> ", "bold")
            text.append(prompt + "\n", "bold")
            text.append(answer + "\n")
        self.query_one("#chat-log", Static).update(text)
