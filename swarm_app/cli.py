"""The `swarm` command: the top-level parser, the dispatch to a command, and the one-line errors.

Each command's flags and handler live in its module in swarm_app/commands/. Importing this module is
cheap (no torch, textual, mlx or llama_cpp): `swarm --version` answers in well under a second. Errors
the user can fix print one line and exit 2; nothing is written first.
"""

from __future__ import annotations

import argparse
import sys

from swarm_app import __version__
from swarm_app.commands import convert, demo, doctor, export, identity, run, watch
from swarm_app.commands import eval as eval_command
from swarm_app.kernel import logs
from swarm_app.kernel.errors import SwarmError
from swarm_app.session import PROTOCOL_VERSION

COMMANDS = (run, demo, watch, identity, export, convert, eval_command, doctor)
"""In the order `swarm --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarm", description="A SAPO node: train your own LoRA with a swarm of peers.")
    parser.add_argument("--version", action="version", version=f"swarm-app {__version__} (protocol RSP/1 "
                        f"v{PROTOCOL_VERSION}; swarm doctor checks it against your peers)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (to stderr)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.typed = list(sys.argv[1:] if argv is None else argv)  # `run --gpus` passes them on to each node
    logs.to_stderr(args.verbose)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except SwarmError as exc:
        print(f"swarm: {exc.message}", file=sys.stderr)
        return exc.exit_code
