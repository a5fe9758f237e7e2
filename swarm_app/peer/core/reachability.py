"""Whether peers can dial this node from outside, found by dial-back; and the helper's side of it.

A node behind a home router or carrier NAT can dial out but cannot be dialed: it must not be advertised as
a dial target. It cannot know this from the inside (its own address is a private one, the router's mapping
unknown), so it asks peers, as BitTorrent's and libp2p's reachability checks do:

1. the requester sends `POST /rsp/v1/dialback {"node", "port", "token"}` to a helper (a peer it knows);
2. the helper dials `http://<the IP it observed the request from>:<port>/rsp/v1/probe?token=..&nonce=..`,
   never another host: a dial-back cannot be aimed at a third party;
3. the probe answers the requester's node id, key and a signature over the helper's fresh nonce, so the
   helper knows it reached that node (not another program on the port); the helper answers the POST with
   `{"reachable": bool}`.

The requester counts a confirmation only when the helper says so AND its own probe endpoint saw the token it
gave that helper: a lying helper can make a node believe it is unreachable (it then only dials out, which
works) but never that it is reachable. `Reachability` turns answers into a verdict: reachable after
`confirmations` distinct networks (/24, /48; distinct addresses where `by_address`, for nodes that all live
on loopback, and, under the LAN rule (sources.Networks), distinct private addresses: a confirmation cannot be
faked, so a LAN's machines are as many witnesses as they are machines) confirmed, unreachable after
`failures` distinct networks (/24, /48 even on a LAN: a "no" can be a lie) could not, and the check starts over
every `recheck_s`. It also keeps the address each confirming helper reached the node at (`dialable`): the
addresses of the node's signed record (records.py). One confirmation is enough to sign one, so that nodes
that all join at once can list each other: a helper cannot fake a confirmation, only name a wrong address,
and an address named by fewer helpers than another is dropped. A "reachable" that rests on helpers at private
addresses only is `lan_only`: they dialed the node on its own network, which says nothing about the internet;
such a node keeps asking helpers at public addresses, and is not listed under the DHT's checked key.
`DialbackDoor` is the helper's rate limit, per requester address and in total.

Sans-IO like the core: time comes in as an argument, randomness from the caller's `random.Random`; nothing
here opens a socket. The I/O shell (peer/io/reachability.py) runs the requests and calls
`NodeCore.set_reachable` with the verdict.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from swarm_app.peer.core.identity import Identity, b64url, node_id_of, unb64url, verify
from swarm_app.peer.core.ratelimit import BucketMap, TokenBucket
from swarm_app.peer.core.sources import PUBLIC, Networks, is_private, prefix_of

PROBE_PREFIX = b"RSP/1 probe\n"
TOKEN_BYTES = 16
NONCE_BYTES = 32


@dataclass(frozen=True)
class ReachabilityPolicy:
    confirmations: int = 3
    """Distinct networks that must dial this node back before it counts as reachable."""
    failures: int = 3
    """Distinct networks that could not, before it counts as unreachable."""
    ask_every_s: float = 20.0
    """At most one dial-back request started per this many seconds (a helper dials once per request)."""
    ask_again_s: float = 600.0
    """The same helper address is not asked twice within this."""
    recheck_s: float = 1800.0
    """After a verdict the check starts over (a router's mapping or a port forward can change)."""
    by_address: bool = False
    """Count distinct addresses instead of networks: nodes that all run on loopback (tests, `swarm demo`)."""
    timeout_s: float = 10.0
    """How long a helper may take to dial back and answer (its own dial has half of it)."""


@dataclass(frozen=True)
class DialbackLimits:
    """The helper's budget: dial-backs it makes for one requester address, and for everyone."""

    per_source: tuple[float, float] = (2.0, 1 / 60)
    """(burst, per second): two at once, then one a minute per requester address."""
    total: tuple[float, float] = (16.0, 1.0)
    """(burst, per second) over all requesters."""
    concurrent: int = 8
    """Dial-backs in flight at once."""


class Reachability:
    """The requester's side: which helper to ask next and what the answers add up to.

    `status` is None until a verdict, then True or False; while a re-check gathers new answers the last
    verdict stands."""

    def __init__(self, policy: ReachabilityPolicy, rng: random.Random, networks: Networks = PUBLIC) -> None:
        self.policy, self.rng, self.networks = policy, rng, networks
        self.status: bool | None = None
        self.lan_only = False
        """The verdict "reachable" rests on helpers at private addresses only: it was reached on this network, and
        nothing is known about the internet (a helper dials the address it saw the request come from)."""
        self.confirmed: dict[str, float] = {}
        """Network (or address) -> when a helper there dialed this node back."""
        self.failed: dict[str, float] = {}
        """Network (or address) -> when a helper there could not."""
        self.named: dict[str, str] = {}
        """Network (or address) of a confirming helper -> the address it reached this node at."""
        self._confirmed_by: dict[str, str] = {}
        """Network (or address) of a confirming helper -> the helper's address."""
        self._named_before: list[str] = []
        self._asked: dict[str, float] = {}
        self._next_ask = 0.0
        self._verdict_at: float | None = None

    def key_of(self, ip: str, reached: bool = False) -> str:
        """What counts as one witness: the helper's network, or its address on loopback; for a confirmation
        (`reached`), a private helper's own address under the LAN rule."""
        if self.policy.by_address:
            return ip
        return self.networks.of(ip) if reached else prefix_of(ip)

    def next_helper(self, now: float, candidates: list[tuple[str, str]],
                    fallback: list[tuple[str, str]] = ()) -> str | None:
        """An address to ask now out of `candidates` (address, host), or out of `fallback` when none of those
        is fit, or None: not due, nothing new to learn, or nobody fit to ask. Helpers from networks that
        already answered are skipped: only distinct witnesses count; but a network that said "could not" is
        asked again once nobody new is left (after `ask_again_s`, as any helper): a "no" may be a dial that
        timed out on a busy host, and a small swarm has no other network to ask. After a verdict nobody is
        asked until the re-check, but a node found reachable on its own network only (`lan_only`) goes on
        asking helpers at public addresses: only they can tell whether the internet reaches it."""
        self._maybe_start_over(now)
        outside_only = self._verdict_at is not None and self.lan_only
        if now < self._next_ask or (self._verdict_at is not None and not outside_only):
            return None

        def fit(pairs: list[tuple[str, str]], skip: Collection[str]) -> list[str]:
            return [addr for addr, host in pairs
                    if not (outside_only and is_private(host)) and self.key_of(host, True) not in skip
                    and now >= self._asked.get(addr, -1e18) + self.policy.ask_again_s]

        answered = self.confirmed.keys() | self.failed.keys()
        fresh = (fit(candidates, answered) or fit(fallback, answered)
                 or fit([*candidates, *fallback], self.confirmed.keys()))
        if not fresh:
            return None
        chosen = self.rng.choice(sorted(set(fresh)))
        self._asked[chosen] = now
        self._next_ask = now + self.policy.ask_every_s
        return chosen

    def on_answer(self, helper_ip: str, reached: bool, now: float, addr: str = "") -> bool | None:
        """A helper at `helper_ip` dialed this node back at `addr` (`reached`) or could not; returns the status."""
        key = self.key_of(helper_ip, reached)
        (self.confirmed if reached else self.failed)[key] = now
        (self.failed if reached else self.confirmed).pop(key, None)
        (self.failed if reached else self.confirmed).pop(self.key_of(helper_ip, not reached), None)
        self.named.pop(key, None)
        self._confirmed_by.pop(key, None)
        if reached:
            self._confirmed_by[key] = helper_ip
        if reached and addr:
            self.named[key] = addr
        if len(self.confirmed) >= self.policy.confirmations:
            self._decide(True, now)
        elif len(self.failed) >= self.policy.failures:
            self._decide(False, now)
        return self.status

    def on_no_answer(self, helper: str, now: float, busy: bool = False) -> None:
        """The helper did not answer (down, an older node, busy): no evidence either way; ask again soon. A
        busy one (429, 503) may be asked again then too; one that failed otherwise not within ask_again_s."""
        self._next_ask = min(self._next_ask, now + self.policy.ask_every_s / 4)
        if busy:
            self._asked.pop(helper, None)

    def reached_from_outside(self) -> bool:
        """Whether a helper outside this node's own network dialed it back (any helper where `by_address`: on
        loopback the addresses stand for hosts anywhere). The verdict answers while there is one; before it,
        the confirmations so far."""
        if self.status is not None:
            return self.status and not self.lan_only
        return self._confirmed_from_outside()

    def _confirmed_from_outside(self) -> bool:
        """A confirmation of the current check came from a public address (any, where `by_address`)."""
        return any(self.policy.by_address or not is_private(self._confirmed_by.get(key, "")) for key in self.confirmed)

    def dialable(self, most: int = 4) -> list[str]:
        """The addresses helpers reached this node at, those named by the most helpers only (at most
        `most`); none once the verdict is "unreachable". While a re-check has no confirmation yet, those of
        the last check."""
        if self.status is False:
            return []
        if not self.named:
            return self._named_before
        votes = Counter(self.named.values())
        best = max(votes.values())
        return [addr for addr, count in votes.items() if count == best][:most]

    def _decide(self, reachable: bool, now: float) -> None:
        self.status, self._verdict_at = reachable, now
        self.lan_only = reachable and not self._confirmed_from_outside()

    def _maybe_start_over(self, now: float) -> None:
        if self._verdict_at is not None and now >= self._verdict_at + self.policy.recheck_s:
            self._verdict_at = None
            self._named_before = self.dialable()
            self.named.clear()
            self._confirmed_by.clear()
            self.confirmed.clear()
            self.failed.clear()
            self._asked.clear()


class DialbackDoor:
    """The helper's side: whether a dial-back request from `ip` may be served now."""

    def __init__(self, limits: DialbackLimits) -> None:
        burst, rate = limits.per_source
        self.per_source: BucketMap[str] = BucketMap(rate, burst, capacity=4096)
        self.total = TokenBucket(limits.total[1], limits.total[0], 0.0)
        self.concurrent, self.in_flight = limits.concurrent, 0
        self.refused = 0

    def admit(self, ip: str, now: float) -> bool:
        """True (a slot taken: call `done` after) or False (answer 429). The per-source budget is checked
        first, so one requester's excess does not spend the total."""
        if self.in_flight >= self.concurrent or self.per_source.peek(ip, now) < 1 or not self.total.take(now):
            self.refused += 1
            return False
        self.per_source.take(ip, now)
        self.in_flight += 1
        return True

    def done(self) -> None:
        self.in_flight -= 1


@dataclass(frozen=True)
class DialbackRequest:
    node: str
    port: int
    token: str


def parse_request(data: Any) -> DialbackRequest:
    """The body of POST /dialback; ValueError when it is not `{"node": id, "port": 1..65535, "token": b64url}`."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    node, port, token = data.get("node"), data.get("port"), data.get("token")
    if not isinstance(node, str) or len(node) != 32:
        raise ValueError("node must be a node id")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError("port must be an integer from 1 to 65535")
    if not isinstance(token, str) or len(unb64url(token)) != TOKEN_BYTES:
        raise ValueError(f"token must be {TOKEN_BYTES} bytes, b64url")
    return DialbackRequest(node, port, token)


def new_token() -> str:
    return b64url(os.urandom(TOKEN_BYTES))


def new_nonce() -> str:
    return b64url(os.urandom(NONCE_BYTES))


def probe_transcript(node: str, nonce: str) -> bytes:
    return PROBE_PREFIX + rfc8785.dumps({"v": 1, "node": node, "nonce": nonce})


def probe_answer(identity: Identity, nonce: str) -> dict[str, str]:
    """GET /probe's answer: this node's id and key, and its signature over the dialer's nonce."""
    return {"node": identity.node_id, "key": b64url(identity.public_key),
            "proof": b64url(identity.sign(probe_transcript(identity.node_id, nonce)))}


def probe_proves(answer: Any, node: str, nonce: str) -> bool:
    """True when `answer` comes from `node` (its key, and its signature over our fresh `nonce`)."""
    if not isinstance(answer, dict) or answer.get("node") != node:
        return False
    try:
        key, proof = unb64url(answer.get("key")), unb64url(answer.get("proof"))
    except ValueError:
        return False
    return len(key) == 32 and node_id_of(key) == node and verify(key, proof, probe_transcript(node, nonce))


@dataclass
class ProbeTokens:
    """Tokens this node handed to helpers, and whether a probe brought each back (bounded: one per
    request in flight)."""

    limit: int = 64
    pending: dict[str, bool] = field(default_factory=dict)

    def issue(self) -> str:
        while len(self.pending) >= self.limit:
            self.pending.pop(next(iter(self.pending)))
        token = new_token()
        self.pending[token] = False
        return token

    def seen(self, token: str) -> bool:
        """A probe presented `token`: True when it is one of ours."""
        if token in self.pending:
            self.pending[token] = True
            return True
        return False

    def redeem(self, token: str) -> bool:
        """Whether a probe brought `token` back; the token is spent."""
        return self.pending.pop(token, False)
