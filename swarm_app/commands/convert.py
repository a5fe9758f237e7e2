"""`swarm convert --to ENGINE [--run-dir DIR]`: move a run to an engine with another adapter format.

Owns the flags and the printout; swarm_app/export/convert.py rewrites the checkpoint.
"""

from __future__ import annotations

import argparse

from swarm_app.commands import flags


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("convert", help="move a run to an engine with another adapter format")
    parser.add_argument("--to", required=True, metavar="ENGINE", help="torch, llama_cpp or mlx")
    flags.add_settings(parser, ("run.run_dir",))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from swarm_app.export.convert import convert_run
    from swarm_app.session.run_folder import run_dir_of

    run_dir = run_dir_of(flags.load_settings_for(args))
    round_index, new, kept = convert_run(run_dir, args.to)
    print(f"round {round_index} converted for {args.to}: {new} (the original is kept in {kept})")
    print(f"  resume with: swarm run --backend {args.to} --run-dir {run_dir}")
    return 0
