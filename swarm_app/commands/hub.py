"""`swarm hub`: a node without a model that keeps a reachable address useful to its swarm (docs/hub.md).

Owns the flags and the headless view; the session's Hub (swarm_app/session/hub.py) does the work. Ctrl-C
and SIGTERM stop it cleanly (a bye to every peer, the peer table saved). Bad input is one line, exit 2,
before anything is written: `--offline` (a hub exists to be reached) and a `--max-inbound` out of range.
"""

from __future__ import annotations

import argparse

from swarm_app.commands import flags
from swarm_app.kernel import logs

HUB_PEER = ("peer.swarm", "peer.bootstrap", "peer.peers", "peer.listen", "peer.mdns", "peer.dht", "peer.upnp",
            "peer.metrics_listen")
"""flags.PEER but --no-share (a hub has nothing of its own to share) and --offline (refused, below)."""
HUB_INBOUND = 128
"""The default of --max-inbound (session/hub.py HUB_INBOUND; not imported here: this module stays cheap)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("hub", help="a node without a model that relays rollouts for its swarm "
                                 "(for a forwarded port or a small server)")
    parser.add_argument("--max-inbound", metavar="N", type=int, default=HUB_INBOUND,
                        help=f"inbound links held at most (default {HUB_INBOUND}; a training node holds 64)")
    parser.add_argument("--offline", dest="peer.enabled", action="store_const", const=False, default=None,
                        help="refused: a hub exists to be reached by its swarm")
    flags.add_settings(parser, HUB_PEER + ("run.log_format",))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    import asyncio  # deferred, as all the work: every `swarm` command imports this module to build its parser

    from swarm_app.headless import HeadlessView
    from swarm_app.session.hub import Hub

    hub = Hub(settings, args.max_inbound)  # UsageError (exit 2) before anything is written
    logs.to_file()
    hub.subscribe(HeadlessView(settings.run.log_format))
    asyncio.run(_run_until_stopped(hub))
    print("hub stopped (peers were told; the peer table is saved)")
    return 0


async def _run_until_stopped(hub) -> None:
    import asyncio

    from swarm_app.kernel.stopping import on_stop_signals

    undo = on_stop_signals(asyncio.get_running_loop(), hub.stop)
    try:
        await hub.run()
    finally:
        undo()
