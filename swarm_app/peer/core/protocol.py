"""The sans-IO RSP/1 node core: every protocol decision, none of the I/O.

It owns the live connections (after the handshake), the address book, peer scores and bans, and the
data plane: publish = sign, file in the pool, push to `push_fanout` random neighbours; every
`pull_interval_s` ask one random neighbour for up to `pull_max` fresh rollouts (one per author,
unheard authors first) while the minute's intake allows (`pulled_per_min_max`); answer pulls from the
pool; admit what arrives and penalize what is rejected.
Callers feed it events (`tick`, `on_frame`, `on_connected`, ...) with the current time and carry out
the returned actions (actions.py: `Dial`, `Send`, `Close`, `FetchPeers`, `HttpPull`; `Admitted` is a
notice). Its parts live beside it: connections.py (what it keeps of a connection, the inbound slots),
exchange.py (peer exchange with signed node records), own_rollouts.py (signing its own), overlay.py (which
neighbours to dial and keep), outbound.py (dialing, judging and replacing them, and whom a pull asks).
It never reads a clock, sleeps, opens a socket or raises on peer input; randomness comes from the
injected `random.Random`, so a simulator can run thousands of cores deterministically.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter, OrderedDict
from typing import Any

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.swarms import DEFAULT_SWARM
from swarm_app.peer.core.actions import Action, Admitted, Close, FetchPeers, Send
from swarm_app.peer.core.addressbook import AddressBook, format_address, parse_address
from swarm_app.peer.core.admission import Accepted, Admission
from swarm_app.peer.core.connections import Connection, InboundSlots
from swarm_app.peer.core.exchange import PeerExchange
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.messages import MAX_HAVE, Bye, MessageError, Pull, Push, Sample, decode_frame, fit_items
from swarm_app.peer.core.outbound import OutboundLinks
from swarm_app.peer.core.overlay import DecayingCount
from swarm_app.peer.core.own_rollouts import OwnRollouts
from swarm_app.peer.core.pool import PoolEntry
from swarm_app.peer.core.ratelimit import TokenBucket
from swarm_app.peer.core.scores import PeerBook, PeerRecord
from swarm_app.peer.core.wire import SignedRollout, WireError, item_from_json

log = logging.getLogger(__name__)

RELAYED_REASONS = frozenset({"author_rate", "no_signal", "new_author"})
"""Rejections that count against a peer only when it pushed the rollout (pushes are the sender's own)."""
SHELL_EVENTS = ("send_dropped", "dial_failures", "http_malformed")
"""Events only the I/O shell sees, counted through `NodeCore.count`."""

class NodeCore(OutboundLinks):
    def __init__(self, identity: Identity, admission: Admission, config: ProtocolConfig, peers: PeerBook,
                 addresses: AddressBook, rng: random.Random, swarm: str = DEFAULT_SWARM) -> None:
        limits = admission.limits
        if limits.author_rate < config.author_rate or limits.author_burst < config.author_burst:
            raise ValueError("the per-author admission budget is below what an honest author may send; "
                             "build the limits with limits.fitted_limits")
        self.identity, self.admission, self.config = identity, admission, config
        self.pool = admission.pool
        self.peers, self.addresses, self.rng = peers, addresses, rng
        self.conns: dict[int, Connection] = {}
        self.by_peer: dict[str, int] = {}
        self.dialing: set[str] = set()
        self.inbound = InboundSlots(config.max_inbound, config.max_inbound_per_ip, config.max_inbound_per_network)
        self.heard: OrderedDict[str, int] = OrderedDict()
        self.counters: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.exchange = PeerExchange(identity, swarm, addresses, rng, self.counters, take=config.exchange_take,
                                     record_ask_s=config.exchange_interval_s / 30,
                                     ask_again_s=4 * config.exchange_interval_s)
        """Peer exchange: this node's signed record, the records it relays, what it takes (exchange.py)."""
        self.own = OwnRollouts(identity, admission, self.counters)
        self._pull_id = 0
        self._next_pull = self._next_exchange = self._next_rotate = self._next_expire = self._next_standing = 0.0
        self._own_push = TokenBucket(config.own_push_rate, config.own_push_burst, 0.0)
        self._init_outbound(config)
        self.reachable: bool | None = None
        """Whether peers can dial this node from outside, as dial-back found (None: not known yet)."""

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    # --- time-driven decisions

    def tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        self._started = min(self._started, now)
        self._expire_pending(now)
        actions += self._drop_useless(now)
        actions += self._dials(now)
        actions += self._probe(now)
        if now >= self._next_pull:
            self._next_pull = now + self.config.pull_interval_s * self.rng.uniform(0.9, 1.1)
            actions += self._pull(now)
        interval = self.config.hungry_exchange_s if self._hungry else self.config.exchange_interval_s
        if now >= min(self._next_exchange, self._last_exchange + interval) and (lister := self._lister(now)):
            self._next_exchange, self._last_exchange = now + self.config.exchange_interval_s, now
            actions.append(FetchPeers(lister))
        elif missing := self.exchange.missing_record(self.conns.values(), now):
            actions.append(FetchPeers(missing))
        if now >= self._next_rotate:
            self._next_rotate = now + self.config.rotate_interval_s
            actions += self._rotate(now)
        if now >= self._next_expire:
            self._next_expire = now + 5.0
            self.pool.expire(int(now * 1000))
            self.admission.seen.expire(int(now * 1000))
        if now >= self._next_standing:
            self._next_standing = now + self.config.standing_refresh_s
            self._update_standing(now)
        return actions

    def _update_standing(self, now: float) -> None:
        """Hand the pool each known author's weight in the external draw (sources.Standing)."""
        standing, limit = self.admission.standing, self.peers.policy.offense_limit
        homes = standing.homes()
        weights = {}
        for author in homes:
            record = self.peers.peek(author)
            used, offense = (record.used, record.offense.value(now)) if record else (0, 0.0)
            weights[author] = standing.weight(author, used, offense, limit, now)
        self.pool.set_standing(weights, homes)

    def _expire_pending(self, now: float) -> None:
        for conn in self.conns.values():
            self.counters["pull_timeouts"] += conn.expire_pulls(now)

    # --- connections

    def reserve_inbound(self, ip: str) -> bool:
        """Claim an inbound slot before the websocket upgrade; False when a cap (total, per address, per
        network) is reached."""
        return self.inbound.reserve(ip)

    def admit_inbound(self, ip: str, now: float) -> tuple[bool, list[Action]]:
        """`reserve_inbound`, and when only the total is full, room for a newcomer (a network holding no
        inbound slot): the idlest inbound connection that sent nothing useful for `idle_inbound_s`, from
        the network holding the most slots, is closed, and its slot is the newcomer's."""
        if self.inbound.reserve(ip):
            return True, []
        victim = self.inbound.victim(ip, self.conns.values(), now, self.config.idle_inbound_s)
        if victim is None:
            return False, []
        self.counters["inbound_evicted"] += 1
        self._forget(victim)
        self.inbound.take(ip)  # over the cap by one until the victim's socket closes and the server releases its slot
        return True, [Close(victim.conn, "busy")]

    def release_inbound(self, ip: str) -> None:
        self.inbound.release(ip)

    def on_connected(self, conn: int, peer: str, direction: str, dialed: str | None, ip: str,
                     listen: str | None, now: float) -> tuple[str | None, list[Action]]:
        """Register a connection whose handshake succeeded. Returns (refusal reason or None, actions)."""
        if dialed is not None:
            self.dialing.discard(dialed)
            self._refund_unverified(dialed)
            self._busy_streak = 0
        if peer == self.node_id:
            if dialed:
                self.addresses.mark_own(dialed)
            return "self", []
        if self.peers.is_banned(peer, now):
            if dialed:
                self.addresses.hold(dialed, self.peers.get(peer, now).banned_until)
            return "banned", []
        actions: list[Action] = []
        existing = self.conns.get(self.by_peer.get(peer, -1))
        if existing is not None:
            keeper = min(self.node_id, peer)  # both ends keep the connection dialed by the smaller id
            new_dialer = self.node_id if direction == "out" else peer
            old_dialer = self.node_id if existing.direction == "out" else peer
            if new_dialer != keeper and old_dialer == keeper:
                return "duplicate", []
            actions.append(Close(existing.conn, "duplicate"))
            self._forget(existing)
        addr = dialed or self._announced_address(ip, listen)
        if dialed:
            self.addresses.succeeded(dialed, peer, now)
        elif addr:
            self.addresses.add(addr, "inbound", peer)
        self.conns[conn] = Connection(conn, peer, direction, addr, now,
                                      TokenBucket(self.config.conn_rate, self.config.conn_burst, now), ip,
                                      delivered=DecayingCount(self.config.score_half_life_s, now))
        self.by_peer[peer] = conn
        self.peers.get(peer, now).address = addr
        if direction == "out" and len(self._outbound()) == 1:
            self._next_exchange = now  # first way into the swarm: ask it who else is there
        return None, actions

    def on_disconnected(self, conn: int, now: float) -> None:
        record = self.conns.get(conn)
        if record is None:
            return
        self._forget(record)
        if record.direction == "out" and record.addr:
            if record.bye == "busy":
                self._prune_backoff(record.addr, now)
            elif now - record.opened < 5.0:
                self.addresses.failed(record.addr, now)  # dropped at once: do not hammer it
            else:
                self.addresses.hold(record.addr, now + self.addresses.backoff_base_s * self.rng.uniform(1, 2))

    def _forget(self, conn: Connection) -> None:
        self.conns.pop(conn.conn, None)
        if self.by_peer.get(conn.peer) == conn.conn:
            del self.by_peer[conn.peer]

    @staticmethod
    def _announced_address(ip: str, listen: str | None) -> str | None:
        if not listen:
            return None
        try:
            _, port = parse_address(listen)
        except ValueError:
            return None
        return format_address(ip, port) if port else None

    # --- frames from peers

    def on_frame(self, conn: int, text: str, now: float) -> list[Action]:
        """Handle one websocket text frame from an established connection."""
        c = self.conns.get(conn)
        if c is None:
            return []
        if not c.bucket.take(now):
            return self._penalize(c, "conn_rate", now)
        try:
            msg = decode_frame(text)
        except MessageError as exc:
            return self._penalize(c, exc.reason, now)
        if isinstance(msg, Push):  # unsolicited rollouts cost a token each: 64 per message is no loophole
            if len(msg.items) > 1 and not c.bucket.take(now, len(msg.items) - 1):
                return self._penalize(c, "conn_rate", now)
            return self._receive(c, msg.items, True, now)
        if isinstance(msg, Pull):
            if not c.bucket.take(now, self.config.pull_cost - 1):
                return self._penalize(c, "conn_rate", now)
            return [self._answer_pull(c, msg, now)]
        if isinstance(msg, Sample):
            if c.pending.pop(msg.re, None) is None:
                if msg.re not in c.timed_out:
                    return self._penalize(c, "bad_message", now)
                c.timed_out.remove(msg.re)  # a busy peer answering after pull_timeout_s: taken, not punished
                self.counters["late_samples"] += 1
            c.answers += 1
            self._note_pulled(len(msg.items), now)
            return self._receive(c, msg.items, False, now)
        if isinstance(msg, Bye):
            c.bye = msg.reason
            return [Close(conn, "")]
        return self._penalize(c, "bad_message", now)  # a hello or proof after the handshake

    def on_frame_error(self, conn: int, reason: str, now: float) -> list[Action]:
        """A frame the transport refused (too large, binary): count it against the peer."""
        c = self.conns.get(conn)
        return self._penalize(c, reason, now) if c is not None else []

    def on_http_sample(self, addr: str, items: list[Any], now: float) -> list[Action]:
        """Rollouts from an HTTP fallback pull of `addr`."""
        state = self.addresses.get(addr)
        peer = state.node_id if state and state.node_id else f"@{addr}"
        pseudo = Connection(-1, peer, "http", addr, now, TokenBucket(1, 1, now), _host_of(addr))
        self._note_pulled(len(items), now)
        return [a for a in self._receive(pseudo, items, False, now) if not isinstance(a, Close)]

    def _answer_pull(self, c: Connection, pull: Pull, now: float) -> Send:
        self.counters["pulls_served"] += 1
        signed = self.pool.for_pull(pull.have, min(pull.max, self.config.pull_max), int(now * 1000), c.peer, self.rng,
                                    int(self.config.pull_fresh_s * 1000), pull.heard or (), pull.held,
                                    pull.recent or ())
        return Send(c.conn, {"t": "sample", "re": pull.id, "items": self._served(signed)})

    def _receive(self, c: Connection, items: list[Any], pushed: bool, now: float) -> list[Action]:
        sender = self.peers.get(c.peer, now)
        now_ms = int(now * 1000)
        actions: list[Action] = []
        for item in items:
            sender.received += 1
            try:
                verdict = self.admission.admit(item_from_json(item), c.peer, now_ms, c.ip, pushed)
            except WireError as exc:
                actions += self._penalize(c, exc.reason, now)
            else:
                if isinstance(verdict, Accepted):
                    c.last_useful = now
                    c.delivered.add(1.0, now)
                    if c.direction == "out" and c.addr:
                        self.addresses.note_useful(c.addr)
                    self._note_accepted(sender, verdict.entry, now)
                    actions.append(Admitted(verdict.entry, pushed))
                else:
                    # a pull answer relays others' rollouts: its budgets are not the sender's fault
                    scale = 0.0 if verdict.reason in RELAYED_REASONS and not pushed else 1.0
                    actions += self._penalize(c, verdict.reason, now, scale)
            if any(isinstance(a, Close) for a in actions):
                break  # banned: the rest of the message is not looked at
        return actions

    def _note_accepted(self, sender: PeerRecord, entry: PoolEntry, now: float) -> None:
        sender.accepted += 1
        self.counters["accepted"] += 1
        self.peers.get(entry.author, now).authored += 1
        self.heard[entry.author] = max(entry.ts_ms, self.heard.pop(entry.author, 0))
        while len(self.heard) > MAX_HAVE:
            self.heard.popitem(last=False)

    def _penalize(self, c: Connection, reason: str, now: float, scale: float = 1.0) -> list[Action]:
        self.rejected[reason] += 1
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
        self.counters["bans"] += 1
        return [Close(c.conn, "offender")] if c.conn in self.conns else []

    # --- own rollouts and training

    def publish(self, rollout: Rollout, now: float) -> list[Action]:
        """Sign an own rollout, file it, push it. Nothing when sharing is off."""
        if not self.config.share:
            self.counters["unshared"] += 1
            return []
        signed = self.own.sign(rollout, now)
        if signed is None or not self.conns or not self._own_push.take(now):
            return []
        targets = self.rng.sample(list(self.conns), min(self.config.push_fanout, len(self.conns)))
        self.counters["pushes"] += len(targets)
        return [Send(t, {"t": "push", "items": [signed.to_item()]}) for t in targets]

    def record_used(self, author: str, mean_advantage: float, now: float) -> None:
        record = self.peers.get(author, now)
        record.used += 1
        record.advantage_sum += mean_advantage

    # --- discovery (exchange.py decides)

    def on_peer_list(self, answer: Any, now: float, addr: str | None = None) -> int:
        """The GET /peers answer of `addr`: its signed records are checked, bad ones counted and dropped, and
        at most `exchange_take` new addresses taken; returns how many."""
        return self.exchange.take(answer, now, addr)

    def peer_list(self, now: float) -> dict[str, list[Any]]:
        """This node's answer to GET /peers: its own record and those of peers whose address it verified."""
        return self.exchange.answer([c.peer for c in self._outbound()], now)

    def load_peer_table(self, data: Any) -> int:
        """Addresses saved by an earlier run (the peer table's JSON); returns how many were taken."""
        return self.exchange.load_table(data)

    # --- what the I/O shell reports, asks for and changes: it calls these and never writes core state

    def count(self, event: str) -> None:
        """Count an event only the shell sees: one of `SHELL_EVENTS` (a full send queue, a failed dial,
        a malformed HTTP request)."""
        if event not in SHELL_EVENTS:
            raise ValueError(f"unknown shell event {event!r}; one of {', '.join(SHELL_EVENTS)}")
        self.counters[event] += 1

    def on_handshake_failed(self) -> None:
        """A hello that failed either way (timeout, bad frame, bad proof): counted as a rejection."""
        self.rejected["handshake"] += 1

    def on_latency(self, peer: str, rtt_s: float, now: float) -> None:
        """The round trip of a hello with `peer`, kept as its latency for the views."""
        self.peers.get(peer, now).latency_ms = round(rtt_s * 1000, 1)

    def serve_http_sample(self, have: dict[str, int], limit: int, now: float,
                          heard: HeardFilter | None = None, held: HeardFilter | None = None,
                          recent: HeardFilter | None = None) -> list[Any]:
        """The answer to GET /sample (the HTTP fallback pull): as a websocket pull is answered, for an
        anonymous requester, at most `pull_max` items."""
        self.counters["http_samples_served"] += 1
        signed = self.pool.for_pull(have, max(1, min(limit, self.config.pull_max)), int(now * 1000), "", self.rng,
                                    int(self.config.pull_fresh_s * 1000), heard or (), held, recent or ())
        return self._served(signed)

    def _served(self, signed: list[SignedRollout]) -> list[Any]:
        """A pull answer's items (as many as fit in a frame), counting the copies of own rollouts among them."""
        items = fit_items([s.to_item() for s in signed])
        self.counters["own_served"] += sum(self.pool.is_own(s.id) for s in signed[:len(items)])
        return items

    def set_reachable(self, reachable: bool | None) -> None:
        """What dial-back found: peers can dial this node (True), cannot (False), or not known yet (None)."""
        self.reachable = self.exchange.reachable = reachable

    def set_dialable(self, addrs: list[str]) -> None:
        """The addresses dial-back reached this node at ([] while none): its signed record names them."""
        self.exchange.set_dialable(addrs)

    def set_sharing(self, share: bool) -> None:
        """Push own rollouts to peers (True) or keep them (False), from the next one on."""
        self.config = dataclasses.replace(self.config, share=share)

    def add_address(self, addr: str, source: str, node_id: str | None = None) -> None:
        """An address to dial from outside the protocol: a bootstrap flag, LAN discovery."""
        if node_id is None or node_id != self.node_id:
            self.addresses.add(addr, source, node_id)

    def mark_own_address(self, addr: str) -> None:
        """One of this node's own addresses: never dialled, never listed."""
        self.addresses.mark_own(addr)

    def verify_address(self, addr: str, node_id: str | None = None) -> None:
        """Dial-back reached `addr` (the shell checked it): it may be advertised, dialed and saved."""
        if node_id != self.node_id:
            self.addresses.verify(addr, node_id)


def _host_of(addr: str) -> str:
    try:
        return parse_address(addr)[0]
    except ValueError:
        return ""
