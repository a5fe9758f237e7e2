"""A tiny DNS server on 127.0.0.1 (UDP, any free port) for the DNS seed tests: `serving` on the test's loop,
`serving_in_thread` for code that runs its own loop (the doctor's `asyncio.run`). Needs dnspython."""

from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import asynccontextmanager, contextmanager
from typing import AsyncIterator, Iterator

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

Records = dict[tuple[str, str], list[str]]


class Zone(asyncio.DatagramProtocol):
    """A DNS server for a few records, `records[(name, "SRV" | "TXT")] = [rdata text, ...]` (changeable while it
    runs): a name it lists answers (with no records for a type it lacks), any other name is NXDOMAIN."""

    def __init__(self, records: Records) -> None:
        self.records = records
        self.asked: list[tuple[str, str]] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        assert self.transport is not None
        self.transport.sendto(self.answer(data), addr)

    def answer(self, data: bytes) -> bytes:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        name, kind = question.name.to_text(omit_final_dot=True), dns.rdatatype.to_text(question.rdtype)
        self.asked.append((name, kind))
        if name not in {n for n, _ in self.records}:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif self.records.get((name, kind)):
            response.answer.append(dns.rrset.from_text(question.name, 60, "IN", kind, *self.records[name, kind]))
        return response.to_wire()


@asynccontextmanager
async def serving(records: Records) -> AsyncIterator[tuple[Zone, str]]:
    """The zone, listening on 127.0.0.1 at any free UDP port, and that IP:PORT."""
    zone = Zone(records)
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: zone, local_addr=("127.0.0.1", 0))
    try:
        yield zone, f"127.0.0.1:{transport.get_extra_info('sockname')[1]}"
    finally:
        transport.close()


@contextmanager
def serving_in_thread(records: Records) -> Iterator[tuple[Zone, str]]:
    """The zone on a thread of its own, answering until the block ends."""
    zone = Zone(records)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                data, addr = sock.recvfrom(4096)
            except socket.timeout:
                continue
            sock.sendto(zone.answer(data), addr)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield zone, f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        done.set()
        thread.join()
        sock.close()
