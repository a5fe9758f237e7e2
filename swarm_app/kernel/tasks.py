"""Verifiable tasks from reasoning-gym: presets, `TaskRef` regeneration, answer extraction and reward.

A `TaskRef` (dataset, config digest, seed, index) regenerates its question and ground truth byte for
byte on any node with the same reasoning-gym version, because the digest covers the dataset name, its
full config and that version. Training draws use seeds below `HELDOUT_SEED`; the held-out evaluation
set is a fixed list of refs at `HELDOUT_SEED`, so no training draw can ever be a held-out item.
This module knows nothing of models or networking.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import json
import random
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from swarm_app.kernel.errors import UsageError

HELDOUT_SEED = 2**31 - 1
"""Reserved dataset seed of the held-out set; training seeds are always smaller."""

DATASET_SIZE = 2**31 - 1
"""Nominal dataset size: reasoning-gym generates item i lazily from (seed, i), so size costs nothing."""

SYSTEM_PROMPT = (
    "You are a careful problem solver. Think briefly, then give the final answer inside "
    "<answer></answer> tags, for example <answer>42</answer>."
)


@dataclass(frozen=True)
class TaskRef:
    """Everything a node needs to regenerate one question and its ground truth."""

    dataset: str
    config_digest: str
    seed: int
    index: int

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "config_digest": self.config_digest, "seed": self.seed, "index": self.index}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskRef":
        return cls(str(data["dataset"]), str(data["config_digest"]), int(data["seed"]), int(data["index"]))


@dataclass(frozen=True)
class TaskSpec:
    """One dataset of a preset: its reasoning-gym config and its share of the draws."""

    dataset: str
    config: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0

    @functools.cached_property
    def digest(self) -> str:
        return config_digest(self.dataset, self.config)


@dataclass(frozen=True)
class Task:
    """A regenerated question with its ground truth; `entry` is reasoning-gym's item (for scoring)."""

    ref: TaskRef
    question: str
    answer: str
    entry: dict[str, Any] = field(repr=False, compare=False)

    def messages(self) -> list[dict[str, str]]:
        """The chat prompt every backend renders with its tokenizer's chat template."""
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self.question}]


def reasoning_gym_version() -> str:
    # reasoning_gym.__version__ is stale (0.1.19 in 0.1.25): read the installed distribution instead
    return metadata.version("reasoning-gym")


