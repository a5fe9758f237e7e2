"""RSP/1 websocket messages: their schema, strict decoding, encoding, and the hello handshake.

Every websocket message is one JSON text frame holding an object with a type field "t": hello,
proof, push, pull, sample, bye. `decode_frame` turns a frame into a typed message or raises
`MessageError(reason)`; rollout items stay raw here (admission judges them one by one). The handshake
classes are sans-IO: they take and return message dicts, with nonces from an injectable source.
Nothing here touches sockets or clocks.

The hello names the swarm the node joined (hello version 2): nodes of different swarms refuse each other
before any signature is spent (`SwarmMismatch`, bye `swarm`), and both proofs cover both names. A hello of
version 1 (a swarm-app from before swarm names) is told `version` and refused (`OlderHello`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import rfc8785

from swarm_app.kernel.swarms import DEFAULT_SWARM, is_swarm_name
from swarm_app.peer.core.heard import HeardFilter
from swarm_app.peer.core.identity import Identity, b64url, node_id_of, unb64url, verify
from swarm_app.peer.core.wire import MAX_FRAME_BYTES, PROTOCOL_VERSION, Rejection

HELLO_PREFIX = b"RSP/1 hello\n"
HELLO_VERSION = 2
"""The hello's version: 2 added the swarm name. Rollout bodies stay at PROTOCOL_VERSION 1."""
NONCE_BYTES = 32
MAX_ITEMS = 64
"""Rollouts per push or sample message."""
MAX_PULL = 64
MAX_HAVE = 1024
"""Authors listed in one pull request."""
MAX_ADDRESS = 300
FRAME_BUDGET = MAX_FRAME_BYTES - 4096
"""Bytes of rollout items per outgoing message, leaving room for the envelope."""

MESSAGE_REASONS: dict[str, str] = {
    "frame_too_large": "websocket message over 1 MiB",
    "bad_message": "not a JSON object of a known type with valid fields, or unexpected at this point",
    "conn_rate": "more messages on one connection than its rate limit allows",
    "handshake": "hello or proof missing, malformed, or with a signature that does not verify",
}


class MessageError(Rejection):
    """A websocket frame that is not a well-formed RSP/1 message."""


class OlderHello(MessageError):
    """A hello of version 1: a node from before swarm names, which needs an update to join any swarm."""

    def __init__(self, version: int) -> None:
        super().__init__("handshake", f"hello version {version}; this node speaks {HELLO_VERSION}")
        self.version = version


@dataclass(frozen=True)
class Hello:
    key: bytes
    node: str
    nonce: bytes
    listen: str | None
    proof: bytes | None
    swarm: str = ""


@dataclass(frozen=True)
class Proof:
    sig: bytes


@dataclass(frozen=True)
class Push:
    items: list[Any]


PULL_FILTERS = ("heard", "held", "recent")
"""A pull's optional Bloom filters (heard.py), in the order `Pull` and `HttpPull` hold them."""


@dataclass(frozen=True)
class Pull:
    id: int
    max: int
    have: dict[str, int]
    heard: HeardFilter | None = None
    """Authors heard from in the last 10 minutes (optional; nodes from before it send none)."""
    held: HeardFilter | None = None
    """Ids of the rollouts the asker holds from the last 120 s (optional, as `heard`)."""
    recent: HeardFilter | None = None
    """Authors heard from in the last 5 minutes (optional, as `heard`): answers bring them last."""


@dataclass(frozen=True)
class Sample:
    re: int
    items: list[Any]


@dataclass(frozen=True)
class Bye:
    reason: str
    swarm: str = ""
    """With reason "swarm": the swarm the sender is in."""


