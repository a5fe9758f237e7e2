"""`swarm watch`: look in on a node running on this machine, read-only.

Owns the flags; swarm_app/watch/client.py connects and shows the node's events.
"""

from __future__ import annotations

import argparse

from swarm_app.commands import flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("watch", help="look in on a node running on this machine (read-only)")
    flags.add_settings(parser, ("run.run_dir", "run.ui", "run.log_format"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    from swarm_app.session.setup import run_dir_of
    from swarm_app.watch.client import watch

    return watch(run_dir_of(settings), settings.run.ui, settings.run.log_format)
