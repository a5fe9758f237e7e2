"""Dial-back over HTTP: the routes a helper serves (POST /rsp/v1/dialback, GET /rsp/v1/probe) and the loop
that asks helpers whether this node can be reached.

The decisions are core/reachability.py's (which helper, what the answers add up to, the helper's rate
limits); this module carries the requests and hands the verdict to `NodeCore.set_reachable`. A helper
dials back only the IP it saw the request come from, at the port named, with a fresh nonce; the requester
believes a "reachable" only when its own probe endpoint saw the token it gave that helper. Every call has a
timeout; a failing helper is no evidence, never an error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import random
import socket
import time
from collections import OrderedDict
from typing import Callable

import aiohttp
from aiohttp import web

from swarm_app.net.gate import ConnectionGate, GatedSite, gated_runner
from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.identity import Identity, unb64url
from swarm_app.peer.core.reachability import (
    NONCE_BYTES,
    DialbackDoor,
    DialbackLimits,
    ProbeTokens,
    Reachability,
    ReachabilityPolicy,
    new_nonce,
    parse_request,
    probe_answer,
    probe_proves,
)
from swarm_app.peer.core.records import is_dial_address
from swarm_app.peer.core.sources import PUBLIC, Networks, is_private
from swarm_app.peer.io import client

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 4096
"""A probe's or a dial-back's answer is a few hundred bytes."""
REACHED_KEPT = 64
LOOP_S = 0.25
"""How often the loop looks for a helper to ask (the policy's ask_every_s spaces the requests): a node that
just connected asks within a quarter second, so that its address is verified and listed soon."""


class DialBack:
    """Both sides of dial-back for one node: `serve_dialback` and `serve_probe` answer others; `run` asks
    helpers."""

    def __init__(self, identity: Identity, policy: ReachabilityPolicy, limits: DialbackLimits,
                 rng: random.Random, clock: Callable[[], float], on_verdict: Callable[[bool | None], None],
                 on_verified: Callable[[str, str], None] = lambda addr, node: None,
                 on_dialable: Callable[[list[str]], None] = lambda addrs: None, networks: Networks = PUBLIC) -> None:
        """`on_verdict(status)`: this node's reachability after each answer. `on_verified(addr, node)`: a
        dial-back this node made for a requester reached `node` at `addr` (it may be advertised now).
        `on_dialable(addrs)`: after each answer, the addresses helpers reached this node at (its record's)."""
        self.identity, self.policy, self.clock = identity, policy, clock
        self.on_verdict, self.on_verified, self.on_dialable = on_verdict, on_verified, on_dialable
        self.state = Reachability(policy, rng, networks)
        self.door = DialbackDoor(limits)
        self.tokens = ProbeTokens()
        self.counters = {"asked": 0, "confirmed": 0, "failed": 0, "no_answer": 0, "served": 0, "probes": 0}
        self.reached: OrderedDict[str, str] = OrderedDict()
        """Addresses this node dialed back for their nodes (most recent last, at most REACHED_KEPT): they accept
        connections, so they can be asked in turn (a node whose peers all dialed in has no outbound one)."""

    # --- the helper's side

    async def serve_dialback(self, request: web.Request, session: aiohttp.ClientSession | None) -> web.Response:
        ip = request.remote or "?"
        if session is None or not self.door.admit(ip, self.clock()):
            return web.json_response({"error": "too many dial-back requests; try again later"}, status=429,
                                     headers={"Retry-After": "60"})
        try:  # the slot is given back however this ends (a body over client_max_size raises 413 here)
            try:
                wanted = parse_request(json.loads(await request.read()))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                return web.json_response({"error": f"bad dial-back request: {exc}"}, status=400)
            target = format_address(ip, wanted.port)
            reached, reason = await self._dial_back(session, target, wanted.node, wanted.token)
        finally:
            self.door.done()
        self.counters["served"] += 1
        log.debug("dial-back to %s for %s: %s", target, wanted.node[:12], reason or "reached")
        if reached:
            self.reached.pop(target, None)
            self.reached[target] = wanted.node
            while len(self.reached) > REACHED_KEPT:
                self.reached.popitem(last=False)
            self.on_verified(target, wanted.node)
        return web.json_response({"reachable": reached, "addr": target, "reason": reason})

    async def _dial_back(self, session: aiohttp.ClientSession, target: str, node: str, token: str) -> tuple[bool, str]:
        """GET the probe at `target` with our fresh nonce: (reached the node named, why not)."""
        nonce = new_nonce()
        url = f"{client.base_url(target)}/probe"
        try:
            answer = await client.get_json(session, url, self.policy.timeout_s / 2, {"token": token, "nonce": nonce},
                                           limit=MAX_ANSWER_BYTES)
        except client.PeerUnavailable as exc:
            return False, f"could not dial {target}: {exc}"
        if not probe_proves(answer, node, nonce):
            return False, f"{target} answered, but not as node {node[:12]} (another program on that port?)"
        return True, ""

    async def serve_probe(self, request: web.Request) -> web.Response:
        nonce = request.query.get("nonce", "")
        try:
            if len(unb64url(nonce)) != NONCE_BYTES:
                raise ValueError("length")
        except ValueError:
            return web.json_response({"error": f"nonce must be {NONCE_BYTES} bytes, b64url"}, status=400)
        self.counters["probes"] += 1
        self.tokens.seen(request.query.get("token", "")[:64])
        return web.json_response(probe_answer(self.identity, nonce))

    # --- the requester's side

    async def run(self, session: aiohttp.ClientSession, helpers: Callable[[], list[str]],
                  port: Callable[[], int | None], fallback: Callable[[], list[str]] = list) -> None:
        """Ask one helper at a time, spaced by the policy, until cancelled. `helpers()`: addresses of
        peers that accept connections (outbound neighbours, addresses that worked); `fallback()`: addresses
        asked only when no helper is left to ask (inbound neighbours, most of which may not accept
        connections); `port()`: the port peers should dial, None while there is none."""
        while True:
            listen_port = port()
            addr = (self.state.next_helper(self.clock(), _with_hosts(helpers()), _with_hosts(fallback()))
                    if listen_port else None)
            if addr is not None and listen_port is not None:
                await self.ask(session, addr, listen_port)
            await asyncio.sleep(min(LOOP_S, self.policy.ask_every_s))

    async def ask(self, session: aiohttp.ClientSession, helper: str, port: int) -> tuple[bool | None, str]:
        """One dial-back request to `helper`: (True: it reached us, False: it could not, None: no answer;
        why not, in words). The answer also goes to the state, whose verdict goes to `on_verdict`."""
        self.counters["asked"] += 1
        token = self.tokens.issue()
        body = {"node": self.identity.node_id, "port": port, "token": token}
        try:
            answer = await client.post_json(session, f"{client.base_url(helper)}/dialback", body, self.policy.timeout_s,
                                            limit=MAX_ANSWER_BYTES)
        except client.PeerUnavailable as exc:
            self.tokens.redeem(token)
            self.counters["no_answer"] += 1
            self.state.on_no_answer(helper, self.clock(), exc.busy)
            log.debug("dial-back request to %s: %s", helper, exc)
            return None, f"{helper} did not answer the dial-back request ({exc})"
        probed = self.tokens.redeem(token)  # our own probe endpoint saw the token: a "yes" is not taken on trust
        reached = probed and isinstance(answer, dict) and answer.get("reachable") is True
        self.counters["confirmed" if reached else "failed"] += 1
        before = self.state.status
        status = self.state.on_answer(await host_ip(helper), reached, self.clock(), _reached_at(answer, port) if reached else "")
        if status != before:
            _log_verdict(status, port, self.state)
        self.on_verdict(status)
        self.on_dialable(self.state.dialable())
        return reached, "" if reached else f"{helper} could not dial port {port} back"


def _reached_at(answer: dict, port: int) -> str:
    """The address a helper says it dialed this node back at: "IP:PORT" with the port asked for, else ""."""
    addr = answer.get("addr")
    if not isinstance(addr, str) or not is_dial_address(addr):
        return ""
    return addr if parse_address(addr)[1] == port else ""


def _with_hosts(addrs: list[str]) -> list[tuple[str, str]]:
    return [(addr, host) for addr in addrs if (host := _host(addr))]


async def host_ip(addr: str, timeout_s: float = 5.0) -> str:
    """The IP that `addr`'s host stands for: the host itself when it is an IP, else the first address it
    resolves to (a helper named `mypc.local` at 192.168.1.20 is on this network), else the name as it is."""
    host = _host(addr)
    try:
        ipaddress.ip_address(host.strip("[]"))
        return host
    except ValueError:
        pass
    try:
        async with asyncio.timeout(timeout_s):
            found = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return host
    return str(found[0][4][0]) if found else host


def _host(addr: str) -> str:
    try:
        return parse_address(addr)[0]
    except ValueError:
        return ""


def _log_verdict(status: bool | None, port: int, state: Reachability) -> None:
    if status and state.lan_only:
        log.info("reachable on this network: %d peers at private addresses dialed this node back on port %d "
                 "(whether peers on the internet can is not known)", len(state.confirmed), port)
    elif status:
        log.info("reachable from outside: %d peers on different networks dialed this node back on port %d",
                 len(state.confirmed), port)
    elif status is False:
        log.warning("not reachable from outside: %d peers could not dial port %d here. The node still works (it "
                    "dials out and trades rollouts over those links); to accept peers too, forward TCP port %d "
                    "on the router to this computer, or enable UPnP", len(state.failed), port, port)


async def check_once(listen: str, helpers: list[str], timeout_s: float = 10.0) -> dict:
    """`swarm doctor`'s one-shot check without a running node: serve GET /rsp/v1/probe on `listen` (with a
    throwaway key: nothing is written), ask each of `helpers` to dial it back, and count who reached it.
    Returns {"port", "asked", "confirmed", "confirmed_from_internet", "failed", "no_answer", "reasons"}
    (`confirmed_from_internet`: confirmations by helpers at public addresses, a host name by what it resolves
    to); OSError when `listen` cannot
    be bound."""
    never = len(helpers) + 1  # the report counts the answers; no verdict (and no verdict's log line) is drawn here
    policy = ReachabilityPolicy(timeout_s=timeout_s, confirmations=never, failures=never)
    dialback = DialBack(Identity.generate(), policy, DialbackLimits(), random.Random(), time.monotonic, lambda _: None)
    app = web.Application(client_max_size=MAX_ANSWER_BYTES)
    app.router.add_get(f"{client.PREFIX}/probe", dialback.serve_probe)
    gate = ConnectionGate(8, 64)  # a few helpers dial in once each
    runner = gated_runner(app, gate, 5.0, lambda: None)
    await runner.setup()
    try:
        host, port = parse_address(listen)
        await GatedSite(runner, host, port, gate).start()
        bound = runner.addresses[0][1]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            answers = await asyncio.gather(*(dialback.ask(session, helper, bound) for helper in helpers))
    finally:
        await runner.cleanup()
    outcomes = [outcome for outcome, _ in answers]
    ips = await asyncio.gather(*(host_ip(helper) for helper in helpers))
    from_internet = sum(1 for ip, outcome in zip(ips, outcomes) if outcome and not is_private(ip))
    return {"port": bound, "asked": len(helpers), "confirmed": outcomes.count(True),
            "confirmed_from_internet": from_internet, "failed": outcomes.count(False),
            "no_answer": outcomes.count(None), "reasons": [why for _, why in answers if why]}
