"""The node core's outbound side: which addresses it dials, which outbound neighbours it drops or replaces,
and whom it asks for peer lists (overlay.py's rules, applied to the links the core holds).

`Outbound` owns the dials in flight, the wanted number of links (`target_outbound`), the budget of dials
to never-reached addresses and the rotation schedule; it reads the live links (links.py), the address book
and the peer book, forgets the links it drops, and returns actions (`Dial`, `Close`, `FetchPeers`); it
opens and closes nothing itself, and the choices are overlay.py's pure functions. Sans-IO: `now` comes in,
randomness from the core's `random.Random`.
"""

from __future__ import annotations

import logging
import random

from swarm_app.peer.core.actions import Action, Close, Dial, FetchPeers
from swarm_app.peer.core.addressbook import AddressBook, AddressState
from swarm_app.peer.core.connections import Connection
from swarm_app.peer.core.exchange import PeerExchange
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.links import Links
from swarm_app.peer.core.overlay import (
    dials_due,
    guarded_dials,
    is_announced,
    is_trusted,
    is_vouched,
    pick_dial,
    proven,
    rotation_victim,
    stalled_victim,
    useless,
)
from swarm_app.peer.core.ratelimit import TokenBucket
from swarm_app.peer.core.scores import PeerBook
from swarm_app.peer.core.tally import Tally

log = logging.getLogger(__name__)


