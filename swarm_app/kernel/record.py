"""A participant's record of one run: what it shared, whose groups it learned from, its held-out gain.

Plain values (it travels in the `RecordUpdated` event to the views and `swarm watch`), and the lines that
`swarm stats` and the dashboard show. It is derived from metrics.jsonl alone (swarm_app/record/ folds the
rows), so it survives resumes and says nothing the rows do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOP_PEERS = 5
"""Peers named in the record: those whose groups this node used most."""


@dataclass(frozen=True)
class ParticipantRecord:
    rounds: int = 0
    """Completed rounds in the run's rows."""
    online_rounds: int = 0
    """Of those, rounds with a peer node (the sharing figures count only these)."""
    shared: int = 0
    """Own rollouts signed and offered to peers."""
    pushed: int = 0
    """Copies of them pushed to peers (whether each peer kept one is not known)."""
    served: int = 0
    """Copies of them handed to peers that pulled."""
    groups_used: int = 0
    """Peers' groups (with a reward spread) in this node's updates."""
    peers_used: int = 0
    """Distinct authors of those groups."""
    top_peers: dict[str, int] = field(default_factory=dict)
    """The authors of the most groups used, most first: node id -> groups (at most TOP_PEERS)."""
    first_round: int | None = None
    """Round of the first held-out evaluation (0: the untouched model); None: no evaluation yet."""
    first_accuracy: float | None = None
    latest_round: int | None = None
    latest_accuracy: float | None = None
    rollbacks: int = 0
    """Automatic rollbacks to the best-evaluated checkpoint."""

    @property
    def gain(self) -> float | None:
        """Held-out accuracy gained since the first evaluation (None with fewer than two)."""
        if self.first_accuracy is None or self.latest_round == self.first_round:
            return None
        return self.latest_accuracy - self.first_accuracy

    def to_dict(self) -> dict[str, Any]:
        first = None if self.first_round is None else {"round": self.first_round, "accuracy": self.first_accuracy}
        latest = None if self.latest_round is None else {"round": self.latest_round, "accuracy": self.latest_accuracy}
        return {"rounds": self.rounds, "online_rounds": self.online_rounds,
                "shared": {"rollouts": self.shared, "pushed": self.pushed, "served": self.served},
                "used": {"groups": self.groups_used, "peers": self.peers_used,
                         "top_peers": [{"node_id": k, "groups": v} for k, v in self.top_peers.items()]},
                "heldout": {"first": first, "latest": latest,
                            "gain": None if self.gain is None else round(self.gain, 6)},
                "rollbacks": self.rollbacks}

    def lines(self) -> list[str]:
        """What `swarm stats` prints and the dashboard's record panel shows (no title)."""
        if not self.online_rounds:
            gave = "shared   nothing (the run trained offline)"
        else:
            gave = (f"shared   {self.shared:,} own rollouts; {self.pushed:,} copies pushed to peers, "
                    f"{self.served:,} handed to peers that pulled")
        used = f"used     {self.groups_used:,} peers' groups with a reward spread, from {self.peers_used} peers"
        peers = [f"  {node_id[:16]:<16} {groups:>6,} groups" for node_id, groups in self.top_peers.items()]
        return [f"rounds   {self.rounds:,}", gave, used, *peers, self._heldout_line(),
                f"rollbacks {self.rollbacks} (to the best-evaluated checkpoint)"]

    def _heldout_line(self) -> str:
        if self.first_round is None:
            return "held-out no evaluation yet"
        first = f"{self.first_accuracy:.3f} ({_at(self.first_round)})"
        if self.gain is None:
            return f"held-out {first}"
        return (f"held-out {first} -> {self.latest_accuracy:.3f} (round {self.latest_round}): "
                f"{self.gain * 100:+.1f} points")


def _at(round_index: int) -> str:
    return "untouched model" if round_index == 0 else f"round {round_index}"
