"""Where rollouts come from, and how much each source may introduce and weigh: the Sybil budgets.

A key costs nothing to make, so budgets per key alone buy nothing: here every budget is also kept per
source address and per network (/24 for IPv4, /48 for IPv6), the way GossipSub v1.1 scores IP colocation.
- `prefix_of(ip)`: the network a source address belongs to; `group_of(ip)`: its wider group (/16, /32), which
  dials are spread over (overlay.pick_dial).
- `is_private(ip)`: the address is in a private network (RFC 1918, link-local, ULA, loopback): the one
  predicate of the LAN rule. `Networks` groups addresses for every budget and cap that counts per network
  (address book, outbound spread, inbound slots, new authors, standing, the draw, dial-back witnesses):
  public addresses by /24 (/48); with `lan` on (a `swarm run` node), each private address on its own, so
  that the machines of one home, lab or classroom LAN are as many sources as they are machines. Only the
  socket's remote address is ever classified (a claimed address only names where to dial).
- `NewAuthorBudget`: how many authors never seen before one address and one network may introduce, in a
  burst and per minute. Pushed rollouts (unsolicited, always the sender's own) get a tight budget: 100
  fresh keys from one place introduce 2 authors per address and 4 per network, then one a minute. Pull
  answers (this node chose whom to ask; a relay passes on many honest authors) get a wider one.
- `Standing`: what an author has earned: a new author's groups weigh little in the external draw
  (`STANDING_FLOOR`) until groups of it were trained on with a reward spread here, over some minutes;
  offenses take it away at once. Slow to earn, quick to lose.
Sans-IO: time comes in as an argument; every table is bounded (least recently used out).
"""

from __future__ import annotations

import functools
import ipaddress
from collections import OrderedDict
from dataclasses import dataclass

from swarm_app.peer.core.ratelimit import BucketMap

STANDING_FLOOR = 0.1
"""Weight of a new author's groups in the external draw, against 1.0 for one with full standing."""


