"""App-wide messages: one wrapper that carries a session event into Textual's message queue."""

from __future__ import annotations

from textual.message import Message

from swarm_app.kernel.events import ChatReplied, Event


class SessionEvent(Message):
    """A session event for the app. Progress events replace a queued one of their kind, so a slow
    terminal draws the newest progress instead of working through stale ones."""

    def __init__(self, event: Event, node: int = 0) -> None:
        super().__init__()
        self.event = event
        self.node = node
        """Which node it came from (`swarm demo` shows several)."""

    def can_replace(self, message: Message) -> bool:
        return (isinstance(message, SessionEvent) and self.event.replaceable and message.node == self.node
                and type(message.event) is type(self.event))


class ChatAnswer(Message):
    """A chat answer so far (kernel's ChatReplied); a newer one of the same prompt replaces a queued one."""

    def __init__(self, event: ChatReplied) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ChatAnswer) and message.event.asked == self.event.asked and not message.event.done
