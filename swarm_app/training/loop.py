"""One SAPO round (docs/architecture.md, "One round"): draw, generate, score, publish, take peers' groups,
update, record.

`Trainer.run_round(t)` runs in the worker thread and returns the round's metrics; it never touches
the asyncio loop or the views (progress goes to its `report` callback, which the session forwards).
A stop is checked between decode steps, so it never waits for a whole generation. Everything random in
round t derives from (seed, t), so a resumed round redraws the same questions and samples. Peer rollouts
arrive through a `RolloutExchange` and are re-derived and re-scored here: nothing a peer sends is
trusted, and nothing it sends can raise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from backends.base import Backend, Cancelled, Sampling, TrainSample
from swarm_app.kernel import tasks
from swarm_app.kernel.events import (
    EvaluationFinished,
    EvaluationProgress,
    EvaluationStarted,
    Event,
    PhaseProgress,
    RoundMetrics,
)
from swarm_app.kernel.rollouts import Rollout, RolloutExchange
from swarm_app.training.diagnostics import round_diagnostics
from swarm_app.training.evaluation import EvalResult, evaluate
from swarm_app.training.grpo import group_advantages, has_signal, weigh_negatives
from swarm_app.training.supply import AdaptiveUpdate

log = logging.getLogger(__name__)

EXTERNAL_TRIES = 4
"""Calls to the exchange per round: groups without a reward spread here are dropped, so ask again."""


class RoundAbandoned(Exception):
    """A stop was requested before the update: the round leaves no trace."""


@dataclass(frozen=True)
class RoundPlan:
    """The per-run constants of the loop."""

    specs: list[tasks.TaskSpec]
    local: int
    external: int
    completions: int
    seed: int
    sampling: Sampling
    keep_zero_advantage_local: bool = True
    eval_every: int = 0
    eval_refs: list[tasks.TaskRef] = field(default_factory=list)
    negative_weight: float = 1.0
    """Scale of the negative advantages in the update (grpo.weigh_negatives)."""
    external_policy: str = "uniform"
    """"uniform": up to J peers' groups, as the exchange hands them out. "fill": the same, and when fewer than J
    arrive, own groups on further questions of the round take the empty places, so the update holds I + J.
    "adaptive": peers' groups first, own questions to cover the shortfall to `signal_target` (training/supply.py).
    Under each, a node with no peer connected (or none to connect to: no exchange) answers J further own
    questions: alone, it trains as a node at I + J / 0 does."""
    signal_target: float = 0.0
    """"adaptive": the signal groups an update aims at (0: I + J)."""
    adaptive_floor: int = 0
    """"adaptive": the fewest own questions a round (0: I)."""


@dataclass
class ScoredGroup:
    rollout: Rollout
    task: tasks.Task
    rewards: list[float]
    tokens: int = 0
    """Tokens this node generated for the group (0 for peers' groups)."""

    @property
    def advantages(self) -> list[float]:
        return group_advantages(self.rewards)


@dataclass
class CpuLedger:
    """CPU seconds the trainer spent on the thread that ran it (time.thread_time, read on that thread): per round
    (its evaluation included) and per evaluation, by round; `thread_total` is the thread's whole CPU time at
    the end of the last timed call. Exact at one engine thread, where the engine computes on that thread; with
    more, their helpers are not counted. A reader on another thread should copy the dicts first."""

    rounds: dict[int, float] = field(default_factory=dict)
    evals: dict[int, float] = field(default_factory=dict)
    thread_total: float = 0.0

    @contextlib.contextmanager
    def timing(self, into: dict[int, float], key: int):
        started = time.thread_time()
        try:
            yield
        finally:
            self.thread_total = time.thread_time()
            into[key] = into.get(key, 0.0) + self.thread_total - started


class Trainer:
    def __init__(self, backend: Backend, plan: RoundPlan, exchange: RolloutExchange | None = None,
                 report: Callable[[Event], None] | None = None) -> None:
        self.backend = backend
        self.plan = plan
        self.exchange = exchange
        self.report = report or (lambda event: None)
        """Receives progress and evaluation events, on the training thread."""
        self.stop_requested = threading.Event()
        self.cpu = CpuLedger()
        """The CPU seconds of each round and evaluation, for whoever measures compute (swarm experiment)."""
        self.supply = AdaptiveUpdate(plan.signal_target, plan.adaptive_floor or plan.local,
                                     plan.local + plan.external, plan.external)
        """The adaptive update's state; observed every round (whatever the policy), used under "adaptive"."""

    def run_round(self, t: int) -> RoundMetrics:
        """One round. Raises RoundAbandoned when a stop comes before the update (the round leaves no
        trace); once the update has begun the round completes (only its evaluation is skipped). Its CPU time
        on this thread goes to `cpu`, and the part that is not its evaluation to the row (`train_cpu_s`)."""
        before = self.cpu.rounds.get(t, 0.0), self.cpu.evals.get(t, 0.0)
        with self.cpu.timing(self.cpu.rounds, t):
            metrics = self._round(t)
        spent = (self.cpu.rounds[t] - before[0]) - (self.cpu.evals.get(t, 0.0) - before[1])
        return dataclasses.replace(metrics, train_cpu_s=round(spent, 4))

    def _round(self, t: int) -> RoundMetrics:
        started = time.perf_counter()
        own, external, checked, gen_s = (self._gather_adaptive(t) if self.plan.external_policy == "adaptive"
                                         else self._gather(t))
        if self.stop_requested.is_set():
            raise RoundAbandoned(t)
        train_started = time.perf_counter()
        training_set = self._training_set(own, external)
        stats = self._train(training_set, lambda done, total: self.report(PhaseProgress(t, "training", done, total)))
        for group in external:
            self.exchange.record_used(group.rollout, mean([abs(a) for a in group.advantages]))
        metrics = self._metrics(t, own, external, stats, gen_s, time.perf_counter() - train_started)
        used_from = dict(Counter(group.rollout.author for group in external)) if self.plan.external else None
        metrics = dataclasses.replace(metrics, external_checked=checked if self.plan.external else None, used_from=used_from,
                                      **round_diagnostics(own, external, checked, [peer for _, peer in training_set], stats))
        self.supply.observe(metrics.n_local, metrics.groups_with_signal - metrics.n_external, metrics.n_external)
        if self.plan.eval_every and t % self.plan.eval_every == 0 and not self.stop_requested.is_set():
            metrics = self._with_evaluation(metrics)
        return dataclasses.replace(metrics, round_s=round(time.perf_counter() - started, 3))

    def _gather(self, t: int) -> tuple[list[ScoredGroup], list[ScoredGroup], int, float]:
        """Own groups (I, then the J places peers left empty where the policy fills them), the peers' groups,
        the peer groups re-scored, and the generation seconds."""
        started = time.perf_counter()
        try:
            own = self._generate_own(t)
        except Cancelled:
            raise RoundAbandoned(t) from None
        gen_s = time.perf_counter() - started
        self._share(t, own)
        external, checked = self._take_external(t)
        filled, fill_s = self._fill(t, self._empty_places(external))
        return own + filled, external, checked, gen_s + fill_s

    def _gather_adaptive(self, t: int) -> tuple[list[ScoredGroup], list[ScoredGroup], int, float]:
        """As _gather, under "adaptive": peers' signal groups first, then own questions for the shortfall (the
        first n of a draw of I + J from (seed, t), so the first I are the fixed policies' own questions)."""
        plan, supply = self.plan, self.supply
        connected = self.exchange is not None and self.exchange.connected()
        external, checked = self._take_external(t, supply.external_wanted()) if connected else ([], 0)
        count = supply.own_count(len(external))
        started = time.perf_counter()
        refs = tasks.draw(plan.specs, plan.seed, t, supply.most)[:count]
        try:
            own = self._generate(t, refs, (plan.seed * 1_000_003 + t) % 2**31)
        except Cancelled:
            raise RoundAbandoned(t) from None
        gen_s = time.perf_counter() - started
        self._share(t, own)
        return own, external, checked, gen_s

    def evaluate(self, round_index: int = 0, kind: str = "scheduled") -> EvalResult:
        """Held-out accuracy now, reported as EvaluationStarted/Progress/Finished (`kind`: why it runs,
        events.EVALUATION_KINDS). Raises Cancelled on stop. Its CPU time on this thread goes to `cpu`."""
        with self.cpu.timing(self.cpu.evals, round_index):
            return self._evaluate(round_index, kind)

    def _evaluate(self, round_index: int, kind: str) -> EvalResult:
        refs = self.plan.eval_refs
        self.report(EvaluationStarted(round_index, len(refs), kind))

        def answered(done: int, total: int) -> None:
            self.report(EvaluationProgress(round_index, done, total, kind))
            self._cancel_check(done, total)

        started = time.perf_counter()
        result = evaluate(self.backend, refs, self.plan.sampling.max_new_tokens, self._cancel_check, answered)
        self.report(EvaluationFinished(round_index, result.accuracy, result.per_task,
                                       round(time.perf_counter() - started, 3), kind, result.n))
        return result

    def _with_evaluation(self, metrics: RoundMetrics) -> RoundMetrics:
        started = time.perf_counter()
        try:
            result = self.evaluate(metrics.round)
        except Cancelled:
            return metrics  # the update is done and kept; only its evaluation was cut short
        return dataclasses.replace(metrics, heldout_acc=result.accuracy, heldout_n=result.n,
                                   eval_s=round(time.perf_counter() - started, 3))

    def _cancel_check(self, done: int, total: int) -> None:
        if self.stop_requested.is_set():
            raise Cancelled()

    def _share(self, t: int, own: list[ScoredGroup]) -> None:
        self.report(PhaseProgress(t, "sharing", 0, len(own)))
        for group in own:
            if has_signal(group.rewards):  # every peer drops a group without a reward spread unread
                self._publish(group.rollout)

    def _empty_places(self, external: list[ScoredGroup]) -> int:
        """The J places own questions take: those peers left empty under "fill" or when no peer is connected."""
        alone = self.exchange is None or not self.exchange.connected()
        return self.plan.external - len(external) if alone or self.plan.external_policy == "fill" else 0

    def _fill(self, t: int, missing: int) -> tuple[list[ScoredGroup], float]:
        """Own groups for the `missing` places (generated, scored and shared like the others) and the seconds
        they took. A stop abandons the round."""
        if missing <= 0 or self.stop_requested.is_set():
            return [], 0.0
        started = time.perf_counter()
        plan = self.plan
        # Questions I+1.. of a draw of I + J: fixed by (seed, t), so a resumed round asks the same ones; a
        # second sampling seed, so these completions do not replay the first call's random stream.
        refs = tasks.draw(plan.specs, plan.seed, t, plan.local + plan.external)[plan.local:][:missing]
        try:
            filled = self._generate(t, refs, (plan.seed * 1_000_003 + t + 2**30) % 2**31)
        except Cancelled:
            raise RoundAbandoned(t) from None
        self._share(t, filled)
        return filled, time.perf_counter() - started

    def _generate_own(self, t: int) -> list[ScoredGroup]:
        plan = self.plan
        return self._generate(t, tasks.draw(plan.specs, plan.seed, t, plan.local), (plan.seed * 1_000_003 + t) % 2**31)

    def _generate(self, t: int, refs: list[tasks.TaskRef], seed: int) -> list[ScoredGroup]:
        plan = self.plan
        items = [tasks.regenerate(ref) for ref in refs]
        sampling = Sampling(plan.sampling.max_new_tokens, plan.sampling.temperature, plan.sampling.top_p, seed=seed)

        def progress(done: int, total: int) -> None:
            self._cancel_check(done, total)
            self.report(PhaseProgress(t, "generating", done, total))

        outputs = self.backend.generate([task.messages() for task in items], plan.completions, sampling, progress)
        self.report(PhaseProgress(t, "scoring", 0, len(items)))
        now_ms = int(time.time() * 1000)
        groups = []
        for task, completions in zip(items, outputs):
            texts = tuple(c.text for c in completions)
            rollout = Rollout(task.ref, task.question, task.answer, texts, self.backend.model_id, t, "", now_ms)
            rewards = [tasks.score(task, text) for text in texts]
            groups.append(ScoredGroup(rollout, task, rewards, sum(c.n_tokens for c in completions)))
        return groups

    def _publish(self, rollout: Rollout) -> None:
        if self.exchange is not None:
            self.exchange.publish(rollout)

    def _take_external(self, t: int, wanted: int | None = None) -> tuple[list[ScoredGroup], int]:
        """Up to `wanted` (default J) peers' groups to train on (re-scored, with a reward spread) and how many
        valid peer groups were re-scored to find them."""
        wanted = self.plan.external if wanted is None else wanted
        if self.exchange is None or wanted <= 0:
            return [], 0
        kept: list[ScoredGroup] = []
        checked = 0
        for _ in range(EXTERNAL_TRIES):
            # ask only for what is missing: the exchange hands each rollout out once
            offered = self.exchange.sample(wanted - len(kept))
            groups = [g for g in map(rescore, offered) if g is not None]
            checked += len(groups)
            kept += [g for g in groups if has_signal(g.rewards)]
            if not offered or len(kept) >= wanted:
                break
        return kept, checked

    def _training_set(self, own: list[ScoredGroup], external: list[ScoredGroup]) -> list[tuple[TrainSample, bool]]:
        """One sample per completion with a non-zero advantage, each with whether it came from a peer."""
        groups = [(g, False) for g in own if self.plan.keep_zero_advantage_local or has_signal(g.rewards)]
        weight = self.plan.negative_weight
        return [(TrainSample(g.task.messages(), text, adv), peer)
                for g, peer in groups + [(g, True) for g in external]
                for text, adv in zip(g.rollout.completions, weigh_negatives(g.advantages, weight)) if adv != 0.0]

    def _train(self, training_set: list[tuple[TrainSample, bool]], progress):
        if not training_set:
            return None  # no group with a reward spread: nothing to learn this round
        return self.backend.train_step([sample for sample, _ in training_set], progress)

    def _update(self, own: list[ScoredGroup], external: list[ScoredGroup], progress):
        """The round's update on these groups (benchmarks/research call it on groups of their own)."""
        return self._train(self._training_set(own, external), progress)

    def _metrics(self, t, own, external, stats, gen_s, train_s) -> RoundMetrics:
        local_rewards = [r for g in own for r in g.rewards]
        external_rewards = [r for g in external for r in g.rewards]
        return RoundMetrics(
            round=t,
            reward_local=mean(local_rewards),
            reward_external=mean(external_rewards) if external_rewards else None,
            reward_local_sum=sum(local_rewards),
            reward_external_sum=sum(external_rewards),
            n_local=len(own),
            n_external=len(external),
            groups_with_signal=sum(has_signal(g.rewards) for g in own + external),
            tokens=sum(g.tokens for g in own),
            train_tokens=stats.tokens if stats else 0,
            loss=stats.loss if stats else None,
            clipped_fraction=stats.clipped_fraction if stats else None,
            grad_norm=stats.grad_norm if stats else None, steps=stats.steps if stats else None,
            gen_s=round(gen_s, 3),
            train_s=round(train_s, 3),
            time=time.time(),
        )


def rescore(rollout: Rollout) -> ScoredGroup | None:
    """Re-derive a peer's task from its TaskRef and score its completions with our verifier.

    None when the task cannot be regenerated here or the peer's question or answer does not match it.
    """
    try:
        task = tasks.regenerate(rollout.ref)
    except (KeyError, ValueError, TypeError) as exc:
        log.debug("dropping external rollout: %s", exc)
        return None
    if task.question != rollout.question or task.answer != rollout.answer:
        return None
    return ScoredGroup(rollout, task, [tasks.score(task, text) for text in rollout.completions])


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
