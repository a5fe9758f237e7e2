"""`swarm watch`: look in on a node running on this machine, read-only.

Owns the flags and the choice of view: the node's events (swarm_app/watch/client.py's stream) in the
same TUI as `swarm run`, without controls, or as the headless lines with `--no-ui`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

from swarm_app.commands import flags
from swarm_app.kernel import logs
from swarm_app.kernel.errors import SwarmError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("watch", help="look in on a node running on this machine (read-only)")
    flags.add_settings(parser, ("run.run_dir", "run.ui", "run.log_format"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    from swarm_app.session.run_folder import run_dir_of

    return watch(run_dir_of(settings), settings.run.ui, settings.run.log_format)


def watch(run_dir: Path, ui: bool, log_format: str = "text") -> int:
    """The command: 0 when the user quits (TUI) or the node stopped (--no-ui)."""
    import asyncio  # deferred: every `swarm` command imports this module to build its parser

    try:
        return asyncio.run(watch_in_tui(run_dir) if ui else print_events(run_dir, log_format))
    except KeyboardInterrupt:
        return 0  # the watcher detaches; the node runs on


async def print_events(run_dir: Path, log_format: str) -> int:
    from swarm_app.headless import HeadlessView
    from swarm_app.watch.client import NodeStream

    view = HeadlessView(log_format)
    async with NodeStream(run_dir) as stream:
        async for event in stream.events():
            view(event)
    if not stream.stopped:
        raise SwarmError(f"the connection to the node in {run_dir} closed before it stopped "
                         f"({stream.close_reason}); run swarm watch again to reattach")
    return 0


async def watch_in_tui(run_dir: Path) -> int:
    from swarm_app.tui.app import SwarmApp
    from swarm_app.watch.client import NodeStream

    async with NodeStream(run_dir) as stream:  # connect first: a problem is one line, not a screen
        app = SwarmApp(lambda deliver: feed(stream, deliver), None, subtitle=f"watching {run_dir}")
        with logs.terminal_owned_by_tui():
            code = await app.run_async()
    if app.error is not None:
        raise app.error  # one line, by cli.fail
    return code or app.return_code or 0  # never 0 after a crash


async def feed(stream, deliver: Callable) -> None:
    """The TUI's source: events until the stream ends, then the screen stays until the user quits."""
    import asyncio

    from swarm_app.kernel.events import LogRecorded  # deferred: two dozen dataclasses, which `swarm --help` skips

    async for event in stream.events():
        deliver(event)
    if not stream.stopped:
        deliver(LogRecorded("warning", f"the connection to the node closed ({stream.close_reason}); "
                                       "quit with q and run swarm watch again to reattach", time.time()))
    await asyncio.Event().wait()  # cancelled when the app exits
