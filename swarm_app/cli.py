"""The `swarm` command: the top-level parser, the dispatch to a command, and the one-line errors.

Each command's flags and handler live in its module in swarm_app/commands/. Importing this module is
cheap (no torch, textual, mlx or llama_cpp): `swarm --version` answers in well under a second. Every
failure is one line on stderr: errors the user can fix name the fix and exit 2 (nothing is written
first), a failure after training started exits 1, and anything unforeseen is one line too, its
traceback in swarm.log. Where a second error (a teardown) replaced the one that ended the command, the
first is the one said. No parser takes abbreviated flags: `--round 3` must not silently mean `--rounds`.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from swarm_app import __version__
from swarm_app.commands import chat, convert, demo, doctor, experiment, export, hub, identity, run, stats, watch
from swarm_app.commands import eval as eval_command
from swarm_app.kernel import logs
from swarm_app.kernel.errors import SwarmError
from swarm_app.session import PROTOCOL_VERSION

COMMANDS = (run, hub, demo, experiment, watch, chat, stats, identity, export, convert, eval_command, doctor)
"""In the order `swarm --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="swarm", description="A SAPO node: train your own LoRA with a swarm of peers.")
    parser.add_argument("--version", action="version", version=f"swarm-app {__version__} (protocol RSP/1 "
                        f"v{PROTOCOL_VERSION}; swarm doctor checks it against your peers)")
    add_logging_flags(parser, argparse.SUPPRESS)
    parser.set_defaults(verbose=False, log_level=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    for sub in _below(parser):
        add_logging_flags(sub, argparse.SUPPRESS)  # before or after the command: `swarm run -v` as `swarm -v run`
    return parser


def _below(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser under `parser`: the commands', and their subcommands' (`identity import`)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [sub, *_below(sub)]
    return found


class _Parser(argparse.ArgumentParser):
    """Every parser (the top one, commands, and their own subcommands, which argparse makes of the same
    class): no abbreviated flags, one-line errors."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """A bad flag or value: one line that names it and where the usage is, not argparse's usage block."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def add_logging_flags(parser: argparse.ArgumentParser, default) -> None:
    """-v and --log-level; SUPPRESS as the default, so a command's parser never overwrites what was
    given before the command (the top parser sets the real defaults)."""
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="log more to stderr (info, with module paths and tracebacks)")
    parser.add_argument("--log-level", choices=logs.LEVELS, default=default,
                        help="lowest level logged to stderr (default: warning)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.typed = list(sys.argv[1:] if argv is None else argv)  # `run --gpus` passes them on to each node
    logs.to_stderr(args.verbose, args.log_level)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except Exception as exc:  # every failure ends here, as one line
        return fail(exc)


def fail(exc: BaseException) -> int:
    """Print the one line for `exc` and return the exit code; the traceback goes to swarm.log (a bad
    input's own line says everything: nothing is logged for it)."""
    error = _user_error(exc)
    logged = logs.traceback_to_file(exc) if error is not exc or error.exit_code != 2 else None
    if error is not None:
        print(f"swarm: {error.message}", file=sys.stderr)
        return error.exit_code
    where = f"the traceback is in {logged}" if logged else "no log file could be written to keep the traceback"
    print(f"swarm: unexpected error: {type(exc).__name__}: {_first_line(exc)}; {where}: please report it",
          file=sys.stderr)
    return 1


def _user_error(exc: BaseException) -> SwarmError | None:
    """The SwarmError that ended the command: `exc`, or one it replaced (a failing teardown raises
    over the error that ended the run; the user needs the first)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SwarmError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else "no message"
