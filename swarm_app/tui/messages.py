"""App-wide messages: one wrapper that carries a session event into Textual's message queue."""

from __future__ import annotations

from textual.message import Message

from swarm_app.events import Event


class SessionEvent(Message):
    """A session event for the app. Progress events replace a queued one of their kind, so a slow
    terminal draws the newest progress instead of working through stale ones."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        return (isinstance(message, SessionEvent) and self.event.replaceable
                and type(message.event) is type(self.event))
