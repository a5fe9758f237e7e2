"""`swarm hub`: a node without a model that keeps a reachable address useful to its swarm (docs/hub.md).

Owns the flags and the headless view; the session's Hub (swarm_app/session/hub.py) does the work. Ctrl-C
and SIGTERM stop it cleanly (a bye to every peer, the peer table saved). Bad input is one line, exit 2,
before anything is written: `--offline` (a hub exists to be reached) and a `--max-inbound` out of range.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_app.commands import flags
from swarm_app.kernel import logs

HUB_PEER = ("peer.swarm", "peer.swarm_key", "peer.bootstrap", "peer.peers", "peer.listen", "peer.mdns", "peer.dht", "peer.upnp",
            "peer.metrics_listen")
"""flags.PEER but --no-share (a hub has nothing of its own to share) and --offline (refused, below)."""
HUB_INBOUND = 128
"""The default of --max-inbound (session/hub.py HUB_INBOUND; not imported here: this module stays cheap)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("hub", help="a node without a model that relays rollouts for its swarm "
                                 "(for a forwarded port or a small server)")
    parser.add_argument("--max-inbound", metavar="N", type=int, default=HUB_INBOUND,
                        help=f"inbound links held at most (default {HUB_INBOUND}; a training node holds 64)")
    parser.add_argument("--sign-record", metavar="FILE", type=Path,
                        help="put the swarm's record of hubs on the DHT, signed by the key in FILE (made when "
                        "missing; keep it private): members given its public key (--swarm-key, printed at start) "
                        "dial those hubs first, and nobody else can forge them")
    parser.add_argument("--record-hub", metavar="HOST:PORT", action="append", default=[],
                        help="a hub the record lists (this hub's public address, and others); once each")
    parser.add_argument("--offline", dest="peer.enabled", action="store_const", const=False, default=None,
                        help="refused: a hub exists to be reached by its swarm")
    flags.add_settings(parser, HUB_PEER + ("run.log_format",))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    import asyncio  # deferred, as all the work: every `swarm` command imports this module to build its parser

    from swarm_app.headless import HeadlessView
    from swarm_app.kernel.errors import UsageError
    from swarm_app.session.hub import Hub, SwarmRecord, hub_settings_error

    if args.record_hub and args.sign_record is None:
        raise UsageError("--record-hub lists hubs in the swarm's signed record: give --sign-record FILE too")
    if args.sign_record is not None:
        SwarmRecord.checked_hubs(args.record_hub)
    error = hub_settings_error(settings, args.max_inbound, args.sign_record is not None)
    if error:
        raise UsageError(error)  # before a key file is made
    record = SwarmRecord.load(args.sign_record, args.record_hub) if args.sign_record else None
    hub = Hub(settings, args.max_inbound, record=record)  # UsageError (exit 2) before anything is written
    if record is not None:
        print(f"swarm record: {'made a new key in' if record.created else 'key from'} {args.sign_record}; members "
              f"join with --swarm {hub.config.swarm} --swarm-key {record.signer.public_text} "
              f"(lists {', '.join(record.hubs)})")
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
