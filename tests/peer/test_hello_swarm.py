"""The hello names the swarm (hello version 2): another swarm is refused before anything is signed, a version 1
hello is recognised as an older node, and both proofs bind both swarm names."""

from __future__ import annotations

import pytest

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.swarms import swarm_name
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.messages import (
    HELLO_VERSION,
    Bye,
    ClientHandshake,
    HandshakeError,
    MessageError,
    OlderHello,
    ServerHandshake,
    SwarmMismatch,
    decode_frame,
    encode,
    swarm_refusal,
)


def hello_of(swarm: str) -> dict:
    return ClientHandshake(Identity.generate(), "127.0.0.1:1", swarm).start()


def test_the_hello_carries_the_swarm_and_a_matching_pair_completes():
    client = ClientHandshake(Identity.generate(), None, "my-lab")
    server = ServerHandshake(Identity.generate(), None, "my-lab")
    hello = client.start()
    assert hello["v"] == HELLO_VERSION == 2 and hello["swarm"] == "my-lab"
    reply = server.on_client_hello(decode_frame(encode(hello)))
    proof = client.on_server_hello(decode_frame(encode(reply)))
    assert server.on_client_proof(decode_frame(encode(proof))).swarm == "my-lab"


def test_another_swarm_is_refused_before_the_server_signs():
    server = ServerHandshake(Identity.generate(), None, "easy")
    signed = []
    server.identity.sign = lambda message: signed.append(message) or b""  # would record a signature
    with pytest.raises(SwarmMismatch, match=r"swarm 'paper' != 'easy'"):
        server.check_swarm(decode_frame(encode(hello_of("paper"))))
    with pytest.raises(SwarmMismatch):
        server.on_client_hello(decode_frame(encode(hello_of("paper"))))
    assert signed == []


def test_the_client_refuses_a_server_hello_of_another_swarm():
    client = ClientHandshake(Identity.generate(), None, "easy")
    server = ServerHandshake(Identity.generate(), None, "paper")
    reply = server.on_client_hello(decode_frame(encode({**client.start(), "swarm": "paper"})))
    with pytest.raises(SwarmMismatch, match=r"swarm 'paper' != 'easy'"):
        client.on_server_hello(decode_frame(encode(reply)))


def test_the_proofs_bind_the_swarm_names():
    """A server hello whose swarm was rewritten in transit no longer verifies."""
    client = ClientHandshake(Identity.generate(), None, "easy")
    server = ServerHandshake(Identity.generate(), None, "paper")
    reply = server.on_client_hello(decode_frame(encode({**client.start(), "swarm": "paper"})))
    with pytest.raises(HandshakeError, match="does not verify"):
        client.on_server_hello(decode_frame(encode({**reply, "swarm": "easy"})))


def test_a_version_1_hello_is_an_older_node():
    hello = {**hello_of("easy"), "v": 1}
    del hello["swarm"]
    with pytest.raises(OlderHello) as caught:
        decode_frame(encode(hello))
    assert caught.value.reason == "handshake" and caught.value.version == 1


@pytest.mark.parametrize("swarm", ["", "Easy", "a b", "x" * 65, 5, None, "-lab"])
def test_a_hello_with_a_bad_swarm_name_is_malformed(swarm):
    with pytest.raises(MessageError) as caught:
        decode_frame(encode({**hello_of("easy"), "swarm": swarm}))
    assert caught.value.reason == "bad_message"


def test_the_swarm_bye_names_the_refusing_sides_swarm():
    bye = decode_frame(encode(swarm_refusal("easy")))
    assert bye == Bye("swarm", "easy")


@pytest.mark.parametrize("configured, preset, expected", [("", "easy", "easy"), ("", "paper", "paper"),
                                                          ("my-lab.2", "easy", "my-lab.2"), (" lab ", "easy", "lab")])
def test_the_swarm_name_defaults_to_the_presets_public_swarm(configured, preset, expected):
    assert swarm_name(configured, preset) == expected


@pytest.mark.parametrize("bad", ["Lab", "my lab", "-lab", "x" * 65, "lab/1"])
def test_a_bad_swarm_name_is_one_usage_error_that_says_what_a_name_is(bad):
    with pytest.raises(UsageError, match="lowercase letters, digits"):
        swarm_name(bad, "easy")
