"""`swarm eval`: held-out accuracy of a model (and optionally a trained adapter) with greedy decoding.

Owns the flags and the printout (progress on stderr while it runs); swarm_app/evaluation/scoring.py loads
and scores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swarm_app.commands import flags
from swarm_app.kernel import logs
from swarm_app.kernel.errors import UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("eval", help="held-out accuracy with greedy decoding")
    parser.add_argument("--adapter", metavar="DIR", help="a LoRA adapter: a checkpoint folder or a run folder")
    parser.add_argument("--n", type=int, default=200, help="held-out questions (default 200)")
    parser.add_argument("--samples", type=int, default=0, metavar="K",
                        help="also the mean reward of K completions per question at the rollout temperature "
                             "(what the reward chart shows; default 0: greedy accuracy only)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    flags.add_settings(parser, flags.MODEL + ("tasks.preset",))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = flags.load_settings_for(args)
    if args.n < 1:
        raise UsageError(f"--n {args.n} must be at least 1")
    if not 0 <= args.samples <= 64:
        raise UsageError(f"--samples {args.samples} must be between 0 and 64")
    from swarm_app.evaluation.scoring import run_eval
    from swarm_app.session.engine import detect_hardware

    logs.to_file()  # a model that fails to load leaves its traceback there

    report = run_eval(settings, Path(args.adapter) if args.adapter else None, args.n,
                      detect_hardware(settings.model.backend), args.samples, say=_progress)
    result = report.result
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report.heading())
        print(f"held-out accuracy {result.accuracy:.3f} on {result.n} questions")
        for name, acc in result.per_task.items():
            print(f"  {name:28s} {acc:.3f}")
        if report.sampled is not None:
            sampled = report.sampled
            print(f"held-out mean reward {sampled.mean_reward:.3f} over {sampled.samples} samples per question "
                  f"at temperature {sampled.temperature:g}")
            for name, reward in sampled.per_task.items():
                print(f"  {name:28s} {reward:.3f}")
    return 0


def _progress(line: str) -> None:
    """While it runs: lines on stderr (stdout keeps the result, `--json` included)."""
    print(f"eval: {line}", file=sys.stderr, flush=True)
