"""Admission of peers' rollouts: the door every received rollout goes through, in a fixed order.

Checks, cheapest first: size, JSON, version, schema, canonical form (wire.parse_body); held-out
seed; timestamp window; duplicate / replay / forgotten
(seen-cache); signature; per-author rate; ground truth re-derived from the TaskRef; a reward spread
when the completions are scored here (filter, then sample: a group whose rewards are all equal teaches
nothing, so it never takes room in the pool); and for an author never admitted before, the budget of
new authors of the address and network that delivered it (sources.py). Only then is the rollout put in
the seen-cache and the pool. A rejection is a value (`Rejected(reason)`), never an exception; `REASONS`
lists every reason. Sans-IO: time comes in as an argument. Scoring the sender is the protocol core's
job, not this one's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import HELDOUT_SEED, Task, TaskRef, regenerate, score
from swarm_app.peer.core.pool import PoolEntry, RolloutPool, SeenCache
from swarm_app.peer.core.ratelimit import BucketMap
from swarm_app.peer.core.sources import NewAuthorBudget, SourceLimits, Standing
from swarm_app.peer.core.wire import ParsedBody, SignedRollout, WireError, parse_body, signature_valid

log = logging.getLogger(__name__)

REASONS: dict[str, str] = {
    "too_large": "body over 64 KiB",
    "malformed": "not UTF-8 JSON, or a bad base64url field",
    "schema": "wrong fields, types or ranges",
    "version": "unknown protocol version",
    "not_canonical": "body bytes are not the RFC 8785 form",
    "heldout_seed": "TaskRef seed reserved for held-out evaluation (2**31-1): never trained on, never shared",
    "future": "timestamp more than 2 min ahead",
    "stale": "timestamp more than 10 min old, or older than what was forgotten from this author",
    "duplicate": "already admitted (same bytes)",
    "replay": "same author and sequence number as an admitted rollout, other bytes",
    "bad_signature": "signature does not verify with the author key",
    "author_rate": "author over its rate limit",
    "unknown_task": "task config this node cannot regenerate",
    "ground_truth": "question or answer differs from the one regenerated from the TaskRef (forgery)",
    "no_signal": "every completion gets the same reward here: no learning signal, never pooled",
    "new_author": "the delivering address or its network used up its budget of authors new to this node",
}
"""Every rollout rejection reason with its meaning (message-level reasons are in messages.py)."""


@dataclass(frozen=True)
class AdmissionLimits:
    past_ms: int = 10 * 60 * 1000
    """Oldest accepted timestamp, relative to the local clock."""
    future_ms: int = 2 * 60 * 1000
    """Furthest-ahead accepted timestamp (clock skew allowance)."""
    author_rate: float = 4.0
    """Rollouts per second admitted per author, sustained. A node raises it to what an honest author on
    its protocol settings may send (limits.fitted_limits); the core refuses to run below that."""
    author_burst: float = 128.0
    """Rollouts admitted per author in one burst (a round's worth, with room); raised like author_rate."""
    author_capacity: int = 8192
    """Authors whose rate buckets are remembered (least recently seen out)."""


@dataclass(frozen=True)
class Accepted:
    entry: PoolEntry
    evicted: int
    """Old pool entries pushed out to make room."""


@dataclass(frozen=True)
class Rejected:
    reason: str
    detail: str = ""


class Admission:
    """Decides on one rollout at a time and files the accepted ones into the pool and seen-cache."""

    def __init__(self, pool: RolloutPool, seen: SeenCache, limits: AdmissionLimits = AdmissionLimits(),
                 regenerate_task: Callable[[TaskRef], Task] = regenerate, sources: SourceLimits = SourceLimits(),
                 score_task: Callable[[Task, str], float] = score) -> None:
        self.pool, self.seen, self.limits = pool, seen, limits
        self._regenerate, self._score = regenerate_task, score_task
        self.new_authors = NewAuthorBudget(sources)
        self.standing = Standing(sources)
        self._author_buckets: BucketMap[bytes] = BucketMap(limits.author_rate, limits.author_burst,
                                                           limits.author_capacity)

    def admit(self, signed: SignedRollout, via: str, now_ms: int, source_ip: str = "",
              pushed: bool = False) -> Accepted | Rejected:
        """`via`: the delivering peer's node id; `source_ip`: its address; `pushed`: unsolicited (a push)
        rather than an answer to this node's pull."""
        try:
            parsed = parse_body(signed.body)
        except WireError as exc:
            return Rejected(exc.reason, str(exc))
        if parsed.rollout.ref.seed >= HELDOUT_SEED:  # before the seen-cache: a copy must not block anything
            return Rejected("heldout_seed", f"{parsed.rollout.ref.dataset} #{parsed.rollout.ref.index}")
        verdict = self._check_time_and_seen(parsed, signed, now_ms)
        if verdict is not None:
            return verdict
        if not signature_valid(parsed, signed):
            return Rejected("bad_signature")
        new = self.standing.home(parsed.rollout.author) == ""
        if new and not self.new_authors.allows(source_ip, pushed, now_ms / 1000):
            return Rejected("new_author", parsed.rollout.author)  # before any per-author table grows
        if not self._author_buckets.take(parsed.author_key, now_ms / 1000):
            return Rejected("author_rate", parsed.rollout.author)
        task, verdict = self._check_ground_truth(parsed.rollout)
        if verdict is not None:
            return verdict
        if len({self._score(task, text) for text in parsed.rollout.completions}) < 2:
            return Rejected("no_signal", f"{parsed.rollout.ref.dataset} #{parsed.rollout.ref.index}")
        author, now = parsed.rollout.author, now_ms / 1000
        if new and not self.new_authors.take(source_ip, pushed, now):
            return Rejected("new_author", author)
        self.standing.introduce(author, source_ip, now)
        return self._file(parsed, signed, via, source_ip)

    def admit_own(self, parsed: ParsedBody, signed: SignedRollout) -> Accepted:
        """File an own rollout (already signed here): pulls serve it, and echoes of it are duplicates."""
        return self._file(parsed, signed, via="")

    def _check_time_and_seen(self, parsed: ParsedBody, signed: SignedRollout, now_ms: int) -> Rejected | None:
        if parsed.ts_ms > now_ms + self.limits.future_ms:
            return Rejected("future", f"{parsed.ts_ms - now_ms} ms ahead")
        if parsed.ts_ms < now_ms - self.limits.past_ms:
            return Rejected("stale", f"{now_ms - parsed.ts_ms} ms old")
        seen = self.seen.check(parsed.author_key, parsed.seq, signed.id, parsed.ts_ms)
        if seen == "replay" and not signature_valid(parsed, signed):
            return Rejected("bad_signature")  # an altered copy, not the author's own second version
        return Rejected(seen) if seen is not None else None

    def _check_ground_truth(self, rollout: Rollout) -> tuple[Task | None, Rejected | None]:
        try:
            task = self._regenerate(rollout.ref)
        except KeyError as exc:
            return None, Rejected("unknown_task", str(exc)[:200])
        except (ValueError, IndexError, TypeError, ArithmeticError, RecursionError) as exc:
            # reasoning-gym failing on an in-range ref: still a task this node cannot vouch for
            log.debug("regenerating %s failed: %r", rollout.ref, exc)
            return None, Rejected("unknown_task", exc.__class__.__name__)
        if task.question != rollout.question or task.answer != rollout.answer:
            return task, Rejected("ground_truth", f"{rollout.ref.dataset} #{rollout.ref.index}")
        return task, None

    def _file(self, parsed: ParsedBody, signed: SignedRollout, via: str, source_ip: str = "") -> Accepted:
        self.seen.add(parsed.author_key, parsed.seq, signed.id, parsed.ts_ms)
        entry = PoolEntry(signed, parsed.rollout, via, source_ip)
        return Accepted(entry, self.pool.insert(entry))
