"""DNS seeds: bootstrap addresses a community publishes under its own domain (`--bootstrap dns:NAME`; dnspython,
the `[dns]` extra, which the installer's `[dht]` brings too).

A seed `dns:NAME` is asked for two record types at once, of the system's resolver or of the server
`dns:NAME@IP:PORT` names: SRV (`priority weight port target`: TARGET:PORT; priority and weight are ignored,
every target is dialed) and TXT (each string of a record holds whole HOST:PORT entries, separated by spaces or
commas; a string is at most 255 bytes, so a long list takes more strings or records). The node resolves its
seeds at start and then every `dns_every_s` (jittered 20%), and hands every address to the core as "bootstrap",
as if the user had typed it: what a community's domain lists is trusted as its flag would be (such addresses
escape the address book's per-network cap, hence at most MAX_ADDRESSES per seed). Answers are not
DNSSEC-checked: only a signed hello proves a node. An entry that is not HOST:PORT is skipped; a failure
(no such name, no answer in time, dnspython missing) is a warning, logged again only when it changes, and the
node keeps its other sources. Addresses a later answer no longer lists stay in the book (the core forgets
dead ones by itself). dnspython's asyncio resolver never blocks the loop. This module makes no protocol decision.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from swarm_app.kernel.errors import UsageError
from swarm_app.peer.core.config import DnsSeed, check_dial_address

log = logging.getLogger(__name__)

INSTALL = 'pip install "swarm-app[dns]"'
MAX_ADDRESSES = 64
"""Addresses taken from one seed's answer: a community lists a handful; a hijacked name cannot fill the book."""
JITTER = 0.2


def installed() -> bool:
    return importlib.util.find_spec("dns") is not None


def address(text: str) -> str | None:
    """A HOST:PORT entry of a record, normalized; None when it is not one."""
    try:
        return check_dial_address(text, "entry")
    except UsageError:
        return None


def srv_entries(records: Iterable[tuple[str, int]]) -> list[str]:
    """TARGET:PORT of SRV records given as (target, port); the target "." says there is no such service."""
    return [f"{target.rstrip('.')}:{port}" for target, port in records if target.rstrip(".")]


def txt_entries(strings: Iterable[bytes]) -> list[str]:
    """The entries of TXT strings: HOST:PORT each, separated by spaces or commas."""
    return [entry for raw in strings for entry in re.split(r"[\s,]+", raw.decode("ascii", "replace")) if entry]


@dataclass
class Lookup:
    """What one resolution of a seed found."""

    seed: DnsSeed
    addresses: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Entries that are not HOST:PORT."""
    error: str = ""
    """Why nothing was found ("" when the name answered)."""

    def problem(self) -> str:
        """What is wrong, in a few words ("" when nothing is)."""
        if self.error:
            return self.error
        if not self.addresses and not self.skipped:
            return "no SRV or TXT records"
        if self.skipped:
            shown = ", ".join(repr(entry) for entry in self.skipped[:3])
            return f"{len(self.skipped)} entr{'y' if len(self.skipped) == 1 else 'ies'} skipped (not HOST:PORT: {shown})"
        return ""

    def summary(self) -> str:
        """The doctor's line: the addresses found and what is wrong."""
        found = f"{len(self.addresses)} address{'es' if len(self.addresses) != 1 else ''}"
        problem = self.problem()
        return f"DNS seed {self.seed}: {found}" + (f"; {problem}" if problem else "")


def read_entries(seed: DnsSeed, entries: list[str]) -> Lookup:
    """A lookup from the entries the records held: valid addresses (once each, MAX_ADDRESSES at most) and the rest."""
    lookup = Lookup(seed)
    for entry in entries:
        addr = address(entry)
        if addr is None:
            lookup.skipped.append(entry)
        elif addr not in lookup.addresses and len(lookup.addresses) < MAX_ADDRESSES:
            lookup.addresses.append(addr)
    return lookup


