"""The whole experiment: the plan from the user's inputs, the base model's scores, every missing cell in
turn, and the outputs rewritten after each cell; progress as plain events for the command to show.

Resuming: a cell whose file exists in the folder is kept as it is; a cell a stop, a failure or a kill cut
short goes on from its nodes' last checkpoints where its folder allows (cell.resume_point), else runs from
nothing. A stop signal ends the cell under way and the run returns with `interrupted`; a failed node ends
the run with its one-line CellFailed. Must not print (the command does) nor compute metrics (summary.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from swarm_app.experiment import plots
from swarm_app.experiment.cell import CellInterrupted, CellRun, resume_point
from swarm_app.experiment.plan import (
    Cell,
    Plan,
    cell_settings,
    check_plan,
    compared_configs,
    default_configs,
    fingerprint,
    parse_configs,
    threads_per_node,
)
from swarm_app.experiment.store import ExperimentDir, write_json
from swarm_app.experiment.summary import summarize
from swarm_app.experiment.table import markdown
from swarm_app.kernel.files import write_bytes_atomic, write_text_atomic
from swarm_app.kernel.settings import Settings
from swarm_app.kernel.stopping import on_stop_signals


@dataclass(frozen=True)
class Inputs:
    """The command's own flags (None: the default)."""

    nodes: int = 4
    configs: str | None = None
    seeds: int = 3
    first_seed: int = 0
    rounds: int = 100
    eval_every: int | None = None
    eval_n: int = 200
    eval_samples: int = 4
    policies: bool = False
    """Default configs: solo, fixed I/J and adaptive I/J (plan.compared_configs) instead of the paper's split."""


@dataclass(frozen=True)
class Started:
    out: Path
    plan: Plan
    kept: int
    """Cells found done in the folder."""
    model: str


@dataclass(frozen=True)
class BaseScoring:
    """The base model's held-out scores are being measured (once per experiment folder)."""

    n: int
    samples: int


@dataclass(frozen=True)
class BaseScored:
    accuracy: float
    n: int
    sampled: float | None
    seconds: float
    engine: str
    kept: bool


@dataclass(frozen=True)
class CellStarted:
    index: int
    total: int
    label: str
    resumed: tuple[int, ...] = ()
    """Each node's rounds done in earlier runs of the cell (empty: a cell starting from nothing)."""


@dataclass(frozen=True)
class CellProgress:
    label: str
    done: int
    """Rounds every node of the cell has finished."""
    rounds: int
    elapsed_s: float
    eta_s: float
    eta_all_s: float
    """Until the last missing cell ends, at the pace seen so far."""


@dataclass(frozen=True)
class CellFinished:
    index: int
    total: int
    label: str
    wall_s: float
    cum_reward: float
    heldout_end: float | None
    gain_points: float | None
    load_average: list[float] | None


@dataclass
class Outcome:
    out: Path
    done: int
    total: int
    interrupted: bool = False
    files: list[Path] = field(default_factory=list)


