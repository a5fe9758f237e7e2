"""`ProtocolConfig`: the knobs of the node core, and the receive budgets derived from its send side.

An honest node must never be penalized for traffic its peers' own settings allow, so nothing a receiver
enforces is a free-standing number: the per-connection bucket (`conn_rate`, `conn_burst`) and the
per-author bucket (`author_rate`, `author_burst`, applied by `fitted_limits`) are computed from what
a node on the same settings may send (own pushes, pulls, pull answers), times `receive_headroom`, plus
`delivery_jitter_s` of bunching. tests/peer/core/test_limits.py checks the relation and that two fast
honest nodes never ban each other. Values only; nothing here runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from swarm_app.peer.core.admission import AdmissionLimits


@dataclass(frozen=True)
class ProtocolConfig:
    target_outbound: int = 8
    """Outbound websockets to keep open (dialed one at a time while at least `low_outbound` are open)."""
    low_outbound: int = 6
    """Below this many outbound links, every missing one is dialed at once."""
    high_outbound: int = 12
    """Outbound links plus dials in flight never exceed this."""
    min_outbound: int = 2
    """When dials keep meeting full nodes (too few reachable peers for everyone's target), a node wants
    fewer outbound links, never fewer than this, and tries for one more every rotation interval."""
    unproven_outbound: int = 3
    """Outbound links (open or being dialed) to peers that have not yet delivered a rollout admitted here:
    at most this many, and no more than the proven ones; while none is proven, or in the node's first
    `settle_after_s`, as many as it takes to reach `low_outbound`. The other places go to peers that
    earned them, so addresses that only announce each other never hold most of a node's links
    (overlay.dials_due); unproven links past that, once one proves itself, are dropped. While a settled
    node has none proven, at most this many go to addresses it merely heard of, the others (up to
    `target_outbound`) to bootstrap, LAN or tried addresses (overlay.guarded_dials); in its first
    `settle_after_s`, at most this many to addresses first announced in inbound peers' hellos while others
    are due."""
    busy_streak: int = 4
    """Full answers in a row (503, bye busy; bootstrap addresses aside) that cost one wanted link."""
    settle_after_s: float = 60.0
    """... not counting those of a node's first minute: a newcomer hears of the nodes every newcomer
    hears of first, and finds them full; that says who is popular, not that the swarm lacks room. (In
    that minute it also fills `low_outbound` links without waiting for them to prove themselves, and
    drops a useless neighbour only while an address is due to replace it.)"""
    protected_outbound: int = 4
    """Outbound neighbours with the best earned score (recent first deliveries) that rotation never
    replaces: announcements alone cannot take these places (overlay.py)."""
    useless_after_answers: int = 2
    """An outbound neighbour open at least `useless_min_age_s` that answered this many pulls without one
    rollout admitted here, while others delivered, is replaced at once (an honest peer answers with
    authors the asker has not heard from)."""
    useless_min_age_s: float = 10.0
    """... not before it has been open this long (two pull intervals): a young swarm's first links may have
    had nothing to give yet."""
    useless_hold_s: float = 600.0
    """... and its address is not dialed again for this long."""
    stalled_rotate_s: float = 20.0
    """While no connection delivers anything and a node holds `low_outbound` links, one outbound neighbour
    that answered `useless_after_answers` pulls with nothing is replaced this often (its address waits
    `rotate_interval_s`)."""
    score_half_life_s: float = 300.0
    """A neighbour's first deliveries count half after this long."""
    unverified_dial_rate: float = 0.1
    """Dials per second to addresses this node never reached itself (heard of from peers), sustained;
    a dial that meets a node (a hello, or a full node's 503) gives its token back."""
    unverified_dial_burst: float = 10.0
    """... and at once: enough to join (a bootstrap's list), too few to be spent on a poisoned list."""
    unchecked_share: float = 0.5
    """The share of that burst addresses from the DHT's unchecked key may spend (dht_timer.py: four of five
    are nodes behind NAT); the rest is kept for the checked key's and peers' addresses a newcomer hears next."""
    exchange_take: int = 16
    """New addresses taken from one peer list at most (a random sample of what it offers)."""
    hungry_exchange_s: float = 2.0
    """While a node wants more outbound links than its address book has addresses due, it asks a neighbour
    for its peer list this often instead of every `exchange_interval_s` (a newcomer, a bootstrap whose
    book holds only its inbound peers)."""
    prune_backoff_s: float = 60.0
    """A full node (503 or bye busy) is not dialed again before this (GossipSub's prune backoff)."""
    pull_fresh_s: float = 120.0
    """Pull answers hold rollouts no older than this: what is relayed stays recent."""
    push_fanout: int = 2
    """Neighbours each own rollout is pushed to."""
    pull_interval_s: float = 5.0
    """A pull of up to `pull_max` rollouts this often: 240 a minute at most, twice what a swarm of 1,000
    needs in a steady state, so that a node that missed half the swarm (a healed partition) hears from
    80% of that half within 3 minutes (20 every 10 s would be 360 in 3 minutes, below the 400 needed)."""
    pull_max: int = 20
    """Rollouts asked for per pull (one per author)."""
    pulled_per_min_max: int = 240
    """A pull (or a probe) is sent only while the rollouts that pull answers brought in the last 60 s, plus
    `pull_max` for each answer awaited and the one asked for, stay within this: with the pushes of its
    neighbours (a few a minute on average, more in a bad minute) a node behind NAT receives fewer than 300
    rollouts in any minute. At 260, one leaf of a 1,000-node simulation received 303 in one minute."""
    heard_window_s: float = 600.0
    """Authors heard from this recently go in a pull's `heard` filter (heard.py): answers bring others
    first. As long as the window over which a node should hear from every author."""
    recent_window_s: float = 300.0
    """Authors heard from this recently go in a pull's `recent` filter: answers bring them after all others,
    so that among the authors heard within `heard_window_s` those heard longest ago come first (after a
    partition heals, the other half)."""
    pull_timeout_s: float = 5.0
    rotate_interval_s: float = 60.0
    """Replace one outbound neighbour this often (when others are known)."""
    exchange_interval_s: float = 30.0
    """Ask a neighbour for its peer list this often."""
    pull_cost: float = 5.0
    """Tokens an incoming pull takes from the connection's bucket: answering one scans the pool."""
    receive_headroom: float = 2.0
    """Receive budgets (per connection, per author) are this many times what an honest node on the same
    settings can send, so an honest sender never uses more than half of any of them."""
    delivery_jitter_s: float = 10.0
    """Seconds by which a sender's messages may arrive bunched (queueing, 2x the 5 s send timeout): this
    much of its sustained rate is added to every receive burst."""
    max_inbound: int = 64
    max_inbound_per_ip: int = 8
    max_inbound_per_network: int = 16
    """Inbound websockets from one /24 (IPv4) or /48 (IPv6): nine addresses cannot hold the whole node."""
    max_inbound_lan: int = 32
    """Inbound websockets from private addresses together, where each counts as a network of its own (the LAN
    rule, sources.Networks): half the node, so that a LAN machine with many addresses leaves room to the rest."""
    standing_refresh_s: float = 5.0
    """How often the authors' standing (their weight in the external draw) is recomputed for the pool."""
    idle_inbound_s: float = 60.0
    """An inbound peer that gave nothing (no admitted rollout) for this long yields its slot to a newcomer."""
    share: bool = True
    """Send own rollouts to peers (pushes and pull answers). False: only receive."""
    own_push_rate: float = 4.0
    """Own rollouts pushed per second at most: no faster than peers' per-author limit admits."""
    own_push_burst: float = 128.0

    # --- receive budgets, derived from the send side above: never a number that only fits by chance

    @property
    def pulls_per_s(self) -> float:
        """Most pulls one node sends per second (the interval is drawn from 0.9..1.1 x pull_interval_s)."""
        return 1.0 / (0.9 * self.pull_interval_s)

    @property
    def honest_conn_rate(self) -> float:
        """Tokens per second an honest sender spends on one connection: every own push may go to the same
        neighbour, plus its pulls (pull_cost each) and the samples answering ours (1 each)."""
        return self.own_push_rate + self.pulls_per_s * (self.pull_cost + 1)

    @property
    def conn_rate(self) -> float:
        """Tokens per second accepted on one connection, sustained (a message is 1, a pushed rollout 1)."""
        return self.receive_headroom * self.honest_conn_rate

    @property
    def conn_burst(self) -> float:
        # at the first moment: a full own-push burst, one pull, one sample and a bye, plus bunching
        honest = self.own_push_burst + self.pull_cost + 2 + self.delivery_jitter_s * self.honest_conn_rate
        return self.receive_headroom * honest

    @property
    def author_rate(self) -> float:
        """Rollouts per second admitted per author: its own pushes plus one per pull answer (each holds at
        most one rollout per author), times the headroom."""
        return self.receive_headroom * (self.own_push_rate + self.pulls_per_s)

    @property
    def author_burst(self) -> float:
        honest = self.own_push_burst + 1 + self.delivery_jitter_s * (self.own_push_rate + self.pulls_per_s)
        return self.receive_headroom * honest


def fitted_limits(limits: AdmissionLimits, config: ProtocolConfig) -> AdmissionLimits:
    """`limits` with the per-author bucket raised to at least what an honest author on `config` may send."""
    return dataclasses.replace(limits, author_rate=max(limits.author_rate, config.author_rate),
                               author_burst=max(limits.author_burst, config.author_burst))
