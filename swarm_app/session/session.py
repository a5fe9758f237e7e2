"""A training session: one backend, the trainer, the run folder and (optionally) the swarm.

`open()` validates everything and loads the model before anything is written, then resumes from the
run's last checkpoint; `run()` drives rounds on the session's one engine thread and publishes typed
events (events.py) on the loop to every subscriber: the TUI, the headless view and the status endpoint
of `swarm watch` are all subscribers, none talks to the trainer. Views steer the run with the request
methods (pause, resume, set_sharing, evaluate_now, stop), which act between rounds; a stop also cuts
generation short between two decode steps and checkpoints the last completed round. Evaluations that
are not a round's own (`e`, and for `swarm demo` the untouched model's baseline and the evaluation
after the last round) run here too, before RunStopped, so every view shows them, and each is a row of
metrics.jsonl.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from backends.base import Cancelled, Hardware, Sampling
from swarm_app.kernel import tasks
from swarm_app.kernel.errors import CheckpointError, SwarmError
from swarm_app.kernel.events import (
    CheckpointSaved,
    Event,
    ModelLoading,
    RecordUpdated,
    RoundFinished,
    RoundStarted,
    RunStarted,
    RunStopped,
    SharingChanged,
)
from swarm_app.kernel.files import check_writable_folder
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.rollouts import RolloutExchange
from swarm_app.kernel.runlock import RunLock
from swarm_app.kernel.settings import Settings, describe
from swarm_app.resources.guest import LEVELS, lower_priority, process_memory
from swarm_app.resources.pausing import Pausing
from swarm_app.resources.policy import GuestPolicy
from swarm_app.session.bus import EventBus, LogForwarder
from swarm_app.session.engine import OpenedEngine, detect_hardware, load_checkpoint_adapter, open_engine, prepare_model
from swarm_app.session.peering import Peering
from swarm_app.session.rollback import RollbackGuard
from swarm_app.session.rows import RunRows
from swarm_app.session.run_folder import (
    check_run_matches,
    move_old_run_aside,
    run_dir_of,
    run_seed,
    write_failed,
    write_run_file,
)
from swarm_app.session.solo import find_solo_curve
from swarm_app.training.checkpoint import Checkpoints, CheckpointState
from swarm_app.training.evaluation import EvalResult
from swarm_app.training.loop import RoundAbandoned, RoundPlan, Trainer
from swarm_app.training.metrics_log import evaluation_row

log = logging.getLogger(__name__)


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future, exc: BaseException | None) -> None:
    """Resolve `future` from another thread; a loop that already closed (the run ended) is left be."""
    def settle() -> None:
        if not future.done():
            future.set_exception(exc) if exc is not None else future.set_result(None)
    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs beyond its settings: what the command that starts it asks of this one run.
    Each is a plain value; the settings (flags, config.toml, SWARM_*) stay what every run shares."""

    fresh: bool = False
    """`swarm run --fresh`: an old run in the folder is moved aside and a new one starts."""
    baseline: bool = False
    """Evaluate the untouched model (held-out) before a new run's first round (`swarm demo`'s node 0)."""
    final_evaluation: bool = False
    """Evaluate after the last round of a run that finished (`swarm demo`, `swarm experiment`)."""
    open_finished: bool = False
    """Load a run that already did all its rounds too (run() then runs none), so that the caller can still
    score its model (`swarm experiment`: a node killed while scoring its last round scores it now)."""


