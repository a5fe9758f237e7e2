"""A socket-free simulator of many RSP/1 node cores (the very code real nodes run), for tests.

Every node is a `NodeCore` with its own seeded `random.Random`; the clock is a number advanced in
fixed steps; messages are delivered after a fixed latency; dials run the real hello handshake
(sans-IO classes from messages.py). Addresses are "10.0.<i // 250>.<i % 250 + 1>:4747".
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable

from swarm_app.kernel.tasks import regenerate
from swarm_app.peer.core.actions import Admitted, Close, Dial, FetchPeers, HttpPull, Send
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.admission import Admission, AdmissionLimits
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import fitted_limits
from swarm_app.peer.core.messages import ClientHandshake, ServerHandshake, decode_frame, encode
from swarm_app.peer.core.pool import RolloutPool, SeenCache
from swarm_app.peer.core.protocol import NodeCore, ProtocolConfig
from swarm_app.peer.core.scores import PeerBook, ScorePolicy

START = 1_800_000_000.0  # simulated epoch seconds: timestamps must look current to admission


@dataclasses.dataclass
class SimNode:
    core: NodeCore
    addr: str
    online: bool = True


class Simulation:
    def __init__(self, n: int, config: ProtocolConfig, seed: int = 0, latency_s: float = 0.01,
                 regenerate_task: Callable = regenerate, limits: AdmissionLimits = AdmissionLimits()) -> None:
        self.now = START
        self.latency_s = latency_s
        self.rng = random.Random(seed)
        self.nodes: list[SimNode] = []
        self.by_addr: dict[str, SimNode] = {}
        self.links: dict[tuple[int, int], tuple[int, int]] = {}  # (node, conn) -> (peer node, peer conn)
        self.queue: list = []
        self.inbound_ip: dict[tuple[int, int], str] = {}
        self.admitted: list[tuple[int, Admitted, float]] = []
        self._ids = itertools.count(1)
        limits = fitted_limits(limits, config)
        for i in range(n):
            identity = Identity.generate()
            rng = random.Random(f"{seed}:{i}")
            pool = RolloutPool(identity.node_id, 4096, 64 << 20, limits.past_ms)
            admission = Admission(pool, SeenCache(65536, limits.past_ms), limits, regenerate_task)
            core = NodeCore(identity, admission, config, PeerBook(ScorePolicy(), rng), AddressBook(rng), rng)
            node = SimNode(core, f"10.{i // 250}.{i % 250}.1:4747")  # one /24 each, as on the internet
            core.addresses.mark_own(node.addr)
            self.nodes.append(node)
            self.by_addr[node.addr] = node

    def index(self, node: SimNode) -> int:
        return self.nodes.index(node)

    def run(self, seconds: float, step_s: float = 0.1) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += step_s
            self._deliver_due()
            for i, node in enumerate(self.nodes):
                if node.online:
                    self.execute(i, node.core.tick(self.now))

    def execute(self, i: int, actions: list) -> None:
        for action in actions:
            if isinstance(action, Send):
                target = self.links.get((i, action.conn))
                if target is not None:
                    heapq.heappush(self.queue, (self.now + self.latency_s, next(self._ids), target, encode(action.message)))
            elif isinstance(action, Close):
                self.disconnect(i, action.conn)
            elif isinstance(action, Dial):
                self.dial(i, action.addr)
            elif isinstance(action, FetchPeers):
                target = self.by_addr.get(action.addr)
                if target is not None and target.online:
                    self.nodes[i].core.on_peer_list(target.core.peer_list())
            elif isinstance(action, HttpPull):
                target = self.by_addr.get(action.addr)
                if target is not None and target.online:
                    items = target.core.serve_http_sample(action.have, action.max, self.now)
                    self.execute(i, self.nodes[i].core.on_http_sample(action.addr, items, self.now))
            elif isinstance(action, Admitted):
                self.admitted.append((i, action, self.now))

    def dial(self, i: int, addr: str) -> None:
        src, dst = self.nodes[i], self.by_addr.get(addr)
        if dst is None or not dst.online or not dst.core.reserve_inbound(src.addr.split(":")[0]):
            self.execute(i, src.core.on_dial_failed(addr, self.now))
            return
        j = self.index(dst)
        client = ClientHandshake(src.core.identity, src.addr, randbytes=self.rng.randbytes)
        server = ServerHandshake(dst.core.identity, dst.addr, randbytes=self.rng.randbytes)
        reply = decode_frame(encode(server.on_client_hello(decode_frame(encode(client.start())))))
        hello_c = server.on_client_proof(decode_frame(encode(client.on_server_hello(reply))))
        out_conn, in_conn = next(self._ids), next(self._ids)
        refusal_out, actions_out = src.core.on_connected(out_conn, client.peer.node, "out", addr, dst.addr.split(":")[0],
                                                         client.peer.listen, self.now)
        if refusal_out:
            dst.core.release_inbound(src.addr.split(":")[0])
            return
        refusal_in, actions_in = dst.core.on_connected(in_conn, hello_c.node, "in", None, src.addr.split(":")[0],
                                                       hello_c.listen, self.now)
        if refusal_in:
            dst.core.release_inbound(src.addr.split(":")[0])
            src.core.on_disconnected(out_conn, self.now)
            return
        self.inbound_ip[(j, in_conn)] = src.addr.split(":")[0]
        self.links[(i, out_conn)] = (j, in_conn)
        self.links[(j, in_conn)] = (i, out_conn)
        self.execute(i, actions_out)
        self.execute(j, actions_in)

    def disconnect(self, i: int, conn: int) -> None:
        other = self.links.pop((i, conn), None)
        self._drop(i, conn)
        if other is not None:
            self.links.pop(other, None)
            self._drop(*other)

    def _drop(self, j: int, conn: int) -> None:
        self.nodes[j].core.on_disconnected(conn, self.now)
        ip = self.inbound_ip.pop((j, conn), None)
        if ip is not None:
            self.nodes[j].core.release_inbound(ip)

    def _deliver_due(self) -> None:
        while self.queue and self.queue[0][0] <= self.now:
            _, _, (j, conn), text = heapq.heappop(self.queue)
            if (j, conn) in self.links and self.nodes[j].online:
                self.execute(j, self.nodes[j].core.on_frame(conn, text, self.now))