class Outbound:
    def __init__(self, node_id: str, config: ProtocolConfig, links: Links, addresses: AddressBook, peers: PeerBook,
                 exchange: PeerExchange, rng: random.Random, tally: Tally) -> None:
        self.node_id, self.config, self.links, self.addresses, self.peers = node_id, config, links, addresses, peers
        self.exchange, self.rng, self.tally = exchange, rng, tally
        self.dialing: set[str] = set()
        """Addresses dialed whose outcome has not come back yet."""
        self._unverified = TokenBucket(config.unverified_dial_rate, config.unverified_dial_burst, 0.0)
        self.target_outbound = config.target_outbound
        """Outbound links wanted now: `config.target_outbound`, less while the nodes it dials are full."""
        self._busy_streak = 0
        self._started = float("inf")
        """The first tick's time."""
        self._next_stalled = self._next_rotate = 0.0
        self.hungry = False
        """The last dials fell short: the address book had too few due candidates (peer lists come faster)."""

    def start(self, now: float) -> None:
        """A tick at `now`: the first one starts the settling time."""
        self._started = min(self._started, now)

    def on_dialed(self, addr: str) -> None:
        """A dial reached a node that completed a hello (whatever the core makes of it)."""
        self.dialing.discard(addr)
        self._refund_unverified(addr)
        self._busy_streak = 0

    def on_closed(self, c: Connection, now: float) -> None:
        """An outbound link closed: a busy bye waits the prune backoff, a link dropped at once counts as a
        failure (do not hammer it), any other waits a jittered backoff."""
        if not c.addr:
            return
        if c.bye == "busy":
            self._prune_backoff(c.addr, now)
        elif now - c.opened < 5.0:
            self.addresses.failed(c.addr, now)
        else:
            self.addresses.hold(c.addr, now + self.addresses.backoff_base_s * self.rng.uniform(1, 2))

    def dials(self, now: float) -> list[Action]:
        """Dial towards `target_outbound` as overlay.dials_due allows (every missing link at once below
        `low_outbound`; few links to unproven peers); overlay.pick_dial chooses. While settled with no
        proven link, overlay.guarded_dials keeps most places for vouched addresses, if it knows any (a node that
        found the swarm by the DHT alone knows none: it rotates through what it heard). While no outbound link is
        proven or vouched for and one was judged useless (`_doubted`), settled or not, the DHT's checked key ranks
        with peers' lists: peers that gave nothing vouch for nothing they list."""
        config, outbound = self.config, self.links.outbound()
        settled = self.settled(now)
        need = dials_due(len(outbound), sum(not proven(c) for c in outbound), len(self.dialing), self.target_outbound,
                         config.low_outbound, config.high_outbound, config.unproven_outbound, settled)
        untried_left, guarded = need, self._guarded(outbound, now)
        if guarded and self._vouched_known():
            need, untried_left = guarded_dials(len(outbound), len(self.dialing), self._untried(outbound), need,
                                               self.target_outbound, config.unproven_outbound)
        self.hungry = False
        if need <= 0:
            return []
        candidates = self.addresses.candidates(now, lambda node: self._not_dialable(node, now), self.dialing)
        held = self._held()
        announced_left = self._announced_left(outbound, now)
        doubted = guarded or self._doubted(outbound, now)
        dials: list[Action] = []
        while len(dials) < need:
            vouched_only = len(dials) >= untried_left
            tokens = self._unverified_tokens(now)
            state = pick_dial(candidates, held, self.rng, tokens >= 1, vouched_only=vouched_only,
                              announced_last=announced_left <= 0, unchecked_allowed=tokens >= self._unchecked_floor,
                              nothing_proven=doubted)
            if state is None:
                self.hungry = not vouched_only
                break
            if not is_trusted(state):
                self._unverified.take(now)
            announced_left -= is_announced(state)
            candidates = [s for s in candidates if s is not state]
            held |= {state.network, state.group}
            self.dialing.add(state.addr)
            dials.append(Dial(state.addr))
        return dials

    def settled(self, now: float) -> bool:
        """Past the node's first `settle_after_s`: before, nothing it knows may have had anything to deliver."""
        return now >= self._started + self.config.settle_after_s

    def _guarded(self, outbound: list[Connection], now: float) -> bool:
        """Settled, and no outbound neighbour proven: whatever holds its links so far only announced itself."""
        return self.settled(now) and not any(proven(c) for c in outbound)

    def _announced_left(self, outbound: list[Connection], now: float) -> int:
        """How many more dials may go to addresses first heard of from inbound peers' hellos while any other
        address is due: in the node's first `settle_after_s`, while it fills `low_outbound` links without
        judging them, `unproven_outbound` unproven links and dials to those at most (whoever says hello can
        announce a server, and sixty hellos would otherwise take most of a newcomer's links), more only when
        nothing else is due (nodes that join together hear of each other by their hellos first); once
        settled, dials_due's bound on unproven links holds for them too."""
        if self.settled(now):
            return self.config.high_outbound
        return self.config.unproven_outbound - sum(map(is_announced, self._unproven_states(outbound)))

    def _vouched_known(self) -> bool:
        """The address book holds an address overlay.is_vouched: the guard has places to keep for it."""
        return any(is_vouched(s) for s in self.addresses.entries())

    def _untried(self, outbound: list[Connection]) -> int:
        """Unproven outbound links and dials in flight to addresses not vouched for (overlay.is_vouched)."""
        return sum(not is_vouched(s) for s in self._unproven_states(outbound))

    def _unproven_states(self, outbound: list[Connection]) -> list[AddressState | None]:
        """The address book's entries of the unproven outbound links and of the dials in flight."""
        addrs = [c.addr for c in outbound if not proven(c)] + list(self.dialing)
        return [self.addresses.get(a) for a in addrs]

    def _unverified_tokens(self, now: float) -> float:
        """The unverified-dial budget's tokens at `now` (refilled, nothing spent)."""
        self._unverified.take(now, 0.0)
        return self._unverified.tokens

    @property
    def _unchecked_floor(self) -> float:
        """Tokens a dial to an address of the DHT's unchecked key must leave at least: the reserve
        `unchecked_share` keeps for the checked key's and peers' addresses."""
        return max(1.0, self._unverified.burst * (1 - self.config.unchecked_share))

    def _doubted(self, outbound: list[Connection], now: float) -> bool:
        """The peer lists this node holds are worth no more than the DHT's checked key: no outbound neighbour
        vouches for its list (it delivered here, `proven`, or its address is `_vouched`), and one has been
        judged (overlay.useless: old enough, pulls answered with nothing), as hostile peers that list each
        other are. A young honest link's list keeps its rank."""
        if any(proven(c) or self._vouched(c) for c in outbound):
            return False
        return bool(useless(outbound, self.config.useless_after_answers, True, now, self.config.useless_min_age_s))

    def _held(self) -> set[str]:
        """Networks and groups (sources.Networks) of the outbound neighbours and of the dials in flight."""
        networks = self.addresses.networks
        states = [self.addresses.get(addr) for addr in self.dialing]
        held = {name for s in states if s for name in (s.network, s.group)}
        return held | {name for c in self.links.outbound() for name in (networks.of(c.ip), networks.group(c.ip))}

    def drop_useless(self, now: float) -> list[Action]:
        """Replace at once the outbound neighbours that answered pulls with nothing this node admitted while
        others delivered (GossipSub's delivery deficit): announcing itself earns a place, keeping it
        takes rollouts. Their addresses wait `useless_hold_s` before a new try; in the node's first
        `settle_after_s`, only as many as there are addresses due to replace them (`_useless`).
        While nothing delivers at all (an eclipse, or a quiet swarm) and the node holds `low_outbound`
        links, so that it may dial no more until one proves itself, one of them is replaced every
        `stalled_rotate_s` instead, one not vouched for first. Once settled with a proven link, unproven
        links past as many as are proven (at most `unproven_outbound`) go too (`_excess_unproven`)."""
        config, outbound = self.config, self.links.outbound()
        judged_after, min_age_s = config.useless_after_answers, config.useless_min_age_s
        delivering = any(proven(c) for c in self.links.values())
        dropped, hold = self._useless(outbound, delivering, now), config.useless_hold_s
        if not delivering and len(outbound) >= config.low_outbound and now >= self._next_stalled and self._refillable(now):
            untried = [c for c in outbound if not self._vouched(c)]
            victim = (stalled_victim(untried, judged_after, now, min_age_s, self.rng)
                      or stalled_victim(outbound, judged_after, now, min_age_s, self.rng))
            dropped, hold = ([victim] if victim else []), config.rotate_interval_s
            if victim:
                self._next_stalled = now + config.stalled_rotate_s
        excess = self._excess_unproven([c for c in outbound if c not in dropped], now)
        for c, until in [(c, now + hold) for c in dropped] + [(c, now + config.rotate_interval_s) for c in excess]:
            if c.addr:
                self.addresses.hold(c.addr, until)
            self.links.forget(c)
        self.tally.count("useless_dropped", len(dropped))
        self.tally.count("excess_dropped", len(excess))
        return [Close(c.conn, "rotate") for c in dropped + excess]

    def _useless(self, outbound: list[Connection], delivering: bool, now: float) -> list[Connection]:
        """overlay.useless; in the node's first `settle_after_s` no more than there are addresses due to
        replace them, not counting those only inbound peers announced (mostly behind NAT): a young swarm's
        links (a bootstrap's to the others among them) may have had nothing to give yet, and are not torn
        down before something else can be tried."""
        config = self.config
        judged = useless(outbound, config.useless_after_answers, delivering, now, config.useless_min_age_s)
        if self.settled(now):
            return judged
        due = self.addresses.candidates(now, lambda node: self._not_dialable(node, now), self.dialing)
        return judged[:sum(not is_announced(s) or s.verified for s in due)]

    def _excess_unproven(self, outbound: list[Connection], now: float) -> list[Connection]:
        """Unproven links past what overlay.dials_due allows a settled node with a proven link, those not
        vouched for and longest on trial first: links dialed while none was proven (or kept after a proven
        one closed) do not outnumber the proven ones once one proves itself."""
        proven_links = sum(proven(c) for c in outbound)
        if not proven_links or not self.settled(now):
            return []
        unproven = sorted((c for c in outbound if not proven(c)), key=lambda c: (self._vouched(c), c.opened))
        excess = len(unproven) - min(self.config.unproven_outbound, proven_links)
        return unproven[:excess] if excess > 0 else []

    def _vouched(self, c: Connection) -> bool:
        return is_vouched(self.addresses.get(c.addr) if c.addr else None)

    def _refillable(self, now: float) -> bool:
        """`_replaceable`, and while guarded with `unproven_outbound` untried links or more besides the one to
        go, by an address overlay.guarded_dials lets it dial: a quiet swarm does not wear a node's links down."""
        outbound = self.links.outbound()
        if (self._guarded(outbound, now) and self._vouched_known()
                and self._untried(outbound) > self.config.unproven_outbound):
            return self._replaceable(now, vouched_only=True)
        return self._replaceable(now)

    def _replaceable(self, now: float, vouched_only: bool = False) -> bool:
        """Some address is due for a dial: replacing a neighbour would not just lose it."""
        due = self.addresses.candidates(now, lambda node: self._not_dialable(node, now), self.dialing)
        return any(is_vouched(s) for s in due) if vouched_only else bool(due)

    def lister(self, now: float) -> str | None:
        """Whom to ask for a peer list: a neighbour that delivered rollouts here; while none did, an address
        the user named (bootstrap, LAN) or else any neighbour: addresses that only announce each other do
        not fill the book from their own lists."""
        earned = [c for c in self.links.values() if proven(c)]
        named = [s.addr for s in self.addresses.entries() if s.source in ("bootstrap", "mdns")]
        if not earned and named:
            return self.rng.choice(named)
        return self.exchange.pick_lister(earned or self.links.values(), now)

    def rotate(self, now: float) -> list[Action]:
        """Every `rotate_interval_s`: replace one outbound neighbour, never one of the `protected_outbound`
        best-scored ones; or, while settled for fewer links than the configured target, try for one more
        instead."""
        if now < self._next_rotate:
            return []
        self._next_rotate = now + self.config.rotate_interval_s
        outbound = self.links.outbound()
        if len(outbound) < self.target_outbound:
            return []
        if self.target_outbound < self.config.target_outbound:
            self.target_outbound += 1
            return []
        if not self._replaceable(now):
            return []
        victim = rotation_victim(outbound, now, self.config.protected_outbound, self.config.rotate_interval_s / 2,
                                 self.rng)
        if victim is None:
            return []
        if victim.addr:
            self.addresses.hold(victim.addr, now + self.config.rotate_interval_s)
        return [Close(victim.conn, "rotate")]

    def _not_dialable(self, node: str, now: float) -> bool:
        return node == self.node_id or self.links.has_peer(node) or self.peers.is_banned(node, now)

    def on_dial_failed(self, addr: str, now: float, http_only: bool = False, busy: bool = False) -> list[Action]:
        """Back off from `addr`. A busy node (connection caps reached) is not a failure: it is left alone
        for the prune backoff and asked for its peer list instead (GossipSub's prune with peer exchange)."""
        self.dialing.discard(addr)
        if busy:
            self._refund_unverified(addr)
            self._prune_backoff(addr, now)
            self._note_busy(addr, now)
            return [FetchPeers(addr)]
        delay = self.addresses.failed(addr, now, http_only)
        log.debug("dial %s failed; next try in %.1f s", addr, delay)
        return []

    def _refund_unverified(self, addr: str) -> None:
        """A dial to a never-reached address that met a node (connected, or busy) gives its token back:
        the budget is for addresses that turn out dead or invented."""
        state = self.addresses.get(addr)
        if state is not None and not state.verified and state.source not in ("bootstrap", "mdns"):
            self._unverified.tokens = min(self._unverified.burst, self._unverified.tokens + 1)

    def _note_busy(self, addr: str, now: float) -> None:
        """After `busy_streak` full answers in a row, want one outbound link fewer (never fewer than
        `min_outbound`; one more is tried every rotation interval): when reachable nodes are too few for
        every node's target, the links are shared out instead of held by whoever came first. Bootstraps
        are expected to be full, and so are the first nodes a newcomer hears of (every newcomer hears of
        them): neither counts, the latter for `settle_after_s` from the first tick."""
        state = self.addresses.get(addr)
        if (state is not None and state.source == "bootstrap") or now < self._started + self.config.settle_after_s:
            return
        self._busy_streak += 1
        if self._busy_streak >= self.config.busy_streak:
            self._busy_streak = 0
            self.target_outbound = max(self.config.min_outbound, self.target_outbound - 1)

    def _prune_backoff(self, addr: str, now: float) -> None:
        self.addresses.hold(addr, now + self.config.prune_backoff_s * self.rng.uniform(1.0, 1.2))

