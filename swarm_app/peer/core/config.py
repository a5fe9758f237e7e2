"""`PeerConfig`: every knob of a peer node in one frozen dataclass, with the defaults docs/protocol.md states.

The session builds it from the [peer] settings (`session/peering.py peer_config`); tests and the demo build it
directly with faster intervals. This module only holds values and parses addresses; it starts nothing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.swarms import DEFAULT_SWARM, DHT_ROUTERS
from swarm_app.peer import DEFAULT_LISTEN, DEFAULT_PORT
from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.admission import AdmissionLimits
from swarm_app.peer.core.protocol import ProtocolConfig
from swarm_app.peer.core.reachability import DialbackLimits, ReachabilityPolicy
from swarm_app.peer.core.scores import ScorePolicy
from swarm_app.peer.core.sources import LAN, SourceLimits

LOOPBACK_TRUST = SourceLimits(push_per_address=(256.0, 4.0), push_per_network=(256.0, 4.0),
                              standing_groups=1, standing_age_s=1e-9, new_source_cap=1 << 20,
                              addresses_per_network=1 << 20, pool_share=1.0)
"""Source budgets for a swarm of nodes that all run on this machine (`swarm demo`, tests): every node
connects from 127.0.0.1, so the Sybil budgets per address would count them as one source."""


@dataclass(frozen=True)
class DhtConfig:
    """The node's part in the BitTorrent Mainline DHT (peer/io/dht.py): finding its swarm by name."""

    listen: str = ""
    """HOST:PORT of the DHT's UDP socket. Empty: the peer listen host, any free port."""
    nodes: tuple[str, ...] = ()
    """DHT nodes to seed the routing table with (a private DHT: tests)."""
    routers: tuple[str, ...] = DHT_ROUTERS
    """Routers that answer a newcomer's first queries (they never enter routing tables)."""
    state_path: Path | None = None
    """Where the routing table's nodes are saved between runs (None: not saved)."""
    first_s: float = 10.0
    """The first lookup and announce wait for the DHT's bootstrap, at most this long."""
    lookup_s: float = 300.0
    """Seconds between lookups (jittered 20%)."""
    hungry_s: float = 15.0
    """... while the node holds fewer than `hungry_below` links: this, doubling while lookups bring nothing
    new, up to `lookup_s`."""
    hungry_below: int = 6
    announce_s: float = 600.0
    """Seconds between announces (DHT nodes drop an announce after about 30 minutes)."""
    early_announce_s: float = 30.0
    """... the first three this far apart: an announce while the routing table fills can be lost."""
    record_key: bytes | None = None
    """The swarm creator's public key (`--swarm-key`): the node reads the swarm's signed record of hubs at every
    lookup (core/swarm_record.py). None: the swarm is known by its name alone."""
    record_signer: Any = None
    """A hub's swarm_record.Signer (`swarm hub --sign-record`): it publishes `record_hubs` under that key."""
    record_hubs: tuple[str, ...] = ()
    record_every_s: float = 1800.0
    """Seconds between puts of the record (DHT nodes keep an item about two hours)."""


@dataclass(frozen=True)
class DnsSeed:
    """A DNS name whose SRV and TXT records list a community's bootstrap addresses (`--bootstrap dns:NAME`,
    resolved by peer/io/dns_seeds.py)."""

    name: str
    server: str | None = None
    """IP:PORT of the DNS server to ask (`dns:NAME@IP:PORT`: a community's own server). None: the system's."""

    def __str__(self) -> str:
        return DNS_PREFIX + self.name + (f"@{self.server}" if self.server else "")


