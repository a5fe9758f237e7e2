"""One cell of the experiment: N nodes of one I/J config and seed, trained at once in this process.

Each node is a full Session (session/session.py) with its own run folder and seed
(demo/local_swarm.node_settings). With J > 0 the nodes are the real peer nodes of
peer/io/local_nodes.py (signed rollouts, admission, pulls and pushes over 127.0.0.1) exactly as `swarm
demo` runs them; with J = 0 a node has no use for peers and trains offline, so that the solo arm pays for
no networking. Models load one at a time (transformers' lazy imports are not thread-safe), then every node
starts its first round together.

Resuming: a cell killed part way continues where its nodes' last checkpoints are (each node a resumed
Session), from what the cell kept as it went: every node's per-round CPU time, per-task evaluations and
engine total in `node-i/experiment_node.json`, rewritten after each of its rounds, and the cell's time
in `segments.json`, one entry per run of the cell. CPU spent on a round that a kill cut short is not
counted: that round runs again. A node killed after its last round, while it was being scored, loads its
last checkpoint and is scored then. A folder without those files cannot resume: `resume_point` says so
and the cell starts again from nothing.

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
from swarm_app.demo.local_swarm import node_settings
from swarm_app.experiment.plan import Cell, Plan, cell_settings
from swarm_app.experiment.store import read_json, write_json
from swarm_app.kernel.errors import CheckpointError, SwarmError
from swarm_app.kernel.events import EvaluationFinished, Event, RoundFinished
from swarm_app.kernel.hardware import cpu_identity
from swarm_app.kernel.settings import Settings
from swarm_app.session.session import Session, SessionOptions
from swarm_app.training.checkpoint import Checkpoints
from swarm_app.training.evaluation import sampled_reward
from swarm_app.training.loop import CpuLedger
from swarm_app.training.metrics_log import MetricsLog

log = logging.getLogger(__name__)

SAMPLED_SEED = 0
"""The held-out sampled reward draws with one fixed seed: the start and the end score the same draw."""

NODE_FILE = "experiment_node.json"
"""In each node's run folder: what the cell needs of that node beyond metrics.jsonl (see the module docstring)."""
SEGMENTS_FILE = "segments.json"
"""In the cell's folder: the wall and process CPU time of each run of the cell."""


class CellInterrupted(Exception):
    """A stop signal ended the cell before its last round: the next run goes on from its checkpoints."""


class CellFailed(SwarmError):
    """A node of the cell failed: the cell is not finished; the line names the node and why."""


