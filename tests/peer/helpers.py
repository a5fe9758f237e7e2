"""Shared builders for the peer tests: valid rollouts from real task refs, signed bodies, nodes."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.config import PeerConfig, local_config
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.wire import SignedRollout, sign_rollout

FAST_DATASETS = ("basic_arithmetic", "base_conversion", "fraction_simplification", "decimal_arithmetic")


def fast_specs() -> list[tasks.TaskSpec]:
    specs = [s for s in tasks.preset("easy") if s.dataset in FAST_DATASETS]
    return specs or tasks.preset("easy")


def make_rollout(seed: int = 1, index: int = 0, completions: int = 4, round_: int = 0) -> Rollout:
    """A valid group with a reward spread (half right, half wrong), as honest nodes share: a group whose
    rewards are all equal is refused (no_signal). Items the verifier scores 0 even when right (a few
    base_conversion items have an empty answer) are skipped for the next draw."""
    for attempt in range(100):
        ref = tasks.draw(fast_specs(), seed, round_ * 1000 + index + attempt * 100_000, 1)[0]
        task = tasks.regenerate(ref)
        texts = tuple(f"thinking {i} <answer>{task.answer if i % 2 == 0 else 'no'}</answer>" for i in range(completions))
        if completions < 2 or len({tasks.score(task, text) for text in texts}) > 1:
            break
    return Rollout(ref, task.question, task.answer, texts, "test-model", round_, "", int(time.time() * 1000))


def make_rollouts(n: int, seed: int = 1) -> list[Rollout]:
    return [make_rollout(seed, i) for i in range(n)]


def signed(identity: Identity, rollout: Rollout | None = None, *, seq: int | None = None,
           ts_ms: int | None = None) -> SignedRollout:
    rollout = rollout or make_rollout()
    ts_ms = int(time.time() * 1000) if ts_ms is None else ts_ms
    return sign_rollout(identity, rollout, ts_ms * 1000 if seq is None else seq, ts_ms)


def fast_config(**protocol) -> PeerConfig:
    """Loopback node with test-speed intervals."""
    defaults = dict(pull_interval_s=0.3, exchange_interval_s=0.5, rotate_interval_s=3600.0,
                    max_inbound=256, max_inbound_per_ip=256, max_inbound_per_network=256)
    return dataclasses.replace(local_config(**{**defaults, **protocol}), tick_s=0.05)


def with_bootstrap(config: PeerConfig, *addresses: str) -> PeerConfig:
    return dataclasses.replace(config, bootstrap=tuple(addresses))


async def wait_for(predicate, timeout_s: float, step: float = 0.05) -> bool:
    """True once `predicate()` holds, polled every `step` seconds; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(step)
    return predicate()
