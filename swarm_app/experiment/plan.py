"""The experiment's grid: I/J configs x seeds, each cell's node seeds and settings, and what must match to
reuse a cell written earlier.

Owns parsing and checking the grid's inputs (one-line UsageErrors, before anything loads or is written)
and turning the user's settings into one cell's settings. Every config of a seed uses the same node seeds
(node i of seed k draws with SEED_STRIDE * k + i), so configs differ only in I and J. Must not run
anything or touch the disk.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.settings import Settings, default_of, describe, field_of, set_value

SEED_STRIDE = 1000
"""Node i of seed k trains with seed SEED_STRIDE * k + i: seeds never overlap for up to 1000 nodes."""
MAX_NODES = 64
MAX_SEEDS = 100
MAX_GROUPS = 256
"""The bound of train.local and train.external."""
CHECKPOINT_EVERY = 5
"""Rounds between a cell's node checkpoints: a cell killed part way goes on from them, losing fewer than 5 rounds
(and a node stopped by a signal saves as it stops)."""
COMPARED = ("model", "lora", "train", "tasks")
"""The settings sections that change what a node learns (not how the machine runs it, nor the network)."""
NOT_COMPARED = {"model": ("threads",), "train": ("local", "external", "external_policy", "rounds", "seed", "eval_every",
                                                  "eval_n", "checkpoint_every")}
"""Settings that may differ between two runs of one experiment: the grid sets them per cell, or they only
change the speed."""


_POLICY = field_of("train.external_policy")
FIXED = default_of(_POLICY)
"""The update of a config that names no policy: the fixed I/J ("uniform", the setting's built-in default), whatever
train.external_policy the model or the user sets, so `8/24` names one thing in every experiment."""
POLICIES = tuple(p for p in _POLICY.metadata["choices"] if p != FIXED)
"""Policies a config may name after a colon (`8/24:adaptive`): the setting's other choices."""


@dataclass(frozen=True, order=True)
class Config:
    """I own questions and J peers' groups per round, under `policy` ("": FIXED)."""

    local: int
    external: int
    policy: str = ""

    @property
    def name(self) -> str:
        return f"{self.local}/{self.external}" + (f":{self.policy}" if self.policy else "")

    @property
    def solo(self) -> bool:
        return self.external == 0


def compared_configs(total: int, local: int) -> tuple[Config, ...]:
    """The configs `--nodes` with several sizes compares by default: solo (I + J)/0, fixed I/J, adaptive I/J."""
    return (Config(total, 0), Config(local, total - local), Config(local, total - local, "adaptive"))


@dataclass(frozen=True)
class Cell:
    config: Config
    seed: int
    """The seed's index k (0, 1, ...), not a node's seed."""

    @property
    def key(self) -> str:
        """The cell's file and folder name: `32-0-seed0`."""
        policy = f"-{self.config.policy}" if self.config.policy else ""
        return f"{self.config.local}-{self.config.external}{policy}-seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.config.name} seed {self.seed}"

    def node_seed(self, node: int) -> int:
        return SEED_STRIDE * self.seed + node


@dataclass(frozen=True)
class Plan:
    nodes: int
    configs: tuple[Config, ...]
    seeds: int
    rounds: int
    eval_every: int
    """Held-out evaluation every E rounds (0: only at the end); the last round is always evaluated."""
    eval_n: int
    eval_samples: int
    """Completions per held-out question for the sampled reward at the start and the end (0: none)."""
    threads: int
    """Engine threads of every node."""
    first_seed: int = 0
    """The seeds are first_seed, ..., first_seed + seeds - 1 (`--seeds 3-7`: a replication on fresh seeds)."""

    def seed_ids(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)

    def cells(self) -> list[Cell]:
        """Seed by seed, so that a whole seed's row of the table is done first."""
        return [Cell(config, seed) for seed in self.seed_ids() for config in self.configs]

    @property
    def solo(self) -> Config | None:
        return next((c for c in self.configs if c.solo), None)

    def scheduled_evaluations(self) -> list[int]:
        """The rounds whose own evaluation (train.eval_every) measures held-out accuracy."""
        return [t for t in range(1, self.rounds + 1) if self.eval_every and t % self.eval_every == 0]

    def eval_rounds(self) -> list[int]:
        """Every round after which held-out accuracy is measured: the scheduled ones and the last (a final
        evaluation where the schedule misses it). The start, round 0, is the base model's (base.json)."""
        scheduled = self.scheduled_evaluations()
        return scheduled if self.rounds in scheduled else [*scheduled, self.rounds]


def parse_configs(text: str) -> tuple[Config, ...]:
    """`32/0,24/8,8/24:adaptive,...`: I/J pairs, I >= 1, J >= 0, the same I + J in all, no repeats; a pair may
    name a policy after a colon (adaptive: I is then the floor of own questions, I + J the most; fill: own
    questions take the places peers leave empty); a bare pair is the fixed update."""
    configs = []
    for part in (p.strip() for p in text.split(",")):
        pair, _, policy = part.partition(":")
        local, slash, external = pair.partition("/")
        if not slash or not local.strip().isdigit() or not external.strip().isdigit():
            raise UsageError(f"--configs {text!r}: {part!r} is not I/J; write whole numbers such as 32/0,16/16")
        if policy and policy not in POLICIES:
            raise UsageError(f"--configs {text!r}: {part!r} names policy {policy!r}; known: {', '.join(POLICIES)}")
        if policy and int(external) == 0:
            raise UsageError(f"--configs {text!r}: {part!r} has J = 0: a policy for peers' groups needs J > 0")
        configs.append(Config(int(local), int(external), policy))
    for config in configs:
        if not 1 <= config.local <= MAX_GROUPS or config.external > MAX_GROUPS:
            raise UsageError(f"--configs: {config.name} is out of range; I must be 1 to {MAX_GROUPS}, J 0 to {MAX_GROUPS}")
    sizes = {c.local + c.external for c in configs}
    if len(sizes) > 1:
        raise UsageError(f"--configs {text!r}: I + J must be the same in every config (found {sorted(sizes)}); "
                         "the paper keeps the update's size and varies only where its groups come from")
    if len(set(configs)) < len(configs):
        raise UsageError(f"--configs {text!r} names a config twice")
    return tuple(configs)


def default_configs(total: int) -> tuple[Config, ...]:
    """The paper's split of its 8 groups (8/0, 6/2, 4/4, 2/6) applied to `total`: I/0, 3I/4, I/2, I/4."""
    found: list[Config] = []
    for local in (total, total * 3 // 4, total // 2, total // 4):
        config = Config(local, total - local)
        if local >= 1 and config not in found:
            found.append(config)
    return tuple(found)


def check_plan(plan: Plan) -> None:
    """The grid's bounds, as one-line UsageErrors."""
    if not 1 <= plan.nodes <= MAX_NODES:
        raise UsageError(f"--nodes {plan.nodes} is out of range; allowed: 1 to {MAX_NODES}")
    if plan.nodes == 1 and any(not c.solo for c in plan.configs):
        raise UsageError("--configs with J > 0 need peers: use --nodes 2 or more, or only I/0 configs")
    if not 1 <= plan.seeds or plan.first_seed < 0 or plan.first_seed + plan.seeds > MAX_SEEDS:
        raise UsageError(f"--seeds {seeds_text(plan)} is out of range; allowed: 1 to {MAX_SEEDS} seeds, "
                         f"numbered 0 to {MAX_SEEDS - 1}")
    if plan.rounds < 1:
        raise UsageError(f"--rounds {plan.rounds} must be at least 1")
    if plan.eval_every < 0:
        raise UsageError(f"--eval-every {plan.eval_every} must be 0 (only at the end) or more")
    if plan.eval_n < 1:
        raise UsageError(f"--eval-n {plan.eval_n} must be at least 1")
    if not 0 <= plan.eval_samples <= 64:
        raise UsageError(f"--eval-samples {plan.eval_samples} must be between 0 and 64")


def parse_seeds(text: str) -> tuple[int, int]:
    """`--seeds K` (seeds 0 to K - 1) or `--seeds A-B` (seeds A to B): (first seed, how many)."""
    first, dash, last = text.strip().partition("-")
    if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
        raise UsageError(f"--seeds {text!r}: write a count (3: seeds 0-2) or a range (3-7: seeds 3 to 7)")
    if not dash:
        return 0, int(first)
    if int(last) < int(first):
        raise UsageError(f"--seeds {text!r}: the range runs backwards; write the smaller seed first")
    return int(first), int(last) - int(first) + 1


def seeds_text(plan: Plan) -> str:
    """The seeds as the command line names them: `3` or `3-7`."""
    return f"{plan.first_seed}-{plan.first_seed + plan.seeds - 1}" if plan.first_seed else str(plan.seeds)


def threads_per_node(requested: int, cores: int, nodes: int) -> int:
    """model.threads where set; else the cores shared out, at least one each (nodes share this process's
    torch thread setting, so every node gets the same)."""
    return requested or max(1, cores // nodes)


def cell_settings(base: Settings, plan: Plan, cell: Cell) -> Settings:
    """The settings the cell's nodes start from (local_swarm.node_settings then gives node i its folder and
    seed + i). Set as a layer above the model's recommendations, so its swarm.toml cannot replace them."""
    settings = copy.deepcopy(base)
    values = {"train.local": cell.config.local, "train.external": cell.config.external, "train.rounds": plan.rounds,
              "train.seed": cell.node_seed(0), "train.eval_every": plan.eval_every, "train.eval_n": plan.eval_n,
              "train.checkpoint_every": min(CHECKPOINT_EVERY, plan.rounds), "model.threads": plan.threads}
    values["train.external_policy"] = cell.config.policy or FIXED
    for key, value in values.items():
        section, name = key.split(".")
        set_value(settings, section, name, value, source="swarm experiment")
    return settings


def fingerprint(settings: Settings, plan: Plan, model: str) -> dict[str, Any]:
    """What a cell written earlier must share with this run to be kept: the grid's shape and every setting
    that changes what a node learns (the configs and the number of seeds may grow)."""
    described = {section: values for section, values in describe(settings).items() if section in COMPARED}
    for section, names in NOT_COMPARED.items():
        for name in names:
            described[section].pop(name)
    return {"model": model, "nodes": plan.nodes, "rounds": plan.rounds, "eval_every": plan.eval_every,
            "eval_n": plan.eval_n, "eval_samples": plan.eval_samples, "settings": described}


def differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys whose values differ between two fingerprints, dotted. A key only one of them has is no
    difference: a later version of the app may add settings (at their defaults) or drop some."""
    found = []
    for key in sorted(set(old) & set(new)):
        a, b = old[key], new[key]
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key} ({a!r} then, {b!r} now)")
    return found
