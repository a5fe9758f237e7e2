"""The session's side of automatic rollback: keep the best-evaluated checkpoint, go back to it on a fall.

After each round with a scheduled evaluation (`RollbackGuard.after_round`):
- a new best: the round is checkpointed (even off the checkpoint_every cadence) and only then named in
  `checkpoints/best.json`, so the file never names an incomplete checkpoint;
- a fall beyond the noise (training/rollback.py, when `[train] rollback` is on): the best checkpoint's
  adapter and optimizer state are loaded, a `rollback` row is written to metrics.jsonl, `RolledBack`
  is published, and the round is checkpointed with the restored adapter. Nothing else changes: the
  round counter goes on and every draw of round t still derives from (seed, t).

Crashes: a kill before that round's checkpoint resumes from the round before and cuts the rollback row
with the rest of the round's rows; the round runs again and falls again. On resume the best is derived
from the kept rows among the checkpoints still on disk (`resume`), and `best.json` is rewritten where a
kill left it behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from swarm_app.kernel.errors import CheckpointError, UsageError
from swarm_app.kernel.events import RolledBack, RoundMetrics
from swarm_app.session.engine import load_checkpoint_adapter
from swarm_app.session.run_folder import write_failed
from swarm_app.training.rollback import Best, Fall, best_of, improves, judge

if TYPE_CHECKING:
    from swarm_app.session.bus import EventBus
    from swarm_app.session.rows import RunRows
    from swarm_app.training.checkpoint import Checkpoints
    from swarm_app.training.loop import Trainer


class Host(Protocol):
    """What the guard uses of the session that runs it (session.py's Session), named here so that this
    module never imports the session: the session owns the guard, not the other way round."""

    checkpoints: "Checkpoints"
    rows: "RunRows"
    trainer: "Trainer"
    events: "EventBus"

    @property
    def backend_name(self) -> str: ...

    async def on_engine(self, call: Callable, *args) -> Any: ...

log = logging.getLogger(__name__)


class RollbackGuard:
    def __init__(self, enabled: bool, eval_n: int) -> None:
        self.enabled = enabled
        self.eval_n = eval_n
        self.best: Best | None = None
        self.needs_checkpoint = False
        """Set by after_round: the round must be checkpointed now (a new best, or a rollback happened)."""

    def resume(self, session: Host) -> None:
        """The best among the kept rows whose checkpoint is still on disk; `best.json` names it."""
        checkpoints = session.checkpoints
        self.best = best_of(session.rows.log.rows(), self.eval_n, checkpoints.rounds())
        if self.best is not None and checkpoints.best_round() != self.best.round:
            try:
                checkpoints.mark_best(self.best.round, self.best.accuracy, self.best.n)
            except OSError as exc:
                raise write_failed(checkpoints.best_file, exc) from None

    async def after_round(self, session: Host, metrics: RoundMetrics) -> Best | None:
        """Roll back on a fall; returns the new best when this round is one. The caller then checkpoints the
        round whenever `needs_checkpoint` says so, and after that calls `mark` with the new best."""
        self.needs_checkpoint = False
        if metrics.heldout_acc is None:
            return None
        n = metrics.heldout_n or self.eval_n
        if improves(self.best, metrics.heldout_acc):
            self.needs_checkpoint = True
            return Best(metrics.round, metrics.heldout_acc, n)
        fall = judge(self.best, metrics.round, metrics.heldout_acc, n)
        if fall is not None and self.enabled:
            self.needs_checkpoint = await self._roll_back(session, fall)
        return None

    async def mark(self, session: Host, best: Best) -> None:
        """Name the (now checkpointed) round the best."""
        try:
            await asyncio.to_thread(session.checkpoints.mark_best, best.round, best.accuracy, best.n)
        except OSError as exc:  # a full disk or a folder made read-only: one line, the run resumes later
            raise write_failed(session.checkpoints.best_file, exc) from None
        self.best = best

    async def _roll_back(self, session: Host, fall: Fall) -> bool:
        folder = session.checkpoints.folder_of(fall.to_round)
        backend = session.trainer.backend
        try:
            await session.on_engine(load_checkpoint_adapter, backend, session.backend_name, folder)
        except (CheckpointError, UsageError) as exc:
            log.warning("held-out accuracy fell from %.3f to %.3f, but the best checkpoint (round %d) cannot be "
                        "loaded (%s): training goes on without rolling back", fall.best, fall.now, fall.to_round,
                        exc.message)
            return False
        await asyncio.to_thread(session.rows.append, fall.to_row(time.time()))
        log.info("rolled back after round %d to the adapter of round %d (held-out %.3f, best %.3f, threshold %.3f)",
                 fall.from_round, fall.to_round, fall.now, fall.best, fall.threshold)
        session.events.publish(RolledBack(fall.from_round, fall.to_round, fall.best, fall.now, fall.threshold,
                                          fall.n))
        return True
