"""The connection gate's arithmetic without sockets: the descriptor budget, the newcomers' slots and their
bounded memory, and eviction of unproven connections. The same rules on real sockets: tests/peer/io/
test_fair_door.py (peer port) and tests/watch/test_watch_port.py (watch port)."""

from __future__ import annotations

from swarm_app.net.gate import (
    NEWCOMER_CONNECTIONS,
    RECENT_S,
    RESERVED_DESCRIPTORS,
    WATCH_CONNECTIONS,
    ConnectionGate,
    descriptor_budget,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Door:
    def __init__(self) -> None:
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


def test_peer_cap_watch_cap_and_reserve_fit_under_the_soft_limit():
    for soft in (256, 512, 1024, 4096, 65536):
        assert descriptor_budget(soft) + WATCH_CONNECTIONS + RESERVED_DESCRIPTORS <= soft
    assert descriptor_budget(1024) == (1024 - 128 - 32) // 2 == 432 and descriptor_budget(256) == 48


def churned(gate: ConnectionGate, ip: str) -> None:
    """`ip` opened and closed its newcomer allowance: it is no newcomer any more."""
    for _ in range(NEWCOMER_CONNECTIONS):
        assert gate.admit(ip)
        gate.release(ip)


def test_known_addresses_cannot_take_the_newcomers_slots():
    clock = Clock()
    gate = ConnectionGate(per_ip=100, total=20, clock=clock)
    assert gate.reserved == 3
    churners = [f"10.0.0.{i}" for i in range(4)]
    for ip in churners:
        churned(gate, ip)
    held = [ip for i in range(17) for ip in [churners[i % 4]] if gate.admit(ip)]
    assert len(held) == 17 and not gate.admit(churners[0]) and gate.refused["total"] == 1
    assert [gate.admit("192.0.2.1") for _ in range(4)] == [True, True, True, False]  # a fresh one gets the 3
    assert gate.newcomers_admitted == 3 and gate.open == 20
    clock.now += RECENT_S + 1  # 5 quiet minutes: the churners are newcomers again
    gate.release("192.0.2.1")
    assert gate.is_newcomer(churners[0]) and gate.admit(churners[0])


def test_a_fresh_address_keeps_its_slot_through_its_own_first_requests():
    gate = ConnectionGate(per_ip=100, total=20)
    for ip in ("a", "b"):
        churned(gate, ip)
    for i in range(17):
        assert gate.admit("ab"[i % 2])
    answered = 0
    for _ in range(10):  # ten requests, one connection each, opened and closed in turn
        if gate.admit("fresh"):
            answered += 1
            gate.release("fresh")
    assert answered == 10


def test_the_memory_of_recent_addresses_is_bounded():
    gate = ConnectionGate(per_ip=4, total=10_000, memory=100)
    for i in range(5000):
        ip = f"10.{i // 256}.{i % 256}.1"
        assert gate.admit(ip)
        gate.release(ip)
    assert len(gate._recent) == 100 and gate.open == 0 and not gate.by_ip


def test_a_full_gate_evicts_the_oldest_unproven_connection_not_a_proven_one():
    gate = ConnectionGate(per_ip=3, total=4, newcomer_share=0)
    watcher, first, second, third = Door(), Door(), Door(), Door()
    assert gate.admit("127.0.0.1", watcher)
    gate.prove(watcher)
    assert gate.admit("127.0.0.1", first) and gate.admit("127.0.0.1", second)
    assert gate.admit("127.0.0.1", third)  # the per-IP cap: `first` goes
    assert first.evicted and not watcher.evicted and gate.by_ip["127.0.0.1"] == 3
    assert gate.admit("127.0.0.2", Door()) and gate.open == 4
    assert gate.admit("127.0.0.3", Door()) and second.evicted  # the total cap: the oldest unproven anywhere
    gate.prove(third)
    assert gate.evicted == 2 and gate.open == 4
    for door in list(gate._unproven):
        gate.prove(door)
    assert not gate.admit("127.0.0.4", Door()) and gate.refused["total"] == 1  # nothing left to evict
    assert not watcher.evicted