@dataclass(frozen=True)
class PeerConfig:
    listen: str = DEFAULT_LISTEN
    """HOST:PORT the RSP server binds (port 0: any free port)."""
    swarm: str = DEFAULT_SWARM
    """The swarm's name, sent in the hello: nodes of other swarms are refused (kernel/swarms.py)."""
    bootstrap: tuple[str, ...] = ()
    """HOST:PORT of peers to dial first (`--bootstrap`, `--peer`, repeatable)."""
    dns_seeds: tuple[DnsSeed, ...] = ()
    """DNS names whose records list more addresses to dial first (`--bootstrap dns:NAME`)."""
    dns_every_s: float = 600.0
    """The seeds are resolved at start and then this often (jittered 20%): a community may change its list."""
    dns_timeout_s: float = 5.0
    """One resolution of a seed gives up after this long (every server and retry included)."""
    source_ip: str | None = None
    """The IP outgoing connections leave from. None: the one the OS picks. Tests on distinct 127.x addresses
    set it to the listen host, so that each node is seen at its own address."""
    public_port: int | None = None
    """The port peers should dial, when it differs from the bound one (a router forwarding another port).
    None: the bound port."""
    upnp: bool = False
    """Ask the home router to forward the listen port (UPnP-IGD; peer/io/upnp.py). Off unless the [peer]
    settings turn it on (a `swarm run` node): tests and the demo never search the LAN."""
    upnp_gateway: str | None = None
    """The gateway's description URL, instead of an SSDP search (tests' fake gateway)."""
    local_only: bool = False
    """Every node of the swarm runs on this machine (`swarm demo`): dial-backs still verify addresses for
    peer exchange, and the node's signed record names its bound address, but no verdict about being
    reachable from outside is drawn or shown."""
    reachability: ReachabilityPolicy = field(default_factory=ReachabilityPolicy)
    """How dial-back decides whether peers can reach this node (core/reachability.py)."""
    dialback: DialbackLimits = field(default_factory=DialbackLimits)
    """Dial-backs this node makes for others: per requester address, in total, at once."""
    mdns: bool = True
    """Announce and find nodes on the LAN with mDNS."""
    dht: DhtConfig | None = None
    """Find the swarm by name on the BitTorrent DHT (None: not at all; tests and the demo leave it off)."""
    metrics_listen: str | None = None
    """HOST:PORT of a separate /metrics server. None: /metrics on the RSP server, loopback clients only."""
    identity_name: str = ""
    """Which of this machine's node keys to use ("": the one key; "gpu-1": the node of GPU 1)."""
    peer_table: bool = True
    """Save known-good peer addresses between runs (in the user data dir unless a path is given)."""
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    scores: ScorePolicy = field(default_factory=ScorePolicy)
    sources: SourceLimits = field(default_factory=lambda: SourceLimits(networks=LAN))
    """New authors a source address and network may introduce, and how standing is earned (sources.py). By
    default with the LAN rule: a private address counts as a network of its own (docs/protocol.md)."""
    sample_per_author_cap: int | None = None
    """Most rollouts of one author in one `sample` call. None: ceil(count / authors available)."""
    pool_max_entries: int = 4096
    pool_max_bytes: int = 64 * 1024 * 1024
    seen_capacity: int = 65536
    tick_s: float = 0.25
    """How often the core is asked what is due (dials, pulls, rotation)."""
    handshake_timeout_s: float = 10.0
    request_timeout_s: float = 5.0
    """Total time for one HTTP request to a peer, and for one websocket send."""
    heartbeat_s: float = 20.0
    """Websocket ping interval; a peer that misses a pong is dropped."""
    header_timeout_s: float = 5.0
    """Seconds an HTTP connection may take to send a complete request, and may stay idle between requests."""
    max_connections: int = 512
    """Open server connections (HTTP and websockets) at most; lowered to fit the descriptor limit (gate.py)."""
    max_connections_per_ip: int | None = None
    """Open server connections from one IP. None: the websocket cap per IP plus 8 for HTTP requests."""
    http_rate: float = 5.0
    """HTTP requests per second per client IP (GET /info, /peers, /sample)."""
    http_burst: float = 20.0

    @property
    def connections_per_ip(self) -> int:
        return self.max_connections_per_ip or self.protocol.max_inbound_per_ip + 8

    @property
    def share(self) -> bool:
        return self.protocol.share

    def with_protocol(self, **changes: Any) -> "PeerConfig":
        return dataclasses.replace(self, protocol=dataclasses.replace(self.protocol, **changes))


