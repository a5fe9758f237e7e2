"""Signed node records: a node's own statement of where it can be dialed, relayed unchanged by others.

A record body is the RFC 8785 (JCS) JSON of exactly these members, signed with the node's Ed25519 key
over `RECORD_PREFIX || body` (docs/protocol.md section 8.2 is the normative text):

    {"v": 1, "node": node id, "key": b64url public key, "swarm": name, "addrs": ["IP:PORT", ...],
     "reachable": bool, "issued_ms": int, "expires_ms": int}

`addrs` are the addresses dial-back reached the node at (1 to `MAX_ADDRS`, IP literals: a receiver never
resolves a name a peer sent). Only the key's holder can sign one, so a relay can neither name an honest
node's id at another address nor alter an address; `expires_ms` (at most `MAX_LIFETIME_MS` after
`issued_ms`) bounds how long a departed node's address keeps travelling. A receiver takes at most
`MAX_RECORDS` from one message.

This module makes and checks records (form, signature, swarm, time) and raises only `RecordError`; which
records a node keeps, relays and dials is exchange.py's.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from functools import lru_cache

import rfc8785

from swarm_app.kernel.swarms import is_swarm_name
from swarm_app.peer.core.addressbook import format_address, parse_address
from swarm_app.peer.core.identity import Identity, b64url, node_id_of, unb64url, verify
from swarm_app.peer.core.wire import MAX_INT, Rejection, signed_item

RECORD_PREFIX = b"RSP/1 record\n"
"""Domain separation (13 ASCII bytes): a record signature is never a rollout's, a hello's or a probe's."""
RECORD_VERSION = 1
MAX_RECORD_BYTES = 1024
"""Largest accepted body: four IPv6 addresses and a 64-character swarm name fit in under 600 bytes."""
MAX_RECORDS = 32
"""Records in one message at most; a message with more is refused whole (`too_many`)."""
MAX_ADDRS = 4
MAX_ADDR_CHARS = 64
RECORD_LIFETIME_MS = 30 * 60_000
"""How long this node's own record is valid; it signs a new one at half of that."""
MAX_LIFETIME_MS = 60 * 60_000
"""Longest `expires_ms - issued_ms` a receiver accepts: nobody signs a record that outlives its node by days."""
MAX_AHEAD_MS = 2 * 60_000
"""`issued_ms` may be this far past the receiver's clock (the same skew as a rollout's `ts_ms`)."""
BODY_KEYS = frozenset({"v", "node", "key", "swarm", "addrs", "reachable", "issued_ms", "expires_ms"})


class RecordError(Rejection):
    """A record refused; `reason` is the label of the records-rejected counter."""


@dataclass(frozen=True)
class NodeRecord:
    """A checked record: the bytes as they travel, and the members a receiver uses."""

    body: bytes
    sig: bytes
    node: str
    addrs: tuple[str, ...]
    reachable: bool
    issued_ms: int
    expires_ms: int

    def to_item(self) -> dict[str, str]:
        """The `{"body", "sig"}` object that carries this record in a peer list, byte for byte as signed."""
        return {"body": self.body.decode("utf-8"), "sig": b64url(self.sig)}

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def sign_record(identity: Identity, swarm: str, addrs: list[str] | tuple[str, ...], reachable: bool, now_ms: int,
                lifetime_ms: int = RECORD_LIFETIME_MS) -> NodeRecord:
    """This node's own record, valid from `now_ms` for `lifetime_ms`. ValueError when an address or the
    swarm name breaks the format (a bug of the caller: dial-back only names IP:PORT addresses)."""
    body = rfc8785.dumps({"v": RECORD_VERSION, "node": identity.node_id, "key": b64url(identity.public_key),
                          "swarm": swarm, "addrs": list(addrs), "reachable": reachable, "issued_ms": now_ms,
                          "expires_ms": now_ms + lifetime_ms})
    item = {"body": body.decode("utf-8"), "sig": b64url(identity.sign(RECORD_PREFIX + body))}
    try:
        return parse_record(item, swarm, now_ms)
    except RecordError as exc:
        raise ValueError(f"own record does not pass its own checks: {exc}") from None


