"""The node core's live links: every connection past its handshake, by number and by peer, and the inbound
slots (connections.py's `InboundSlots`), with the choices that read only them.

`Links` owns this table; the core's face registers and forgets connections through it, the outbound
owner (outbound.py) and the pull owner (pulls.py) read it. Choices made here: which of two connections to
one peer both ends keep, which idle inbound peer makes room for a newcomer, and which addresses the I/O
shell asks for a dial-back (`dialback_helpers`, `inbound_neighbours`). Sans-IO: the time is an argument.
"""

from __future__ import annotations

from typing import Iterable

from swarm_app.peer.core.actions import Action, Close
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.connections import Connection, InboundSlots
from swarm_app.peer.core.limits import ProtocolConfig
from swarm_app.peer.core.tally import Tally


class Links:
    def __init__(self, node_id: str, config: ProtocolConfig, addresses: AddressBook, tally: Tally) -> None:
        self.node_id, self.addresses, self.tally = node_id, addresses, tally
        self.conns: dict[int, Connection] = {}
        self.by_peer: dict[str, int] = {}
        self.inbound = InboundSlots(config.max_inbound, config.max_inbound_per_ip, config.max_inbound_per_network,
                                    addresses.networks, config.max_inbound_lan)
        self.idle_inbound_s = config.idle_inbound_s

    def __len__(self) -> int:
        return len(self.conns)

    def __contains__(self, conn: int) -> bool:
        return conn in self.conns

    def get(self, conn: int) -> Connection | None:
        return self.conns.get(conn)

    def values(self) -> Iterable[Connection]:
        return self.conns.values()

    def outbound(self) -> list[Connection]:
        return [c for c in self.conns.values() if c.direction == "out"]

    def has_peer(self, peer: str) -> bool:
        return peer in self.by_peer

    def add(self, c: Connection) -> None:
        self.conns[c.conn] = c
        self.by_peer[c.peer] = c.conn

    def forget(self, c: Connection) -> None:
        self.conns.pop(c.conn, None)
        if self.by_peer.get(c.peer) == c.conn:
            del self.by_peer[c.peer]

    def duplicate(self, peer: str, direction: str) -> tuple[bool, list[Action]]:
        """A second connection to `peer` (this one `direction`): (refused, actions). Both ends keep the one
        dialed by the smaller node id; the older one is closed and forgotten when the new one wins."""
        existing = self.conns.get(self.by_peer.get(peer, -1))
        if existing is None:
            return False, []
        keeper = min(self.node_id, peer)
        new_dialer = self.node_id if direction == "out" else peer
        old_dialer = self.node_id if existing.direction == "out" else peer
        if new_dialer != keeper and old_dialer == keeper:
            return True, []
        self.forget(existing)
        return False, [Close(existing.conn, "duplicate")]

    def expire_pulls(self, now: float) -> int:
        """Pulls past their deadline on every connection (Connection.expire_pulls); returns how many."""
        return sum(c.expire_pulls(now) for c in self.conns.values())

    # --- inbound slots

    def reserve_inbound(self, ip: str) -> bool:
        return self.inbound.reserve(ip)

    def admit_inbound(self, ip: str, now: float) -> tuple[bool, list[Action]]:
        """`reserve_inbound`, and when only the total is full, room for a newcomer (a network holding no
        inbound slot): the idlest inbound connection that sent nothing useful for `idle_inbound_s`, from
        the network holding the most slots, is closed, and its slot is the newcomer's."""
        if self.inbound.reserve(ip):
            return True, []
        victim = self.inbound.victim(ip, self.conns.values(), now, self.idle_inbound_s)
        if victim is None:
            return False, []
        self.tally.count("inbound_evicted")
        self.forget(victim)
        self.inbound.take(ip)  # over the cap by one until the victim's socket closes and the server releases its slot
        return True, [Close(victim.conn, "busy")]

    def release_inbound(self, ip: str) -> None:
        self.inbound.release(ip)

    # --- whom the shell asks for a dial-back

    def dialback_helpers(self, reached: Iterable[str] = ()) -> list[str]:
        """Peers that accept connections: those this node dialed, addresses that worked before, and `reached`
        (those it dialed back for their own check, which the shell knows)."""
        dialed = [c.addr for c in self.conns.values() if c.direction == "out" and c.addr]
        worked = [s.addr for s in self.addresses.entries() if s.last_ok > 0]
        return dialed + worked + list(reached)

    def inbound_neighbours(self) -> list[str]:
        """Where inbound neighbours say they listen (their observed IP, the port they announced): dial-back
        helpers of last resort, since most may sit behind NAT. A node that most of a small swarm dialed first
        has fewer other helpers than the confirmations it needs."""
        return [c.addr for c in self.conns.values() if c.direction == "in" and c.addr]