def check_address(text: str, flag: str) -> str:
    try:
        parse_address(text)
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}; write it as HOST:PORT, e.g. 192.168.1.20:{DEFAULT_PORT}") from None
    return text.strip()


LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(\.{LABEL})*\.?")
"""A DNS name (RFC 1123 labels)."""


def check_dial_address(text: str, what: str) -> str:
    """An address to dial (a bootstrap or peer): HOST:PORT with an IP or a DNS name and a port from 1 to
    65535; a UsageError in one line that says what is wrong and how to write it."""
    example = f"write it as HOST:PORT, e.g. 192.168.1.20:{DEFAULT_PORT} or node.example.org:{DEFAULT_PORT}"
    try:
        host, port = parse_address(text)
    except ValueError as exc:
        raise UsageError(f"{what} {text!r}: {exc}; {example}") from None
    if port == 0:
        raise UsageError(f"{what} {text!r}: port 0 cannot be dialed; {example}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not HOSTNAME.fullmatch(host):
            raise UsageError(f"{what} {text!r}: {host!r} is neither an IP address nor a host name; {example}") from None
    return format_address(host, port)


DNS_PREFIX = "dns:"
DNS_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
DNS_NAME = re.compile(rf"(?=.{{1,253}}$){DNS_LABEL}(\.{DNS_LABEL})*\.?")
"""A name to look records up under: RFC 1123 labels, plus the underscores of SRV names (_swarm._tcp)."""


def is_dns_seed(text: str) -> bool:
    """A bootstrap entry that names a DNS seed rather than a HOST:PORT."""
    return text.strip().startswith(DNS_PREFIX)


def check_dns_seed(text: str, what: str) -> DnsSeed:
    """A DNS seed entry, `dns:NAME` or `dns:NAME@IP:PORT` (the server to ask: an IP, since a name would need a
    resolver first); a UsageError in one line that says what is wrong and how to write it."""
    example = "write it as dns:NAME or dns:NAME@IP:PORT, e.g. dns:_swarm._tcp.example.org"
    name, at, server = text.strip()[len(DNS_PREFIX):].partition("@")
    if not DNS_NAME.fullmatch(name):
        raise UsageError(f"{what} {text!r}: {name!r} is not a DNS name; {example}")
    if not at:
        return DnsSeed(name)
    try:
        host, port = parse_address(server)
        ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"{what} {text!r}: the DNS server {server!r} is not IP:PORT; {example}") from None
    if port == 0:
        raise UsageError(f"{what} {text!r}: port 0 cannot be asked; {example}")
    return DnsSeed(name, format_address(host, port))


LOOPBACK_WITNESSES = ReachabilityPolicy(by_address=True)
"""Dial-back on loopback: every node lives in 127.0.0.0/8, so distinct addresses count as distinct witnesses."""
LOOPBACK_DIALBACKS = DialbackLimits(per_source=(256.0, 16.0), total=(256.0, 16.0), concurrent=32)
"""Dial-backs a loopback node makes for others: its fellow nodes all ask from 127.0.0.1, one address."""


def local_config(**protocol: Any) -> PeerConfig:
    """A loopback node without mDNS or peer table, for tests and the demo, trusting its fellow loopback
    nodes as distinct sources (LOOPBACK_TRUST) and as distinct dial-back witnesses; `protocol` overrides."""
    return PeerConfig(listen="127.0.0.1:0", mdns=False, peer_table=False, sources=LOOPBACK_TRUST,
                      reachability=LOOPBACK_WITNESSES, dialback=LOOPBACK_DIALBACKS).with_protocol(**protocol)
