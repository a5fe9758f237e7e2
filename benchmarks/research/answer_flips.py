"""Which held-out answers did training change? The base model's greedy answers against a trained adapter's.

Issue 14's diagnosis of a greedy accuracy that falls while the sampled reward rises: per task, how many
held-out items stay right, stay wrong, turn wrong and turn right, and how far a changed answer moved
(for numeric answers: the new answer minus the old one). Greedy, torch engine, the app's held-out list.

    python -m benchmarks.research.answer_flips RUN_OR_CHECKPOINT [--tasks easy] [--n 500] [--show basic_arithmetic]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from backends import registry
from backends.base import Sampling
from swarm_app.evaluation.scoring import adapter_folder
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.kernel.settings import Settings
from swarm_app.session.engine import model_spec

OUTCOMES = {(True, True): "stay right", (False, False): "stay wrong", (True, False): "turn wrong",
            (False, True): "turn right"}


def greedy_answers(backend, items: list[tasks.Task], max_new_tokens: int) -> list[str]:
    outputs = backend.generate([t.messages() for t in items], 1, Sampling(max_new_tokens, 0.0, seed=0))
    return [group[0].text for group in outputs]


def numeric_shift(before: str | None, after: str | None) -> str:
    try:
        return f"{float(after) - float(before):+g}"
    except (TypeError, ValueError):
        return "non-numeric"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("adapter", type=Path, help="a run folder (its newest checkpoint) or a checkpoint folder")
    parser.add_argument("--model", type=Path, default=bundled_model_dir())
    parser.add_argument("--tasks", default="easy", help="task preset")
    parser.add_argument("--n", type=int, default=500, help="held-out items (round-robin over the tasks)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--show", nargs="*", default=[], metavar="TASK", help="print every changed item of these tasks")
    parser.add_argument("--out", type=Path, help="write the counts as JSON here")
    args = parser.parse_args()

    settings = Settings()
    settings.model.threads = 1
    items = [tasks.regenerate(ref, heldout=True) for ref in tasks.heldout(tasks.preset(args.tasks), args.n)]
    backend = registry.load("torch", model_spec(settings, args.model, trainable=False))
    try:
        before = greedy_answers(backend, items, args.max_new_tokens)
        backend.load_adapter(adapter_folder(args.adapter))
        after = greedy_answers(backend, items, args.max_new_tokens)
    finally:
        backend.close()

    outcomes: dict[str, Counter] = defaultdict(Counter)
    shifts: dict[str, Counter] = defaultdict(Counter)
    for task, old, new in zip(items, before, after):
        name = task.ref.dataset
        right = (tasks.score(task, old) >= 1.0, tasks.score(task, new) >= 1.0)
        outcomes[name][OUTCOMES[right]] += 1
        old_answer, new_answer = tasks.extract_answer(old), tasks.extract_answer(new)
        if old_answer != new_answer:
            shifts[name][numeric_shift(old_answer, new_answer)] += 1
            if name in args.show:
                print(f"{OUTCOMES[right]:>10} | {task.question[-50:]!r} truth {task.answer!r}: {old_answer!r} -> {new_answer!r}")
    report = {name: {"outcomes": dict(outcomes[name]), "changed_answers_by_shift": dict(shifts[name].most_common())}
              for name in sorted(outcomes)}
    for name, row in report.items():
        print(f"{name}: {row['outcomes']}; changed answers by shift: {row['changed_answers_by_shift']}")
    if args.out:
        args.out.write_text(json.dumps({"adapter": str(args.adapter), "n": args.n, "tasks": report}, indent=1) + "\n")


if __name__ == "__main__":
    main()
