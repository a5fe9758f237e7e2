"""`swarm stats`: a participant's record of a run (what it shared, whose groups it used, its held-out gain).

Owns the flags and the printing; the record is folded from the run's metrics.jsonl by swarm_app/record/.
Reading a run never disturbs a node training in it (only metrics.jsonl is read; no lock is taken).
"""

from __future__ import annotations

import argparse
import json

from swarm_app.commands import flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("stats", help="what a run shared, whose groups it used, its held-out gain")
    flags.add_settings(parser, ("run.run_dir",))
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    from swarm_app.record.ledger import load
    from swarm_app.session.run_folder import run_dir_of

    run_dir = run_dir_of(settings)
    record = load(run_dir)
    if args.json:
        print(json.dumps({"run_dir": str(run_dir), **record.to_dict()}, indent=2))
    else:
        print(f"run      {run_dir}")
        print("\n".join(record.lines()))
    return 0