def config_digest(dataset: str, config: dict[str, Any]) -> str:
    canonical = json.dumps({"dataset": dataset, "config": config, "reasoning_gym": reasoning_gym_version()},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


PAPER_CALENDAR_TASKS = ["count_days", "weekday_of_date", "is_leap_year", "recurring_event_day"]

PRESETS: dict[str, list[TaskSpec]] = {
    # The nine specialties of the SAPO paper, one question per sampled task, with the reference configs.
    "paper": [
        TaskSpec("arc_1d", {"min_size": 10, "max_size": 30, "num_train": 3}),
        TaskSpec("basic_arithmetic", {"min_terms": 2, "max_terms": 6, "min_digits": 1, "max_digits": 4,
                                      "operators": ["+", "-", "*", "/"], "allow_parentheses": True,
                                      "allow_negation": True}),
        TaskSpec("base_conversion", {"min_base": 2, "max_base": 16, "min_value": 0, "max_value": 1000}),
        TaskSpec("bf", {"difficulty": 1}),
        TaskSpec("binary_matrix", {"min_n": 3, "max_n": 10, "p_zero": 0.25}),
        TaskSpec("calendar_arithmetic", {"year": 2023, "offset_upper_bound": 100, "tasks": PAPER_CALENDAR_TASKS}),
        TaskSpec("decimal_arithmetic", {"min_num_decimal_places": 1, "max_num_decimal_places": 3,
                                        "min_terms": 2, "max_terms": 6, "precision": 5}),
        TaskSpec("fraction_simplification", {"min_value": 1, "max_value": 100, "min_factor": 2, "max_factor": 100}),
        TaskSpec("propositional_logic", {"min_vars": 2, "max_vars": 4, "min_statements": 2, "max_statements": 4,
                                         "min_complexity": 1, "max_complexity": 3}),
    ],
    # Small difficulty settings with short answers, on which the bundled tiny model starts weak but not
    # hopeless (see assets/models/swarm-tiny/README.md for its scores).
    "easy": [
        # arc_1d and bf are left out: the tiny model stays at 0 on them (arc_1d at size 8-10 scored 0 of 62
        # held-out questions greedy and 1 group in 62 had any reward at T=1), so they would only dilute it.
        # calendar_arithmetic and propositional_logic too: a build trained on them answered every question
        # with one string ("Sunday"; "(P ∨ R)", which the verifier accepts for 77% of items), so GRPO had
        # only answer priors to reshuffle there, and their long prompts took compute from the other tasks.
        TaskSpec("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                      "operators": ["+", "-"], "allow_parentheses": False, "allow_negation": False}),
        TaskSpec("base_conversion", {"min_base": 2, "max_base": 10, "min_value": 0, "max_value": 15}),
        TaskSpec("fraction_simplification", {"min_value": 1, "max_value": 9, "min_factor": 2, "max_factor": 5,
                                             "styles": ["plain"]}),
        TaskSpec("decimal_arithmetic", {"min_num_decimal_places": 1, "max_num_decimal_places": 1,
                                        "min_terms": 2, "max_terms": 2, "precision": 5}, weight=1.5),
        TaskSpec("binary_matrix", {"min_n": 2, "max_n": 3, "p_zero": 0.25}, weight=0.75),
    ],
}


def preset(name: str) -> list[TaskSpec]:
    if name not in PRESETS:
        raise UsageError(f"unknown task preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]


def known_specs() -> dict[str, TaskSpec]:
    """Every spec of every preset by digest: the configs this node can regenerate for peers."""
    return {spec.digest: spec for specs in PRESETS.values() for spec in specs}


@functools.lru_cache(maxsize=256)
def _dataset(dataset: str, digest: str, seed: int):
    spec = known_specs().get(digest)
    if spec is None or spec.dataset != dataset:
        raise KeyError(f"unknown task config {dataset}/{digest}")
    import reasoning_gym  # deferred: importing it costs ~1 s

    _silence_bf_compiler()
    return reasoning_gym.create_dataset(dataset, seed=seed, size=DATASET_SIZE, **spec.config)


@functools.cache
def _silence_bf_compiler() -> None:
    """bf's bundled compiler prints a progress dot per item with the builtin print, which would corrupt
    the TUI and the headless lines. A module-level `print` shadows the builtin for that module only;
    `contextlib.redirect_stdout` would not do: it swaps sys.stdout for every thread at once."""
    from reasoning_gym.code.contrib.bfit.Compiler import Optimizer

    Optimizer.print = lambda *args, **kwargs: None


def regenerate(ref: TaskRef, *, heldout: bool = False) -> Task:
    """The question and ground truth of `ref`. Raises KeyError for a config this node does not know or
    a ref out of range. Held-out items (seed HELDOUT_SEED) only with `heldout=True`, which only the
    local evaluation passes: a peer's rollout for a held-out item must never reach training."""
    if not 0 <= ref.index < DATASET_SIZE or not 0 <= ref.seed <= HELDOUT_SEED:
        raise KeyError(f"task ref out of range: {ref}")
    if ref.seed == HELDOUT_SEED and not heldout:
        raise KeyError(f"task ref {ref} is a held-out item: reserved for evaluation, never trained on")
    # decimal_arithmetic sets the thread's decimal precision to its config's (5 digits in ours); a local
    # context keeps that out of everything computed after (scoring, rounding in tools/make_default_model.py).
    with decimal.localcontext():
        entry = _dataset(ref.dataset, ref.config_digest, ref.seed)[ref.index]
    return Task(ref, str(entry["question"]), str(entry["answer"]), entry)


def extract_answer(completion: str) -> str | None:
    """The text of the last complete `<answer>...</answer>` span, stripped; None when there is none."""
    end = completion.rfind("</answer>")
    if end < 0:
        return None
    start = completion.rfind("<answer>", 0, end)
    if start < 0:
        return None
    return completion[start + len("<answer>"):end].strip()


def score(task: Task, completion: str) -> float:
    """Reward in [0, 1]: the dataset's verifier on the extracted answer; 0 without an answer span.

    The answer span is extracted first: the raw `score_answer` gives partial credit to a right answer
    buried in a longer string, which a model would learn to exploit.
    """
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    ds = _dataset(task.ref.dataset, task.ref.config_digest, task.ref.seed)
    try:
        reward = float(ds.score_answer(answer, task.entry))
    except (ValueError, TypeError, ArithmeticError, SyntaxError, RecursionError):
        return 0.0  # a verifier choking on junk text is a wrong answer, not a crash
    return min(max(reward, 0.0), 1.0)


def draw(specs: list[TaskSpec], seed: int, round_index: int, count: int) -> list[TaskRef]:
    """`count` training refs for one round, a pure function of (seed, round): resumes redraw the same.

    A draw of n is the first n of any larger draw of the same (seed, round): each ref takes its task and its
    index from the stream in turn, so configs of one seed with different I (and the own questions a round adds
    beyond I) ask the same questions where they overlap."""
    rng = random.Random(f"draw:{seed}:{round_index}")
    weights = [s.weight for s in specs]
    refs = []
    for _ in range(count):
        spec = rng.choices(specs, weights=weights)[0]
        refs.append(TaskRef(spec.dataset, spec.digest, seed, rng.randrange(DATASET_SIZE)))
    return refs


def heldout(specs: list[TaskSpec], n: int) -> list[TaskRef]:
    """The fixed held-out list: the same `n` refs for every node and run of this preset."""
    rng = random.Random("heldout")
    chosen = [specs[i % len(specs)] for i in range(n)]  # round-robin: every task equally represented
    return [TaskRef(spec.dataset, spec.digest, HELDOUT_SEED, rng.randrange(DATASET_SIZE)) for spec in chosen]