class Session:
    def __init__(self, settings: Settings, options: SessionOptions = SessionOptions(), *,
                 exchange: RolloutExchange | None = None) -> None:
        """`exchange`: a peer node made and run by the caller (the demo, the experiment); it is shown in the
        views when it has `stats()`. Otherwise the session starts its own node when [peer] enabled says so.
        Views and callers hear the events through `subscribe()`."""
        self.settings, self.options = settings, options
        self.baseline_result: EvalResult | None = None
        self.final_result: EvalResult | None = None
        self.exchange = exchange
        self.events = EventBus()
        self.hardware: Hardware | None = None
        """Detected in open() (on the loading thread: a CUDA probe may import torch)."""
        self.fresh = options.fresh
        self.run_dir = run_dir_of(settings)
        self.rows = RunRows(self.run_dir / "metrics.jsonl")
        self.checkpoints = Checkpoints(self.run_dir)
        self.guard = RollbackGuard(settings.train.rollback, settings.train.eval_n)
        """Keeps the best-evaluated checkpoint and goes back to it when held-out accuracy falls (rollback.py)."""
        self.trainer: Trainer | None = None
        self.engine: OpenedEngine | None = None
        self.model = None
        self.peering = Peering(self.events, exchange)  # the peer node: built, started, watched, stopped
        self.seed = 0
        self.next_round = 1
        self.last_checkpoint = ""
        self.pausing = Pausing(self._poke)
        """The user's pause and the pause rules' hold (resources/pausing.py)."""
        self.guest: GuestPolicy | None = None
        self.priority = "normal priority"
        self._lock: RunLock | None = None
        """The run folder's lock, from open() to the end of run(): one node per run folder."""
        self._stopping = False
        self._stop_event: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._eval_requested = False
        self._engine_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swarm-engine")

    @property
    def peer_node(self):
        """The peer node the views show (the session's own or the caller's); None when offline."""
        return self.peering.node

    @property
    def peer_config(self):
        """The config of the session's own peer node (None when there is none, or the caller brought it)."""
        return self.peering.config

    @property
    def paused(self) -> bool:
        """Paused by the user (a pause rule's hold is not this)."""
        return self.pausing.by_user

    @property
    def stopping(self) -> bool:
        """A stop was asked for (by a view, a signal or the demo)."""
        return self._stopping

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        """Receive every event from now on (on the loop); returns the function that unsubscribes."""
        return self.events.subscribe(subscriber)

    # -- requests from the views (call them on the loop thread) -------------------------------
    def stop(self) -> None:
        """End the run: generation stops between two decode steps (the round is abandoned); an update
        already under way completes. The last completed round is checkpointed."""
        self._stopping = True
        if self.trainer is not None:
            self.trainer.stop_requested.set()
        self._poke(stop=True)

    def pause(self) -> None:
        """No new round starts until resume(); the round under way finishes, the swarm goes on."""
        self.pausing.pause()

    def resume(self) -> None:
        self.pausing.resume()

    def set_sharing(self, share: bool) -> None:
        """Send own rollouts to peers (True) or only receive (False), from the next rollout on."""
        self.peering.set_sharing(share)
        self.events.publish(SharingChanged(share))

    def evaluate_now(self) -> None:
        """A held-out evaluation after the round under way (at once when paused)."""
        self._eval_requested = True
        self._poke()

    def _poke(self, stop: bool = False) -> None:
        if self._wake is not None:
            self._wake.set()
        if stop and self._stop_event is not None:
            self._stop_event.set()

    # -- opening: validate, load, resume ------------------------------------------------------
    def open(self) -> None:
        """Blocking (loads the model): call it from a worker thread in async code.

        Every input is checked (preset, addresses, model folder, run folder, listen port) before the
        model loads and before anything is written, so bad input costs milliseconds and leaves no trace.
        """
        specs = tasks.preset(self.settings.tasks.preset)
        self.hardware = self.hardware or detect_hardware(self.settings.model.backend)
        self.guest = GuestPolicy(self.settings.resources, self.hardware.cores, self.settings.model.threads)
        self.peering.configure(self.settings)
        self.model = prepare_model(self.settings)  # its swarm.toml, below every layer the user set
        model_dir = self.model.folder
        check_writable_folder(self.run_dir, "--run-dir")
        started = check_run_matches(self.run_dir, model_dir, self.settings.tasks.preset, self.fresh)
        self.seed = run_seed(self.settings, started)
        # One node per run folder: where a node may run already (the folder exists), say so before the
        # port check (which would warn of the other node's port); a new folder is made only once the
        # listen address is good too, so that bad input writes nothing.
        self._lock = RunLock.acquire(self.run_dir) if self.run_dir.is_dir() else None
        self.peering.claim_listen(self.settings)
        self._lock = self._lock or RunLock.acquire(self.run_dir)
        if self._already_finished() and not self.options.open_finished:
            return
        backend = self._load_backend()
        self.guest.attach(backend.set_threads, backend.device().startswith("cpu"))
        if self.fresh and move_old_run_aside(self.run_dir):
            self._relock()
        if self.checkpoints.exists():
            self._resume(backend)
        else:
            self.rows.log.keep_rounds(0)  # rows of rounds that never reached a checkpoint
        self.rows.reopen()
        write_run_file(self.run_dir, model_dir, self.settings, self.seed, self.backend_name)
        if self.exchange is None and self.peer_config is not None:
            self.exchange = self.peering.build(lambda: self.rows.last_round)
        self.trainer = Trainer(backend, self._plan(specs), self.exchange, self._report)
        self.trainer.supply.replay(self.rows.log.rows())  # a resumed run's adaptive update goes on as it was

    def _relock(self) -> None:
        """After --fresh moved the old run (and its lock file) aside: lock the new folder, then let go of the old."""
        old, self._lock = self._lock, RunLock.acquire(self.run_dir)
        old.release()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _already_finished(self) -> bool:
        """True when the run already did all its rounds: then nothing is loaded and run() only says so."""
        total = self.settings.train.rounds
        if self.fresh or not total or not self.checkpoints.latest_file.exists():
            return False
        try:
            state, folder = self.checkpoints.load_latest()
        except CheckpointError:
            return False  # the resume path finds the newest intact checkpoint and says what it did
        if state.round < total:
            return False
        self.next_round, self.last_checkpoint = state.round + 1, str(folder)
        return True

    @property
    def backend_name(self) -> str:
        return self.engine.name if self.engine else ""

    @property
    def backend_reason(self) -> str:
        return self.engine.reason if self.engine else ""

    def _load_backend(self):
        """The engine `--backend` names, or the best that works here (session/engine.py)."""
        def loading(name: str) -> None:
            self.events.publish_threadsafe(ModelLoading(self.model.model_id, name, "loading the model"))

        self.engine = open_engine(self.settings, self.hardware, model=self.model, on_attempt=loading)
        return self.engine.backend

    def _plan(self, specs: list[tasks.TaskSpec]) -> RoundPlan:
        t, m = self.settings.train, self.settings.model
        return RoundPlan(specs, t.local, t.external, t.completions, self.seed,
                         Sampling(m.max_new_tokens, m.temperature, m.top_p), t.keep_zero_advantage_local,
                         t.eval_every, tasks.heldout(specs, t.eval_n), t.negative_weight, t.external_policy,
                         t.signal_target, t.adaptive_floor)

    def _resume(self, backend) -> None:
        state, folder = self.checkpoints.restore(lambda folder: load_checkpoint_adapter(backend, self.backend_name, folder))
        self.rows.log.keep_rounds(state.round)
        self.guard.resume(self)
        self.last_checkpoint = str(folder)
        self.next_round = state.round + 1
        log.info("resuming %s after round %d", self.run_dir, state.round)

    # -- running ----------------------------------------------------------------------------
    async def run(self) -> int:
        """Run rounds until the total is reached or stop() is called. Returns the last completed round."""
        self.events.attach(asyncio.get_running_loop())
        self._stop_event, self._wake = asyncio.Event(), asyncio.Event()
        if self._stopping:
            self._stop_event.set()
        forwarder = LogForwarder(self.events)
        logging.getLogger().addHandler(forwarder)
        try:
            if self.trainer is None and not await self._open_unless_stopped():
                last = self.next_round - 1
                self.events.publish(RunStopped(last, "already finished" if not self._stopping else "interrupted",
                                               str(self.run_dir), self.last_checkpoint))
                return last
            return await self._run_rounds()
        finally:
            logging.getLogger().removeHandler(forwarder)
            self._release_lock()  # the run folder is no longer written: another node may take it

    async def _open_unless_stopped(self) -> bool:
        """open() on a daemon thread, abandoned when a stop comes first (loading can take a minute and
        cannot be interrupted; a daemon thread does not hold the process). False: nothing to train."""
        self.events.publish(ModelLoading(self.settings.model.path or "the bundled model",
                                         self.settings.model.backend, "checking the settings"))
        opened = asyncio.get_running_loop().create_future()
        threading.Thread(target=self._open_into, args=(opened,), name="swarm-open", daemon=True).start()
        stopped = asyncio.ensure_future(self._stop_event.wait())
        await asyncio.wait({opened, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not opened.done():
            opened.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
            self.next_round = self._checkpointed_round() + 1
            return False
        opened.result()  # raises what open() raised
        return self.trainer is not None and not self._stopping

    def _open_into(self, opened: asyncio.Future) -> None:
        loop = opened.get_loop()
        try:
            self.open()
        except BaseException as exc:  # handed to the loop, raised there
            _settle(loop, opened, exc)
        else:
            _settle(loop, opened, None)

    def _checkpointed_round(self) -> int:
        """The round of the newest checkpoint, read without loading it (0 when there is none)."""
        if not self.checkpoints.latest_file.exists():
            return 0
        try:
            state, folder = self.checkpoints.load_latest()
        except CheckpointError:
            return 0
        self.last_checkpoint = str(folder)
        return state.round

    async def _run_rounds(self) -> int:
        trainer, total = self.trainer, self.settings.train.rounds
        self.events.publish(RunStarted(str(self.run_dir), self.backend_name, self.backend_reason,
                                       trainer.backend.model_id, self.settings.tasks.preset, self.next_round, total,
                                       trainer.backend.device(), trainer.backend.memory(),
                                       self.engine.machine_line(self.settings), self.hardware.ram_bytes,
                                       offline=self.peer_node is None,
                                       resources=self.guest.describe(self.settings.resources.level, self.priority),
                                       external=self.settings.train.external))
        self.events.publish(RecordUpdated(self.rows.ledger.record()))
        last_saved = last_done = self.next_round - 1
        reason, error = "finished", None
        watchers: list[asyncio.Future] = []
        try:
            await self.peering.join()
            await self._publish_solo_curve()
            watchers = [asyncio.ensure_future(self.peering.watch()),
                        asyncio.ensure_future(self.pausing.watch_rules(self.guest))]
            if self.options.baseline and last_done == 0:
                self.baseline_result = await self._evaluate(0, "baseline")
            while not self._stopping and (total == 0 or self.next_round <= total):
                await self._between_rounds(last_done)
                if self._stopping:
                    break
                t = self.next_round
                self.events.publish(RoundStarted(t))
                try:
                    metrics = await self.on_engine(self._run_round_as_guest, t)
                except RoundAbandoned:
                    break
                metrics = self.rows.with_cpu_total(metrics, rss_bytes=process_memory(), **self.peering.figures())
                await asyncio.to_thread(self.rows.add_round, metrics.to_row())
                last_done, self.next_round = t, t + 1
                self.events.publish(RoundFinished(metrics))
                best = await self.guard.after_round(self, metrics)
                if self.guard.needs_checkpoint or t % self.settings.train.checkpoint_every == 0:
                    last_saved = await self._save(t)
                if best is not None:
                    await self.guard.mark(self, best)
                self.events.publish(RecordUpdated(self.rows.ledger.record()))
            if self._stopping:
                reason = "interrupted"
            elif self.options.final_evaluation:
                self.final_result = await self._evaluate(last_done, "final")
        except BaseException as exc:
            reason, error = "error", exc
            raise
        finally:
            for watcher in watchers:
                watcher.cancel()
            if last_done > last_saved:
                await self._save_at_exit(last_done, error)
            await self.peering.leave()
            self.events.publish(RunStopped(last_done, reason, str(self.run_dir), self.last_checkpoint))
        return last_done

    async def _between_rounds(self, last_done: int) -> None:
        """Serve an evaluation request, and wait while paused by the user or held by a pause rule (the swarm
        keeps going meanwhile); each new reason to wait is announced."""
        while not self._stopping:
            if self._eval_requested:
                self._eval_requested = False
                if await self._evaluate(last_done, "requested") is None:
                    return  # a stop cut it short
            notice = self.pausing.notice(last_done)
            if notice is not None:
                self.events.publish(notice)
            if not self.pausing.waiting:
                return
            self._wake.clear()
            await self._wake.wait()

    def _run_round_as_guest(self, t: int):
        """One round on the engine thread, on the thread count the guest policy gives, which it then learns from."""
        self.guest.begin_round()
        metrics = self.trainer.run_round(t)
        self.guest.end_round(metrics.tokens + metrics.train_tokens)
        return dataclasses.replace(metrics, threads=self.guest.round_threads or None)

    def _report(self, event: Event) -> None:
        """The trainer's progress (engine thread): a thread probe that runs long is cut short here."""
        self.guest.during_round()
        self.events.publish_threadsafe(event)

    def lower_priority(self) -> None:
        """Run below normal scheduling priority unless resources.low_priority is off (the run commands call
        it; a library user's process is left alone)."""
        if self.settings.resources.low_priority:
            nice = LEVELS[self.settings.resources.level][1]
            self.priority = lower_priority(nice)

    async def _evaluate(self, round_index: int, kind: str) -> EvalResult | None:
        """A held-out evaluation on the engine thread, kept as a row of its own in metrics.jsonl; None
        when a stop cut it short (nothing is written then)."""
        started = time.perf_counter()
        try:
            result = await self.on_engine(self.trainer.evaluate, round_index, kind)
        except Cancelled:
            return None
        row = evaluation_row(round_index, kind, result.accuracy, result.n, result.per_task,
                             round(time.perf_counter() - started, 3), time.time())
        await asyncio.to_thread(self.rows.append, row)
        self.events.publish(RecordUpdated(self.rows.ledger.record()))
        return result

    async def _publish_solo_curve(self) -> None:
        """For a node that learns from peers: a solo run of the same model to compare with, when one is found
        (session/solo.py); the views say so when none is."""
        if self.settings.train.external == 0:
            return
        found = await asyncio.to_thread(find_solo_curve, user_dirs().data, self.model.model_id, self.model.folder,
                                        self.settings.tasks.preset, self.run_dir, describe(self.settings),
                                        self.settings.train.eval_n)
        if found is not None:
            self.events.publish(found)

    async def _save_at_exit(self, t: int, error: BaseException | None) -> None:
        """Checkpoint the last completed round on the way out; when the run is already failing (`error`),
        a failed save is logged, not raised over the error that ended the run; on screen only when it
        is news (a disk that already failed the run failing again is not: the command prints that line)."""
        try:
            await self._save(t)
        except SwarmError as exc:
            if error is None:
                raise
            same = isinstance(error, SwarmError) and error.title == exc.title
            log.log(logging.INFO if same else logging.WARNING, "%s", exc.message)

    async def _save(self, t: int) -> int:
        state = CheckpointState(t, self.rows.rounds, self.trainer.backend.model_id, self.backend_name)
        try:
            folder = await self.on_engine(self.checkpoints.save, state, self.trainer.backend.save_adapter)
        except OSError as exc:
            raise write_failed(self.checkpoints.folder, exc) from None
        self.last_checkpoint = str(folder)
        self.events.publish(CheckpointSaved(t, str(folder)))
        return t

    async def on_engine(self, call: Callable, *args):
        """`call(*args)` on the session's one engine thread: every round, evaluation and checkpoint runs there.
        Each thread that runs the model's ops gets its own OpenMP team, and an idle team spins on the cores
        that the working one needs: with rounds on whichever pool thread was free, 2 threads made a round of
        the bundled model 1.3-1.5x slower than 1 thread (benchmarks/results/session_threads.md)."""
        return await asyncio.get_running_loop().run_in_executor(self._engine_thread, call, *args)

    def close(self) -> None:
        """Let go of the run folder and the engine. A teardown that fails is logged: the run's files are
        complete by now, and an error that ended the run must stay the one the user reads."""
        self._release_lock()
        try:
            if self.trainer is not None:
                self.trainer.backend.close()
        except Exception as exc:
            log.warning("closing the %s engine failed (%s: %s); the run's files are complete", self.backend_name,
                        type(exc).__name__, exc, exc_info=True)
        self._engine_thread.shutdown(wait=False)
