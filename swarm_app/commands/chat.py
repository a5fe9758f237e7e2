"""`swarm chat`: talk to a run's current adapter (also while a node trains in the folder), or to the base model.

Owns the flags, their checks (one line, exit 2) and the streams: answers on stdout, what answers and how it
loads on stderr. swarm_app/chat/ does the work; it never locks or writes the run folder.
"""

from __future__ import annotations

import argparse
import random
import sys

from swarm_app.commands import flags
from swarm_app.kernel import logs
from swarm_app.kernel.errors import UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("chat", help="talk to a run's current adapter (or the base model)")
    parser.add_argument("--base", action="store_true", help="the untouched base model, for comparison")
    parser.add_argument("--prompt", metavar="TEXT", help="answer TEXT once and exit (for scripts)")
    parser.add_argument("--task", metavar="NAME", help="ask a held-out question of task NAME of the run's preset "
                        "(or the preset's name: any of its tasks); shows the right answer and the verifier's score. "
                        "Then an empty line asks another")
    parser.add_argument("--temperature", metavar="T", default="0",
                        help="sampling temperature (default 0: greedy, as the held-out evaluation)")
    parser.add_argument("--max-tokens", metavar="N", default="", help="longest answer (default: the run's model.max_new_tokens)")
    parser.add_argument("--json-lines", action="store_true", help='for programs (the TUI\'s chat view): {"prompt": '
                        'TEXT} per line on stdin, the answer as JSON lines on stdout')
    flags.add_settings(parser, flags.MODEL + ("run.run_dir",))
    parser.set_defaults(handler=main)


def _number(flag: str, text: str, kind: type, low: float, high: float):
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a {'number' if kind is float else 'whole number'}") from None
    if not low <= value <= high:
        raise UsageError(f"{flag} {text} must be between {low:g} and {high:g}")
    return value


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    temperature = _number("--temperature", args.temperature, float, 0.0, 5.0)
    max_tokens = _number("--max-tokens", args.max_tokens, int, 1, 8192) if args.max_tokens else 0
    if args.prompt is not None and args.task:
        raise UsageError("--prompt and --task: pass one (--task asks its own question)")
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty: pass the text to answer")
    from swarm_app.chat.lines import answer_prompt, converse, serve_json_lines
    from swarm_app.chat.run import read_run
    from swarm_app.chat.talk import Talker, chat_sampling, pick_specs, settings_for_run
    from swarm_app.session.engine import detect_hardware
    from swarm_app.session.run_folder import run_dir_of

    logs.to_file()
    run_dir = run_dir_of(settings)
    # --base: the run's model where there is a run, unless --model names another
    run = read_run(run_dir) if not args.base or (run_dir.is_dir() and "model.path" not in settings.given) else None
    settings_for_run(settings, run)
    specs = pick_specs(settings.tasks.preset, args.task) if args.task else None
    talker = Talker(settings, None if args.base else run_dir, detect_hardware(settings.model.backend), say=_progress)
    try:
        talker.open()
        _progress(f"talking to {talker.source} on the {talker.opened.name} engine")
        sampling = chat_sampling(settings, max_tokens, temperature)
        if args.json_lines:
            serve_json_lines(talker, sys.stdin, sampling, sys.stdout)
            return 0
        if args.prompt is not None:
            answer_prompt(talker, args.prompt, sampling, sys.stdout)
            return 0
        interactive = sys.stdin.isatty()
        if interactive:
            _progress("one question a line; " + ("an empty line asks another task question; " if specs else "")
                      + "Ctrl-D ends")
        converse(talker, sys.stdin, sampling, sys.stdout, specs, random.Random(), "> " if interactive else "")
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a chat as Ctrl-D does
    finally:
        talker.close()
    return 0


def _progress(line: str) -> None:
    print(f"chat: {line}", file=sys.stderr, flush=True)
