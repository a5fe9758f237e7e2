"""`SwarmApp`: the terminal UI of one node (or, read-only, of a node watched with `swarm watch`).

It knows the node only through two things: a `source` coroutine that delivers events to a callback
until the node stops (a local session's run, or the watch client's stream), and optional `controls`
(the session's request methods; None when read-only). Events arrive as `SessionEvent` messages, are
folded into one `ViewState`, and the widgets that show that kind of fact redraw from it.
"""

from __future__ import annotations

import time
from typing import Awaitable, Callable, Protocol

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Input, TabbedContent, TabPane

from swarm_app.kernel.errors import SwarmError
from swarm_app.kernel.events import (
    ChatReplied,
    EvaluationFinished,
    LogRecorded,
    PeersUpdated,
    RolledBack,
    RoundFinished,
    RunStopped,
    SoloCurveFound,
)
from swarm_app.tui.chat import ChatView
from swarm_app.tui.dashboard import Dashboard, RewardChart
from swarm_app.tui.log_view import LogsView
from swarm_app.tui.messages import ChatAnswer, SessionEvent
from swarm_app.tui.peers import PeersView
from swarm_app.tui.state import ViewState

Source = Callable[[Callable[..., None]], Awaitable[object]]
"""`source(deliver)` runs until the node stops, calling `deliver(event)` on the app's loop
(`deliver(event, node)` when it feeds several nodes, numbered from 0)."""

HELP = ("p  pause / resume training (the node keeps sharing)\n"
        "s  sharing on / off\n"
        "e  held-out evaluation now\n"
        "t  chart: rewards / held-out accuracy per task\n"
        "c  chat with the newest checkpoint (Esc: back to the keys)\n"
        "l  logs: lowest level shown\n"
        "1 2 3  dashboard, peers, logs\n"
        "n  next node (swarm demo)\n"
        "F12  save a screenshot (SVG)\n"
        "q  quit (checkpoint first)")


class Controls(Protocol):
    paused: bool

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def set_sharing(self, share: bool) -> None: ...
    def evaluate_now(self) -> None: ...
    def stop(self) -> None: ...


class Chat(Protocol):
    """Talks to the node's newest checkpoint (swarm_app/chat/child.py): `reply` hears ChatReplied events."""

    def ask(self, prompt: str, reply: Callable[[ChatReplied], None]) -> int: ...


