"""Peer exchange: this node's own signed record, the records it relays, and what it takes from peers' lists.

A node answers GET /peers with its own record (records.py; signed once dial-back reached it) and the
records of peers whose address it verified itself (it completed a hello there, or its dial-back reached
that node there), each relayed byte for byte as its subject signed it: at most `MAX_RECORDS` in all,
outbound neighbours first, then a random sample of the others. The same addresses go out as unsigned
`peers` entries for nodes from before records, which read only those (docs/protocol.md section 10).

From a peer's answer it reads only the records: each is checked (records.parse_record); a bad one is
dropped and counted by reason (`rejected`, exported on /metrics); a message with more than `MAX_RECORDS`
is refused whole; at most `take` new addresses of the good ones, chosen at random, enter the address book
with the record's node id. Good records are kept (as many as the address book holds addresses) so that
they can be relayed once this node verifies their address; a record is replaced only by a newer one of
its node. Besides the periodic exchange with a random neighbour, a neighbour whose record this node lacks
or holds past half its life is asked for it (one such request every `record_ask_s`, the same neighbour not
again within `ask_again_s`): a record reaches the nodes that can relay it soon after it is signed, and
stays fresh there. Such an answer only brings records, no new address: a neighbour that leaves out its
own record to be asked more often gains no more room in the book than the periodic exchange gives it.

Sans-IO like the core: time comes in as an argument, randomness from the caller's `random.Random`.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Callable, Iterable

from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.connections import Connection
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.records import (
    MAX_ADDRS,
    MAX_RECORDS,
    NodeRecord,
    RecordError,
    is_dial_address,
    parse_record,
    sign_record,
)


class PeerExchange:
    def __init__(self, identity: Identity, swarm: str, addresses: AddressBook, rng: random.Random,
                 count: Callable[[str], None], *, take: int, record_ask_s: float, ask_again_s: float) -> None:
        """`take`: new addresses taken from one answer at most. `record_ask_s`: at most one request for a
        missing record this often; `ask_again_s`: not to the same neighbour within this. `count`: the
        core's tally (tally.py), for records received and signed."""
        self.identity, self.swarm, self.addresses, self.rng = identity, swarm, addresses, rng
        self.count, self.take_max = count, take
        self.record_ask_s, self.ask_again_s = record_ask_s, ask_again_s
        self._next_record_ask = 0.0
        self.records: dict[str, NodeRecord] = {}
        """Node id -> the newest good record received of it."""
        self.rejected: Counter[str] = Counter()
        """Records refused, by reason (records.RecordError's, and `too_many` for a message over the cap)."""
        self.dialable: tuple[str, ...] = ()
        """Where dial-back reached this node (the shell's `NodeCore.set_dialable`): its record's addresses."""
        self.reachable: bool | None = None
        """The dial-back verdict (`NodeCore.set_reachable`): no record while it is False."""
        self.own: NodeRecord | None = None
        self._asked: dict[str, float] = {}
        self._record_asks: set[str] = set()
        """Addresses asked for their own record, whose answers add no address."""

    # --- this node's record

    def set_dialable(self, addrs: Iterable[str]) -> None:
        self.dialable = tuple(dict.fromkeys(a for a in addrs if is_dial_address(a)))[:MAX_ADDRS]

    def own_record(self, now: float) -> NodeRecord | None:
        """This node's record, signed anew when what it says changed or half its life is over; None while
        dial-back has reached it nowhere, or found it unreachable."""
        if not self.dialable or self.reachable is False:
            self.own = None
            return None
        now_ms, own, reachable = int(now * 1000), self.own, self.reachable is True
        if (own is None or own.addrs != self.dialable or own.reachable != reachable
                or now_ms >= (own.issued_ms + own.expires_ms) // 2):
            self.own = sign_record(self.identity, self.swarm, self.dialable, reachable, now_ms)
            self.count("records_signed")
        return self.own

    # --- the answer to GET /peers

    def answer(self, outbound: list[str], now: float) -> dict[str, list[Any]]:
        """`{"records": [...], "peers": [...]}`: own record, then those of the `outbound` neighbours (node
        ids) this node holds, then a random sample of the other records it may relay."""
        now_ms = int(now * 1000)
        relayable = {node: addr for node, record in self.records.items()
                     if (addr := self._verified_address(record, now_ms))}
        first = [node for node in dict.fromkeys(outbound) if node in relayable]
        own = self.own_record(now)
        room = MAX_RECORDS - (own is not None)
        others = [node for node in relayable if node not in set(first)]
        chosen = first[:room]
        chosen += self.rng.sample(others, min(len(others), room - len(chosen)))
        listed = [(own, own.addrs[0])] if own is not None else []
        listed += [(self.records[node], relayable[node]) for node in chosen]
        return {"records": [record.to_item() for record, _ in listed],
                "peers": [{"node": record.node, "addr": addr, "verified": True} for record, addr in listed]}

    def _verified_address(self, record: NodeRecord, now_ms: int) -> str | None:
        """One of the record's addresses where this node itself met its node (and that is not failing),
        while the record is live; else None: a record nobody here could check is not passed on."""
        if not record.live(now_ms):
            return None
        for addr in record.addrs:
            state = self.addresses.get(addr)
            if state is not None and state.verified and state.failures == 0 and state.node_id == record.node:
                return addr
        return None

    # --- a peer's answer

    def take(self, answer: Any, now: float, lister: str | None = None) -> int:
        """Check the records of a peer's GET /peers answer (from `lister`), keep the good ones and add at most
        `take` of their new addresses to the book (none when it answers a request for its own record);
        returns how many were added. Unsigned `peers` entries (all an older node sends) are not read:
        anyone could have written them."""
        wanted_record_only = lister in self._record_asks
        self._record_asks.discard(lister or "")
        items = answer.get("records") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            return 0
        if len(items) > MAX_RECORDS:
            self.rejected["too_many"] += 1
            return 0
        now_ms, offered = int(now * 1000), {}
        for item in items:
            try:
                record = parse_record(item, self.swarm, now_ms)
            except RecordError as exc:
                self.rejected[exc.reason] += 1
                continue
            if record.node == self.identity.node_id:
                continue
            self.count("records_received")
            self._keep(record, now_ms)
            for addr in () if wanted_record_only else record.addrs:
                if addr not in self.addresses:
                    offered.setdefault(addr, record.node)
                else:
                    self.addresses.listed_by_peer(addr, record.node)
        taken = self.rng.sample(list(offered.items()), min(len(offered), self.take_max))
        return sum(self.addresses.add(addr, "exchange", node) is not None for addr, node in taken)

    def _keep(self, record: NodeRecord, now_ms: int) -> None:
        held = self.records.get(record.node)
        if held is not None and held.issued_ms >= record.issued_ms:
            return
        self.records.pop(record.node, None)
        self.records[record.node] = record
        if len(self.records) > self.addresses.capacity:
            self._trim(now_ms)

    def _trim(self, now_ms: int) -> None:
        """Expired records go first, then those none of whose addresses the book holds, then the oldest."""
        over = len(self.records) - self.addresses.capacity
        ranked = sorted(self.records.values(), key=lambda r: (r.live(now_ms),
                                                               any(a in self.addresses for a in r.addrs), r.issued_ms))
        for record in ranked[:over]:
            del self.records[record.node]

    # --- whom to ask

    def pick_lister(self, conns: Iterable[Connection], now: float) -> str | None:
        """The address of a random neighbour to ask for its peer list (the periodic exchange), or None when
        none can be asked."""
        listers = self._listers(conns)
        if not listers:
            return None
        node = self.rng.choice(list(listers))
        self._asked[node] = now
        self._record_asks.discard(listers[node])
        return listers[node]

    def missing_record(self, conns: Iterable[Connection], now: float) -> str | None:
        """The address of a neighbour to ask for its own record now, or None: one whose record this node
        lacks or holds past half its life, not asked within `ask_again_s`; one every `record_ask_s`."""
        if now < self._next_record_ask:
            return None
        listers, now_ms = self._listers(conns), int(now * 1000)
        self._asked = {node: t for node, t in self._asked.items() if node in listers}
        due = [node for node in listers if self._wants_record(node, now_ms)
               and now >= self._asked.get(node, -1e18) + self.ask_again_s]
        if not due:
            return None
        self._next_record_ask = now + self.record_ask_s
        node = self.rng.choice(due)
        self._asked[node] = now
        self._record_asks.add(listers[node])
        return listers[node]

    def _listers(self, conns: Iterable[Connection]) -> dict[str, str]:
        """Node id -> address of the neighbours whose peer list can be fetched: the outbound ones, and
        inbound ones whose address was verified (a node many dial, such as a bootstrap, learns from those)."""
        listers = {}
        for c in conns:
            state = self.addresses.get(c.addr) if c.addr else None
            if c.addr and (c.direction == "out" or (state is not None and state.verified)):
                listers[c.peer] = c.addr
        return listers

    def _wants_record(self, node: str, now_ms: int) -> bool:
        record = self.records.get(node)
        return record is None or now_ms >= (record.issued_ms + record.expires_ms) // 2

    # --- the saved peer table

    def load_table(self, data: Any) -> int:
        """Addresses saved by an earlier run (the peer table's JSON); returns how many were taken. The table
        holds addresses this node verified and that delivered, not records: those expire within the hour."""
        return self.addresses.load_json(data)
