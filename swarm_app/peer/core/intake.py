"""The node core's intake: what comes in (peers' rollouts through admission.py's door into the pool), what it
costs the sender (offences, bans), what goes out of the pool (answers to pulls, own rollouts), and what the
node tells of itself when it pulls (the authors it heard from, the rollouts it holds).

`Intake` owns the admission door, the pool, the peer book (scores, offences, bans, standing), the authors
heard and the own-push budget; it reads the live links (links.py) to know whether an offender is still
connected, and notes in the address book which outbound neighbour was useful or banned. It returns
actions (`Admitted`, `Close`, `Send`) and opens nothing. Sans-IO: the time is an argument, randomness
the core's `random.Random`.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from typing import Any

from swarm_app.kernel.rollouts import Rollout
from swarm_app.peer.core.actions import Action, Admitted, Close, Send
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.admission import Accepted, Admission, Rejected
from swarm_app.peer.core.connections import Connection
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.links import Links
from swarm_app.peer.core.messages import MAX_HAVE, Pull, fit_items
from swarm_app.peer.core.own_rollouts import OwnRollouts
from swarm_app.peer.core.pool import PoolEntry
from swarm_app.peer.core.ratelimit import TokenBucket
from swarm_app.peer.core.scores import PeerBook, PeerRecord
from swarm_app.peer.core.tally import Tally
from swarm_app.peer.core.wire import SignedRollout, WireError, item_from_json

log = logging.getLogger(__name__)

RELAYED_REASONS = frozenset({"author_rate", "no_signal", "new_author"})
"""Rejections that count against a peer only when it pushed the rollout (pushes are the sender's own)."""


class Intake:
    def __init__(self, identity: Identity, admission: Admission, config: ProtocolConfig, peers: PeerBook,
                 addresses: AddressBook, links: Links, rng: random.Random, tally: Tally) -> None:
        self.admission, self.pool, self.config, self.peers = admission, admission.pool, config, peers
        self.addresses, self.links, self.rng, self.tally = addresses, links, rng, tally
        self.heard: OrderedDict[str, int] = OrderedDict()
        """Author -> the newest time (ms) of a rollout admitted from it, the `MAX_HAVE` latest authors."""
        self.own = OwnRollouts(identity, admission, tally.count)
        self._own_push = TokenBucket(config.own_push_rate, config.own_push_burst, 0.0)
        self.sharing = config.share
        """Own rollouts are pushed and served (True) or kept (False); the face's `set_sharing` changes it."""

    # --- peers' rollouts in

    def receive(self, c: Connection, items: list[Any], pushed: bool, now: float) -> list[Action]:
        sender = self.peers.get(c.peer, now)
        now_ms = int(now * 1000)
        actions: list[Action] = []
        for item in items:
            sender.received += 1
            try:
                verdict = self.admission.admit(item_from_json(item), c.peer, now_ms, c.ip, pushed)
            except WireError as exc:
                actions += self.penalize(c, exc.reason, now)
            else:
                if isinstance(verdict, Accepted):
                    c.last_useful = now
                    c.delivered.add(1.0, now)
                    if c.direction == "out" and c.addr:
                        self.addresses.note_useful(c.addr)
                    self._note_accepted(sender, verdict.entry, now)
                    actions.append(Admitted(verdict.entry, pushed))
                else:
                    scale = 0.0 if self._not_its_fault(c, verdict, pushed) else 1.0
                    actions += self.penalize(c, verdict.reason, now, scale)
            if any(isinstance(a, Close) for a in actions):
                break  # banned: the rest of the message is not looked at
        return actions

    @staticmethod
    def _not_its_fault(c: Connection, verdict: Rejected, pushed: bool) -> bool:
        """A rejection counted but not held against the sender: a pull answer relays others' rollouts, whose
        budgets it cannot know; and a push of its own first rollouts can meet a new-author budget spent by
        others of its address or network (a shared NAT, a LAN): refused until a pull answer brings the
        author in, never a ban, at whatever rate the sender produces. Pushing other keys stays an offence."""
        if verdict.reason in RELAYED_REASONS and not pushed:
            return True
        return verdict.reason == "new_author" and verdict.detail == c.peer

    def _note_accepted(self, sender: PeerRecord, entry: PoolEntry, now: float) -> None:
        sender.accepted += 1
        self.tally.count("accepted")
        self.peers.get(entry.author, now).authored += 1
        self.heard[entry.author] = max(entry.ts_ms, self.heard.pop(entry.author, 0))
        while len(self.heard) > MAX_HAVE:
            self.heard.popitem(last=False)

    def penalize(self, c: Connection, reason: str, now: float, scale: float = 1.0) -> list[Action]:
        """Count `reason` against the sender (scale 0: counted, not held against it); a ban closes it."""
        self.tally.reject(reason)
        record = self.peers.get(c.peer, now)
        if scale == 0.0:
            record.rejected[reason] += 1
            return []
        if not self.peers.penalize(c.peer, reason, now):
            return []
        log.warning("peer %s banned for %.0f s after repeated rejections (%s)",
                    c.peer[:12], record.banned_until - now, dict(record.rejected))
        if c.addr:
            self.addresses.hold(c.addr, record.banned_until)
            self.addresses.discredit(c.addr)
        self.tally.count("bans")
        return [Close(c.conn, "offender")] if c.conn in self.links else []

    # --- the pool out

    def answer_pull(self, c: Connection, pull: Pull, now: float) -> Send:
        self.tally.count("pulls_served")
        signed = self.pool.for_pull(pull.have, min(pull.max, self.config.pull_max), int(now * 1000), c.peer, self.rng,
                                    int(self.config.pull_fresh_s * 1000), pull.heard or (), pull.held,
                                    pull.recent or ())
        return Send(c.conn, {"t": "sample", "re": pull.id, "items": self._served(signed)})

    def serve_http_sample(self, have: dict[str, int], limit: int, now: float, heard: HeardFilter | None,
                          held: HeardFilter | None, recent: HeardFilter | None) -> list[Any]:
        self.tally.count("http_samples_served")
        signed = self.pool.for_pull(have, max(1, min(limit, self.config.pull_max)), int(now * 1000), "", self.rng,
                                    int(self.config.pull_fresh_s * 1000), heard or (), held, recent or ())
        return self._served(signed)

    def _served(self, signed: list[SignedRollout]) -> list[Any]:
        """A pull answer's items (as many as fit in a frame), counting them and the copies of own rollouts among
        them (the rest are relayed)."""
        items = fit_items([s.to_item() for s in signed])
        self.tally.count("rollouts_served", len(items))
        self.tally.count("own_served", sum(self.pool.is_own(s.id) for s in signed[:len(items)]))
        return items

    def publish(self, rollout: Rollout, conns: list[int], now: float) -> list[Action]:
        """Sign an own rollout, file it, push it to `push_fanout` of `conns` (while the own-push budget lasts).
        Nothing while sharing is off."""
        if not self.sharing:
            self.tally.count("unshared")
            return []
        signed = self.own.sign(rollout, now)
        if signed is None or not conns or not self._own_push.take(now):
            return []
        targets = self.rng.sample(conns, min(self.config.push_fanout, len(conns)))
        self.tally.count("pushes", len(targets))
        return [Send(t, {"t": "push", "items": [signed.to_item()]}) for t in targets]

    def pull_filters(self, now: float) -> tuple[HeardFilter, HeardFilter, HeardFilter]:
        """What a pull tells of this node (heard.py), in `PULL_FILTERS` order: the authors it heard from
        within the coverage window, the rollouts it holds that an answer could bring (as fresh as an
        answer's), and the authors it heard from lately. Its `have` map stays empty: the filters say more
        in a size that does not grow with the swarm."""
        now_ms, config = int(now * 1000), self.config
        window, lately = now_ms - int(config.heard_window_s * 1000), now_ms - int(config.recent_window_s * 1000)
        held = self.pool.held_ids(now_ms - int(config.pull_fresh_s * 1000))
        return (HeardFilter.of(a for a, ts in self.heard.items() if ts >= window), HeardFilter.of_rollouts(held),
                HeardFilter.of(a for a, ts in self.heard.items() if ts >= lately))

    # --- upkeep

    def expire(self, now: float) -> None:
        self.pool.expire(int(now * 1000))
        self.admission.seen.expire(int(now * 1000))

    def update_standing(self, now: float) -> None:
        """Hand the pool each known author's weight in the external draw (sources.Standing)."""
        standing, limit = self.admission.standing, self.peers.policy.offense_limit
        homes = standing.homes()
        weights = {}
        for author in homes:
            record = self.peers.peek(author)
            used, offense = (record.used, record.offense.value(now)) if record else (0, 0.0)
            weights[author] = standing.weight(author, used, offense, limit, now)
        self.pool.set_standing(weights, homes)

    def record_used(self, author: str, mean_advantage: float, now: float) -> None:
        record = self.peers.get(author, now)
        record.used += 1
        record.advantage_sum += mean_advantage
