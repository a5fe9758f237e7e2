"""`swarm doctor`: this machine, the engines that run here and the one chosen, and whether the peers answer.

Owns the flags and the printout; swarm_app/doctor/report.py builds the report. Exits 1, saying which
on stderr, when a check it makes fails.
"""

from __future__ import annotations

import argparse
import json
import sys

from swarm_app.commands import flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("doctor", help="this machine, the engines that run here and the one chosen")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pace", action="store_true", help="also load the model on the chosen engine and time a "
                        "probe round: seconds per round and rounds per hour here (seconds on the bundled model)")
    flags.add_settings(parser, flags.MODEL + ("resources.level",) + flags.PEER)
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    from swarm_app.doctor.report import build_report, format_text
    from swarm_app.kernel.hardware import detect

    report = build_report(settings, detect(), pace=args.pace)
    print(json.dumps(report) if args.json else format_text(report))
    failed = report["failed"]
    if failed:
        checks = f"{len(failed)} check{'s' if len(failed) > 1 else ''} failed"
        print(f"swarm doctor: {checks}: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0