class EngineClock:
    """CPU seconds of one node's engine thread, from the trainer's own ledger (Trainer.cpu, training/loop.py):
    `rounds[t]` is round t's CPU time (with its evaluation, if it had one) and `evals[t]` the evaluation's part.
    Exact at model.threads 1, where the engine computes on that thread; with more threads their helpers are
    not counted (the cell's process CPU time is kept beside it). The experiment only reads the ledger: it
    drives the node through the session like any caller and replaces nothing on it."""

    def __init__(self) -> None:
        self.ledger = CpuLedger()
        self.before = 0.0
        """The engine CPU seconds of earlier runs of a resumed cell."""

    def attach(self, trainer) -> None:
        """Read `trainer.cpu` from now on (what an earlier run of the cell kept is carried into it)."""
        trainer.cpu.rounds.update(self.ledger.rounds)
        trainer.cpu.evals.update(self.ledger.evals)
        self.ledger = trainer.cpu

    @property
    def rounds(self) -> dict[int, float]:
        return self.ledger.rounds

    @property
    def evals(self) -> dict[int, float]:
        return self.ledger.evals

    def keep_only(self, rounds: dict[int, float], evals: dict[int, float]) -> None:
        self.ledger.rounds.clear()
        self.ledger.rounds.update(rounds)
        self.ledger.evals.clear()
        self.ledger.evals.update(evals)

    @property
    def spent(self) -> float:
        """All engine CPU seconds so far (`before` and this thread's), as of the last timed call's end."""
        return self.before + self.ledger.thread_total


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

    @property
    def finished(self) -> bool:
        return self.sampled is not None or bool(self.engine_cpu_s)

    def kept(self) -> dict[str, Any]:
        """What `node-i/experiment_node.json` holds (copies: the engine thread adds to the clock meanwhile)."""
        return {"engine": self.engine, "rounds": dict(self.clock.rounds), "evals": dict(self.clock.evals),
                "engine_cpu_s": self.engine_cpu_s or self.clock.spent, "finished": self.finished,
                "per_task": dict(self.per_task), "sampled": self.sampled, "peer": self.peer}

    def restore(self, kept: dict[str, Any], last_round: int | None) -> None:
        """Take back what an earlier run of the cell kept, up to `last_round` (where the node's checkpoint
        resumes it; None: the node had finished). A round after it runs again: its CPU time comes off."""
        def upto(figures: dict[str, Any]) -> dict[int, Any]:
            return {int(t): v for t, v in figures.items() if last_round is None or int(t) <= last_round}

        self.engine = kept.get("engine") or self.engine
        self.clock.keep_only(upto(kept["rounds"]), upto(kept["evals"]))
        redone = sum(v for t, v in kept["rounds"].items() if int(t) not in self.clock.rounds)
        self.clock.before = max(float(kept["engine_cpu_s"]) - redone, 0.0)
        self.per_task = upto(kept["per_task"])
        if last_round is None:
            self.sampled, self.engine_cpu_s, self.peer = kept["sampled"], float(kept["engine_cpu_s"]), kept["peer"]


def read_kept(folder: Path) -> dict[str, Any] | None:
    """A node's `experiment_node.json`, or None where there is none or it is not one."""
    kept = read_json(folder / NODE_FILE)
    return kept if isinstance(kept, dict) and {"rounds", "evals", "engine_cpu_s", "per_task"} <= kept.keys() else None


def resume_point(folder: Path, nodes: int) -> list[int] | None:
    """Each node's last checkpointed round in a cell's folder left by a killed run, or None where the cell
    cannot go on and starts again from nothing: its time was not kept, or a node with a checkpoint did not
    keep its figures. A node killed while scoring its last round goes on with that scoring."""
    if not folder.is_dir() or not isinstance(read_json(folder / SEGMENTS_FILE), list):
        return None
    done = []
    for i in range(nodes):
        node = folder / f"node-{i}"
        last = _last_checkpoint(node)
        if read_kept(node) is None and last > 0:
            return None
        done.append(last)
    return done


