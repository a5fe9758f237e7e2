"""Swarm names, and the bootstrap addresses this app ships for the public swarms.

A swarm is named; nodes of different names do not connect (the name travels in the hello,
docs/protocol.md section 6). A node that names none joins the public swarm of its task preset (`easy`,
`paper`): nodes training on the same tasks find each other by default, and a private group picks a name of
its own. Bootstrap addresses are where a node first dials: the list shipped here for the swarm, replaced
by `[peer] bootstrap` / `SWARM_PEER_BOOTSTRAP` / `--bootstrap` when any of those is given; `--peer`
adds to it. Pure data and checks: this module opens no socket.
"""

from __future__ import annotations

import re

from swarm_app.kernel.errors import UsageError

DEFAULT_SWARM = "easy"
"""The public swarm of the default task preset."""

PUBLIC_BOOTSTRAP: dict[str, tuple[str, ...]] = {"easy": (), "paper": ()}
"""Bootstrap addresses shipped per public swarm. Empty: no public bootstrap node runs yet, so a node finds
its first peers on the LAN (mDNS), in its saved peer table, or at an address given with --bootstrap or
--peer. Any reachable node can serve as a bootstrap for others."""

DHT_ROUTERS = ("router.bittorrent.com:6881", "dht.transmissionbt.com:6881", "router.utorrent.com:6881")
"""Public BitTorrent DHT routers a node asks first to join the Mainline DHT, on which it finds its swarm by
name (peer/io/dht.py); run by others, so nothing of ours needs hosting."""

SWARM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
"""1 to 64 lowercase letters, digits, '.', '_' and '-', starting with a letter or digit (lowercase only:
"Easy" and "easy" are not two swarms by accident)."""


def is_swarm_name(name: object) -> bool:
    return isinstance(name, str) and SWARM_NAME.fullmatch(name) is not None


def swarm_name(configured: str, preset: str) -> str:
    """The swarm a node joins: the name configured, else its task preset's public swarm. A bad name is a
    UsageError that says what a name may hold."""
    name = configured.strip() or preset
    if not is_swarm_name(name):
        raise UsageError(f"swarm name {name!r}: use 1 to 64 lowercase letters, digits, '.', '_' or '-', "
                         f"starting with a letter or digit (e.g. --swarm {DEFAULT_SWARM} or --swarm my-lab)")
    return name


def shipped_bootstrap(swarm: str) -> tuple[str, ...]:
    """The bootstrap addresses this app ships for `swarm` (none for a private swarm)."""
    return PUBLIC_BOOTSTRAP.get(swarm, ())


def reachability_text(reachable: bool, port: int, lan_only: bool = False) -> str:
    """What dial-back found, in words, and what it means for the participant. `lan_only`: only peers at private
    addresses dialed it back (they reach it on this network; whether the internet can is not known)."""
    if reachable and lan_only:
        return (f"reachable from outside: on this network only (peers here dialed it back on port {port}; "
                "none from the internet yet)")
    if reachable:
        return f"reachable from outside: yes (peers dialed it back on port {port})"
    return (f"reachable from outside: no (peers cannot dial port {port} here); "
            "it still works: it dials out, and rollouts flow both ways over those links")


def reachability_fix(port: int, upnp: str = "") -> str:
    """How a participant behind a home router makes the node reachable (it helps the swarm: more nodes
    that others can dial). `upnp`: what the node's own UPnP attempt got (NodeStats.upnp)."""
    if upnp == "mapped":
        return (f"to accept peers too: the router says it forwards port {port} (UPnP), yet peers cannot dial it; "
                f"forward TCP port {port} to this computer by hand")
    extra = ' (and pip install "swarm-app[upnp]")' if upnp == "missing" else ""
    return f"to accept peers too: forward TCP port {port} on your router to this computer, or enable UPnP there{extra}"


def reachability_short(reachable: bool | None, witnesses: int = 0, needed: int = 0, port: int = 0,
                       lan_only: bool = False) -> str:
    """The same in a few words, for one line of the dashboard; `port` 0: no verdict is drawn (a swarm all
    on this machine)."""
    if reachable and lan_only:
        return "reachable from outside: on this network only"
    if reachable:
        return "reachable from outside: yes"
    if reachable is False:
        return "reachable from outside: no (still works: dials out)"
    if not port:
        return "reachable from outside: not checked (all nodes on this machine)"
    return f"reachable from outside: checking ({witnesses}/{needed} dial-backs)" if needed else "reachable from outside: checking"
