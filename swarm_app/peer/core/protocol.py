"""The sans-IO RSP/1 node core: every protocol decision, none of the I/O.

`NodeCore` is the face: callers feed it events (`tick`, `on_frame`, `on_connected`, ...) with the current
time and carry out the returned actions (actions.py: `Dial`, `Send`, `Close`, `FetchPeers`, `HttpPull`;
`Admitted` is a notice); the I/O shell reads it only through `view` (view.py). Behind the face, each part
owns its state: `links` (links.py: the live connections and inbound slots, and whom to ask for a
dial-back), `outbound` (outbound.py: which addresses to dial, which neighbours to drop or replace, whom
to ask for peer lists), `pulls` (pulls.py: whom to ask for rollouts, within the minute's intake),
`intake` (intake.py: the admission door, the pool, peer scores and bans, own rollouts out), `exchange`
(exchange.py: peer lists of signed node records) and `tally` (tally.py: the counters). The face routes
each event to its owners and orders the tick; it decides nothing they can.
Data plane: publish = sign, file in the pool, push to `push_fanout` random neighbours; every
`pull_interval_s` ask one random neighbour for up to `pull_max` fresh rollouts (one per author,
unheard authors first) while the minute's intake allows (`pulled_per_min_max`); answer pulls from the
pool; admit what arrives and penalize what is rejected.
It never reads a clock, sleeps, opens a socket or raises on peer input; randomness comes from the
injected `random.Random`, so a simulator can run thousands of cores deterministically.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.swarms import DEFAULT_SWARM
from swarm_app.peer.core.actions import Action, Close, FetchPeers
from swarm_app.peer.core.addressbook import AddressBook, format_address, parse_address
from swarm_app.peer.core.admission import Admission
from swarm_app.peer.core.connections import Connection
from swarm_app.peer.core.exchange import PeerExchange
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.intake import Intake
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.links import Links
from swarm_app.peer.core.messages import Bye, MessageError, Pull, Push, Sample, decode_frame
from swarm_app.peer.core.outbound import Outbound
from swarm_app.peer.core.overlay import DecayingCount, proven
from swarm_app.peer.core.pulls import Pulls
from swarm_app.peer.core.ratelimit import TokenBucket
from swarm_app.peer.core.scores import PeerBook
from swarm_app.peer.core.tally import Tally
from swarm_app.peer.core.view import CoreView

__all__ = ["NodeCore", "ProtocolConfig"]

log = logging.getLogger(__name__)


class NodeCore:
    def __init__(self, identity: Identity, admission: Admission, config: ProtocolConfig, peers: PeerBook,
                 addresses: AddressBook, rng: random.Random, swarm: str = DEFAULT_SWARM) -> None:
        limits = admission.limits
        if limits.author_rate < config.author_rate or limits.author_burst < config.author_burst:
            raise ValueError("the per-author admission budget is below what an honest author may send; "
                             "build the limits with limits.fitted_limits")
        self.identity, self.config, self.addresses, self.rng = identity, config, addresses, rng
        node_id = identity.node_id
        self.tally = Tally()
        self.links = Links(node_id, config, addresses, self.tally)
        self.intake = Intake(identity, admission, config, peers, addresses, self.links, rng, self.tally)
        self.exchange = PeerExchange(identity, swarm, addresses, rng, self.tally.count, take=config.exchange_take,
                                     record_ask_s=config.exchange_interval_s / 30,
                                     ask_again_s=4 * config.exchange_interval_s)
        """Peer exchange: this node's signed record, the records it relays, what it takes (exchange.py)."""
        self.outbound = Outbound(node_id, config, self.links, addresses, peers, self.exchange, rng, self.tally)
        self.pulls = Pulls(config, self.links, self.intake, addresses, rng, self.tally)
        self._next_exchange = self._next_expire = self._next_standing = 0.0
        self._last_exchange = -float("inf")
        self.view = CoreView(node_id, self.links, self.intake, self.exchange, addresses, self.tally)
        """What the I/O shell and the views may read of this core (view.py)."""

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    @property
    def peers(self) -> PeerBook:
        return self.intake.peers

    @property
    def reachable(self) -> bool | None:
        """Whether peers can dial this node from outside, as dial-back found (None: not known yet)."""
        return self.exchange.reachable

    @property
    def confirmed(self) -> bool:
        """A peer reached this node by dial-back at least once (its signed record names where)."""
        return bool(self.exchange.dialable)

    def discovery_links(self, now: float) -> int:
        """Open links as the DHT's schedule counts them (dht_timer.DhtTimer): none while the node is past its
        first `settle_after_s` and no link has delivered a rollout admitted here, since six links held by an
        eclipse are worth no more than none: it keeps looking the swarm up at the hungry pace for addresses to
        rotate to. (In its first minute nothing may have had anything to deliver yet.)"""
        if self.outbound.settled(now) and not any(proven(c) for c in self.links.values()):
            return 0
        return self.view.links

    # --- time-driven decisions

    def tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        self.outbound.start(now)
        self.pulls.expire(now)
        actions += self.outbound.drop_useless(now)
        actions += self.outbound.dials(now)
        actions += self.pulls.probe(now)
        actions += self.pulls.pull(now)
        actions += self._exchange(now)
        actions += self.outbound.rotate(now)
        if now >= self._next_expire:
            self._next_expire = now + 5.0
            self.intake.expire(now)
        if now >= self._next_standing:
            self._next_standing = now + self.config.standing_refresh_s
            self.intake.update_standing(now)
        return actions

    def _exchange(self, now: float) -> list[Action]:
        """Ask a neighbour for its peer list every `exchange_interval_s` (`hungry_exchange_s` while dials
        fall short), else a neighbour whose record this node lacks for that record."""
        interval = self.config.hungry_exchange_s if self.outbound.hungry else self.config.exchange_interval_s
        if now >= min(self._next_exchange, self._last_exchange + interval) and (lister := self.outbound.lister(now)):
            self._next_exchange, self._last_exchange = now + self.config.exchange_interval_s, now
            return [FetchPeers(lister)]
        if missing := self.exchange.missing_record(self.links.values(), now):
            return [FetchPeers(missing)]
        return []

    # --- connections

    def reserve_inbound(self, ip: str) -> bool:
        """Claim an inbound slot before the websocket upgrade; False when a cap (total, per address, per
        network) is reached."""
        return self.links.reserve_inbound(ip)

    def admit_inbound(self, ip: str, now: float) -> tuple[bool, list[Action]]:
        """`reserve_inbound`, or room made by closing an idle inbound peer (links.Links.admit_inbound)."""
        return self.links.admit_inbound(ip, now)

    def release_inbound(self, ip: str) -> None:
        self.links.release_inbound(ip)

    def on_connected(self, conn: int, peer: str, direction: str, dialed: str | None, ip: str,
                     listen: str | None, now: float) -> tuple[str | None, list[Action]]:
        """Register a connection whose handshake succeeded. Returns (refusal reason or None, actions)."""
        if dialed is not None:
            self.outbound.on_dialed(dialed)
        if peer == self.node_id:
            if dialed:
                self.addresses.mark_own(dialed)
            return "self", []
        if self.peers.is_banned(peer, now):
            if dialed:
                self.addresses.hold(dialed, self.peers.get(peer, now).banned_until)
            return "banned", []
        refused, actions = self.links.duplicate(peer, direction)
        if refused:
            return "duplicate", []
        addr = dialed or _announced_address(ip, listen)
        if dialed:
            self.addresses.succeeded(dialed, peer, now)
        elif addr:
            self.addresses.add(addr, "inbound", peer)
        self.links.add(Connection(conn, peer, direction, addr, now,
                                  TokenBucket(self.config.conn_rate, self.config.conn_burst, now), ip,
                                  delivered=DecayingCount(self.config.score_half_life_s, now)))
        self.peers.get(peer, now).address = addr
        if direction == "out" and len(self.links.outbound()) == 1:
            self._next_exchange = now  # first way into the swarm: ask it who else is there
        return None, actions

    def on_disconnected(self, conn: int, now: float) -> None:
        record = self.links.get(conn)
        if record is None:
            return
        self.links.forget(record)
        if record.direction == "out":
            self.outbound.on_closed(record, now)

    def on_dial_failed(self, addr: str, now: float, http_only: bool = False, busy: bool = False) -> list[Action]:
        """Back off from `addr`; a busy node is asked for its peer list instead (outbound.Outbound)."""
        return self.outbound.on_dial_failed(addr, now, http_only, busy)

    # --- frames from peers

    def on_frame(self, conn: int, text: str, now: float) -> list[Action]:
        """Handle one websocket text frame from an established connection."""
        c = self.links.get(conn)
        if c is None:
            return []
        penalize = self.intake.penalize
        if not c.bucket.take(now):
            return penalize(c, "conn_rate", now)
        try:
            msg = decode_frame(text)
        except MessageError as exc:
            return penalize(c, exc.reason, now)
        if isinstance(msg, Push):  # unsolicited rollouts cost a token each: 64 per message is no loophole
            if len(msg.items) > 1 and not c.bucket.take(now, len(msg.items) - 1):
                return penalize(c, "conn_rate", now)
            return self.intake.receive(c, msg.items, True, now)
        if isinstance(msg, Pull):
            if not c.bucket.take(now, self.config.pull_cost - 1):
                return penalize(c, "conn_rate", now)
            return [self.intake.answer_pull(c, msg, now)]
        if isinstance(msg, Sample):
            if not self.pulls.answered(c, msg.re, len(msg.items), now):
                return penalize(c, "bad_message", now)
            return self.intake.receive(c, msg.items, False, now)
        if isinstance(msg, Bye):
            c.bye = msg.reason
            return [Close(conn, "")]
        return penalize(c, "bad_message", now)  # a hello or proof after the handshake

    def on_frame_error(self, conn: int, reason: str, now: float) -> list[Action]:
        """A frame the transport refused (too large, binary): count it against the peer."""
        c = self.links.get(conn)
        return self.intake.penalize(c, reason, now) if c is not None else []

    def on_http_sample(self, addr: str, items: list[Any], now: float) -> list[Action]:
        """Rollouts from an HTTP fallback pull of `addr`."""
        state = self.addresses.get(addr)
        peer = state.node_id if state and state.node_id else f"@{addr}"
        pseudo = Connection(-1, peer, "http", addr, now, TokenBucket(1, 1, now), _host_of(addr))
        self.pulls.note_pulled(len(items), now)
        return [a for a in self.intake.receive(pseudo, items, False, now) if not isinstance(a, Close)]

    # --- own rollouts and training

    def publish(self, rollout: Rollout, now: float) -> list[Action]:
        """Sign an own rollout, file it, push it. Nothing when sharing is off."""
        return self.intake.publish(rollout, list(self.links.conns), now)

    def record_used(self, author: str, mean_advantage: float, now: float) -> None:
        self.intake.record_used(author, mean_advantage, now)

    # --- discovery (exchange.py decides)

    def on_peer_list(self, answer: Any, now: float, addr: str | None = None) -> int:
        """The GET /peers answer of `addr`: its signed records are checked, bad ones counted and dropped, and
        at most `exchange_take` new addresses taken; returns how many."""
        return self.exchange.take(answer, now, addr)

    def peer_list(self, now: float) -> dict[str, list[Any]]:
        """This node's answer to GET /peers: its own record and those of peers whose address it verified."""
        return self.exchange.answer([c.peer for c in self.links.outbound()], now)

    def load_peer_table(self, data: Any) -> int:
        """Addresses saved by an earlier run (the peer table's JSON); returns how many were taken."""
        return self.exchange.load_table(data)

    # --- what the I/O shell reports, asks for and changes: it calls these and never writes core state

    def count(self, event: str, n: int = 1) -> None:
        """Count an event only the shell sees: one of tally.SHELL_EVENTS (a full send queue, a failed dial,
        a malformed HTTP request, `n` bytes of websocket messages in or out)."""
        self.tally.count_shell(event, n)

    def on_handshake_failed(self) -> None:
        """A hello that failed either way (timeout, bad frame, bad proof): counted as a rejection."""
        self.tally.reject("handshake")

    def on_latency(self, peer: str, rtt_s: float, now: float) -> None:
        """The round trip of a hello with `peer`, kept as its latency for the views."""
        self.peers.get(peer, now).latency_ms = round(rtt_s * 1000, 1)

    def serve_http_sample(self, have: dict[str, int], limit: int, now: float,
                          heard: HeardFilter | None = None, held: HeardFilter | None = None,
                          recent: HeardFilter | None = None) -> list[Any]:
        """The answer to GET /sample (the HTTP fallback pull): as a websocket pull is answered, for an
        anonymous requester, at most `pull_max` items."""
        return self.intake.serve_http_sample(have, limit, now, heard, held, recent)

    def dialback_helpers(self, reached: list[str]) -> list[str]:
        """Whom the shell asks for a dial-back: peers that accept connections, then `reached` (links.py)."""
        return self.links.dialback_helpers(reached)

    def inbound_neighbours(self) -> list[str]:
        """Dial-back helpers of last resort: where inbound neighbours say they listen (links.py)."""
        return self.links.inbound_neighbours()

    def set_reachable(self, reachable: bool | None) -> None:
        """What dial-back found: peers can dial this node (True), cannot (False), or not known yet (None)."""
        self.exchange.reachable = reachable

    def set_dialable(self, addrs: list[str]) -> None:
        """The addresses dial-back reached this node at ([] while none): its signed record names them."""
        self.exchange.set_dialable(addrs)

    def set_sharing(self, share: bool) -> None:
        """Push own rollouts to peers (True) or keep them (False), from the next one on."""
        self.intake.sharing = share

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


def _announced_address(ip: str, listen: str | None) -> str | None:
    if not listen:
        return None
    try:
        _, port = parse_address(listen)
    except ValueError:
        return None
    return format_address(ip, port) if port else None


def _host_of(addr: str) -> str:
    try:
        return parse_address(addr)[0]
    except ValueError:
        return ""