def parse_record(item: object, swarm: str, now_ms: int) -> NodeRecord:
    """Check one `{"body", "sig"}` item received in a peer list: its bytes, then its dates at `now_ms`."""
    body, sig = signed_item(item, MAX_RECORD_BYTES, RecordError)
    record = _checked(body, sig, swarm)
    if not record.live(now_ms):
        raise RecordError("expired", f"expired {now_ms - record.expires_ms} ms ago")
    if record.issued_ms > now_ms + MAX_AHEAD_MS:
        raise RecordError("future", f"issued {record.issued_ms - now_ms} ms ahead")
    return record


@lru_cache(maxsize=4096)
def _checked(body: bytes, sig: bytes, swarm: str) -> NodeRecord:
    """What does not depend on the time, cheapest checks first, the signature last; once per distinct
    record (a record that fails is checked again): every neighbour's list relays the same live records,
    up to 32 each, and the verdict on the same bytes never changes."""
    data = _decode(body)
    record = NodeRecord(body, sig, data["node"], tuple(data["addrs"]), data["reachable"], data["issued_ms"],
                        data["expires_ms"])
    if rfc8785.dumps(data) != body:
        raise RecordError("not_canonical", "bytes differ from the RFC 8785 form")
    key = unb64url(data["key"])
    if node_id_of(key) != record.node:
        raise RecordError("wrong_node", "node is not the id of key")
    if data["swarm"] != swarm:
        raise RecordError("swarm", f"a record of swarm {data['swarm']!r}")
    if not 0 < record.expires_ms - record.issued_ms <= MAX_LIFETIME_MS:
        raise RecordError("lifetime", f"valid for {record.expires_ms - record.issued_ms} ms")
    if not verify(key, sig, RECORD_PREFIX + body):
        raise RecordError("bad_signature")
    return record


def _decode(body: bytes) -> dict:
    """The body's members, each of its type and range; RecordError otherwise."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RecordError("malformed", "not UTF-8 JSON") from None
    if not isinstance(data, dict):
        raise RecordError("schema", "body is not an object")
    if type(data.get("v")) is not int or data["v"] != RECORD_VERSION:
        raise RecordError("version", f"record version {str(data.get('v'))[:20]!r}")
    if set(data) != BODY_KEYS:
        raise RecordError("schema", "wrong set of members")
    if not isinstance(data["node"], str) or len(data["node"]) != 32:
        raise RecordError("schema", "node must be a node id")
    try:
        key = unb64url(data["key"])
    except ValueError:
        raise RecordError("schema", "key is not base64url") from None
    if len(key) != 32:
        raise RecordError("schema", "key must be 32 bytes")
    if not is_swarm_name(data["swarm"]):
        raise RecordError("schema", "swarm is not a swarm name")
    if type(data["reachable"]) is not bool:
        raise RecordError("schema", "reachable must be true or false")
    for name in ("issued_ms", "expires_ms"):
        if type(data[name]) is not int or not 0 <= data[name] <= MAX_INT:
            raise RecordError("schema", f"{name} must be an integer from 0 to {MAX_INT}")
    _check_addrs(data["addrs"])
    return data


def _check_addrs(addrs: object) -> None:
    if not isinstance(addrs, list) or not 1 <= len(addrs) <= MAX_ADDRS or len(set(map(str, addrs))) != len(addrs):
        raise RecordError("schema", f"addrs must be 1 to {MAX_ADDRS} distinct addresses")
    for addr in addrs:
        if not isinstance(addr, str) or len(addr) > MAX_ADDR_CHARS or not is_dial_address(addr):
            raise RecordError("address", f"{str(addr)[:80]!r} is not IP:PORT in canonical form")


def is_dial_address(addr: str) -> bool:
    """`addr` is "IP:PORT" ("[IPv6]:PORT") spelled as format_address spells it, with a port from 1 to 65535."""
    try:
        host, port = parse_address(addr)
        canonical = str(ipaddress.ip_address(host))  # one spelling: "::1", never "0::1"
    except ValueError:
        return False
    return port > 0 and format_address(canonical, port) == addr
