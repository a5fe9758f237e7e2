"""The node core's counters: events (pulls sent, rollouts accepted, bans, ...) and rejections by reason.

`Tally` owns both tables; the core's parts count through `count` and `reject` (peer exchange and own
rollouts are handed `count` alone), and readers get copies (`events`, `rejections`) or one figure
(`tally["pulls"]`). What only the I/O shell sees is counted through `count_shell`, which refuses any name
outside `SHELL_EVENTS`. Plain integers: the metrics are read at scrape time (peer/io/metrics.py).
"""

from __future__ import annotations

from collections import Counter

SHELL_EVENTS = ("send_dropped", "dial_failures", "http_malformed", "ws_bytes_in", "ws_bytes_out")
"""Events only the I/O shell sees, counted through `NodeCore.count` (the bytes: of websocket messages on
established links, UTF-8 text without framing)."""


class Tally:
    def __init__(self) -> None:
        self._events: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()

    def count(self, event: str, n: int = 1) -> None:
        self._events[event] += n

    def count_shell(self, event: str, n: int = 1) -> None:
        """One of `SHELL_EVENTS` (a full send queue, a failed dial, a malformed HTTP request, message bytes)."""
        if event not in SHELL_EVENTS:
            raise ValueError(f"unknown shell event {event!r}; one of {', '.join(SHELL_EVENTS)}")
        self._events[event] += n

    def reject(self, reason: str) -> None:
        """A rollout, message or handshake refused, by reason (node-wide)."""
        self._rejected[reason] += 1

    def __getitem__(self, event: str) -> int:
        return self._events[event]

    def events(self) -> dict[str, int]:
        return dict(self._events)

    def rejections(self) -> dict[str, int]:
        return dict(self._rejected)
