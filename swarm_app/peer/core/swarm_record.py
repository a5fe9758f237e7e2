"""A swarm's signed record: the hub addresses its creator lists, stored on the Mainline DHT as a BEP 44
mutable item under the creator's ed25519 key (peer/io/dht.py puts and gets it).

A swarm found by its name alone can be poisoned: anyone can announce addresses under its info-hash, and a
newcomer behind NAT spends its unverified-dial budget on them. A swarm whose members also know its creator's
public key (`--swarm-key`) has one entry nobody else can write: the record, signed by that key, naming a few
hubs (`swarm hub --sign-record`). Its addresses go to the core as bootstrap addresses: the user named the key,
as a user names a bootstrap, so they are dialed first and outside the unverified budget.

Owns the item's key, salt and value, its signature check (BEP 44: ed25519 over the bencoded salt, seq and
value; libtorrent checks it too) and the secret key libtorrent wants (the 64-byte expanded form of a 32-byte
seed). Sans-IO: no DHT, no files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarm_app.kernel.errors import UsageError
from swarm_app.peer.core.identity import b64url, unb64url

MAX_HUBS = 16
"""Hub addresses a record lists at most (a BEP 44 value holds at most 1000 bytes)."""
MAX_VALUE = 1000
"""BEP 44's limit on a value, bencoded."""
RECORD_VERSION = 1


def salt(swarm: str) -> bytes:
    """The item's salt: one key can sign the records of several swarms."""
    return hashlib.sha1(f"swarm-app/record/{swarm}".encode()).digest()


def encode(swarm: str, hubs: list[str]) -> bytes:
    """The record's value (compact JSON); ValueError when it lists no hub, too many, or does not fit."""
    if not 1 <= len(hubs) <= MAX_HUBS:
        raise ValueError(f"a swarm record lists 1 to {MAX_HUBS} hubs, not {len(hubs)}")
    value = json.dumps({"v": RECORD_VERSION, "swarm": swarm, "hubs": hubs}, separators=(",", ":")).encode()
    if len(bencoded(value)) > MAX_VALUE:
        raise ValueError(f"a swarm record of {len(hubs)} hubs does not fit in {MAX_VALUE} bytes")
    return value


def decode(swarm: str, value: bytes) -> list[str]:
    """The hub addresses of a record's value (unchecked strings); ValueError on anything else, or a record of
    another swarm (a key may sign several)."""
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a swarm record (not JSON)") from None
    if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
        raise ValueError("not a swarm record of version 1")
    if data.get("swarm") != swarm:
        raise ValueError(f"a record of swarm {data.get('swarm')!r}, not {swarm!r}")
    hubs = data.get("hubs")
    if not isinstance(hubs, list) or not all(isinstance(h, str) for h in hubs) or len(hubs) > MAX_HUBS:
        raise ValueError(f"a record's hubs are a list of at most {MAX_HUBS} HOST:PORT strings")
    return hubs


def bencoded(value: bytes) -> bytes:
    """The value as BEP 44 stores it: one bencoded string."""
    return b"%d:%s" % (len(value), value)


def signed_message(salt_: bytes, seq: int, value: bytes) -> bytes:
    """What the creator's key signs (BEP 44): the bencoded salt, sequence number and value, without the
    dictionary's braces."""
    head = b"4:salt%d:%s" % (len(salt_), salt_) if salt_ else b""
    return head + b"3:seqi%de1:v" % seq + bencoded(value)


def verify(public_key: bytes, signature: bytes, salt_: bytes, seq: int, value: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, signed_message(salt_, seq, value))
    except (InvalidSignature, ValueError):
        return False
    return True


def parse_public_key(text: str, what: str = "--swarm-key ([peer] swarm_key)") -> bytes:
    """A creator's public key as `swarm hub --sign-record` prints it (43 characters of base64url); UsageError."""
    try:
        key = unb64url(text.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise UsageError(f"{what} {text!r} is not a swarm key: give the 43 characters `swarm hub --sign-record` "
                         "printed (base64url of an ed25519 public key)")
    return key


@dataclass(frozen=True)
class Signer:
    """The creator's key: `seed` is the 32-byte ed25519 secret kept in the key file."""

    seed: bytes

    @classmethod
    def generate(cls) -> Signer:
        return cls(os.urandom(32))

    @property
    def public_key(self) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def public_text(self) -> str:
        return b64url(self.public_key)

    @property
    def expanded_secret(self) -> bytes:
        """The 64-byte secret libtorrent's dht_put_mutable_item wants: SHA-512 of the seed, clamped as ed25519
        clamps a scalar (the same signatures as the seed's)."""
        h = bytearray(hashlib.sha512(self.seed).digest())
        h[0] &= 248
        h[31] &= 63
        h[31] |= 64
        return bytes(h)

    def sign(self, salt_: bytes, seq: int, value: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(signed_message(salt_, seq, value))
