"""Addresses this node may dial: where they came from, who answered there, and when to try again.

Failures back off exponentially with full jitter (base * 2**failures, capped, times a random factor
in [0.5, 1]) so that many nodes retrying one bootstrap do not retry in step; an address heard of from
others that fails `forget_after` times without ever answering is forgotten (one announced by an inbound
peer after one failure: most such peers are behind NAT) (a poisoned peer list costs
a few dials, not a dial every few minutes forever). Bootstrap addresses are never forgotten; others
are, least useful first, above `capacity`, and one network (/24, /48) holds at most `per_network`;
with `networks.lan` (sources.Networks), a private address is a network of its own, and private addresses
together hold at most `lan_addresses` entries.
An address is *verified* once this node reached it itself (or the shell's dial-back did): only those
are advertised to peers. It is *useful* once a peer there delivered rollouts this node admitted: only
those are saved in the peer table (`to_json`), at most `saved_per_network` per network, best first.
Sans-IO: `now` and the random source come from the caller.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

from swarm_app.peer.core.sources import PUBLIC, Networks

SOURCES = ("bootstrap", "mdns", "dht", "dht-unchecked", "exchange", "inbound", "table")
SELF_ANNOUNCED = ("inbound", "dht", "dht-unchecked")
"""Sources of addresses their owners announced themselves and nobody reached (an inbound peer's hello, the
DHT under the swarm's keys): any can be invented; most announced in a hello or under the DHT's unchecked key
are behind NAT (a node announces before dial-back can tell it it is unreachable). "dht": the checked key,
where only nodes a peer dialed back announce (dht_timer.announce_key)."""


@dataclass
class AddressState:
    addr: str
    source: str
    node_id: str | None = None
    failures: int = 0
    next_attempt: float = 0.0
    last_ok: float = 0.0
    http_only: bool = False
    """The address answered HTTP but refused the websocket: pull it over GET /sample."""
    network: str = ""
    """Its host's /24 (IPv4) or /48 (IPv6); the host itself where a private address counts alone."""
    group: str = ""
    """Its host's /16 (IPv4) or /32 (IPv6); the host itself where a private address counts alone."""
    lan: bool = False
    """A private address counted on its own (sources.Networks.is_lan)."""
    verified: bool = False
    """This node reached it (a completed hello), now or in an earlier run, or dial-back confirmed it."""
    useful: float = 0.0
    """Rollouts this node admitted first from the peer there while it was an outbound neighbour."""


def parse_address(text: str) -> tuple[str, int]:
    """"host:port" or "[v6]:port" -> (host, port); ValueError otherwise."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"address {text!r} is not HOST:PORT")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class AddressBook:
    def __init__(self, rng: random.Random, *, capacity: int = 1024, backoff_base_s: float = 1.0,
                 backoff_max_s: float = 300.0, per_network: int = 4, forget_after: int = 3,
                 saved: int = 64, saved_per_network: int = 2, networks: Networks = PUBLIC,
                 lan_addresses: int = 64) -> None:
        self.rng, self.capacity, self.per_network = rng, capacity, per_network
        self.networks, self.lan_addresses = networks, lan_addresses
        """`per_network`: entries from one /24 (/48) at most, bootstrap addresses aside: sixty addresses
        announcing themselves from one network take 4 lines of the book, not sixty."""
        self.backoff_base_s, self.backoff_max_s, self.forget_after = backoff_base_s, backoff_max_s, forget_after
        self.saved, self.saved_per_network = saved, saved_per_network
        self._book: dict[str, AddressState] = {}
        self.own: set[str] = set()
        """Addresses that reach this node itself: never dialed."""

    def __len__(self) -> int:
        return len(self._book)

    def __contains__(self, addr: str) -> bool:
        return addr in self._book

    def get(self, addr: str) -> AddressState | None:
        return self._book.get(addr)

    def entries(self) -> list[AddressState]:
        return list(self._book.values())

    def add(self, addr: str, source: str, node_id: str | None = None) -> AddressState | None:
        """Learn an address (normalized); None when it is malformed or this node's own."""
        try:
            addr = format_address(*parse_address(addr))
        except ValueError:
            return None
        if addr in self.own:
            return None
        state = self._book.get(addr)
        if state is None:
            if source != "bootstrap" and self._crowded(addr):
                return None
            host = parse_address(addr)[0]
            state = self._book[addr] = AddressState(addr, source, network=self.networks.of(host),
                                                    group=self.networks.group(host), lan=self.networks.is_lan(host))
            self._trim()
        elif source == "bootstrap" or (source == "dht" and state.source == "dht-unchecked"):
            state.source = source
        if node_id is not None:
            state.node_id = node_id
        return state

    def listed_by_peer(self, addr: str, node_id: str) -> None:
        """A peer's list named `addr` in `node_id`'s signed record (the peer reached it there): an address the
        DHT handed on now ranks as one heard from peers ("exchange"), so that the DHT's many dead addresses
        (most of a swarm is behind NAT) do not outrank it. (One an inbound hello announced keeps its rank: a
        bootstrapped swarm joins as fast that way, and no faster the other.)"""
        state = self._book.get(addr)
        if state is not None and state.source in ("dht", "dht-unchecked"):
            state.source, state.node_id = "exchange", node_id

    def _crowded(self, addr: str) -> bool:
        host = parse_address(addr)[0]
        network = self.networks.of(host)
        others = [s for s in self._book.values() if s.source != "bootstrap"]
        if sum(1 for s in others if s.network == network) >= self.per_network:
            return True
        return self.networks.is_lan(host) and sum(1 for s in others if s.lan) >= self.lan_addresses

    def candidates(self, now: float, skip_node: Callable[[str], bool], exclude_addrs: set[str]) -> list[AddressState]:
        """Addresses due for a dial attempt, except pending dials and known nodes `skip_node` rejects."""
        return [s for s in self._book.values()
                if s.next_attempt <= now and s.addr not in exclude_addrs and s.addr not in self.own
                and (s.node_id is None or not skip_node(s.node_id))]

    def failed(self, addr: str, now: float, http_only: bool = False) -> float:
        """Record a failed dial; returns the delay until the next attempt."""
        state = self._book.get(addr)
        if state is None:
            return 0.0
        state.http_only = http_only
        forget_after = 1 if state.source in SELF_ANNOUNCED else self.forget_after  # mostly behind NAT
        if not state.verified and state.source not in ("bootstrap", "mdns") and state.failures + 1 >= forget_after:
            del self._book[addr]  # heard of, never answered: a dead or invented address
            return 0.0
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** min(state.failures, 30))
        delay *= self.rng.uniform(0.5, 1.0)
        state.failures += 1
        state.next_attempt = now + delay
        return delay

    def succeeded(self, addr: str, node_id: str, now: float) -> None:
        state = self._book.get(addr)
        if state is not None:
            state.failures, state.next_attempt, state.last_ok = 0, 0.0, now
            state.node_id, state.http_only, state.verified = node_id, False, True

    def verify(self, addr: str, node_id: str | None) -> None:
        """Dial-back reached `addr` (the shell's check): advertised and dialed like an address that worked."""
        state = self.add(addr, "exchange", node_id)
        if state is not None:
            state.verified = True

    def note_useful(self, addr: str, count: float = 1.0) -> None:
        """The outbound neighbour at `addr` delivered `count` rollouts this node admitted first."""
        state = self._book.get(addr)
        if state is not None:
            state.useful += count

    def discredit(self, addr: str) -> None:
        """The peer at `addr` was banned: whatever it delivered, it is not saved in the peer table."""
        state = self._book.get(addr)
        if state is not None:
            state.useful = 0.0

    def advertised(self) -> list[AddressState]:
        """Verified addresses that are not failing: what this node may tell peers."""
        return [s for s in self._book.values() if s.verified and s.failures == 0]

    def hold(self, addr: str, until: float) -> None:
        """Do not dial before `until` (a ban, or a rotation)."""
        state = self._book.get(addr)
        if state is not None:
            state.next_attempt = max(state.next_attempt, until)

    def mark_own(self, addr: str) -> None:
        self.own.add(addr)
        self._book.pop(addr, None)

    def to_json(self) -> list[dict[str, Any]]:
        """The peer table: verified addresses whose peers proved useful, most useful first, at most
        `saved_per_network` per network and `saved` in all (a restart dials these first, so nothing that
        only announced itself, or answered without delivering, is kept)."""
        kept: list[AddressState] = []
        per_network: dict[str, int] = {}
        for state in sorted(self._book.values(), key=lambda s: (s.useful, s.last_ok), reverse=True):
            if not (state.verified and state.useful > 0) or per_network.get(state.network, 0) >= self.saved_per_network:
                continue
            per_network[state.network] = per_network.get(state.network, 0) + 1
            kept.append(state)
        return [{"addr": s.addr, "node": s.node_id, "last_ok": s.last_ok, "useful": s.useful} for s in kept[:self.saved]]

    def load_json(self, data: Any) -> int:
        """Add the saved entries that are well-formed (verified in an earlier run); returns how many."""
        added = 0
        for item in data if isinstance(data, list) else []:
            if isinstance(item, dict) and isinstance(item.get("addr"), str):
                node = item.get("node") if isinstance(item.get("node"), str) else None
                state = self.add(item["addr"], "table", node)
                if state is not None:
                    added += 1
                    state.verified = True
                    state.last_ok = _number(item.get("last_ok"))
                    state.useful = _number(item.get("useful"))
        return added

    def _trim(self) -> None:
        if len(self._book) <= self.capacity:
            return
        removable = [s for s in self._book.values() if s.source != "bootstrap"]
        removable.sort(key=lambda s: (s.useful, s.verified, s.last_ok, -s.failures))
        for state in removable[:len(self._book) - self.capacity]:
            del self._book[state.addr]


def _number(value: Any) -> float:
    """A non-negative number from the saved table, or 0 for anything else."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else 0.0
