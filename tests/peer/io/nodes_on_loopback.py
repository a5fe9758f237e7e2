"""Real PeerNodes, each on its own 127.x address (listening and dialing from it, so every peer sees it at its
own address, as machines on a network are): the builders the join, swarm-name and dial-back tests share."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from contextlib import asynccontextmanager
from typing import AsyncIterator

import pytest

from swarm_app.peer.core.config import PeerConfig
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.reachability import ReachabilityPolicy
from swarm_app.peer.io.node import PeerNode
from tests.peer.helpers import fast_config

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="needs 127.x.y.z source addresses (Linux)")

FAST_DIALBACK = ReachabilityPolicy(by_address=True, ask_every_s=0.2, ask_again_s=5.0, timeout_s=3.0)
"""Distinct 127.x addresses are distinct witnesses; a request every 0.2 s, so a verdict takes about a second."""


def on(ip: str, *bootstrap: str, swarm: str = "easy", **changes) -> PeerConfig:
    """A test-speed node listening on `ip` and dialing from it, in `swarm`, dialing `bootstrap` first."""
    config = fast_config()
    return dataclasses.replace(config, listen=f"{ip}:0", source_ip=ip, swarm=swarm, bootstrap=bootstrap,
                               reachability=FAST_DIALBACK, **changes)


@asynccontextmanager
async def started(*configs: PeerConfig) -> AsyncIterator[list[PeerNode]]:
    """Start a node per config, in order; stop them all on exit."""
    nodes: list[PeerNode] = []
    try:
        for config in configs:
            nodes.append(PeerNode(config, Identity.generate()))
            await nodes[-1].start()
        yield nodes
    finally:
        await asyncio.gather(*(node.stop() for node in nodes), return_exceptions=True)


