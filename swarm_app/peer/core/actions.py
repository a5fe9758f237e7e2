"""What the sans-IO node core asks its driver to do: dial, send, close, fetch peers, pull over HTTP,
and the notice that a rollout was admitted. Plain frozen values; the driver (node.py, or a
simulator) carries them out in order. Nothing here does anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.pool import PoolEntry


@dataclass(frozen=True)
class Dial:
    addr: str


@dataclass(frozen=True)
class Send:
    conn: int
    message: dict[str, Any]


@dataclass(frozen=True)
class Close:
    conn: int
    reason: str


@dataclass(frozen=True)
class FetchPeers:
    addr: str


@dataclass(frozen=True)
class HttpPull:
    addr: str
    have: dict[str, int]
    max: int
    heard: HeardFilter | None = None
    held: HeardFilter | None = None
    recent: HeardFilter | None = None


@dataclass(frozen=True)
class Admitted:
    entry: PoolEntry
    pushed: bool


Action = Dial | Send | Close | FetchPeers | HttpPull | Admitted
