"""Decode and verify each distinct rollout once per simulated run, not once per node that receives it.

A rollout published in a swarm of 1,000 nodes is admitted by hundreds of them; every real node decodes
its item, parses its body and verifies its Ed25519 signature (0.06 + 0.11 ms, benchmarks/admission.py),
which would make a 13-minute run of 1,000 nodes spend most of an hour on the same few hundred
thousand bodies, and keep a private copy of each in every pool (gigabytes). `decode_once` caches the
three pure functions admission uses, keyed by the exact bytes they are given: `item_from_json` (by
body and signature text), `parse_body` (by body bytes) and `signature_valid` (by body id and
signature). A cached answer is the answer the function gave the first time, errors included, so every
node still decides exactly as it would; the signatures are real and each is checked once. The cache
holds at most `capacity` entries per function (the oldest half goes when full).
tests/peer/core/test_overlay.py checks that a run gives the same figures with and without it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from swarm_app.peer.core import admission, intake
from swarm_app.peer.core.wire import Rejection

_MISS = object()


class _Cache:
    def __init__(self, function: Callable, capacity: int) -> None:
        self.function, self.capacity = function, capacity
        self.answers: dict[Any, Any] = {}

    def call(self, key: Any, *args: Any) -> Any:
        answer = self.answers.get(key, _MISS)
        if answer is _MISS:
            try:
                answer = self.function(*args)
            except Rejection as exc:  # the function's own refusal (WireError): remembered and raised again
                answer = exc
            if len(self.answers) >= self.capacity:
                for old in list(itertools.islice(self.answers, self.capacity // 2)):
                    del self.answers[old]
            self.answers[key] = answer
        if isinstance(answer, Rejection):
            raise answer.with_traceback(None)  # a fresh traceback each time: the old ones are not kept
        return answer


@contextmanager
def decode_once(capacity: int = 400_000) -> Iterator[None]:
    """While open, admission in this process decodes and verifies each distinct item once."""
    originals = (intake.item_from_json, admission.parse_body, admission.signature_valid)
    items, bodies, signatures = (_Cache(f, capacity) for f in originals)

    def item_from_json(item: Any) -> Any:
        if isinstance(item, dict) and isinstance(item.get("body"), str) and isinstance(item.get("sig"), str):
            return items.call((item["body"], item["sig"], len(item)), item)
        return originals[0](item)

    def parse_body(body: bytes) -> Any:
        return bodies.call(body, body)

    def signature_valid(parsed: Any, signed: Any) -> bool:
        return signatures.call((signed.id, signed.sig), parsed, signed)

    intake.item_from_json, admission.parse_body, admission.signature_valid = (
        item_from_json, parse_body, signature_valid)
    try:
        yield
    finally:
        intake.item_from_json, admission.parse_body, admission.signature_valid = originals