class SwarmApp(App[int]):
    CSS_PATH = "swarm.tcss"
    TITLE = "swarm-app"
    BINDINGS = [
        Binding("p", "toggle_pause", "Pause"),
        Binding("s", "toggle_sharing", "Sharing"),
        Binding("e", "evaluate", "Evaluate"),
        Binding("t", "toggle_chart", "Per task"),
        Binding("c", "chat", "Chat"),
        Binding("l", "cycle_logs", "Log level", show=False),
        Binding("1", "show_tab('dashboard')", "Dashboard", show=False),
        Binding("2", "show_tab('peers')", "Peers", show=False),
        Binding("3", "show_tab('logs')", "Logs", show=False),
        Binding("n", "next_node", "Next node", show=False),
        Binding("f12", "save_picture", "Screenshot", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit_run", "Quit"),
        Binding("ctrl+q", "quit_run", "Quit", show=False, priority=True),
        Binding("ctrl+c", "quit_run", "Quit", show=False, priority=True),
    ]

    def __init__(self, source: Source, controls: Controls | None = None, *, subtitle: str = "",
                 clock: Callable[[], float] = time.time, nodes: int = 1,
                 node_controls: dict[int, Controls] | None = None, chat: Chat | None = None) -> None:
        """`controls` steer the one node (None: read-only); with `nodes` > 1, `node_controls` maps each
        node to its controls as they appear, and `n` switches between the nodes."""
        super().__init__()
        self.source, self.clock = source, clock
        self.node_controls = node_controls if node_controls is not None else ({0: controls} if controls else {})
        self.states = [ViewState() for _ in range(nodes)]
        self.selected = 0
        self.subtitle = subtitle
        self.chat = chat
        self.error: BaseException | None = None
        """What ended the app when it was not the user: the node's error (one the user can fix, or not) or
        the app's own. The command raises it once the terminal is back, as one line."""

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="dashboard"):
            with TabPane("Dashboard", id="dashboard"):
                yield Dashboard()
            with TabPane("Peers", id="peers"):
                yield PeersView()
            with TabPane("Logs", id="logs"):
                yield LogsView()
            with TabPane("Chat", id="chat"):
                yield ChatView()
        yield Footer()

    REDRAW_S = 0.2
    """Charts and tables redraw at most 5 times a second: a fast engine finishes rounds in milliseconds."""

    def on_mount(self) -> None:
        self._stale: set[str] = set()
        self.redraw()
        self.query_one(LogsView).redraw(self.state)
        self.set_interval(self.REDRAW_S, self.flush)
        self.run_source()

    @property
    def state(self) -> ViewState:
        return self.states[self.selected]

    @property
    def controls(self) -> Controls | None:
        return self.node_controls.get(self.selected)

    @work(exclusive=True, group="source")
    async def run_source(self) -> None:
        try:
            await self.source(lambda event, node=0: self.post_message(SessionEvent(event, node)))
        except Exception as exc:  # the node failed: the command says why once the terminal is back
            self.error = exc
            self.exit(exc.exit_code if isinstance(exc, SwarmError) else 1)
            return
        self.exit(0)

    def _handle_exception(self, error: Exception) -> None:
        """Textual's path for an error of its own (a widget's bug): it exits with code 1 and prints a
        rich traceback of hundreds of lines over the terminal. The app still exits 1; the traceback
        goes to swarm.log through the command (textual 8: the traceback is one of `_exit_renderables`)."""
        if self.error is None:
            self.error = error
        super()._handle_exception(error)
        self._exit_renderables.clear()

    # --- events in
    @on(SessionEvent)
    def on_session_event(self, message: SessionEvent) -> None:
        event = message.event
        self.states[message.node].apply(event)
        if message.node != self.selected:
            return
        if isinstance(event, LogRecorded):
            self.query_one(LogsView).add(self.state.logs[-1])
        if isinstance(event, (RoundFinished, EvaluationFinished, SoloCurveFound)):
            self._stale.add("chart")
        if isinstance(event, (PeersUpdated, RoundFinished)):
            self._stale.add("peers")
        if isinstance(event, RolledBack):
            self.notify(event.text, title="Rollback", severity="warning", timeout=10)
        if isinstance(event, RunStopped) and self.controls is None:
            self.notify(self.state.stop_line, title="The node stopped")
        self._stale.add("dashboard")

    def flush(self) -> None:
        """Redraw what changed since the last flush."""
        stale, self._stale = self._stale, set()
        if "chart" in stale:
            self.query_one(RewardChart).show(self.state)
        if "peers" in stale:
            self.refresh_peers()
        if "dashboard" in stale:
            self.redraw()

    def redraw(self) -> None:
        self.query_one(Dashboard).show(self.state)
        node = f"node {self.selected + 1} of {len(self.states)} (n: next) · " if len(self.states) > 1 else ""
        mode = "" if self.controls else " · read-only"
        self.sub_title = f"{node}{self.state.status} · round {self.state.round}{mode} · {self.subtitle}"

    def refresh_peers(self) -> None:
        self.query_one(PeersView).show(self.state, self.clock())

    # --- keys out
    def _control(self) -> Controls | None:
        if self.controls is None:
            self.notify("read-only: this view watches a node; steer it where it runs", severity="warning")
        return self.controls

    def action_toggle_pause(self) -> None:
        if (c := self._control()) is not None:
            c.resume() if c.paused else c.pause()
            self.notify("training resumes" if not c.paused else "training pauses after this round; sharing goes on")

    def action_toggle_sharing(self) -> None:
        if self.state.offline:
            self.notify("offline (--offline): this node shares nothing and receives nothing", severity="warning")
            return
        if (c := self._control()) is not None:
            c.set_sharing(not self.state.sharing)

    def action_evaluate(self) -> None:
        if (c := self._control()) is not None:
            c.evaluate_now()
            self.notify("held-out evaluation after the round under way")

    def action_toggle_chart(self) -> None:
        chart = self.query_one(RewardChart)
        chart.per_task = not chart.per_task
        chart.show(self.state)

    def action_cycle_logs(self) -> None:
        self.query_one(LogsView).cycle_level(self.state)

    def action_chat(self) -> None:
        if self.chat is None:
            self.notify("chat: only where the node runs (swarm run, or swarm chat --run-dir RUN)", severity="warning")
            return
        self.query_one(TabbedContent).active = "chat"
        self.query_one("#chat-input", Input).focus()

    @on(Input.Submitted, "#chat-input")
    def on_chat_submitted(self, message: Input.Submitted) -> None:
        prompt = message.value.strip()
        if not prompt or self.chat is None:
            return
        message.input.clear()
        self.query_one(ChatView).asked(prompt)
        self.chat.ask(prompt, lambda event: self.post_message(ChatAnswer(event)))

    @on(ChatAnswer)
    def on_chat_answer(self, message: ChatAnswer) -> None:
        self.query_one(ChatView).replied(message.event)

    def key_escape(self) -> None:
        self.set_focus(None)  # out of the chat line: the keys steer the node again

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_next_node(self) -> None:
        if len(self.states) > 1:
            self.selected = (self.selected + 1) % len(self.states)
            self._stale |= {"chart", "peers", "dashboard"}
            self.query_one(LogsView).redraw(self.state)
            self.flush()

    def action_save_picture(self) -> None:
        """An SVG of the screen in the user data dir (to share, or for the docs)."""
        from swarm_app.kernel.paths import user_dirs

        folder = user_dirs().data / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        path = self.save_screenshot(path=str(folder))
        self.notify(f"saved {path}", title="Screenshot")

    def action_help(self) -> None:
        self.notify(HELP, title="Keys", timeout=10)

    def action_quit_run(self) -> None:
        running = [c for i, c in self.node_controls.items() if self.states[i].status != "stopped"]
        if not running:
            self.exit(0)
            return
        self.notify("stopping: checkpointing the last completed round")
        for controls in running:
            controls.stop()  # run_source exits the app once every session has checkpointed and stopped
