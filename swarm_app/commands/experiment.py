"""`swarm experiment`: the SAPO paper's local/external table on this machine, resumable.

Owns the flags, their one-line checks and the progress lines; swarm_app/experiment/ does the work. On a
terminal the progress of the cell under way is one line redrawn in place; with --no-ui (or without a
terminal) it is plain lines, one at most every PROGRESS_EVERY_S seconds, for logs and scripts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from swarm_app.commands import flags
from swarm_app.kernel import logs
from swarm_app.kernel.errors import UsageError

PROGRESS_EVERY_S = 15.0
INTERRUPTED = 130
"""The exit code of an experiment stopped by a signal before its last cell (the cells done are kept)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "experiment", help="the paper's table: nodes trained alone against nodes that share (resumable)",
        description="Runs every I/J config with N nodes for R rounds, for K seeds (every config of a seed uses the same "
        "node seeds; nodes with J > 0 swap rollouts over 127.0.0.1 as swarm run nodes do, I/0 nodes train offline), "
        "then writes results.json, "
        "table.md and three PNGs to --out. Each (config, seed) cell is kept when it finishes: run the same command "
        "again to continue a stopped experiment (a cell cut short goes on from its nodes' checkpoints, every 5 "
        "rounds). All nodes run in this process, each on its own engine thread with "
        "--threads threads (default: the physical cores shared out among the nodes, at least 1).")
    parser.add_argument("--nodes", default="4", metavar="N[,N...]", help="nodes per config (default 4); several sizes "
                        "(2,4,8,16) run one experiment each in DIR/nodes-N, by default comparing solo (I+J)/0, fixed "
                        "I/J and adaptive I/J (the model's I and J), and write DIR/sizes.json")
    parser.add_argument("--configs", metavar="I/J,...", help="own questions I / peers' groups J per round, I + J the "
                        "same in all; a bare I/J is the fixed update, I/J:adaptive or I/J:fill that "
                        "train.external_policy (default: the model's I split as the paper splits 8; for the bundled "
                        "model 32/0,24/8,16/16,8/24)")
    parser.add_argument("--seeds", default="3", metavar="K|A-B",
                        help="seeds per config: K (seeds 0 to K-1; default 3) or a range A-B (seeds A to B: a "
                        "replication on fresh seeds, its outputs over those seeds only)")
    parser.add_argument("--rounds", default="100", metavar="R", help="rounds per node (default 100)")
    parser.add_argument("--eval-every", metavar="E", help="held-out evaluation every E rounds and at the end "
                        "(default R/4; 0: only at the end)")
    parser.add_argument("--eval-n", default="200", metavar="M", help="held-out questions per evaluation (default 200)")
    parser.add_argument("--eval-samples", default="4", metavar="S", help="completions per held-out question for the "
                        "sampled reward at the start and the end (default 4; 0: none)")
    parser.add_argument("--out", metavar="DIR", help="the experiment folder (default: experiments/default in the data dir)")
    parser.add_argument("--no-ui", action="store_true", help="plain progress lines (also when there is no terminal)")
    flags.add_settings(parser, flags.MODEL + ("tasks.preset", "train.completions"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from swarm_app.experiment.plan import parse_seeds
    from swarm_app.experiment.runner import Inputs

    sizes = _sizes(args.nodes)
    first_seed, seeds = parse_seeds(args.seeds)
    inputs = [Inputs(nodes=n, configs=args.configs, seeds=seeds, first_seed=first_seed,
                     rounds=_int(args.rounds, "--rounds"),
                     eval_every=_int(args.eval_every, "--eval-every") if args.eval_every is not None else None,
                     eval_n=_int(args.eval_n, "--eval-n"), eval_samples=_int(args.eval_samples, "--eval-samples"),
                     policies=len(sizes) > 1) for n in sizes]
    settings = flags.load_settings_for(args)
    from swarm_app.experiment.runner import make_plan
    from swarm_app.kernel.paths import user_dirs

    plans = [make_plan(settings, one) for one in inputs]  # every size checked before anything runs
    out = Path(args.out).expanduser() if args.out else user_dirs().data / "experiments" / "default"
    folders = {plan.nodes: out / f"nodes-{plan.nodes}" if len(plans) > 1 else out for plan in plans}
    logs.to_file()
    for plan in plans:
        code = _run_size(settings, plan, folders[plan.nodes], args)
        if code:
            return code
    from swarm_app.experiment.runner import write_sizes

    written = write_sizes(out, folders)
    if written is not None:
        print(f"wrote {written}")
    return 0


def _run_size(settings, plan, out: Path, args: argparse.Namespace) -> int:
    """One swarm size's experiment in `out`; 0, or the exit code that ends the command."""
    from swarm_app.experiment.plots import available as plots_available
    from swarm_app.experiment.runner import run_experiment

    view = ProgressView(live=not args.no_ui and sys.stdout.isatty())
    outcome = run_experiment(settings, plan, out, view)
    view.end()
    if outcome.interrupted:
        print(f"stopped: {outcome.done} of {outcome.total} cells done in {outcome.out}; run the same command to continue")
        return INTERRUPTED
    print(f"{outcome.done} of {outcome.total} cells done; wrote {', '.join(p.name for p in outcome.files)} in {outcome.out}")
    if not plots_available():
        print("plots skipped: matplotlib is not installed (pip install matplotlib, then run the same command again)")
    if outcome.files:
        print(main_table(outcome.out / "table.md"))
    return 0


def _sizes(text: str) -> list[int]:
    """`--nodes 4` or `--nodes 2,4,8,16`: whole numbers, no repeats."""
    sizes = [_int(part.strip(), "--nodes") for part in text.split(",")]
    if len(set(sizes)) < len(sizes):
        raise UsageError(f"--nodes {text!r} names a size twice")
    return sizes


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a whole number") from None


def main_table(path: Path) -> str:
    """The first table of table.md (the per-config summary), for the terminal."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines[:next((i for i, line in enumerate(lines) if line.startswith("Each figure")),
                                                    len(lines))] if line.startswith("|"))


class ProgressView:
    """The runner's events as lines; `live`: the cell's progress redrawn in place on the terminal."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.prefix = ""
        self.last_progress = 0.0
        self.drawn = False

    def __call__(self, event) -> None:
        from swarm_app.experiment import runner

        if isinstance(event, runner.CellProgress):
            self._progress(event)
        elif isinstance(event, runner.Started):
            self._line(format_start(event))
        elif isinstance(event, runner.BaseScoring):
            sampled = f" and {event.samples} samples each" if event.samples else ""
            self._line(f"base model: scoring {event.n} held-out items (greedy{sampled})")
        elif isinstance(event, runner.BaseScored):
            self._line(format_base(event))
        elif isinstance(event, runner.CellStarted):
            self.prefix = f"cell {event.index}/{event.total}  {event.label}"
            self.last_progress = 0.0  # a cell's first progress line always shows
            resumed = (f" (going on from the last checkpoints: rounds {', '.join(map(str, event.resumed))} done)"
                       if event.resumed else "")
            self._line(f"{self.prefix}: loading the nodes{resumed}")
        elif isinstance(event, runner.CellFinished):
            self._line(format_finished(event))

    def _progress(self, event) -> None:
        line = (f"{self.prefix}  round {event.done}/{event.rounds}  {duration(event.elapsed_s)} elapsed, "
                f"cell ETA {duration(event.eta_s)}, all cells ETA {duration(event.eta_all_s)}")
        if self.live:
            print(f"\r\x1b[2K{line}", end="", flush=True)
            self.drawn = True
        elif event.done == event.rounds or time.monotonic() - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = time.monotonic()
            print(line, flush=True)

    def _line(self, text: str) -> None:
        self.end()
        print(text, flush=True)

    def end(self) -> None:
        if self.drawn:
            print(flush=True)
            self.drawn = False


def format_start(event) -> str:
    from swarm_app.experiment.plan import seeds_text

    plan = event.plan
    evals = f"every {plan.eval_every} rounds and at the end" if plan.eval_every else "at the end"
    which = f" ({seeds_text(plan)})" if plan.first_seed else ""
    return (f"experiment in {event.out}: model {event.model}, {plan.nodes} nodes x configs "
            f"{', '.join(c.name for c in plan.configs)} x {plan.seeds} seed(s){which}, {plan.rounds} rounds; held-out "
            f"{plan.eval_n} items {evals}; {plan.threads} engine thread(s) per node, all nodes in this process; "
            f"{event.kept} of {len(plan.cells())} cells already done")


def format_base(event) -> str:
    sampled = f", sampled reward {event.sampled:.3f}" if event.sampled is not None else ""
    how = "kept from base.json" if event.kept else f"{event.engine}, {duration(event.seconds)}"
    return f"base model: held-out accuracy {event.accuracy:.3f} on {event.n} items{sampled} ({how})"


def format_finished(event) -> str:
    held = (f"held-out {event.heldout_end:.3f} ({event.gain_points:+.1f} points)" if event.heldout_end is not None
            else "held-out -")
    load = f"; load average {event.load_average[0]:.2f}" if event.load_average else ""
    return (f"cell {event.index}/{event.total}  {event.label} done in {duration(event.wall_s)}: cum. training reward "
            f"{event.cum_reward:.1f}, {held}{load}")


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
