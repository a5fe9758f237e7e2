"""`PeerNode`: the RSP/1 node on one asyncio loop, and the trainer's `RolloutExchange`.

It wires the sans-IO core (protocol.NodeCore) to aiohttp: runs the server, reads websockets, runs mDNS,
the DNS seeds (peer/io/dns_seeds.py) and the peer table, and carries out the core's actions, the outbound
ones (send queues, dials, peer-list fetches, HTTP pulls) through peer/io/outbound.py. `publish`, `sample`
and `record_used` are safe to call from the training thread and never block or raise: work crosses to the
loop with call_soon_threadsafe, and the pool has its own lock. It makes no protocol decision of its own.
It also runs the dial-back check (peer/io/reachability.py), whose verdict goes to `NodeCore.set_reachable`
and the addresses it reached this node at to `NodeCore.set_dialable` (what its signed record names),
and keeps the refusals of hellos from other swarms and older versions (`refusals`) for the log and views.
It reads the core only through `NodeCore.view` (core/view.py); whom to ask for a dial-back is the core's
choice too (`NodeCore.dialback_helpers`).

Constructor (what the session calls):
    PeerNode(config, identity, *, peer_table_path=None, clock=time.time, rng=None, regenerate_task=regenerate)
    PeerNode.from_config(config, identity=None, collectors=())  # identity from the keyring / key file,
                                                                # table in the data dir
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Coroutine

import aiohttp
from aiohttp import web

from swarm_app.kernel.errors import SwarmError
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import Task, TaskRef, regenerate
from swarm_app.net.gate import ConnectionGate, GatedSite, descriptor_budget, gated_runner, soft_descriptor_limit
from swarm_app.peer.core.actions import Action, Admitted, Close, Dial, FetchPeers, HttpPull, Send
from swarm_app.peer.core.addressbook import AddressBook, format_address, parse_address
from swarm_app.peer.core.admission import Admission
from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.core.identity import Identity, IdentityStore
from swarm_app.peer.core.limits import fitted_limits
from swarm_app.peer.core.messages import Hello
from swarm_app.peer.core.pool import PoolEntry, RolloutPool, SeenCache
from swarm_app.peer.core.protocol import NodeCore
from swarm_app.peer.core.scores import PeerBook
from swarm_app.peer.core.stats import NodeStats
from swarm_app.peer.io import client, dht, discovery, dns_seeds, server, upnp
from swarm_app.peer.io.metrics import NodeMetrics
from swarm_app.peer.io.outbound import Dialer, SendQueues
from swarm_app.peer.io.reachability import DialBack

log = logging.getLogger(__name__)

TABLE_SAVE_S = 300.0
REFUSAL_KINDS = 32
"""Distinct refusal reasons counted (each swarm name is one): hellos naming random swarms cannot grow memory."""

Listener = Callable[[PoolEntry, bool], None]


class PeerNode:
    """One swarm node. Implements `swarm_app.kernel.rollouts.RolloutExchange`."""

    def __init__(self, config: PeerConfig, identity: Identity, *, peer_table_path: Path | None = None,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None,
                 regenerate_task: Callable[[TaskRef], Task] = regenerate, collectors: tuple = ()) -> None:
        """`collectors`: more Prometheus collectors for this node's /metrics (the session's training figures)."""
        self.config, self.identity, self.clock = config, identity, clock
        self.rng = rng or random.Random()
        self.peer_table_path = peer_table_path
        self.pool = RolloutPool(identity.node_id, config.pool_max_entries, config.pool_max_bytes, config.limits.past_ms,
                                share=config.sources.pool_share, new_source_cap=config.sources.new_source_cap,
                                networks=config.sources.networks)
        admission = Admission(self.pool, SeenCache(config.seen_capacity, config.limits.past_ms),
                              fitted_limits(config.limits, config.protocol), regenerate_task, config.sources)
        addresses = AddressBook(self.rng, backoff_base_s=1.0, backoff_max_s=300.0,
                                per_network=config.sources.addresses_per_network, networks=config.sources.networks,
                                lan_addresses=config.sources.lan_addresses)
        self.core = NodeCore(identity, admission, config.protocol, PeerBook(config.scores, self.rng),
                             addresses, self.rng, config.swarm)
        self.gate = ConnectionGate(config.connections_per_ip,
                                   min(config.max_connections, descriptor_budget(soft_descriptor_limit())))
        """Caps on open server connections (all HTTP, websockets included), shared by both servers."""
        self.metrics = NodeMetrics(self.core, self.gate, collectors)
        self.address: str | None = None
        """HOST:PORT the server is bound to (the real port when the config asked for port 0)."""
        self.metrics_address: str | None = None
        """HOST:PORT of the separate /metrics server, when `metrics_listen` is set."""
        self.stopping = False
        self._sample_rng = random.Random(self.rng.random())
        self._sample_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.send_queues = SendQueues(self.core, config.request_timeout_s)
        """A send queue and writer per established websocket."""
        self.dialer = Dialer(self, self._execute)
        self._tasks: set[asyncio.Task] = set()
        self._next_conn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runners: list[web.AppRunner] = []
        self._session: aiohttp.ClientSession | None = None
        self._mdns: discovery.MdnsDiscovery | None = None
        self.dht: dht.DhtDiscovery | None = None
        """The swarm's rendezvous on the BitTorrent DHT, while it runs (config.dht; peer/io/dht.py)."""
        self.dns_seeds: dns_seeds.DnsSeeds | None = None
        """The DNS seeds' resolver, while the node runs with some (config.dns_seeds; peer/io/dns_seeds.py)."""
        self.mapping: upnp.PortMapping | None = None
        """The router's port mapping, when UPnP got one."""
        self.upnp_state = ""
        """"" (not tried), "missing", "none" or "mapped" (NodeStats.upnp)."""
        self.refusals: Counter[str] = Counter()
        """Hellos refused either way, by reason ("swarm 'x' != 'easy'", an older swarm-app)."""
        verdict = (lambda status: None) if config.local_only else self.core.set_reachable
        dialable = (lambda addrs: None) if config.local_only else self.core.set_dialable
        self.dialback = DialBack(identity, config.reachability, config.dialback, random.Random(self.rng.random()),
                                 clock, verdict, self._dialed_back, dialable, config.sources.networks)
        for addr in config.bootstrap:
            self.core.add_address(addr, "bootstrap")

    @classmethod
    def from_config(cls, config: PeerConfig, identity: Identity | None = None, collectors: tuple = ()) -> "PeerNode":
        """The node of this user: identity from its store (unless given), peer table in the data dir
        (if enabled). Two nodes in one process need two identities: same key, same node id, and they
        refuse each other as "self"."""
        if identity is None:
            loaded = IdentityStore(name=config.identity_name).load_or_create()
            log.info("node id %s (key in %s)", loaded.identity.node_id, loaded.store)
            identity = loaded.identity
        table = user_dirs().data / discovery.PEER_TABLE_NAME if config.peer_table else None
        return cls(config, identity, peer_table_path=table, collectors=collectors)

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """The shared client session (None until the node runs): dials, peer exchange, dial-backs."""
        return self._session

    @property
    def public_port(self) -> int | None:
        """The port peers should dial: `public_port` where set (a forwarded port), else the bound one."""
        if self.address is None:
            return None
        return self.config.public_port or parse_address(self.address)[1]

    @property
    def announced(self) -> str | None:
        """The `listen` of our hello: the bound host with the port peers should dial."""
        if self.address is None:
            return None
        return format_address(parse_address(self.address)[0], self.public_port or 0)

    def refused(self, reason: str, where: str) -> None:
        """A hello refused either way (another swarm, an older version): counted, and logged the first time
        each reason is seen (after that at debug level: a misconfigured neighbour retries every few minutes)."""
        if reason not in self.refusals and len(self.refusals) >= REFUSAL_KINDS:
            reason = "other refusals"
        self.refusals[reason] += 1
        first = self.refusals[reason] == 1
        (log.warning if first else log.debug)("not connected to %s: %s", where, reason)

    # --- lifecycle

    async def start(self) -> None:
        """Bind the server and start discovery. Raises SwarmError only when the listen address is unusable."""
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        host, port = parse_address(self.config.listen)
        if self.peer_table_path is not None:
            self.core.load_peer_table(discovery.read_peer_table(self.peer_table_path))
        runner = await self._serve_app(server.create_app(self), host, port, "--listen")
        bound_port = runner.addresses[0][1]
        self.address = format_address(host, bound_port)
        for own_host in {host, "127.0.0.1", "localhost", "0.0.0.0"}:
            self.core.mark_own_address(format_address(own_host, bound_port))
        if self.config.local_only:  # every node runs on this machine: the bound address is where they dial it
            self.core.set_dialable([self.address])
        if self.config.metrics_listen:
            metrics_host, metrics_port = parse_address(self.config.metrics_listen)
            metrics = await self._serve_app(server.metrics_app(self), metrics_host, metrics_port, "--metrics-listen")
            self.metrics_address = format_address(metrics_host, metrics.addresses[0][1])
        if self.config.mdns:
            self._mdns = discovery.MdnsDiscovery(self.node_id, host, bound_port, self._found_on_lan)
            if not await self._mdns.start():
                self._mdns = None
        if self.config.dht is not None:
            self.dht = dht.for_node(self)
            if not await self.dht.start():
                self.dht = None
        self._ready.set()
        log.info("peer node %s listening on %s", self.node_id[:12], self.address)

    async def _serve_app(self, app: web.Application, host: str, port: int, flag: str) -> web.AppRunner:
        runner = gated_runner(app, self.gate, self.config.header_timeout_s, self._count_malformed)
        await runner.setup()
        self._runners.append(runner)
        try:
            await GatedSite(runner, host, port, self.gate).start()
        except OSError as exc:
            await self.stop()
            raise SwarmError(f"cannot listen on {format_address(host, port)}: {exc.strerror or exc}; "
                             f"choose another address or port with {flag}", title="Network") from None
        return runner

    def _count_malformed(self) -> None:
        self.core.count("http_malformed")

    async def background(self, app: web.Application) -> AsyncIterator[None]:
        """cleanup_ctx of the server app: the shared ClientSession and the tick loop live and die with it."""
        timeout = aiohttp.ClientTimeout(total=None, connect=self.config.request_timeout_s,
                                        sock_connect=self.config.request_timeout_s)
        local = (self.config.source_ip, 0) if self.config.source_ip else None
        self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0, local_addr=local))
        ticker = asyncio.create_task(self._tick_loop(), name=f"rsp-tick-{self.node_id[:8]}")
        checker = asyncio.create_task(self._check_reachability(), name=f"rsp-dialback-{self.node_id[:8]}")
        own = [ticker, checker]
        if self.config.dns_seeds:
            self.dns_seeds = dns_seeds.DnsSeeds(self.config.dns_seeds, self.add_peer, self.config.dns_every_s,
                                                self.config.dns_timeout_s, random.Random(self.rng.random()))
            own.append(asyncio.create_task(self.dns_seeds.run(), name=f"rsp-dns-{self.node_id[:8]}"))
        try:
            yield
        finally:
            for task in own:
                task.cancel()
            pending = [*own, *self._tasks]
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._session.close()

    async def stop(self) -> None:
        """Say bye to every peer, close everything, save the peer table. Safe to call twice."""
        if self.stopping:
            return
        self.stopping = True
        await self.send_queues.close_all("shutdown", wait_s=1.0)
        if self._mdns is not None:
            await self._mdns.stop()
        if self.dht is not None:
            await self.dht.stop()
        if self.mapping is not None:
            await upnp.unmap(self.mapping)
            self.mapping = None
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self.peer_table_path is not None:
            discovery.save_peer_table(self.peer_table_path, self.core.view.peer_table())

    async def _tick_loop(self) -> None:
        await self._ready.wait()  # no dial before the server is bound: a hello must announce our port
        last_save = self.clock()
        while True:
            now = self.clock()
            try:
                self._execute(self.core.tick(now))
            except Exception:  # a bug in one tick must not end networking for the rest of the run
                log.exception("peer tick failed; continuing")
            if self.peer_table_path is not None and now - last_save > TABLE_SAVE_S:
                last_save = now
                discovery.save_peer_table(self.peer_table_path, self.core.view.peer_table())
            await asyncio.sleep(self.config.tick_s)

    async def _check_reachability(self) -> None:
        """Map the port on the router first (when asked to), so that the dial-backs test the mapping too;
        then keep asking peers, and renew the mapping at half its lease."""
        await self._ready.wait()
        assert self._session is not None
        if self._wants_upnp():
            await self._map_port()
        checking = asyncio.create_task(self.dialback.run(self._session, self._dialback_helpers, lambda: self.public_port,
                                                         self.core.inbound_neighbours))
        try:
            while self.mapping is not None:
                await asyncio.sleep(upnp.LEASE_S / 2)
                await self._map_port()
            await checking
        finally:
            checking.cancel()

    def _wants_upnp(self) -> bool:
        """UPnP is asked for, and this node is bound where a router could forward to (not loopback)."""
        if not self.config.upnp or self.address is None:
            return False
        return bool(self.config.upnp_gateway) or not _is_loopback(parse_address(self.address)[0])

    async def _map_port(self) -> None:
        bound = parse_address(self.address or "")[1]
        self.mapping = await upnp.map_port(bound, self.config.upnp_gateway)
        self.upnp_state = "mapped" if self.mapping else ("none" if upnp.installed() else "missing")

    def _dialed_back(self, addr: str, node_id: str) -> None:
        """A dial-back this node made for `node_id` reached it at `addr`: the core may now list, dial and save
        that address (only verified addresses spread)."""
        self.core.verify_address(addr, node_id)

    def _dialback_helpers(self) -> list[str]:
        """Whom to ask for a dial-back: the core's choice, given those this node dialed back for their own check."""
        return self.core.dialback_helpers(list(self.dialback.reached))

    # --- RolloutExchange (training thread)

    def publish(self, rollout: Rollout) -> None:
        """Share one own rollout group: signed with this node's key (author filled in), pushed, served."""
        loop = self._loop
        if loop is None or self.stopping:
            log.debug("rollout not shared: the peer node is not running")
            return
        try:
            loop.call_soon_threadsafe(self._publish_now, rollout)
        except RuntimeError:  # the loop closed between the check and the call
            log.debug("rollout not shared: the event loop is closed")

    def sample(self, count: int) -> list[Rollout]:
        """Up to `count` admitted peer rollouts, fresh, uniform with a per-author cap, each given once."""
        with self._sample_lock:
            return self.pool.sample(count, int(self.clock() * 1000), self._sample_rng,
                                    self.config.sample_per_author_cap)

    def record_used(self, rollout: Rollout, mean_advantage: float) -> None:
        """The trainer used this peer rollout; `mean_advantage` is its group's figure for the views."""
        loop = self._loop
        if loop is None or not rollout.author or rollout.author == self.node_id:
            return
        try:
            loop.call_soon_threadsafe(self.core.record_used, rollout.author, float(mean_advantage), self.clock())
        except RuntimeError:
            log.debug("usage not recorded: the event loop is closed")

    def connected(self) -> bool:
        """Whether any peer connection is open (read from the training thread: a snapshot of a dict's size)."""
        return self.core.view.connected

    def _publish_now(self, rollout: Rollout) -> None:
        self._execute(self.core.publish(rollout, self.clock()))

    # --- views and control (event loop thread)

    def stats(self) -> NodeStats:
        """A snapshot for the views. Call it on the event loop thread."""
        state = self.dialback.state
        return dataclasses.replace(self.core.view.stats(self.address, self.clock()), swarm=self.config.swarm,
                                   reachable=self.core.view.reachable, lan_only=state.lan_only,
                                   public_port=0 if self.config.local_only else self.public_port or 0,
                                   witnesses=len(state.confirmed), unreached=len(state.failed),
                                   witnesses_needed=0 if self.config.local_only else state.policy.confirmations,
                                   refusals=dict(self.refusals), upnp=self.upnp_state)

    def add_listener(self, listener: Listener) -> None:
        """`listener(entry, pushed)` runs on the loop for every admitted peer rollout."""
        self._listeners.append(listener)

    def add_peer(self, addr: str) -> None:
        """An address the user named (a test's, a DNS seed's record): dialed as a bootstrap address."""
        self.core.add_address(addr, "bootstrap")

    def reserve_inbound(self, ip: str) -> bool:
        """An inbound slot for a websocket from `ip` (the core may close an idle peer to make room)."""
        admitted, actions = self.core.admit_inbound(ip, self.clock())
        self._execute(actions)
        return admitted

    def set_sharing(self, share: bool) -> None:
        self.core.set_sharing(share)

    def _found_on_lan(self, addr: str, node_id: str | None) -> None:
        self.core.add_address(addr, "mdns", node_id)

    def _found_on_dht(self, addr: str, checked: bool = True) -> None:
        """An address announced under one of the swarm's keys: unverified (the core's unverified-dial budget);
        one from the unchecked key is dialed only when nothing else is due."""
        self.core.add_address(addr, "dht" if checked else "dht-unchecked")

    def _found_in_record(self, hubs: list[str]) -> None:
        """The hubs of the swarm's record, signed by the key the user named (`--swarm-key`): dialed as bootstrap
        addresses, outside the unverified-dial budget (core/swarm_record.py)."""
        for addr in hubs:
            self.add_peer(addr)

    # --- actions

    def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.send_queues.send(action.conn, action.message)
            elif isinstance(action, Close):
                self.send_queues.close(action.conn, action.reason)
            elif isinstance(action, Admitted):
                self._notify(action)
            elif isinstance(action, Dial):
                self._spawn(self.dialer.dial(action.addr))
            elif isinstance(action, FetchPeers):
                self._spawn(self.dialer.fetch_peers(action.addr))
            elif isinstance(action, HttpPull):
                self._spawn(self.dialer.http_pull(action))

    def _spawn(self, coro: Coroutine) -> None:
        if self.stopping or self._session is None:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notify(self, action: Admitted) -> None:
        for listener in self._listeners:
            try:
                listener(action.entry, action.pushed)
            except Exception:  # a view's bug must not break admission
                log.exception("rollout listener failed")

    # --- connections

    async def serve(self, ws: Any, hello: Hello, direction: str, dialed: str | None, ip: str,
                    rtt_s: float | None = None) -> None:
        """Run one established connection until it closes (both directions use this); `rtt_s` is the
        hello's round trip, kept as the peer's latency for the views."""
        self._next_conn += 1
        conn = self._next_conn
        refusal, actions = self.core.on_connected(conn, hello.node, direction, dialed, ip, hello.listen, self.clock())
        if refusal is not None:
            if refusal == "self" and dialed:
                log.info("%s answered with this node's own id: our own address, or another node using "
                         "the same key (an identity imported on two machines?)", dialed)
            await client.bye_and_close(ws, refusal, self.config.request_timeout_s)
            return
        if rtt_s is not None:
            self.core.on_latency(hello.node, rtt_s, self.clock())
        self.send_queues.open(conn, ws)
        self._execute(actions)
        log.info("peer %s connected (%s, %s)", hello.node[:12], direction, dialed or ip)
        try:
            async for msg in ws:  # ends on close; an oversized frame arrives as one ERROR message first
                self._on_message(conn, msg)
        finally:
            writer = self.send_queues.remove(conn)
            self.core.on_disconnected(conn, self.clock())
            await asyncio.gather(writer, return_exceptions=True)
            log.info("peer %s disconnected", hello.node[:12])

    def _on_message(self, conn: int, msg: aiohttp.WSMessage) -> None:
        now = self.clock()
        try:
            if msg.type == aiohttp.WSMsgType.TEXT:
                self.core.count("ws_bytes_in", len(msg.data.encode("utf-8", "surrogatepass")))
                self._execute(self.core.on_frame(conn, msg.data, now))
            elif msg.type == aiohttp.WSMsgType.BINARY:
                self._execute(self.core.on_frame_error(conn, "bad_message", now))
            elif msg.type == aiohttp.WSMsgType.ERROR:
                too_big = getattr(msg.data, "code", None) == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
                self._execute(self.core.on_frame_error(conn, "frame_too_large" if too_big else "bad_message", now))
        except Exception:  # the core must not raise on peer input; if it does, drop this peer, not the node
            log.exception("handling a message from connection %d failed; closing it", conn)
            self.send_queues.close(conn, "internal error")



def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
