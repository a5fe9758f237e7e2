"""The one model resolver: `--model` -> (local folder, model id), with hub ids from the local cache only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarm_app.kernel.errors import ModelError
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.session.model import ResolvedModel, is_hub_id, resolve, resolve_model


def fake_hub_cache(tmp_path: Path, model_dir: Path, repo_id: str, monkeypatch) -> Path:
    """A Hugging Face cache holding `model_dir` as the snapshot of `repo_id`; returns the snapshot folder."""
    from huggingface_hub import constants

    org, name = repo_id.split("/")
    repo = tmp_path / "hub" / f"models--{org}--{name}"
    snapshot = repo / "snapshots" / "0123abcd"
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return snapshot


def test_empty_means_the_bundled_model():
    assert resolve("") == ResolvedModel(bundled_model_dir(), "swarm-tiny")
    assert resolve_model("") == bundled_model_dir()


def test_a_local_folder_is_named_after_itself(stub_model):
    assert resolve(str(stub_model)) == ResolvedModel(stub_model, "stub-model")


def test_a_hub_id_resolves_to_its_snapshot_and_keeps_the_hub_id(stub_model, tmp_path, monkeypatch):
    snapshot = fake_hub_cache(tmp_path, stub_model, "tiny/llama", monkeypatch)
    resolved = resolve("tiny/llama")
    assert resolved.folder.resolve() == snapshot.resolve()
    assert resolved.model_id == "tiny/llama"  # not the snapshot's commit hash "0123abcd"


def test_a_snapshot_folder_given_directly_publishes_the_hub_id(stub_model, tmp_path, monkeypatch):
    snapshot = fake_hub_cache(tmp_path, stub_model, "Qwen/Qwen2.5-0.5B-Instruct", monkeypatch)
    assert resolve(str(snapshot)).model_id == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_hub_id_not_in_the_cache_says_how_to_get_it(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(ModelError, match="local Hugging Face cache.*hf download nobody-here/no-such-model"):
        resolve("nobody-here/no-such-model")


@pytest.mark.parametrize("text, expected", [
    ("Qwen/Qwen2.5-0.5B-Instruct", True), ("gpt2", True), ("org/name/extra", False), ("./model", False),
    ("~/models/x", False), ("../x", False), ("/abs/path", False), ("a\\b", False), ("org/", False), ("a..b/c", False),
])
def test_what_counts_as_a_hub_id(text, expected):
    assert is_hub_id(text) is expected


def test_a_missing_path_that_is_no_hub_id_names_the_folder(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve(str(tmp_path / "nowhere" / "deeper"))


def test_a_folder_without_config_is_refused(stub_model):
    (stub_model / "config.json").unlink()
    with pytest.raises(ModelError, match="no config.json"):
        resolve(str(stub_model))
