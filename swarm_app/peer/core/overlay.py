"""Which peers a node keeps as outbound neighbours: the overlay's choices, none of its I/O.

Known designs, not new ones: HyParView's small active view fed from a larger passive one (here the
outbound links and the address book), Bitcoin's addrman split between addresses that worked ("tried")
and addresses only heard of ("new"), and GossipSub v1.1's peer scoring (first deliveries earn a score
that decays) and per-IP colocation limits.
- `pick_dial`: the next address to dial: of a group (/16, /32), else a network (/24, /48), no outbound
  neighbour or pending dial already holds when one is due; half of the time an address that proved useful
  before; a group at random and then an address of it (`spread_choice`); an address this node never
  reached itself only while the budget for those lasts; in a node's first minute, only a few links to
  addresses inbound peers announced while others are due (outbound.py `_announced_left`).
- `stalled_victim`: while no connection delivers anything (an eclipse, or a quiet swarm), one outbound
  neighbour that was judged, to replace now and then: a node whose links all only announce themselves
  is not stuck with them, and since nothing earns a place, none is protected.
- `protected`: the best-scored outbound neighbours, kept out of rotation, so that an attacker whose
  addresses crowd the book still cannot take the places earned by peers that delivered rollouts.
- `rotation_victim`: the neighbour to replace at the next rotation: the lowest score among the
  unprotected ones that had time to earn one.
- `useless`: neighbours to replace at once: asked for rollouts several times, they never gave one this
  node admitted, while others did (GossipSub v1.1's mesh delivery deficit).
- `dials_due`: how many dials to start: every missing link at once below the low-water mark, one at a
  time above it, and never more than a few links to peers that have not yet delivered (*unproven*), so
  that most places are held by peers that earned them (HyParView's active view, refilled from the
  passive one only as fast as links prove themselves).
- `guarded_dials`: while a settled node has no proven link, only a few of its links may go to addresses
  it merely heard of (Bitcoin addrman's "new" table); the others, up to the target, to addresses the
  user named or that delivered before ("tried"): announcements alone cannot fill it.
- `on_trial`: outbound neighbours still being judged (unproven, fewer answers than it takes to judge):
  each is asked for rollouts every pull interval (the node's one regular pull goes to the others), so a
  new link is judged, kept for what it delivers or dropped by `useless`, within a pull interval or two,
  not minutes; no connection is asked more than once a pull interval.
Sans-IO: time and randomness are arguments; nothing here holds state beyond a `DecayingCount`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from swarm_app.peer.core.addressbook import SELF_ANNOUNCED, AddressState


class DecayingCount:
    """A count whose past halves every `half_life_s`: a neighbour's recent first deliveries, so that what
    it gave ten minutes ago counts for little against what others give now (GossipSub's decay)."""

    __slots__ = ("half_life_s", "count", "stamp")

    def __init__(self, half_life_s: float, now: float) -> None:
        self.half_life_s, self.count, self.stamp = half_life_s, 0.0, now

    def value(self, now: float) -> float:
        if now > self.stamp:
            self.count *= math.exp2(-(now - self.stamp) / self.half_life_s)
            self.stamp = now
        return self.count

    def add(self, amount: float, now: float) -> None:
        self.count = self.value(now) + amount


class Neighbour(Protocol):
    """What the overlay reads of an outbound connection (protocol.Connection)."""

    opened: float
    delivered: DecayingCount
    answers: int
    pending: dict[int, float]


N = TypeVar("N", bound=Neighbour)


def proven(c: Neighbour) -> bool:
    """It delivered a rollout this node admitted first, on this connection: its place is earned."""
    return c.delivered.count > 0


def dials_due(open_out: int, unproven: int, dialing: int, target: int, low: int, high: int,
              max_unproven: int, settled: bool = True) -> int:
    """How many dials to start now, with `open_out` outbound links (`unproven` of them not yet proven)
    and `dialing` dials in flight, towards `target` links.

    Below `low` (and the target) every missing link is dialed at once, above it one at a time; links
    and dials never exceed `high`. Unproven links and dials together: as many as it takes to reach
    `low` while none is proven or the node is not yet `settled` (a newcomer has nothing to judge by, nor
    has anyone while the swarm is young), and past `low` at most `max_unproven`; once settled with a
    proven link, no more than the proven ones, and at most `max_unproven`. So every place past `low`
    waits for a link to prove itself, and addresses that only announce each other never hold more than
    half of the links of a settled node that any peer delivered to.
    """
    if open_out < min(low, target):
        need = target - open_out - dialing
    else:
        need = 0 if dialing else min(1, target - open_out)
    proven_links = open_out - unproven
    if settled and proven_links:
        room = min(max_unproven, proven_links) - unproven - dialing
    else:
        room = max(max_unproven, low - proven_links) - unproven - dialing
    return max(0, min(need, room, high - open_out - dialing))


def on_trial(c: Neighbour, judged_after: int) -> bool:
    """Not proven yet, and fewer than `judged_after` answers to judge it by."""
    return not proven(c) and c.answers < judged_after


def probes_due(outbound: Iterable[N], judged_after: int) -> list[N]:
    """The neighbours on trial that may be asked for rollouts: no pull to them is pending."""
    return [c for c in outbound if on_trial(c, judged_after) and not c.pending]


def pick_dial(candidates: Sequence[AddressState], held: set[str], rng: random.Random,
              unverified_allowed: bool, tried_share: float = 0.5, vouched_only: bool = False,
              announced_last: bool = False, unchecked_allowed: bool = True,
              nothing_proven: bool = False) -> AddressState | None:
    """One address to dial among the due `candidates`, or None.

    Networks and groups already `held` (by an outbound neighbour or a dial in flight) are passed over while
    any other is due: an address of a group (/16, /32) no neighbour holds first, else of a network (/24, /48)
    none holds (Bitcoin's one outbound connection per netgroup, as long as the book allows); within that,
    with probability `tried_share` an address that delivered rollouts here before, otherwise any, drawn by
    `spread_choice`; never-reached addresses only when `unverified_allowed`, and
    addresses that inbound peers merely announced only when no other is due, and those found under the
    DHT's unchecked key (dht_timer.announce_key) only after them. `vouched_only`: only
    addresses the user named or that delivered here before (`is_vouched`). `unchecked_allowed`: whether a
    never-reached address from the unchecked key may be dialed now (the budget's reserve). `announced_last`: addresses
    first heard of from an inbound peer's hello (`is_announced`) only when no other is due, reached since
    or not. `nothing_proven`: no outbound neighbour of this node has delivered (`proven`) or is vouched for, and
    one was judged by what it gave, or the node settled with none delivering (outbound.py `_doubted`), so the
    peer lists it holds came from peers that gave nothing, which is how an eclipse or a poisoned lookup fills a
    book; addresses of the DHT's checked key (each announced by its own node once a dial-back reached it) then
    rank with those heard from peers.
    """
    usable = [s for s in candidates if (unverified_allowed or is_trusted(s)) and (is_vouched(s) or not vouched_only)
              and (unchecked_allowed or s.source != "dht-unchecked" or is_trusted(s))]
    if announced_last:
        usable = [s for s in usable if not is_announced(s)] or usable
    heard = [s for s in usable if not is_announced(s) or s.verified or (nothing_proven and s.source == "dht")]
    usable = heard or usable  # addresses inbound peers announced (often behind NAT): only when nothing else
    checked = [s for s in usable if s.source != "dht-unchecked" or s.verified]
    usable = checked or usable  # the DHT's unchecked key (mostly behind NAT): only when nothing else
    fresh = [s for s in usable if s.network not in held]
    wider = [s for s in fresh if (s.group or s.network) not in held]
    pool = wider or fresh or usable
    if not pool:
        return None
    tried = [s for s in pool if s.useful > 0]
    if tried and rng.random() < tried_share:
        return spread_choice(tried, rng)
    return spread_choice(pool, rng)


def spread_choice(states: Sequence[AddressState], rng: random.Random) -> AddressState:
    """A group (/16, /32: `AddressState.group`) at random, then an address of it at random (Bitcoin addrman's
    netgroup buckets): 150 addresses an attacker holds in a few rented blocks are drawn about as often as a
    few members at home on as many providers, not 150 times as often. States without a group count alone."""
    groups: dict[str, list[AddressState]] = {}
    for state in states:
        groups.setdefault(state.group or state.addr, []).append(state)
    return rng.choice(groups[rng.choice(sorted(groups))])


def is_trusted(state: AddressState) -> bool:
    """Dialing it costs nothing from the unverified budget: this node reached it before (or dial-back
    verified it), or the user named it (bootstrap, LAN discovery)."""
    return state.verified or state.source in ("bootstrap", "mdns")


def is_announced(state: AddressState | None) -> bool:
    """This node first heard of it from its owner (an inbound peer's hello, a DHT announce), not from a peer
    that reached it: whoever says hello, or announces on the DHT, can announce a server."""
    return state is not None and state.source in SELF_ANNOUNCED


def is_vouched(state: AddressState | None) -> bool:
    """The user named it (bootstrap, LAN discovery) or a peer there delivered rollouts this node admitted
    (addrman's "tried" table, not its "new" one): no announcement alone makes an address vouched for."""
    return state is not None and (state.source in ("bootstrap", "mdns") or state.useful > 0)


def guarded_dials(open_out: int, dialing: int, untried: int, need: int, target: int,
                  max_untried: int) -> tuple[int, int]:
    """While a settled node has no proven link (an eclipse, or a swarm gone quiet): (dials to start, of
    which the first how many may go to addresses that are not vouched for). `untried`: its unproven links
    and dials to such addresses, at most `max_untried`; vouched addresses may be dialed up to `target`
    besides `need` (overlay.dials_due), so that a node whose links all only announce themselves reaches
    a peer that can deliver without waiting for a place to free up."""
    total = max(need, target - open_out - dialing)
    return max(0, total), max(0, min(need, max_untried - untried))


def protected(outbound: Iterable[Neighbour], now: float, keep: int) -> list[Neighbour]:
    """The `keep` outbound neighbours with the highest earned score (only those that earned any)."""
    earned = [c for c in outbound if c.delivered.value(now) > 0]
    earned.sort(key=lambda c: c.delivered.value(now), reverse=True)
    return earned[:keep]


def useless(outbound: Sequence[N], min_answers: int, others_delivered: bool, now: float,
            min_age_s: float) -> list[N]:
    """Neighbours open at least `min_age_s` that answered at least `min_answers` pulls and never delivered
    a rollout admitted here, while some other connection did (`others_delivered`: in a quiet swarm, where
    nobody delivers, nobody is dropped; a node whose every outbound neighbour is useless still sees its
    inbound peers deliver). The age: a young swarm's honest nodes often have nothing new for a while."""
    if not others_delivered:
        return []
    return [c for c in outbound if c.answers >= min_answers and not proven(c) and now - c.opened >= min_age_s]


def stalled_victim(outbound: Sequence[N], judged_after: int, now: float, min_age_s: float,
                   rng: random.Random) -> N | None:
    """One of the neighbours `useless` would name were others delivering, at random."""
    judged = useless(outbound, judged_after, True, now, min_age_s)
    return rng.choice(judged) if judged else None


def rotation_victim(outbound: Sequence[Neighbour], now: float, keep: int, min_age_s: float,
                    rng: random.Random) -> Neighbour | None:
    """The unprotected neighbour to replace: the lowest recent score among those open at least
    `min_age_s` (a new link gets time to prove itself); ties broken at random."""
    safe = {id(c) for c in protected(outbound, now, keep)}
    old = [c for c in outbound if id(c) not in safe and now - c.opened >= min_age_s]
    if not old:
        return None
    rng.shuffle(old)
    return min(old, key=lambda c: c.delivered.value(now))
