"""`swarm run`: train round after round in the TUI or headless (resuming the run it finds), or one
node per GPU with `--gpus`.

Owns the flags and the choice of view; the Session does the work. Ctrl-C and SIGTERM stop between
steps; the TUI owns the terminal while it runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from swarm_app.commands import flags
from swarm_app.kernel import logs

log = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("run", help="train round after round (resumes the run it finds)")
    parser.add_argument("--fresh", action="store_true", help="start over; an existing run is moved aside")
    parser.add_argument("--gpus", metavar="all|0,1,...", help="one node per GPU, each with its own key, run folder "
                        "and port (headless; look at one with swarm watch --run-dir RUN-gpuN)")
    flags.add_settings(parser, flags.MODEL + flags.TRAIN + ("run.run_dir", "run.ui", "run.log_format", "resources.level")
                       + flags.PEER)
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    if args.gpus:
        return _run_per_gpu(args, settings)
    import asyncio  # deferred, as all the work: every `swarm` command imports this module to build its parser

    from swarm_app.session.session import Session, SessionOptions

    logs.to_file()
    session = Session(settings, SessionOptions(fresh=args.fresh))  # it detects the hardware while loading
    session.lower_priority()  # the owner's programs come first (resources.low_priority)
    try:
        if wants_tui(settings):
            return _run_in_tui(session)
        from swarm_app.headless import HeadlessView

        session.subscribe(HeadlessView(settings.run.log_format))
        asyncio.run(_run_until_stopped(session))
    finally:
        session.close()
    return 0


def wants_tui(settings) -> bool:
    """The TUI unless --no-ui, or when there is no terminal to draw on (a pipe, systemd, CI)."""
    if not settings.run.ui:
        return False
    if not (sys.stdin.isatty() and sys.__stderr__.isatty() and sys.stdout.isatty()):
        log.info("no terminal to draw on: showing the headless view (pass --no-ui to say so)")
        return False
    return True


async def _run_until_stopped(session) -> None:
    import asyncio

    from swarm_app.kernel.stopping import on_stop_signals
    from swarm_app.watch.service import watched

    undo = on_stop_signals(asyncio.get_running_loop(), session.stop)
    try:
        async with watched(session):  # `swarm watch` can attach (127.0.0.1, token in watch.json)
            await session.run()
    finally:
        undo()


def _run_per_gpu(args: argparse.Namespace, settings) -> int:
    import asyncio

    from swarm_app.kernel.hardware import detect
    from swarm_app.multi_gpu.processes import parse_gpus, plan_nodes, run_nodes, without_gpus_flag
    from swarm_app.session.run_folder import run_dir_of

    gpus = parse_gpus(args.gpus, len(detect().gpus))
    typed = without_gpus_flag(args.typed[args.typed.index("run") + 1:])
    nodes = plan_nodes(gpus, typed, run_dir_of(settings), settings.peer.listen, settings.peer.enabled)
    for node in nodes:
        print(f"gpu {node.gpu}: run folder {node.run_dir}" + (f", listening on {node.listen}" if settings.peer.enabled else ""))
    from swarm_app.headless import HeadlessView

    views = {node.gpu: HeadlessView(settings.run.log_format, prefix=f"gpu {node.gpu}  ") for node in nodes}
    return asyncio.run(run_nodes(nodes, lambda gpu, event: views[gpu](event)))


def _run_in_tui(session) -> int:
    from swarm_app.chat.child import ChildChat
    from swarm_app.headless import format_stop
    from swarm_app.kernel.events import RunStopped
    from swarm_app.tui.app import SwarmApp

    stops: list[RunStopped] = []
    chat = ChildChat(session.run_dir, lambda: session.backend_name)  # its own process, started on the first `c` prompt

    async def source(deliver) -> None:
        session.subscribe(deliver)
        session.subscribe(lambda e: stops.append(e) if isinstance(e, RunStopped) else None)
        try:
            await _run_until_stopped(session)
        finally:
            await chat.close()

    app = SwarmApp(source, session, subtitle=str(session.run_dir), chat=chat)
    with logs.terminal_owned_by_tui():
        code = app.run()
    if app.error is not None:
        raise app.error  # one line, by cli.fail
    if stops:
        print(format_stop(stops[-1]))  # the terminal is back: say where the files are
    return code if code is not None else (app.return_code or 0)  # never 0 after a crash
