"""When a node looks its swarm up on the DHT and announces itself there: the schedule of `DhtConfig`, sans-IO.

Time comes in as an argument and two answers go out (look up now? announce now?), so the same schedule
runs a real node (peer/io/dht.py, on asyncio's clock) and every node of the simulator
(benchmarks/swarm/dht.py, on its virtual clock). The first lookup and announce are due at `start` (the
caller waits for the DHT's bootstrap first); announces come `early_announce_s` apart until three went
out, then every `announce_s`; lookups every `lookup_s`, or while the node holds fewer than `hungry_below`
links every `hungry_s`, doubling for each lookup in a row after the first that brought nothing new (at most
2**6 times), never beyond `lookup_s`; a node that falls short of links has its next lookup brought forward
to `hungry_s` after its last one (the caller is woken at least every `hungry_s` to tell). The first miss
does not double: the wait after a lookup is set when it starts, before its answer, so in a swarm's first
seconds (nothing announced yet) doubling at once would push the lookup that finds the newly announced
members 15 s later for every node that started with them.
Every interval is jittered by +-20% (nodes that start together spread out).

`announce_key` says under which of the swarm's two keys a node announces: CHECKED once a peer outside its own
network has dialed it back (or its router maps its port), UNCHECKED before (BitTorrent clients announce unchecked, and the first
members of a swarm found only here could otherwise never meet), nowhere once dial-back found it unreachable.
Most of a swarm sits behind NAT and announces before its verdict, and an announce stays listed ~30 minutes:
under one key, four of five addresses a lookup returns would be dead. Lookups read CHECKED always and
UNCHECKED while the node is short of links; the core dials UNCHECKED addresses only when no other is due
(overlay.pick_dial), so they cost the unverified-dial budget only while nothing better is known.
What the node does with what it finds is the caller's.
"""

from __future__ import annotations

import random

from swarm_app.peer.core.config import DhtConfig

MAX_DOUBLINGS = 6
KEY_CHECK_S = 2.0
"""While a node is on the unchecked key, its schedule wakes this often to see whether it may move to the checked
key now (a dial-back confirmed it): the checked key should list a reachable node at once, not at the next
announce, since newcomers dial its addresses first. A node found unreachable (most of a swarm) is not woken."""

CHECKED, UNCHECKED = "checked", "unchecked"
"""The swarm's two keys on the DHT (peer/io/dht.py info_hash): members dial-back confirmed, and the rest."""


def announce_key(reachable: bool | None, confirmed: bool, mapped: bool) -> str | None:
    """Where a node announces itself: CHECKED once a peer reached it by dial-back (`confirmed`: one
    confirmation; `reachable`: the verdict) or its router maps its port, UNCHECKED while nothing is known,
    None once dial-back found it unreachable (it only dials out)."""
    if reachable is False:
        return None
    return CHECKED if reachable or confirmed or mapped else UNCHECKED


def looks_unchecked(links: int, hungry_below: int) -> bool:
    """Whether a lookup also reads the UNCHECKED key: while the node holds fewer than `hungry_below` links."""
    return links < hungry_below


class DhtTimer:
    def __init__(self, config: DhtConfig, rng: random.Random, start: float) -> None:
        self.config, self.rng = config, rng
        self.next_lookup = self.next_announce = start
        self.lookups = self.announces = 0
        """Lookups started, announces made (the caller counts an announce with `announced`)."""
        self.misses = 0
        """Lookups in a row before the last one that brought no new address."""
        self._new = 0
        self.key: str | None = None
        """The key of the last announce (None before the first)."""
        self._asked: str | None = UNCHECKED
        """The key `announce_due` was last asked about (announce_key's answer then)."""
        self._last_lookup = start
        self._slow = False
        """The next lookup was set at the slow pace (the node held enough links then)."""

    @property
    def next_due(self) -> float:
        return min(self.next_lookup, self.next_announce)

    def wake_after(self, now: float) -> float:
        """Seconds until the caller should ask again: when something is due, or KEY_CHECK_S while the node may
        still move to the checked key (not announced there yet, and not found unreachable)."""
        wait = min(self.next_due - now, self.config.hungry_s)  # a node that falls short of links is seen soon
        return min(wait, KEY_CHECK_S) if self._asked is not None and self.key != CHECKED else wait

    def found(self, count: int = 1) -> None:
        """A lookup's answer brought `count` addresses not handed on before."""
        self._new += count

    def announce_due(self, now: float, key: str | None) -> bool:
        """Whether to announce under `key` (announce_key's answer; None: nowhere) at `now`: on the schedule,
        or at once when the key changed since the last announce. When the schedule's time came the next
        one is scheduled, announced or not (the caller asks again then)."""
        self._asked = key
        scheduled = now >= self.next_announce
        if scheduled:
            early = self.announces < 3
            self.next_announce = now + self._jitter(self.config.early_announce_s if early else self.config.announce_s)
        return key is not None and (scheduled or (self.announces > 0 and key != self.key))

    def announced(self, key: str) -> None:
        self.announces += 1
        self.key = key

    def lookup_due(self, now: float, links: int) -> bool:
        """Whether a lookup is due at `now` for a node holding `links` links; if so it counts as started and
        the next one is scheduled. A node that falls short of links while the next lookup is set at the slow
        pace has it brought forward to `hungry_s` after the last one."""
        cfg = self.config
        hungry = links < cfg.hungry_below
        if hungry and self._slow:
            self.next_lookup = min(self.next_lookup, self._last_lookup + self._jitter(cfg.hungry_s))
            self._slow = False
        if now < self.next_lookup:
            return False
        self.misses = self.misses + 1 if self.lookups and not self._new else 0
        self._new = 0
        self.lookups += 1
        self._last_lookup, self._slow = now, not hungry
        doublings = min(max(0, self.misses - 1), MAX_DOUBLINGS)
        wait = min(cfg.lookup_s, cfg.hungry_s * 2 ** doublings) if hungry else cfg.lookup_s
        self.next_lookup = now + self._jitter(wait)
        return True

    def _jitter(self, seconds: float) -> float:
        return seconds * self.rng.uniform(0.8, 1.2)