Message = Hello | Proof | Push | Pull | Sample | Bye


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def decode_frame(text: str) -> Message:
    """Parse one text frame; MessageError for anything that is not a valid RSP/1 message."""
    if len(text) > MAX_FRAME_BYTES:
        raise MessageError("frame_too_large")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise MessageError("bad_message", "not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        raise MessageError("bad_message", "not an object with a type")
    decoder = _DECODERS.get(data["t"])
    if decoder is None:
        raise MessageError("bad_message", f"unknown type {data['t'][:32]!r}")
    try:
        return decoder(data)
    except OlderHello:
        raise
    except (KeyError, TypeError, ValueError):
        raise MessageError("bad_message", f"bad {data['t']} fields") from None


def _hello(d: dict) -> Hello:
    if type(d["v"]) is not int:
        raise ValueError("version")
    if d["v"] == PROTOCOL_VERSION:
        raise OlderHello(d["v"])
    if d["v"] != HELLO_VERSION:
        raise ValueError("version")
    key, nonce = unb64url(d["key"]), unb64url(d["nonce"])
    listen = d.get("listen")
    if len(key) != 32 or len(nonce) != NONCE_BYTES or d["node"] != node_id_of(key):
        raise ValueError("key, nonce or node id")
    if listen is not None and (not isinstance(listen, str) or len(listen) > MAX_ADDRESS):
        raise ValueError("listen")
    if not is_swarm_name(d["swarm"]):
        raise ValueError("swarm")
    proof = unb64url(d["proof"]) if "proof" in d else None
    return Hello(key, d["node"], nonce, listen, proof, d["swarm"])



def _int(value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError("integer out of range")
    return value


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise ValueError("items")
    return value


def _pull(d: dict) -> Pull:
    have = d["have"]
    if not isinstance(have, dict) or len(have) > MAX_HAVE:
        raise ValueError("have")
    for author, ts in have.items():
        if len(author) > 64:
            raise ValueError("author id")
        _int(ts, 0, 2**53 - 1)
    heard, held, recent = (HeardFilter.from_wire(d[name]) if name in d else None for name in PULL_FILTERS)
    return Pull(_int(d["id"], 0, 2**53 - 1), _int(d["max"], 1, MAX_PULL), have, heard, held, recent)


def _bye(d: dict) -> Bye:
    if not isinstance(d["reason"], str):
        raise ValueError("reason")
    swarm = d.get("swarm")
    return Bye(d["reason"][:200], swarm[:64] if isinstance(swarm, str) else "")


_DECODERS: dict[str, Callable[[dict], Message]] = {
    "hello": _hello,
    "proof": lambda d: Proof(unb64url(d["sig"])),
    "push": lambda d: Push(_items(d["items"])),
    "pull": _pull,
    "sample": lambda d: Sample(_int(d["re"], 0, 2**53 - 1), _items(d["items"])),
    "bye": _bye,
}


def fit_items(items: list[dict[str, str]], budget: int = FRAME_BUDGET) -> list[dict[str, str]]:
    """The longest prefix of `items` whose encoding fits in one frame."""
    fitted, size = [], 0
    for item in items:
        size += len(encode(item).encode("utf-8")) + 1
        if size > budget:
            break
        fitted.append(item)
    return fitted


# --- the hello handshake: each side signs a fresh nonce of the other with both ids, both swarm names and
# the hello version; a hello naming another swarm is refused before anything is signed


class HandshakeError(ValueError):
    pass


class SwarmMismatch(HandshakeError):
    """The other side is in another swarm: `theirs` != `ours`. Not an offence: it dialed the wrong place."""

    def __init__(self, theirs: str, ours: str) -> None:
        super().__init__(f"swarm {theirs!r} != {ours!r}")
        self.theirs, self.ours = theirs, ours


def transcript(role: str, signer: str, peer: str, signer_nonce: bytes, peer_nonce: bytes, signer_swarm: str,
               peer_swarm: str) -> bytes:
    return HELLO_PREFIX + rfc8785.dumps({"v": HELLO_VERSION, "role": role, "signer": signer, "peer": peer,
                                         "signer_nonce": b64url(signer_nonce), "peer_nonce": b64url(peer_nonce),
                                         "signer_swarm": signer_swarm, "peer_swarm": peer_swarm})


def hello_message(identity: Identity, nonce: bytes, listen: str | None, swarm: str, proof: bytes | None = None) -> dict:
    msg = {"t": "hello", "v": HELLO_VERSION, "key": b64url(identity.public_key), "node": identity.node_id,
           "nonce": b64url(nonce), "listen": listen, "swarm": swarm}
    if proof is not None:
        msg["proof"] = b64url(proof)
    return msg


def swarm_refusal(swarm: str) -> dict:
    """The bye that refuses a hello from another swarm, naming this side's swarm."""
    return {"t": "bye", "reason": "swarm", "swarm": swarm}


def version_refusal() -> dict:
    """The bye that refuses a hello of version 1, before the server's own hello (an older node reads a bye
    there, as it reads "banned")."""
    return {"t": "bye", "reason": "version"}


class ClientHandshake:
    """Dialing side: send hello; check the server's hello, swarm and proof; answer with a proof."""

    def __init__(self, identity: Identity, listen: str | None, swarm: str = DEFAULT_SWARM, *,
                 randbytes: Callable[[int], bytes] = os.urandom) -> None:
        self.identity, self.listen, self.swarm = identity, listen, swarm
        self.nonce = randbytes(NONCE_BYTES)
        self.peer: Hello | None = None

    def start(self) -> dict:
        return hello_message(self.identity, self.nonce, self.listen, self.swarm)

    def on_server_hello(self, msg: Message) -> dict:
        if not isinstance(msg, Hello) or msg.proof is None:
            raise HandshakeError("expected the server's hello with its proof")
        if msg.swarm != self.swarm:
            raise SwarmMismatch(msg.swarm, self.swarm)
        me = self.identity.node_id
        if not verify(msg.key, msg.proof, transcript("server", msg.node, me, msg.nonce, self.nonce, msg.swarm, self.swarm)):
            raise HandshakeError("server proof does not verify")
        self.peer = msg
        sig = self.identity.sign(transcript("client", me, msg.node, self.nonce, msg.nonce, self.swarm, msg.swarm))
        return {"t": "proof", "sig": b64url(sig)}


class ServerHandshake:
    """Accepting side: on the client's hello (of this swarm) send ours with a proof; then check the client's."""

    def __init__(self, identity: Identity, listen: str | None, swarm: str = DEFAULT_SWARM, *,
                 randbytes: Callable[[int], bytes] = os.urandom) -> None:
        self.identity, self.listen, self.swarm = identity, listen, swarm
        self.nonce = randbytes(NONCE_BYTES)
        self.peer: Hello | None = None

    def check_swarm(self, msg: Message) -> None:
        """SwarmMismatch for a hello from another swarm (call before `on_client_hello`: no signature spent)."""
        if isinstance(msg, Hello) and msg.swarm != self.swarm:
            raise SwarmMismatch(msg.swarm, self.swarm)

    def on_client_hello(self, msg: Message) -> dict:
        if not isinstance(msg, Hello) or msg.proof is not None:
            raise HandshakeError("expected the client's hello")
        self.check_swarm(msg)
        self.peer = msg
        sig = self.identity.sign(transcript("server", self.identity.node_id, msg.node, self.nonce, msg.nonce,
                                            self.swarm, msg.swarm))
        return hello_message(self.identity, self.nonce, self.listen, self.swarm, proof=sig)

    def on_client_proof(self, msg: Message) -> Hello:
        if self.peer is None or not isinstance(msg, Proof):
            raise HandshakeError("expected the client's proof")
        peer = self.peer
        if not verify(peer.key, msg.sig, transcript("client", peer.node, self.identity.node_id, peer.nonce, self.nonce,
                                                    peer.swarm, self.swarm)):
            raise HandshakeError("client proof does not verify")
        return peer
