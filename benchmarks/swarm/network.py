"""A discrete-event network of RSP/1 node cores: the very `NodeCore` real nodes run, without sockets.

The clock is virtual and events wait in one heap (time, sequence number, handler, arguments), so a run
is reproducible from its seed: every node core has its own `random.Random`, and the network draws
latency, loss and hellos' nonces from one more. What the network models, and nothing else:
- latency: each node has an access delay; a message between two nodes takes the sum, in order;
- loss: a message is dropped with probability `loss` (a pull then times out; a push is lost);
- reachability: a node behind NAT cannot be dialed (the dial times out) but dials out, and the links
  it opens carry both ways;
- partitions: nodes on different `side`s cannot reach each other while `partitioned` (open links
  between them are cut, dials and peer-list fetches time out);
- leaving: a node that goes offline closes nothing politely (its peers see the links drop);
- dial-back: what the shells do with POST /dialback (swarm_app/peer/core/reachability.py): the first
  peers a node connects to try to reach it; each that can marks its address verified, and the node
  signs its record (swarm_app/peer/core/records.py) for that address.
Dials run the real hello handshake (messages.py), peer lists and HTTP pulls are answered by the target's
core. A node's `role` other than "honest" hands its outgoing traffic to `hostile` (hostile.py) first.
Tests use it through tests/peer/sim.py; benchmarks/swarm_sim.py builds scenarios on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swarm_app.kernel.swarms import DEFAULT_SWARM as SWARM
from swarm_app.kernel.tasks import regenerate, score
from swarm_app.peer.core.actions import Action, Admitted, Close, Dial, FetchPeers, HttpPull, Send
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.admission import Admission, AdmissionLimits
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import fitted_limits
from swarm_app.peer.core.messages import ClientHandshake, ServerHandshake, decode_frame, encode
from swarm_app.peer.core.pool import RolloutPool, SeenCache
from swarm_app.peer.core.protocol import NodeCore, ProtocolConfig
from swarm_app.peer.core.scores import PeerBook, ScorePolicy
from swarm_app.peer.core.sources import SourceLimits

START = 1_800_000_000.0
"""Simulated epoch seconds: rollouts' timestamps must look current to admission."""
PORT = 4747
POOL_ENTRIES = 1024
"""Rollouts a simulated node's pool holds (4,096 in the app): pull answers come from the last 120 s, at
most ~500 entries here, so no answer changes; what the cap cuts is the training draw's reserve, which
the simulator does not run, and the time a pull answer takes to scan the pool."""


@dataclasses.dataclass
class SimNode:
    index: int
    core: NodeCore
    addr: str
    ip: str
    reachable: bool = True
    online: bool = True
    role: str = "honest"
    """"honest", or a hostile mode of hostile.py ("attack", "eclipse")."""
    joined: float = START
    left: float | None = None
    side: int = 0
    """Its half during a partition."""
    delay_s: float = 0.005
    """One-way access latency: a message between two nodes takes the sum of theirs."""


class Observer:
    """What a measurement wants to hear about; every hook does nothing by default."""

    def admitted(self, node: SimNode, action: Admitted, now: float) -> None: ...

    def frame(self, sender: SimNode, receiver: SimNode, message: dict[str, Any], size: int) -> None: ...

    def connected(self, client: SimNode, server: SimNode, now: float) -> None: ...

    def listed(self, node: SimNode, entries: list[dict[str, Any]]) -> None: ...

    def dialing(self, node: SimNode, target: SimNode | None) -> None: ...


def seeded_identity(label: str) -> Identity:
    """A node key drawn from `label`: the same seed gives the same swarm, node ids included."""
    return Identity(Ed25519PrivateKey.from_private_bytes(hashlib.sha256(label.encode()).digest()))


def node_ip(index: int) -> str:
    """One /16 per node, as members at home on many providers: 20.<i % 250>.0.1, then 21.x.0.1, ... (up to
    58,750 nodes). Public addresses: a private network's (10/8, 192.168/16, ...) may be treated as one LAN by
    the peer core's rules. Hostile nodes are numbered among the honest, so they too hold a /16 each: the
    attacker's best case against the core's spread of dials over /16s (overlay.pick_dial)."""
    return f"{20 + index // 250}.{index % 250}.0.1"


