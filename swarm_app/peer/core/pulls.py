"""The node core's pulls: whom it asks for rollouts, when, and within which budget.

Every `pull_interval_s` one random neighbour not on trial is asked (with no connection at all, an address
reachable only over HTTP); each outbound neighbour on trial is asked at once and then once a pull interval
(overlay.probes_due), so that it can prove itself; all of it within the minute's intake
(`pulled_per_min_max`). `Pulls` owns the request ids, the schedule and the record of answers; what a pull
says of this node comes from the intake (intake.py's `pull_filters`). Sans-IO: the time is an argument,
randomness the core's `random.Random`.
"""

from __future__ import annotations

import random
from collections import deque

from swarm_app.peer.core.actions import Action, HttpPull, Send
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.connections import Connection
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.intake import Intake
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.links import Links
from swarm_app.peer.core.messages import PULL_FILTERS
from swarm_app.peer.core.overlay import on_trial, probes_due
from swarm_app.peer.core.tally import Tally


class Pulls:
    def __init__(self, config: ProtocolConfig, links: Links, intake: Intake, addresses: AddressBook,
                 rng: random.Random, tally: Tally) -> None:
        self.config, self.links, self.intake, self.addresses, self.rng, self.tally = (
            config, links, intake, addresses, rng, tally)
        self._pull_id = 0
        self._next_pull = 0.0
        self._probe_at: dict[int, float] = {}
        """Connection -> when an outbound neighbour on trial is next asked for rollouts (`probe`)."""
        self._pulled: deque[tuple[float, int]] = deque()
        """(time, rollouts) of each pull answer in the last minute (`_room`)."""

    def expire(self, now: float) -> None:
        self.tally.count("pull_timeouts", self.links.expire_pulls(now))

    def answered(self, c: Connection, re: int, count: int, now: float) -> bool:
        """An answer to pull `re` carrying `count` rollouts: False when this node asked no such thing (a late
        answer, after `pull_timeout_s`, is taken and not punished: a busy peer)."""
        if c.pending.pop(re, None) is None:
            if re not in c.timed_out:
                return False
            c.timed_out.remove(re)
            self.tally.count("late_samples")
        c.answers += 1
        self.note_pulled(count, now)
        return True

    def note_pulled(self, count: int, now: float) -> None:
        self._pulled.append((now, count))

    def _room(self, now: float) -> int:
        """How many more pulls the minute's budget (`pulled_per_min_max`) allows now: what answers brought
        in the last 60 s, and a full answer for each pull still awaited, count against it."""
        while self._pulled and self._pulled[0][0] <= now - 60.0:
            self._pulled.popleft()
        awaited = sum(len(c.pending) for c in self.links.values())
        used = sum(n for _, n in self._pulled) + awaited * self.config.pull_max
        return max(0, (self.config.pulled_per_min_max - used) // self.config.pull_max)

    def _ask(self, conn: Connection, filters: tuple[HeardFilter, ...], now: float) -> Send:
        self._pull_id += 1
        conn.pending[self._pull_id] = now + self.config.pull_timeout_s
        self.tally.count("pulls")
        return Send(conn.conn, {"t": "pull", "id": self._pull_id, "max": self.config.pull_max, "have": {},
                                **{name: f.to_wire() for name, f in zip(PULL_FILTERS, filters)}})

    def probe(self, now: float) -> list[Action]:
        """Ask each outbound neighbour on trial for rollouts at once, then once a pull interval (overlay.py)."""
        self._probe_at = {conn: t for conn, t in self._probe_at.items() if conn in self.links}
        due = [c for c in probes_due(self.links.outbound(), self.config.useless_after_answers)
               if now >= self._probe_at.get(c.conn, now)]
        if due and len(due) > (room := self._room(now)):
            self.tally.count("pulls_deferred", len(due) - room)
            due = due[:room]
        if not due:
            return []
        filters = self.intake.pull_filters(now)
        for c in due:
            self._probe_at[c.conn] = now + self.config.pull_interval_s
        self.tally.count("probes", len(due))
        return [self._ask(c, filters, now) for c in due]

    def pull(self, now: float) -> list[Action]:
        """Every `pull_interval_s` (jittered): ask one random connection for rollouts, not one on trial
        (`probe` asks those)."""
        if now < self._next_pull:
            return []
        self._next_pull = now + self.config.pull_interval_s * self.rng.uniform(0.9, 1.1)
        judged_after = self.config.useless_after_answers
        if not self._room(now):
            self.tally.count("pulls_deferred")
            return []
        others = [c for c in self.links.values() if not (c.direction == "out" and on_trial(c, judged_after))]
        if others:
            return [self._ask(self.rng.choice(others), self.intake.pull_filters(now), now)]
        if len(self.links):
            return []
        http_only = [s.addr for s in self.addresses.entries() if s.http_only]
        if http_only:
            self.tally.count("http_pulls")
            return [HttpPull(self.rng.choice(http_only), {}, self.config.pull_max, *self.intake.pull_filters(now))]
        return []