def _last_checkpoint(node: Path) -> int:
    try:
        return Checkpoints(node).load_latest()[0].round
    except (CheckpointError, OSError, ValueError):
        return 0


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
        earlier = read_json(folder / SEGMENTS_FILE)
        self.earlier = earlier if isinstance(earlier, list) else []
        """The earlier runs of this cell (a resumed cell), each {"wall_s", "load_s", "train_wall_s", ...}."""

    def stop(self) -> None:
        self.stopped = True
        for session in self.sessions:
            session.stop()
        self.gate.open()

    async def run(self) -> None:
        from swarm_app.peer.io.local_nodes import run_demo  # deferred: aiohttp

        self.times = {"started_at": time.time(), "load_average_start": _load_average(), "machine": cpu_identity(),
                      "process_cpu_start": time.process_time(), "t0": time.monotonic()}
        if self.cell.config.solo:
            await asyncio.gather(*(self.run_node(i, None) for i in range(self.plan.nodes)), return_exceptions=True)
        else:
            await run_demo(self.plan.nodes, self.run_node)  # logs a node's failure and lets the others end

    async def run_node(self, index: int, exchange) -> None:
        record = self.records[index]
        kept = read_kept(self.folder / f"node-{index}")
        if kept is not None and kept.get("finished"):
            record.restore(kept, None)  # it finished in an earlier run of the cell
            self.gate.arrive()
            return
        options = SessionOptions(final_evaluation=self.plan.rounds not in self.plan.scheduled_evaluations(),
                                 open_finished=True)  # a node killed while scoring its last round scores it now
        session = Session(node_settings(self.base, index, self.folder), options, exchange=exchange)
        session.subscribe(lambda event: self._on_event(record, event))
        self.sessions.append(session)
        try:
            await self._open(session, record, kept)
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
            if record.finished and not record.error:
                self._keep(record)
            session.close()

    async def _open(self, session: Session, record: NodeRecord, kept: dict[str, Any] | None) -> None:
        try:
            async with self.opening:
                if not self.stopped:
                    await asyncio.to_thread(session.open)
            if session.trainer is not None:
                record.engine = session.backend_name
                record.clock.attach(session.trainer)
                if kept is not None:
                    record.restore(kept, session.next_round - 1)
        finally:
            self.gate.arrive()
        await self.gate.wait()
        self.times.setdefault("t_start", time.monotonic())

    def _on_event(self, record: NodeRecord, event: Event) -> None:
        record.on_event(event)
        if isinstance(event, RoundFinished):
            self._keep(record)
            self.on_round(record.node, event.metrics.round)

    def _keep(self, record: NodeRecord) -> None:
        """Write what a resumed cell needs of this node, and the cell's time so far."""
        write_json(self.folder / f"node-{record.node}" / NODE_FILE, record.kept())
        write_json(self.folder / SEGMENTS_FILE, [*self.earlier, self._segment()])

    def _segment(self) -> dict[str, Any]:
        """This run of the cell so far."""
        now = time.monotonic()
        t_start = self.times.get("t_start", now)
        return {"started_at": self.times["started_at"], "wall_s": round(now - self.times["t0"], 3),
                "load_s": round(t_start - self.times["t0"], 3), "train_wall_s": round(now - t_start, 3),
                "process_cpu_s": round(time.process_time() - self.times["process_cpu_start"], 3),
                "load_average_start": self.times["load_average_start"], "machine": self.times["machine"]}

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
        record.engine_cpu_s = record.clock.before + await session.on_engine(time.thread_time)

    def result(self) -> dict[str, Any]:
        failed = [r for r in self.records if r.error]
        if failed:
            raise CellFailed(f"cell {self.cell.label}: node {failed[0].node} failed ({failed[0].error}); run the "
                             "same command to go on from the nodes' last checkpoints")
        if self.stopped or any(s.stopping for s in self.sessions):
            raise CellInterrupted(self.cell.label)
        return cell_record(self.cell, self.plan, self.records, self.folder, [*self.earlier, self._segment()])


def _timed_sampled(backend, refs, sampling: Sampling, samples: int) -> tuple[Any, float]:
    started = time.thread_time()
    result = sampled_reward(backend, refs, sampling, samples)
    return result, round(time.thread_time() - started, 3)


def cell_record(cell: Cell, plan: Plan, records: list[NodeRecord], folder: Path,
                segments: list[dict[str, Any]]) -> dict[str, Any]:
    """What the cell file keeps: the cell, its timing and load (summed over the runs of the cell, in
    `segments`), and every node's rows and evaluations."""
    nodes = [node_record(r, MetricsLog(folder / f"node-{r.node}" / "metrics.jsonl")) for r in records]

    def total(key: str) -> float:
        return round(sum(segment[key] for segment in segments), 3)

    return {
        "cell": {"key": cell.key, "config": cell.config.name, "local": cell.config.local,
                 "external": cell.config.external, "seed": cell.seed,
                 "node_seeds": [cell.node_seed(i) for i in range(plan.nodes)]},
        "engine": next((r.engine for r in records if r.engine), ""), "threads": plan.threads,
        "started_at": segments[0]["started_at"], "runs": len(segments),
        "wall_s": total("wall_s"), "load_s": total("load_s"), "train_wall_s": total("train_wall_s"),
        "process_cpu_s": total("process_cpu_s"),
        "load_average": {"start": segments[0]["load_average_start"], "end": _load_average()},
        "machines": sorted({segment["machine"] for segment in segments if segment.get("machine")}),
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