def make_plan(settings: Settings, inputs: Inputs) -> Plan:
    """The plan, checked: configs default to the model's own I + J split as the paper splits its 8 (the
    model's swarm.toml applied first), threads to the physical cores shared out among the nodes."""
    from swarm_app.session.engine import detect_hardware, prepare_model

    prepare_model(settings)  # the model's recommended settings, as every session of the experiment will see them
    total = settings.train.local + settings.train.external
    configs = (parse_configs(inputs.configs) if inputs.configs
               else compared_configs(total, settings.train.local) if inputs.policies and settings.train.external
               else default_configs(total))
    eval_every = inputs.eval_every if inputs.eval_every is not None else max(1, inputs.rounds // 4)
    cores = detect_hardware(settings.model.backend).cores
    plan = Plan(inputs.nodes, configs, inputs.seeds, inputs.rounds, eval_every, inputs.eval_n, inputs.eval_samples,
                threads_per_node(settings.model.threads, cores, inputs.nodes), inputs.first_seed)
    check_plan(plan)
    return plan


def run_experiment(settings: Settings, plan: Plan, out: Path, report: Callable[[Any], None]) -> Outcome:
    """Run the missing cells of `plan` into `out` (locked while it runs), reporting progress events."""
    store = ExperimentDir(out)
    lock = store.lock()
    try:
        return asyncio.run(_Experiment(settings, plan, store, report).run())
    finally:
        lock.release()


class _Experiment:
    def __init__(self, settings: Settings, plan: Plan, store: ExperimentDir, report: Callable[[Any], None]) -> None:
        self.settings, self.plan, self.store, self.report = settings, plan, store, report
        self.current: CellRun | None = None
        self.stopped = False
        self.cell_walls: list[float] = []

    def stop(self) -> None:
        self.stopped = True
        if self.current is not None:
            self.current.stop()

    async def run(self) -> Outcome:
        undo = on_stop_signals(asyncio.get_running_loop(), self.stop)
        try:
            return await self._run()
        finally:
            undo()

    async def _run(self) -> Outcome:
        model = self._model_id()
        self.store.check_plan(fingerprint(self.settings, self.plan, model))
        cells = self.plan.cells()
        missing = [cell for cell in cells if self.store.read_cell(cell) is None]
        self.report(Started(self.store.root, self.plan, len(cells) - len(missing), model))
        base = await self._base()
        outcome = Outcome(self.store.root, len(cells) - len(missing), len(cells))
        if not missing or self.stopped:
            outcome.files = self._write_outputs(base, model)
        for number, cell in enumerate(missing, start=1):
            if self.stopped:
                break
            try:
                record = await self._run_cell(cell, cells.index(cell) + 1, len(missing) - number)
            except CellInterrupted:
                break
            self.store.write_cell(cell, record)
            outcome.done += 1
            outcome.files = self._write_outputs(base, model)
            self._finished(cell, cells.index(cell) + 1, len(cells), record, base)
        outcome.interrupted = self.stopped
        return outcome

    def _model_id(self) -> str:
        from swarm_app.session.model import resolve

        return resolve(self.settings.model.path).model_id

    async def _base(self) -> dict[str, Any]:
        base = self.store.read_base()
        kept = base is not None
        if base is None:
            self.report(BaseScoring(self.plan.eval_n, self.plan.eval_samples))
            base = await asyncio.to_thread(score_base, cell_settings(self.settings, self.plan, self.plan.cells()[0]), self.plan)
            self.store.write_base(base)
        sampled = (base.get("sampled") or {}).get("mean_reward")
        self.report(BaseScored(base["accuracy"], base["n"], sampled, base["seconds"], base["engine"], kept))
        return base

    async def _run_cell(self, cell: Cell, index: int, after: int) -> dict[str, Any]:
        total = len(self.plan.cells())
        folder = self.store.cell_folder(cell)
        done = resume_point(folder, self.plan.nodes)
        if done is None:
            folder, done = self.store.scratch(cell), []
        self.report(CellStarted(index, total, cell.label, tuple(done) if any(done) else ()))
        tracker = _Pace(self, cell, after, min(done, default=0))
        self.current = CellRun(self.settings, self.plan, cell, folder, tracker.on_round)
        try:
            await self.current.run()
            return self.current.result()
        finally:
            self.current = None

    def _finished(self, cell: Cell, index: int, total: int, record: dict[str, Any], base: dict[str, Any]) -> None:
        self.cell_walls.append(record["wall_s"])
        from swarm_app.experiment.summary import cell_metrics

        m = cell_metrics(record, base, self.plan)
        self.report(CellFinished(index, total, cell.label, record["wall_s"], m["cum_reward"], m["heldout_end"],
                                 m["gain_points"], record["load_average"]["end"]))

    def _write_outputs(self, base: dict[str, Any], model: str) -> list[Path]:
        cells = [record for cell in self.plan.cells() if (record := self.store.read_cell(cell)) is not None]
        if not cells:
            return []
        summary = summarize(self.plan, base, cells)
        setup = self._setup(base, model)
        write_json(self.store.results_file, {"experiment": {**_plan_dict(self.plan), **setup}, "base": base,
                                             "summary": summary, "cells": cells})
        write_text_atomic(self.store.table_file, markdown(self.plan, setup, summary))
        if summary["headline"] is not None:
            write_json(self.store.summary_file, {**summary["headline"], "model": model, "engine": base["engine"],
                                                 "cells_done": len(cells), "cells": len(self.plan.cells())})
        seeds = max(len(c["seeds"]) for c in summary["configs"])
        title = f"{self.plan.nodes} nodes per config; mean over {seeds} seed(s), shaded: +-1 sd"
        pngs = draw_atomically(summary["curves"], self.store.root, title)
        written = [self.store.results_file, self.store.table_file, *pngs]
        return written + ([self.store.summary_file] if summary["headline"] is not None else [])

    def _setup(self, base: dict[str, Any], model: str) -> dict[str, Any]:
        s = self.settings
        return {"model": model, "engine": base["engine"], "preset": s.tasks.preset, "completions": s.train.completions,
                "temperature": s.model.temperature, "max_new_tokens": s.model.max_new_tokens}


class _Pace:
    """A cell's progress: the rounds every node has finished, and the time left at the pace seen so far."""

    def __init__(self, experiment: _Experiment, cell: Cell, cells_after: int, resumed_at: int = 0) -> None:
        self.experiment, self.cell, self.cells_after = experiment, cell, cells_after
        self.done = [resumed_at] * experiment.plan.nodes
        self.reported = self.resumed_at = resumed_at
        self.started = time.monotonic()

    def on_round(self, node: int, t: int) -> None:
        self.done[node] = t
        low, rounds = min(self.done), self.experiment.plan.rounds
        if low <= self.reported:
            return
        self.reported = low
        elapsed = time.monotonic() - self.started
        eta = elapsed / (low - self.resumed_at) * (rounds - low)
        walls = self.experiment.cell_walls
        per_cell = sum(walls) / len(walls) if walls else elapsed + eta
        self.experiment.report(CellProgress(self.cell.label, low, rounds, elapsed, eta, eta + per_cell * self.cells_after))


def score_base(settings: Settings, plan: Plan) -> dict[str, Any]:
    """The base model's held-out scores on the engine the nodes will use: every curve's round 0."""
    from backends.base import Sampling
    from swarm_app.experiment.cell import SAMPLED_SEED
    from swarm_app.kernel import tasks
    from swarm_app.session.engine import open_engine
    from swarm_app.training.evaluation import evaluate, sampled_reward

    engine = open_engine(settings)
    started = time.monotonic()
    m = settings.model
    try:
        refs = tasks.heldout(tasks.preset(settings.tasks.preset), plan.eval_n)
        result = evaluate(engine.backend, refs, m.max_new_tokens)
        sampled = (sampled_reward(engine.backend, refs, Sampling(m.max_new_tokens, m.temperature, m.top_p, seed=SAMPLED_SEED),
                                  plan.eval_samples).to_dict() if plan.eval_samples else None)
    finally:
        engine.backend.close()
    return {**result.to_dict(), "sampled": sampled, "engine": engine.name, "threads": engine.threads,
            "seconds": round(time.monotonic() - started, 3)}


def write_sizes(out: Path, folders: dict[int, Path]) -> Path | None:
    """`out/sizes.json` (experiment/sizes.py) from the results.json of each size's folder that has one."""
    from swarm_app.experiment.sizes import sizes_file
    from swarm_app.experiment.store import read_json

    by_size = {}
    for nodes, folder in folders.items():
        results = read_json(folder / "results.json")
        if isinstance(results, dict):
            by_size[nodes] = (results["experiment"]["rounds"], results["summary"]["configs"])
    table = sizes_file(by_size) if by_size else None
    if table is None:
        return None
    write_json(out / "sizes.json", table)
    return out / "sizes.json"


def draw_atomically(curves: dict[str, Any], out: Path, title: str) -> list[Path]:
    """The PNGs, each drawn into a temporary folder and moved into `out` whole."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=out, prefix=".plots-") as tmp:
        drawn = plots.draw(curves, Path(tmp), title)
        for path in drawn:
            write_bytes_atomic(out / path.name, path.read_bytes())
    return [out / path.name for path in drawn]


def _plan_dict(plan: Plan) -> dict[str, Any]:
    return {"nodes": plan.nodes, "configs": [c.name for c in plan.configs], "seeds": plan.seeds,
            "seed_ids": list(plan.seed_ids()), "rounds": plan.rounds,
            "eval_every": plan.eval_every, "eval_n": plan.eval_n, "eval_samples": plan.eval_samples,
            "threads_per_node": plan.threads, "eval_rounds": plan.eval_rounds()}
