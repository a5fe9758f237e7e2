"""`swarm demo`: a local swarm of N training nodes in this process, on 127.0.0.1.

Owns the flags, the demo's own defaults (10 rounds, J = 4: below config.toml and SWARM_* so those
apply here as in `swarm run`) and the choice of view; swarm_app/demo/local_swarm.py runs the nodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_app.commands import flags
from swarm_app.commands.run import wants_tui
from swarm_app.kernel import logs
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
    from swarm_app.demo.local_swarm import default_out_dir, format_summary, parse_backends

    backends = parse_backends(args.backends)
    out_dir = Path(args.out) if args.out else default_out_dir()
    logs.to_file()
    print(f"demo: {args.nodes} nodes, {settings.train.rounds} rounds, J = {settings.train.external}; runs in {out_dir}")
    if wants_tui(settings):
        with logs.terminal_owned_by_tui():
            summaries = _run_in_tui(settings, args.nodes, out_dir, backends)
    else:
        import asyncio  # deferred: every `swarm` command imports this module to build its parser

        summaries = asyncio.run(_run_headless(settings, args.nodes, out_dir, backends))
    print(format_summary(summaries))
    return 1 if any(s.error for s in summaries) else 0


async def _run_headless(settings, nodes: int, out_dir: Path, backends: tuple[str, ...]) -> list:
    """One headless line per node per round, the node named first."""
    from swarm_app.demo.local_swarm import run_demo_swarm
    from swarm_app.headless import HeadlessView

    def on_session(index: int, session) -> None:
        session.subscribe(HeadlessView("text", prefix=f"node {index}  ", total_rounds=settings.train.rounds))

    return await run_demo_swarm(settings, nodes, out_dir, on_session=on_session, backends=backends)


def _run_in_tui(settings, nodes: int, out_dir: Path, backends: tuple[str, ...]) -> list:
    """Every node in one TUI, `n` switches: each session is subscribed as node i as its model loads and
    its request methods become node i's controls, so p, s and e act on the node shown and q stops them all."""
    import asyncio

    from swarm_app.demo.local_swarm import run_demo_swarm
    from swarm_app.tui.app import SwarmApp

    controls: dict = {}
    summaries: list = []

    async def source(deliver) -> None:
        def on_session(index: int, session) -> None:
            controls[index] = session
            session.subscribe(lambda event: deliver(event, index))

        # filled in place as the nodes go: `q` during the final evaluations still leaves every node's row
        await run_demo_swarm(settings, nodes, out_dir, on_session=on_session, backends=backends, summaries=summaries)
        if not any(session.stopping for session in controls.values()):
            await asyncio.Event().wait()  # the demo ran to its end: keep the picture until q

    app = SwarmApp(source, nodes=nodes, node_controls=controls, subtitle=f"demo in {out_dir}")
    app.run()
    if app.error is not None:
        raise app.error
    return summaries
