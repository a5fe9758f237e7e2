"""Shared fixtures. Every test gets its own user folders: the developer's config never leaks in."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch) -> Path:
    """Point every platformdirs folder at a temp dir; drop SWARM_* settings; keep tests off the network."""
    import os

    for key in list(os.environ):
        if key.startswith("SWARM_"):
            monkeypatch.delenv(key)
    home = tmp_path / "swarm-home"
    monkeypatch.setenv("SWARM_HOME", str(home))
    # No test joins a real swarm by accident (port 47470, mDNS on the LAN); networked tests opt in.
    monkeypatch.setenv("SWARM_PEER_ENABLED", "false")
    monkeypatch.setenv("SWARM_PEER_UPNP", "false")  # nor asks a router on the LAN to forward a port (SSDP)
    monkeypatch.setenv("SWARM_PEER_DHT", "false")  # nor asks the public DHT routers (tests run a private DHT)
    return home


@pytest.fixture
def stub_model(tmp_path) -> Path:
    """A folder that passes the model checks; the fake backend loads nothing from it."""
    import json

    folder = tmp_path / "stub-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A small untrained llama-type HF model folder with tokenizer and chat template, built offline."""
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)
