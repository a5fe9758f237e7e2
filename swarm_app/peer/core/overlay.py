"""Which peers a node keeps as outbound neighbours: the overlay's choices, none of its I/O.

Known designs, not new ones: HyParView's small active view fed from a larger passive one (here the
outbound links and the address book), Bitcoin's addrman split between addresses that worked ("tried")
and addresses only heard of ("new"), and GossipSub v1.1's peer scoring (first deliveries earn a score
that decays) and per-IP colocation limits.
- `pick_dial`: the next address to dial: a network (/24, /48) no outbound neighbour or pending dial
  already holds when one is due, half of the time an address that proved useful before; an address
  this node never reached itself only while the budget for those lasts.
- `protected`: the best-scored outbound neighbours, kept out of rotation, so that an attacker whose
  addresses crowd the book still cannot take the places earned by peers that delivered rollouts.
- `rotation_victim`: the neighbour to replace at the next rotation: the lowest score among the
  unprotected ones that had time to earn one.
- `useless`: neighbours to replace at once: asked for rollouts several times, they never gave one this
  node admitted, while others did (GossipSub v1.1's mesh delivery deficit).
Sans-IO: time and randomness are arguments; nothing here holds state beyond a `DecayingCount`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Protocol

from swarm_app.peer.core.addressbook import AddressState


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


def pick_dial(candidates: Sequence[AddressState], held_networks: set[str], rng: random.Random,
              unverified_allowed: bool, tried_share: float = 0.5) -> AddressState | None:
    """One address to dial among the due `candidates`, or None.

    Networks already held are passed over while any other is due (one outbound neighbour per /24 as
    long as the book allows); within that, with probability `tried_share` an address that delivered
    rollouts here before, otherwise any; never-reached addresses only when `unverified_allowed`, and
    addresses that inbound peers merely announced only when no other is due.
    """
    usable = [s for s in candidates if unverified_allowed or is_trusted(s)]
    heard = [s for s in usable if s.source != "inbound" or s.verified]
    usable = heard or usable  # addresses inbound peers announced (often behind NAT): only when nothing else
    fresh = [s for s in usable if s.network not in held_networks]
    pool = fresh or usable
    if not pool:
        return None
    tried = [s for s in pool if s.useful > 0]
    if tried and rng.random() < tried_share:
        return rng.choice(tried)
    return rng.choice(pool)


def is_trusted(state: AddressState) -> bool:
    """Dialing it costs nothing from the unverified budget: this node reached it before (or dial-back
    verified it), or the user named it (bootstrap, LAN discovery)."""
    return state.verified or state.source in ("bootstrap", "mdns")


def protected(outbound: Iterable[Neighbour], now: float, keep: int) -> list[Neighbour]:
    """The `keep` outbound neighbours with the highest earned score (only those that earned any)."""
    earned = [c for c in outbound if c.delivered.value(now) > 0]
    earned.sort(key=lambda c: c.delivered.value(now), reverse=True)
    return earned[:keep]


def useless(outbound: Sequence[Neighbour], min_answers: int, others_delivered: bool) -> list[Neighbour]:
    """Neighbours that answered at least `min_answers` pulls and never delivered a rollout admitted here,
    while some other connection did (`others_delivered`: in a quiet swarm, where nobody delivers, nobody
    is dropped; a node whose every outbound neighbour is useless still sees its inbound peers deliver)."""
    if not others_delivered:
        return []
    return [c for c in outbound if c.answers >= min_answers and c.delivered.count == 0]


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
