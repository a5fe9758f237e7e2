"""`swarm demo`: a local swarm of N training nodes in this process, on 127.0.0.1.

Owns the flags, the demo's own defaults (10 rounds, J = 4: below config.toml and SWARM_* so those
apply here as in `swarm run`) and the choice of view; swarm_app/session/local_swarm.py runs the nodes.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from swarm_app.kernel import logs
from swarm_app.commands import flags
from swarm_app.commands.run import wants_tui
from swarm_app.kernel.errors import UsageError

DEFAULTS = {"train.rounds": 10, "train.external": 4, "train.seed": 0}
"""A demo ends by itself, shows peers' rollouts being used and is reproducible (node i draws with seed
S + i); `swarm run` trains until stopped, alone, with a random seed."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="a local swarm of N training nodes in this process (127.0.0.1)",
                                 description="A local swarm of N training nodes in this process, on 127.0.0.1. "
                                 "Node i uses seed S + i (S: --seed).")
    parser.add_argument("--nodes", type=int, default=4, metavar="N", help="nodes (default 4)")
    parser.add_argument("--backends", metavar="A,B,...", help="engines of the nodes, in turn (e.g. torch,llama_cpp,mlx)")
    parser.add_argument("--out", metavar="DIR", help="where the nodes' run folders go (default: a new folder in the data dir)")
    flags.add_settings(parser, flags.MODEL + flags.TRAIN + ("run.ui",), DEFAULTS)
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 64:
        raise UsageError(f"--nodes {args.nodes} is out of range; allowed: 1 to 64")
    settings = flags.load_settings_for(args)
    if settings.train.rounds == 0:
        raise UsageError("--rounds must be at least 1 for a demo")
    from swarm_app.session.local_swarm import default_out_dir, format_summary, run_demo_swarm

    backends = _backends(args.backends)
    out_dir = Path(args.out) if args.out else default_out_dir()
    print(f"demo: {args.nodes} nodes, {settings.train.rounds} rounds, J = {settings.train.external}; runs in {out_dir}")
    if wants_tui(settings):
        from swarm_app.tui.node_switcher import run_demo_in_tui

        with logs.terminal_owned_by_tui():
            summaries = run_demo_in_tui(settings, args.nodes, out_dir, backends)
    else:
        summaries = asyncio.run(run_demo_swarm(settings, args.nodes, out_dir, backends=backends))
    print(format_summary(summaries))
    return 1 if any(s.error for s in summaries) else 0


def _backends(text: str | None) -> tuple[str, ...]:
    from backends import registry

    names = tuple(name.strip() for name in (text or "").split(",") if name.strip())
    unknown = [name for name in names if name not in registry.names()]
    if unknown:
        raise UsageError(f"--backends: unknown engine {', '.join(unknown)}; choose from {', '.join(registry.names())}")
    return names
