"""docs/protocol.md's test vector and message shapes match the implementation."""

from __future__ import annotations

import re
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swarm_app.peer.core.admission import REASONS
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.messages import MESSAGE_REASONS, ClientHandshake, ServerHandshake, decode_frame, encode
from swarm_app.peer.core.records import RECORD_PREFIX, parse_record, sign_record
from swarm_app.peer.core.wire import SignedRollout, parse_body, sign_rollout, signature_valid

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
BYE_SENDERS = [r'Close\([^()]*?, "([^"]+)"\)', r'_close\(\w+, "([^"]+)"\)', r'"t": "bye", "reason": "([^"]+)"',
               r'return "(\w+)", \[\]', r'send_queues\.close\(\w+, "([^"]+)"\)', r'close_all\("([^"]+)"']
"""Where the code chooses a bye reason: core Close actions, the node's _close, literal bye frames, hello refusals,
and the send queues' closes (peer/io/outbound.py)."""


def test_the_documented_test_vector():
    identity = Identity(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    body = re.search(r"```json\n(.*?)\n```", DOC, re.S).group(1).encode()
    sig = re.search(r"sig = ([A-Za-z0-9_-]{86})\n", DOC).group(1)
    rollout_id = re.search(r"id  = ([0-9a-f]{64})", DOC).group(1)
    assert f"public key `{b64url(identity.public_key)}`" in DOC
    assert f"node id `{identity.node_id}`" in DOC
    assert f"one line, {len(body)} bytes)" in DOC
    parsed = parse_body(body)
    assert sign_rollout(identity, parsed.rollout, parsed.seq, parsed.ts_ms).body == body
    signed = SignedRollout(body, identity.sign(b"RSP/1 rollout\n" + body))
    assert b64url(signed.sig) == sig and signed.id.hex() == rollout_id and signature_valid(parsed, signed)


def test_the_documented_record_vector():
    identity = Identity(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    body = re.search(r"```text\n(.*?)\n```", DOC, re.S).group(1).encode()
    sig = re.search(r"record sig = ([A-Za-z0-9_-]{86})\n", DOC).group(1)
    record = sign_record(identity, "easy", ["203.0.113.7:47470"], True, 1_700_000_000_000)
    assert record.body == body and b64url(record.sig) == sig
    assert f"one line, {len(body)} bytes)" in DOC
    assert parse_record(record.to_item(), "easy", 1_700_000_000_000) == record
    assert RECORD_PREFIX == b"RSP/1 record\n" and '"RSP/1 record\\n" || body)      # the prefix is 13 ASCII' in DOC


def test_every_record_rejection_reason_is_in_the_documented_table():
    source = (ROOT / "swarm_app" / "peer" / "core" / "records.py").read_text(encoding="utf-8")
    raised = set(re.findall(r'RecordError\("(\w+)"', source)) | {"too_many"}
    assert {"bad_signature", "wrong_node", "expired", "swarm", "address"} <= raised
    for reason in raised:
        assert re.search(rf"\| `{reason}` \|$", DOC, re.M), reason


def test_the_documented_hello_runs_between_two_sides():
    client_id, server_id = Identity.generate(), Identity.generate()
    client = ClientHandshake(client_id, "127.0.0.1:1", "easy")
    server = ServerHandshake(server_id, "127.0.0.1:2", "easy")
    hello = client.start()
    assert set(hello) == {"t", "v", "key", "node", "nonce", "listen", "swarm"} and hello["v"] == 2
    assert '`{"t":"hello","v":2,"key":b64url(pk_C),"node":id_C,"nonce":' in DOC
    reply = server.on_client_hello(decode_frame(encode(hello)))
    assert set(reply) == {"t", "v", "key", "node", "nonce", "listen", "swarm", "proof"}
    proof = client.on_server_hello(decode_frame(encode(reply)))
    assert set(proof) == {"t", "sig"}
    assert server.on_client_proof(decode_frame(encode(proof))).node == client_id.node_id
    assert client.peer.node == server_id.node_id


def test_every_bye_reason_the_code_sends_is_in_the_documented_table():
    source = "\n".join(f.read_text(encoding="utf-8") for f in sorted((ROOT / "swarm_app" / "peer").rglob("*.py")))
    sent = {reason for pattern in BYE_SENDERS for reason in re.findall(pattern, source)}
    documented = set(re.findall(r"^  \| `([^`]+)` \|", DOC, re.M))
    assert {"self", "banned", "duplicate", "offender", "rotate", "shutdown", "internal error"} <= sent
    assert sent == documented


def test_every_rejection_reason_is_in_the_doc():
    for reason in [*REASONS, *MESSAGE_REASONS]:
        assert f"`{reason}`" in DOC, reason
