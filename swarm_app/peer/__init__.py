"""The peer module: the rollout swarm protocol RSP/1 (see docs/protocol.md).

Layers, bottom up: `identity` (Ed25519 key and node id), `wire` (signed rollout bodies), `pool`
and `ratelimit` (bounded state), `admission` (sans-IO checks of hostile input), `messages`
(websocket frames and the hello handshake), `addressbook`, `records` (signed node records) and `exchange`
(peer exchange), `scores`, `actions` and `protocol` (the sans-IO node core: neighbours, push/pull choices,
backoff, offender bans), `config`, and the aiohttp glue (`server`, `client`, `discovery`, `metrics`,
`stats`, `node`). `demo` is what `swarm demo` wires; `swarm identity` is swarm_app/commands/identity.py.

Importing this package must stay cheap: nothing heavy is imported here.
"""

PROTOCOL_VERSION = 1
"""RSP/1's version number, in every hello and rollout: nodes of different versions refuse each other."""

DEFAULT_PORT = 47470
DEFAULT_LISTEN = f"0.0.0.0:{DEFAULT_PORT}"
"""Where a node accepts peers unless told otherwise (all interfaces: a LAN swarm needs no setup)."""
