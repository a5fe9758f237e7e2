"""One cell of the experiment: N nodes of one I/J config and seed, trained at once in this process.

Each node is a full Session (session/session.py) with its own run folder and seed
(session/local_swarm.node_settings). With J > 0 the nodes are the real peer nodes of
peer/io/local_nodes.py (signed rollouts, admission, pulls and pushes over 127.0.0.1) exactly as `swarm
demo` runs them; with J = 0 a node has no use for peers and trains offline, so that the solo arm pays for
no networking. Models load one at a time (transformers' lazy imports are not thread-safe), then every node
starts its first round together.

Threads: every node runs its engine on its own engine thread (Session.on_engine) with model.threads as
the plan says (1 when there are at least as many nodes as cores), so N nodes keep N threads busy and no
OpenMP team spins beside another. CPU time per node is read inside its engine thread (time.thread_time,
EngineClock): a per-node figure although the nodes share the process.

Owns running the nodes and collecting what they did (their metrics.jsonl rows, evaluations, CPU time);
must not print, decide which cells to run, or write outside the cell's run folders.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from backends.base import Sampling
from swarm_app.experiment.plan import Cell, Plan, cell_settings
from swarm_app.kernel.errors import SwarmError
from swarm_app.kernel.events import EvaluationFinished, Event, RoundFinished
from swarm_app.kernel.settings import Settings
from swarm_app.session.local_swarm import node_settings
from swarm_app.session.session import Session
from swarm_app.training.evaluation import sampled_reward
from swarm_app.training.metrics_log import MetricsLog

log = logging.getLogger(__name__)

SAMPLED_SEED = 0
"""The held-out sampled reward draws with one fixed seed: the start and the end score the same draw."""


class CellInterrupted(Exception):
    """A stop signal ended the cell before its last round: nothing of it is kept."""


class CellFailed(SwarmError):
    """A node of the cell failed: nothing of it is kept; the line names the node and why."""


class EngineClock:
    """CPU seconds of one node's engine thread, read inside that thread with time.thread_time.

    It wraps the trainer's run_round and evaluate (the session calls them on the engine thread), so
    `rounds[t]` is round t's CPU time (with its evaluation, if it had one) and `evals[t]` the evaluation's
    part. Exact at model.threads 1, where the engine computes on that thread; with more threads their
    helpers are not counted (the cell's process CPU time is kept beside it)."""

    def __init__(self) -> None:
        self.rounds: dict[int, float] = {}
        self.evals: dict[int, float] = {}

    def attach(self, trainer) -> None:
        run_round, evaluate = trainer.run_round, trainer.evaluate

        def timed_round(t: int):
            return self._timed(self.rounds, t, run_round, t)

        def timed_evaluate(round_index: int = 0, *args):
            return self._timed(self.evals, round_index, evaluate, round_index, *args)

        trainer.run_round, trainer.evaluate = timed_round, timed_evaluate

    @staticmethod
    def _timed(into: dict[int, float], key: int, call: Callable, *args):
        started = time.thread_time()
        try:
            return call(*args)
        finally:
            into[key] = into.get(key, 0.0) + time.thread_time() - started


@dataclass
class NodeRecord:
    node: int
    seed: int
    engine: str = ""
    clock: EngineClock = field(default_factory=EngineClock)
    per_task: dict[int, dict[str, float]] = field(default_factory=dict)
    """Per-task held-out accuracy of each evaluation, by round (from EvaluationFinished)."""
    sampled: dict[str, Any] | None = None
    engine_cpu_s: float = 0.0
    peer: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def on_event(self, event: Event) -> None:
        if isinstance(event, EvaluationFinished):
            self.per_task[event.round] = dict(event.per_task)


class StartGate:
    """The nodes' first rounds start together, once every model has loaded (or at once on a failure or a stop)."""

    def __init__(self, nodes: int) -> None:
        self.waiting = nodes
        self.event = asyncio.Event()

    def arrive(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0:
            self.event.set()

    def open(self) -> None:
        self.event.set()

    async def wait(self) -> None:
        await self.event.wait()


class CellRun:
    """`await run()`, then `result()`: the cell's record (see `cell_record`), or CellInterrupted after
    `stop()` (a stop signal: the caller forwards it) or CellFailed when a node failed. Run folders go under
    `folder`; `on_round(node, t)` is called after each node's round."""

    def __init__(self, settings: Settings, plan: Plan, cell: Cell, folder: Path,
                 on_round: Callable[[int, int], None]) -> None:
        self.base = cell_settings(settings, plan, cell)
        self.plan, self.cell, self.folder, self.on_round = plan, cell, folder, on_round
        self.records = [NodeRecord(i, cell.node_seed(i)) for i in range(plan.nodes)]
        self.sessions: list[Session] = []
        self.gate = StartGate(plan.nodes)
        self.opening = asyncio.Lock()
        self.stopped = False
        self.times: dict[str, Any] = {}

    def stop(self) -> None:
        self.stopped = True
        for session in self.sessions:
            session.stop()
        self.gate.open()

    async def run(self) -> None:
        from swarm_app.peer.io.local_nodes import run_demo  # deferred: aiohttp

        self.times = {"started_at": time.time(), "load_average_start": _load_average(),
                      "process_cpu_start": time.process_time(), "t0": time.monotonic()}
        if self.cell.config.solo:
            await asyncio.gather(*(self.run_node(i, None) for i in range(self.plan.nodes)), return_exceptions=True)
        else:
            await run_demo(self.plan.nodes, self.run_node)  # logs a node's failure and lets the others end

    async def run_node(self, index: int, exchange) -> None:
        record = self.records[index]
        session = Session(node_settings(self.base, index, self.folder), exchange=exchange, fresh=True,
                          on_event=lambda event: self._on_event(record, event),
                          final_evaluation=self.plan.rounds not in self.plan.scheduled_evaluations())
        self.sessions.append(session)
        try:
            await self._open(session, record)
            if not self.stopped:
                await session.run()
            if not session.stopping and not self.stopped:
                await self._finish(session, record)
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            self.stop()  # a cell with a failed node is not kept: end the others now
            raise
        finally:
            if exchange is not None:
                record.peer = _peer_figures(exchange.stats())
            session.close()

    async def _open(self, session: Session, record: NodeRecord) -> None:
        try:
            async with self.opening:
                if not self.stopped:
                    await asyncio.to_thread(session.open)
            if session.trainer is not None:
                record.engine = session.backend_name
                record.clock.attach(session.trainer)
        finally:
            self.gate.arrive()
        await self.gate.wait()
        self.times.setdefault("t_start", time.monotonic())

    def _on_event(self, record: NodeRecord, event: Event) -> None:
        record.on_event(event)
        if isinstance(event, RoundFinished):
            self.on_round(record.node, event.metrics.round)

    async def _finish(self, session: Session, record: NodeRecord) -> None:
        """The sampled held-out reward and the engine thread's CPU time, once the node's run (with its final
        evaluation, a row of metrics.jsonl) is done."""
        if self.plan.eval_samples:
            m, trainer = session.settings.model, session.trainer
            sampling = Sampling(m.max_new_tokens, m.temperature, m.top_p, seed=SAMPLED_SEED)
            started = time.monotonic()
            result, cpu_s = await session.on_engine(_timed_sampled, trainer.backend, trainer.plan.eval_refs, sampling,
                                                    self.plan.eval_samples)
            record.sampled = {**result.to_dict(), "cpu_s": cpu_s, "seconds": round(time.monotonic() - started, 3)}
        record.engine_cpu_s = await session.on_engine(time.thread_time)

    def result(self) -> dict[str, Any]:
        failed = [r for r in self.records if r.error]
        if failed:
            raise CellFailed(f"cell {self.cell.label}: node {failed[0].node} failed ({failed[0].error}); nothing of "
                             "this cell was kept: run the same command to try it again")
        if self.stopped or any(s.stopping for s in self.sessions):
            raise CellInterrupted(self.cell.label)
        return cell_record(self.cell, self.plan, self.records, self.folder, self.times)


def _timed_sampled(backend, refs, sampling: Sampling, samples: int) -> tuple[Any, float]:
    started = time.thread_time()
    result = sampled_reward(backend, refs, sampling, samples)
    return result, round(time.thread_time() - started, 3)


def cell_record(cell: Cell, plan: Plan, records: list[NodeRecord], folder: Path, times: dict[str, Any]) -> dict[str, Any]:
    """What the cell file keeps: the cell, its timing and load, and every node's rows and evaluations."""
    ended = time.monotonic()
    nodes = [node_record(r, MetricsLog(folder / f"node-{r.node}" / "metrics.jsonl")) for r in records]
    return {
        "cell": {"key": cell.key, "config": cell.config.name, "local": cell.config.local,
                 "external": cell.config.external, "seed": cell.seed,
                 "node_seeds": [cell.node_seed(i) for i in range(plan.nodes)]},
        "engine": records[0].engine, "threads": plan.threads, "started_at": times["started_at"],
        "wall_s": round(ended - times["t0"], 3),
        "load_s": round(times.get("t_start", ended) - times["t0"], 3),
        "train_wall_s": round(ended - times.get("t_start", ended), 3),
        "process_cpu_s": round(time.process_time() - times["process_cpu_start"], 3),
        "load_average": {"start": times["load_average_start"], "end": _load_average()},
        "run_folders": str(folder),
        "nodes": nodes,
    }


def node_record(record: NodeRecord, metrics: MetricsLog) -> dict[str, Any]:
    """A node's round rows (with the CPU time of each round), its held-out points (the rounds' own
    evaluations and the evaluation rows of metrics.jsonl, per task) and its other figures."""
    rows = [{**row, "cpu_s": _rounded(record.clock.rounds.get(row["round"])),
             "eval_cpu_s": _rounded(record.clock.evals.get(row["round"]))} for row in metrics.rows()]
    heldout = {row["round"]: {"round": row["round"], "accuracy": row["heldout_acc"], "kind": "scheduled",
                              "per_task": record.per_task.get(row["round"], {})}
               for row in rows if row.get("heldout_acc") is not None}
    for row in metrics.evaluations():
        if row["round"] > 0:  # an evaluation of the untouched model is not this node's: base.json has it
            heldout[row["round"]] = {"round": row["round"], "accuracy": row["heldout_acc"], "kind": row.get("kind", ""),
                                     "per_task": row.get("per_task") or record.per_task.get(row["round"], {})}
    for t, point in heldout.items():
        point["cpu_s"] = _rounded(record.clock.evals.get(t))
    return {"node": record.node, "seed": record.seed, "engine": record.engine, "rows": rows,
            "heldout": [heldout[t] for t in sorted(heldout)], "sampled_end": record.sampled,
            "engine_cpu_s": round(record.engine_cpu_s, 3), "peer": record.peer}


def _peer_figures(stats) -> dict[str, Any]:
    return {"published": stats.published, "sent": stats.sent, "accepted": stats.accepted,
            "rejected": dict(stats.rejected), "peers": stats.neighbours}


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # Windows has none
        return None
