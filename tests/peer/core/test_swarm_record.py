"""The swarm's signed record (core/swarm_record.py): what a creator's key signs, and what a reader refuses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from swarm_app.kernel.errors import UsageError
from swarm_app.peer.core.config import DhtConfig
from swarm_app.peer.core.swarm_record import Signer, decode, encode, parse_public_key, salt, verify
from swarm_app.peer.io.dht import DhtDiscovery


def test_a_record_round_trips_and_only_the_creators_signature_over_it_verifies():
    creator, other = Signer.generate(), Signer.generate()
    value = encode("lab", ["203.0.113.9:47470"])
    signature = creator.sign(salt("lab"), 3, value)
    assert decode("lab", value) == ["203.0.113.9:47470"]
    assert verify(creator.public_key, signature, salt("lab"), 3, value)
    assert not verify(other.public_key, signature, salt("lab"), 3, value)  # another key
    assert not verify(creator.public_key, signature, salt("lab"), 4, value)  # a replayed signature, new seq
    assert not verify(creator.public_key, signature, salt("lab2"), 3, value)  # another swarm's salt
    assert not verify(creator.public_key, signature, salt("lab"), 3, encode("lab", ["198.51.100.1:1"]))


def test_a_record_refuses_what_is_not_one_or_belongs_to_another_swarm():
    with pytest.raises(ValueError, match="another|not 'lab'"):
        decode("lab", encode("lab2", ["203.0.113.9:1"]))
    for bad in (b"\xff", b"[]", b'{"v": 2, "swarm": "lab", "hubs": []}', b'{"v": 1, "swarm": "lab", "hubs": [1]}'):
        with pytest.raises(ValueError):
            decode("lab", bad)
    with pytest.raises(ValueError, match="1 to 16"):
        encode("lab", [])
    with pytest.raises(ValueError, match="does not fit"):
        encode("lab", ["h" * 200 + f".example.org:{k}" for k in range(1, 10)])


def test_the_swarm_key_is_the_43_characters_the_hub_prints():
    creator = Signer.generate()
    assert parse_public_key(creator.public_text) == creator.public_key
    for bad in ("", "abc", creator.public_text + "A", creator.public_text.replace(creator.public_text[0], "*")):
        with pytest.raises(UsageError, match="not a swarm key"):
            parse_public_key(bad)


def item(signer: Signer, value: bytes, seq: int, swarm: str = "lab", signature: bytes | None = None) -> SimpleNamespace:
    """What libtorrent's dht_mutable_item_alert carries."""
    return SimpleNamespace(key=signer.public_key, salt=salt(swarm), item=value, seq=seq,
                           signature=signature if signature is not None else signer.sign(salt(swarm), seq, value))


async def test_a_reader_hands_on_a_signed_record_once_and_refuses_a_forged_or_older_one():
    creator = Signer.generate()
    got: list[list[str]] = []
    reader = DhtDiscovery(DhtConfig(record_key=creator.public_key), "lab", "127.0.0.1", lambda: None, lambda: None,
                          lambda: 0, lambda a, c: None, on_record=got.append)
    value = encode("lab", ["203.0.113.9:47470", "not an address", "198.51.100.7:1"])
    forged = item(creator, encode("lab", ["192.0.2.66:1"]), 9, signature=bytes(64))
    reader._on_item(forged)
    assert reader.records_refused == 1 and got == []  # received, refused for its signature
    reader._on_item(item(creator, value, 2))
    assert got == [["203.0.113.9:47470", "198.51.100.7:1"]]  # the one that is no address is skipped
    reader._on_item(item(creator, value, 2))  # the same record again, from the next lookup
    reader._on_item(item(creator, encode("lab", ["192.0.2.1:1"]), 1))  # an older one (seq 1 < 2)
    assert len(got) == 1
    reader._on_item(item(creator, encode("lab2", ["192.0.2.1:1"]), 3))  # a record of another swarm, same salt
    assert reader.records_refused == 2 and len(got) == 1
    reader._on_item(item(creator, encode("lab", ["192.0.2.1:1"]), 4))
    assert got[-1] == ["192.0.2.1:1"]  # a newer record: its hubs at once