def _parsed(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`ip` (brackets allowed) as an address, an IPv4-mapped IPv6 one as its IPv4; None when unparsable."""
    try:
        address = ipaddress.ip_address(ip.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=16384)
def prefix_of(ip: str) -> str:
    """The source's network: its /24 (IPv4) or /48 (IPv6); anything unparsable stands for itself.
    Cached: it is asked for every admitted rollout and every dial, about a few thousand distinct
    addresses, and parsing one costs ~10 us."""
    return _network_of(ip, 24, 48)


@functools.lru_cache(maxsize=16384)
def group_of(ip: str) -> str:
    """The source's wider group: its /16 (IPv4) or /32 (IPv6), Bitcoin addrman's "netgroup": one operator's
    addresses (a rented block, a cloud region) mostly share one, the members of a swarm at home mostly do
    not; anything unparsable stands for itself."""
    return _network_of(ip, 16, 32)


def _network_of(ip: str, v4_bits: int, v6_bits: int) -> str:
    address = _parsed(ip)
    if address is None:
        return ip
    bits = v4_bits if address.version == 4 else v6_bits
    return str(ipaddress.ip_network(f"{address}/{bits}", strict=False))


LAN_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
    "169.254.0.0/16", "fe80::/10",  # link-local
    "fc00::/7",  # IPv6 unique local (ULA)
    "127.0.0.0/8", "::1/128"))  # loopback: nodes of one machine
"""Private networks: reachable only from the same site, so an address there is held by someone on it."""


@functools.lru_cache(maxsize=16384)
def is_private(ip: str) -> bool:
    """Whether `ip` is in a private network (LAN_NETWORKS); False for anything unparsable."""
    address = _parsed(ip)
    if address is None:
        return False
    return any(address in network for network in LAN_NETWORKS if network.version == address.version)


@dataclass(frozen=True)
class Networks:
    """How source addresses are grouped into networks for the budgets and caps that count per network."""

    lan: bool = False
    """Each private address (`is_private`) is a network of its own; public ones are grouped by /24 (/48).
    False: every address by its /24 (/48), as in the core's unit tests, where 10.x stands for any address."""

    def is_lan(self, ip: str) -> bool:
        """A private-network address that this grouping counts on its own."""
        return self.lan and is_private(ip)

    def of(self, ip: str) -> str:
        """The network `ip` counts under: the address itself on a LAN, else its /24 (/48)."""
        return ip.strip("[]") if self.is_lan(ip) else prefix_of(ip)

    def group(self, ip: str) -> str:
        """The wider group `ip` is drawn from when dialing: the address itself on a LAN, else its /16 (/32)."""
        return ip.strip("[]") if self.is_lan(ip) else group_of(ip)


PUBLIC = Networks()
"""Every address by its /24 (/48): the default of the core's classes."""
LAN = Networks(lan=True)
"""Private addresses one by one (a `swarm run` node's default: PeerConfig)."""


@dataclass(frozen=True)
class SourceLimits:
    """New authors a source may introduce (burst, then per second), per address and per network."""

    push_per_address: tuple[float, float] = (2.0, 1 / 120)
    push_per_network: tuple[float, float] = (4.0, 1 / 60)
    pull_per_address: tuple[float, float] = (32.0, 0.5)
    pull_per_network: tuple[float, float] = (64.0, 1.0)
    sources: int = 4096
    """Addresses and networks whose budgets are remembered (least recently seen out)."""
    standing_groups: int = 8
    """Groups of an author trained on (with a reward spread) for full standing."""
    standing_age_s: float = 120.0
    """Seconds since an author's first admitted rollout for full standing."""
    new_source_cap: int = 2
    """Groups per external draw from a network none of whose authors has earned half standing."""
    addresses_per_network: int = 4
    """Address book entries from one network (bootstrap addresses aside): a few, so that one network's
    addresses cannot crowd out everyone else's."""
    pool_share: float = 0.25
    """Most of the pool's entries, and of its bytes, that one author or one delivering address may hold."""
    networks: Networks = PUBLIC
    """How addresses group into networks for these budgets (PeerConfig's default: LAN)."""
    lan_addresses: int = 64
    """With `networks.lan`: address book entries of private addresses together (bootstrap aside) at most,
    so that one LAN machine holding many addresses (IPv6 gives it millions) cannot fill the book."""


class NewAuthorBudget:
    """Tokens for introducing authors this node has not admitted before, per address and per network."""

    def __init__(self, limits: SourceLimits) -> None:
        def buckets(rate_burst: tuple[float, float]) -> BucketMap[str]:
            burst, rate = rate_burst
            return BucketMap(rate, burst, limits.sources)

        self._push = (buckets(limits.push_per_address), buckets(limits.push_per_network))
        self._pull = (buckets(limits.pull_per_address), buckets(limits.pull_per_network))
        self.network_of = limits.networks.of

    def allows(self, ip: str, pushed: bool, now: float) -> bool:
        """Whether one more new author from `ip` fits both its address's and its network's budget (nothing
        is spent, and no table grows: a spent budget costs the node no memory per fresh key)."""
        per_address, per_network = self._push if pushed else self._pull
        return per_address.peek(ip, now) >= 1 and per_network.peek(self.network_of(ip), now) >= 1

    def take(self, ip: str, pushed: bool, now: float) -> bool:
        """One new author from `ip`: True when both its address and its network have a token left."""
        per_address, per_network = self._push if pushed else self._pull
        if not self.allows(ip, pushed, now):
            return False
        return per_address.take(ip, now) and per_network.take(self.network_of(ip), now)


class Standing:
    """Per author: where it was first seen from (its home network), when, and the weight it has earned."""

    def __init__(self, limits: SourceLimits, capacity: int = 8192) -> None:
        self.limits, self.capacity = limits, capacity
        self._first: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def introduce(self, author: str, ip: str, now: float) -> None:
        """Remember the author's first admitted rollout and the network that delivered it."""
        if author in self._first:
            self._first.move_to_end(author)
            return
        self._first[author] = (self.limits.networks.of(ip) if ip else "", now)
        while len(self._first) > self.capacity:
            self._first.popitem(last=False)

    def home(self, author: str) -> str:
        """The network that introduced `author` ("" when unknown)."""
        return self._first.get(author, ("", 0.0))[0]

    def weight(self, author: str, used_with_signal: int, offense: float, offense_limit: float, now: float) -> float:
        """STANDING_FLOOR for a new author, up to 1.0 once `standing_groups` of its groups were trained on
        over `standing_age_s`; offense points scale it down in proportion, at once."""
        _, since = self._first.get(author, ("", now))
        earned = min(1.0, used_with_signal / self.limits.standing_groups) * min(1.0, (now - since) / self.limits.standing_age_s)
        weight = STANDING_FLOOR + (1.0 - STANDING_FLOOR) * earned
        return max(0.0, weight * (1.0 - min(1.0, offense / offense_limit)))

    def homes(self) -> dict[str, str]:
        return {author: home for author, (home, _) in self._first.items()}
