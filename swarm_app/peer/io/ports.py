"""Is a listen address free? A cheap bind probe, so a busy port is reported before the model loads.

It binds and closes a socket the way aiohttp's TCPSite will (SO_REUSEADDR on POSIX, so a port in
TIME_WAIT is not mistaken for a busy one) and starts nothing.
"""

from __future__ import annotations

import os
import socket


def bind_error(host: str, port: int) -> OSError | None:
    """None when HOST:PORT can be bound now (port 0 always can), else the OSError a bind raises."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        if os.name != "nt":  # on Windows SO_REUSEADDR would let two servers share the port
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc
    return None