async def resolve(seed: DnsSeed, timeout_s: float) -> Lookup:
    """Ask for the seed's SRV and TXT records; never raises for what the network or the records do."""
    if not installed():
        return Lookup(seed, error=f"dnspython not installed ({INSTALL})")
    import dns.asyncresolver  # deferred: only a node with DNS seeds loads dnspython (~30 ms)
    import dns.exception

    try:
        resolver = _resolver(seed, timeout_s)
        answers = await asyncio.gather(*(resolver.resolve(seed.name, kind, raise_on_no_answer=False)
                                         for kind in ("SRV", "TXT")), return_exceptions=True)
    except dns.exception.DNSException as exc:  # no system resolver configured
        return Lookup(seed, error=_why(exc, timeout_s))
    failed = [a for a in answers if isinstance(a, BaseException)]
    if len(failed) == len(answers):
        if not all(isinstance(exc, (dns.exception.DNSException, OSError)) for exc in failed):
            raise failed[0]
        return Lookup(seed, error=_why(failed[0], timeout_s))
    entries = []
    for answer in answers:
        for rdata in [] if isinstance(answer, BaseException) or answer.rrset is None else answer.rrset:
            if hasattr(rdata, "strings"):
                entries += txt_entries(rdata.strings)
            elif hasattr(rdata, "target"):
                entries += srv_entries([(rdata.target.to_text(), rdata.port)])
    return read_entries(seed, entries)


def _resolver(seed: DnsSeed, timeout_s: float) -> Any:
    import dns.asyncresolver

    from swarm_app.peer.core.addressbook import parse_address

    if seed.server is None:
        resolver = dns.asyncresolver.Resolver()
    else:
        resolver = dns.asyncresolver.Resolver(configure=False)
        host, resolver.port = parse_address(seed.server)
        resolver.nameservers = [host]
    resolver.lifetime = timeout_s
    return resolver


def _why(exc: BaseException, timeout_s: float) -> str:
    import dns.exception
    import dns.resolver

    if isinstance(exc, dns.resolver.NXDOMAIN):
        return "no such name (NXDOMAIN)"
    if isinstance(exc, dns.exception.Timeout):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, dns.resolver.NoNameservers):
        return "the DNS server failed or refused"
    if isinstance(exc, OSError):
        return f"cannot ask the DNS server ({exc.strerror or exc})"
    return f"{exc.__class__.__name__}: {exc}"


class DnsSeeds:
    """Resolve `seeds` now and every `every_s` (jittered), handing each address found to `on_found(addr)`."""

    def __init__(self, seeds: tuple[DnsSeed, ...], on_found: Callable[[str], None], every_s: float = 600.0,
                 timeout_s: float = 5.0, rng: random.Random | None = None) -> None:
        self.seeds, self.on_found, self.every_s, self.timeout_s = seeds, on_found, every_s, timeout_s
        self.rng = rng or random.Random()
        self.lookups: dict[DnsSeed, Lookup] = {}
        """Each seed's latest lookup."""
        self.rounds = 0

    async def run(self) -> None:
        if not installed():
            log.warning("DNS seeds: %s not asked (dnspython not installed: %s); peers come from the other sources",
                        ", ".join(map(str, self.seeds)), INSTALL)
            return
        while True:
            try:
                await asyncio.gather(*(self.refresh(seed) for seed in self.seeds))
            except Exception:  # a bug here must not end the node's other discovery, nor these seeds' next round
                log.exception("DNS seeds: resolving failed; asking again later")
            self.rounds += 1
            await asyncio.sleep(self.every_s * self.rng.uniform(1 - JITTER, 1 + JITTER))

    async def refresh(self, seed: DnsSeed) -> None:
        """Resolve one seed, hand on its addresses, and say what went wrong when that changed."""
        lookup = await resolve(seed, self.timeout_s)
        before = self.lookups.get(seed)
        self.lookups[seed] = lookup
        problem = lookup.problem()
        if problem and (before is None or before.problem() != problem):
            log.warning("DNS seed %s: %s%s", seed, problem,
                        "" if lookup.addresses else "; peers come from the other sources, asking again later")
        elif before is None or before.addresses != lookup.addresses:
            log.info("DNS seed %s: %d address%s", seed, len(lookup.addresses), "es" if len(lookup.addresses) != 1 else "")
        for addr in lookup.addresses:
            self.on_found(addr)