class Network:
    def __init__(self, config: ProtocolConfig, seed: int = 0, *, regenerate_task: Callable = regenerate,
                 score_task: Callable = score, limits: AdmissionLimits = AdmissionLimits(),
                 sources: SourceLimits = SourceLimits(), tick_s: float = 0.1, loss: float = 0.0,
                 dial_timeout_s: float = 5.0, dialback_checks: int = 3) -> None:
        self.config, self.seed, self.tick_s, self.loss = config, seed, tick_s, loss
        self.dial_timeout_s, self.dialback_checks = dial_timeout_s, dialback_checks
        self._dialbacks: dict[int, tuple[int, int]] = {}
        """Node index -> (peers asked to dial it back, peers that reached it)."""
        self.limits = fitted_limits(limits, config)
        self.sources, self._regenerate, self._score = sources, regenerate_task, score_task
        self.now = START
        self.rng = random.Random(f"network:{seed}")
        self.nodes: list[SimNode] = []
        self.by_addr: dict[str, SimNode] = {}
        self.links: dict[tuple[int, int], tuple[int, int]] = {}
        """(node, conn) -> (peer node, peer conn), both directions."""
        self.inbound_ip: dict[tuple[int, int], str] = {}
        self.partitioned = False
        self.observer = Observer()
        self.hostile: Any = None
        """Set by hostile.py: rewrites what hostile nodes send (`outgoing`) and list (`peer_list`)."""
        self._queue: list[tuple[float, int, Callable, tuple]] = []
        self._ids = itertools.count(1)

    # --- nodes

    def add_node(self, *, reachable: bool = True, role: str = "honest", delay_s: float = 0.005,
                 bootstrap: tuple[str, ...] = (), identity: Identity | None = None) -> SimNode:
        """A new node, online from now, ticking from a random phase of its first tick interval."""
        index = len(self.nodes)
        identity = identity or seeded_identity(f"{self.seed}:{index}")
        rng = random.Random(f"{self.seed}:{index}")
        pool = RolloutPool(identity.node_id, POOL_ENTRIES, 64 << 20, self.limits.past_ms,
                           share=self.sources.pool_share, new_source_cap=self.sources.new_source_cap)
        admission = Admission(pool, SeenCache(65536, self.limits.past_ms), self.limits, self._regenerate,
                              self.sources, self._score)
        book = AddressBook(rng, per_network=self.sources.addresses_per_network)
        core = NodeCore(identity, admission, self.config, PeerBook(ScorePolicy(), rng), book, rng, SWARM)
        ip = node_ip(index)
        node = SimNode(index, core, f"{ip}:{PORT}", ip, reachable, True, role, self.now, delay_s=delay_s)
        core.mark_own_address(node.addr)
        for addr in bootstrap:
            core.add_address(addr, "bootstrap")
        self.nodes.append(node)
        self.by_addr[node.addr] = node
        self.schedule(self.rng.uniform(0, self.tick_s), self._tick, node)
        return node

    def leave(self, node: SimNode) -> None:
        """The node stops at once (a crash or a closed laptop): its peers see every link drop."""
        node.online, node.left = False, self.now
        for (i, conn) in [key for key in self.links if key[0] == node.index]:
            self._cut(i, conn)

    # --- the clock

    def schedule(self, delay_s: float, handler: Callable, *args: Any) -> None:
        heapq.heappush(self._queue, (self.now + delay_s, next(self._ids), handler, args))

    def run_until(self, end: float) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end:
            when, _, handler, args = heapq.heappop(queue)
            self.now = max(self.now, when)
            handler(*args)
        self.now = max(self.now, end)

    def _tick(self, node: SimNode) -> None:
        if not node.online:
            return
        self.execute(node.index, node.core.tick(self.now))
        self.schedule(self.tick_s, self._tick, node)

    # --- actions

    def execute(self, i: int, actions: list[Action]) -> None:
        node = self.nodes[i]
        if node.role != "honest" and self.hostile is not None:
            actions = self.hostile.outgoing(node, actions)
        for action in actions:
            if isinstance(action, Send):
                self.send(node, action.conn, action.message)
            elif isinstance(action, Close):
                self._close(i, action.conn, action.reason)
            elif isinstance(action, Dial):
                self._start_dial(node, action.addr)
            elif isinstance(action, FetchPeers):
                self._fetch_peers(node, action.addr)
            elif isinstance(action, HttpPull):
                self._http_pull(node, action)
            elif isinstance(action, Admitted):
                self.observer.admitted(node, action, self.now)

    def send(self, node: SimNode, conn: int, message: dict[str, Any]) -> None:
        """A frame from `node` on `conn`, delivered to the other end a latency later (unless lost)."""
        target = self.links.get((node.index, conn))
        if target is None:
            return
        text = encode(message)
        peer = self.nodes[target[0]]
        self.observer.frame(node, peer, message, len(text))
        if self.loss and self.rng.random() < self.loss:
            return
        self.schedule(node.delay_s + peer.delay_s, self._deliver, target, text)

    def _deliver(self, target: tuple[int, int], text: str) -> None:
        if target in self.links and self.nodes[target[0]].online:
            self.execute(target[0], self.nodes[target[0]].core.on_frame(target[1], text, self.now))

    def can_reach(self, src: SimNode, dst: SimNode | None) -> bool:
        """Whether `src` can open a connection to `dst` now (online, dialable, same side)."""
        return (dst is not None and dst.online and dst.reachable
                and not (self.partitioned and src.side != dst.side))

    def _start_dial(self, node: SimNode, addr: str) -> None:
        """A dial completes after three round trips (TCP, the websocket upgrade, the hello), or fails
        after the dial timeout when the address cannot be reached or the attempt is lost."""
        dst = self.by_addr.get(addr)
        self.observer.dialing(node, dst)
        if not self.can_reach(node, dst) or (self.loss and self.rng.random() < self.loss):
            self.schedule(self.dial_timeout_s, self._dial_failed, node, addr)
        else:
            self.schedule(3 * (node.delay_s + dst.delay_s), self._dial_done, node, addr)

    def _dial_failed(self, node: SimNode, addr: str) -> None:
        if node.online:
            self.execute(node.index, node.core.on_dial_failed(addr, self.now))

    def _dial_done(self, node: SimNode, addr: str) -> None:
        if node.online:
            self.dial(node.index, addr)

    def _fetch_peers(self, node: SimNode, addr: str) -> None:
        target = self.by_addr.get(addr)
        if self.can_reach(node, target):
            listed = self.peer_list_of(target)
            self.schedule(2 * (node.delay_s + target.delay_s), self._peers_arrived, node, listed, addr)

    def peer_list_of(self, node: SimNode) -> dict[str, list[Any]]:
        """The node's GET /peers answer: signed records, and the unsigned entries older nodes read."""
        if node.role != "honest" and self.hostile is not None:
            return self.hostile.peer_list(node)
        answer = node.core.peer_list(self.now)
        self.observer.listed(node, answer["peers"])
        return answer

    def _peers_arrived(self, node: SimNode, answer: dict[str, list[Any]], addr: str) -> None:
        if node.online:
            node.core.on_peer_list(answer, self.now, addr)

    def _http_pull(self, node: SimNode, action: HttpPull) -> None:
        target = self.by_addr.get(action.addr)
        if self.can_reach(node, target):
            items = target.core.serve_http_sample(action.have, action.max, self.now, action.heard, action.held)
            self.execute(node.index, node.core.on_http_sample(action.addr, items, self.now))

    # --- connections

    def dial(self, i: int, addr: str) -> bool:
        """Connect node i to `addr` now, with the real hello; False when refused or unreachable."""
        src, dst = self.nodes[i], self.by_addr.get(addr)
        if not self.can_reach(src, dst):
            self.execute(i, src.core.on_dial_failed(addr, self.now))
            return False
        admitted, evictions = dst.core.admit_inbound(src.ip, self.now)
        if not admitted:
            self.execute(i, src.core.on_dial_failed(addr, self.now, busy=True))
            return False
        self.execute(dst.index, evictions)
        client = ClientHandshake(src.core.identity, src.addr, randbytes=self.rng.randbytes)
        server = ServerHandshake(dst.core.identity, dst.addr, randbytes=self.rng.randbytes)
        reply = decode_frame(encode(server.on_client_hello(decode_frame(encode(client.start())))))
        hello_c = server.on_client_proof(decode_frame(encode(client.on_server_hello(reply))))
        out_conn, in_conn = next(self._ids), next(self._ids)
        refusal, actions_out = src.core.on_connected(out_conn, client.peer.node, "out", addr, dst.ip,
                                                     client.peer.listen, self.now)
        if refusal:
            dst.core.release_inbound(src.ip)
            return False
        refusal, actions_in = dst.core.on_connected(in_conn, hello_c.node, "in", None, src.ip, hello_c.listen, self.now)
        if refusal:
            dst.core.release_inbound(src.ip)
            src.core.on_disconnected(out_conn, self.now)
            return False
        self.inbound_ip[(dst.index, in_conn)] = src.ip
        self.links[(i, out_conn)] = (dst.index, in_conn)
        self.links[(dst.index, in_conn)] = (i, out_conn)
        self.observer.connected(src, dst, self.now)
        self._dial_back(src, dst)
        self.execute(i, actions_out)
        self.execute(dst.index, actions_in)
        return True

    def _close(self, i: int, conn: int, reason: str) -> None:
        """Node i closes `conn`: it forgets it now; the peer reads the bye (if any) and the close a
        latency later."""
        other = self.links.pop((i, conn), None)
        self._drop(i, conn)
        if other is None:
            return
        self.links.pop(other, None)
        peer = self.nodes[other[0]]
        self.schedule(self.nodes[i].delay_s + peer.delay_s, self._closed_by_peer, other, reason)

    def _closed_by_peer(self, end: tuple[int, int], reason: str) -> None:
        j, conn = end
        if reason and self.nodes[j].online:
            self.nodes[j].core.on_frame(conn, encode({"t": "bye", "reason": reason}), self.now)
        self._drop(j, conn)

    def _cut(self, i: int, conn: int) -> None:
        """A link dies without a word (a crash, a partition): both ends see it at once."""
        other = self.links.pop((i, conn), None)
        self._drop(i, conn)
        if other is not None:
            self.links.pop(other, None)
            self._drop(*other)

    def disconnect(self, i: int, conn: int) -> None:
        self._cut(i, conn)

    def _drop(self, j: int, conn: int) -> None:
        self.nodes[j].core.on_disconnected(conn, self.now)
        ip = self.inbound_ip.pop((j, conn), None)
        if ip is not None:
            self.nodes[j].core.release_inbound(ip)

    def _dial_back(self, client: SimNode, helper: SimNode) -> None:
        """What the shells do with dial-back (POST /dialback, GET /probe): the first `dialback_checks`
        peers a node connects to try to reach it at its address; each that can marks the address
        verified and tells the node where it reached it (the address of its signed record), and after two
        confirmations the node knows it is reachable (after `dialback_checks` failures, that it is not)."""
        asked, reached = self._dialbacks.get(client.index, (0, 0))
        if asked >= self.dialback_checks:
            return
        asked += 1
        if self.can_reach(helper, client):
            reached += 1
            helper.core.verify_address(client.addr, client.core.node_id)
            client.core.set_dialable([client.addr])
        self._dialbacks[client.index] = (asked, reached)
        if reached >= 2:
            client.core.set_reachable(True)
        elif asked - reached >= self.dialback_checks:
            client.core.set_reachable(False)

    # --- partitions

    def partition(self, sides: dict[int, int]) -> None:
        """Split the nodes (index -> side); links between the sides are cut."""
        for node in self.nodes:
            node.side = sides.get(node.index, 0)
        self.partitioned = True
        for (i, conn), (j, _) in list(self.links.items()):
            if self.nodes[i].side != self.nodes[j].side and (i, conn) in self.links:
                self._cut(i, conn)

    def heal(self) -> None:
        self.partitioned = False
