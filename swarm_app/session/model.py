"""The one model resolver: `--model` -> (local folder, model id).

`--model` may be empty (the bundled model), a local folder, or a Hugging Face id ("org/name" or a
legacy single name such as "gpt2") already in the local Hugging Face cache: never a download.
The model id is what peers see: the hub id for a hub model (also when the folder given is a cache
snapshot, whose own name is a commit hash), else the folder's name. Engines take only the folder.
Only cheap file checks happen here, before anything heavy is imported or anything is written, so a
bad `--model` fails in milliseconds with a message that says what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from swarm_app.kernel.errors import ModelError
from swarm_app.kernel.paths import bundled_model_dir

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
"""Hugging Face repo ids: "name" or "org/name"; letters, digits, '.', '_' and '-'."""
SNAPSHOT_PARENT = re.compile(r"models--(?P<org>[^/\\]+?)--(?P<name>[^/\\]+)")
"""The cache folder of one hub repo: <cache>/models--org--name/snapshots/<commit>."""


@dataclass(frozen=True)
class ResolvedModel:
    """A checked model folder and the id this node publishes for it."""

    folder: Path
    model_id: str


def resolve(path: str) -> ResolvedModel:
    """The folder and model id of `path` ("" means the bundled model). Raises ModelError."""
    if not path:
        folder = bundled_model_dir()
        if not folder.is_dir():
            raise ModelError(f"the bundled model is missing from {folder}; reinstall swarm-app or pass --model FOLDER")
        return ResolvedModel(check_model_folder(folder), folder.name)
    candidate = Path(path).expanduser()
    if candidate.exists():
        folder = check_model_folder(candidate)
        return ResolvedModel(folder, hub_id_of_snapshot(folder) or folder.resolve().name)
    if is_hub_id(path):
        return ResolvedModel(check_model_folder(_from_hf_cache(path)), path)
    raise ModelError(f"model folder {candidate} does not exist; pass --model with a folder that holds config.json "
                     "or a Hugging Face id (org/name) in the local cache")


def resolve_model(path: str) -> Path:
    """The local folder of `path` (kept for callers that need only the folder). Raises ModelError."""
    return resolve(path).folder


def is_hub_id(path: str) -> bool:
    """True for text shaped like a Hugging Face repo id (it may still be absent from the cache)."""
    return bool(HUB_ID.fullmatch(path)) and ".." not in path and "--" not in path


def hub_id_of_snapshot(folder: Path) -> str:
    """"org/name" when `folder` is a snapshot in a Hugging Face cache, else ""."""
    resolved = folder.resolve()
    if resolved.parent.name != "snapshots":
        return ""
    match = SNAPSHOT_PARENT.fullmatch(resolved.parent.parent.name)
    return f"{match['org']}/{match['name']}" if match else ""


def check_model_folder(folder: Path) -> Path:
    """`folder`, once it passes the engines' own rule (backends/chat.py); else a one-line ModelError."""
    from backends.chat import model_folder_problem  # no heavy import: transformers loads only in load_tokenizer

    problem = model_folder_problem(folder)
    if problem is not None:
        raise ModelError(f"--model {problem}" if not folder.is_dir() else problem)
    return folder


def _from_hf_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download  # deferred: only for hub ids
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        raise ModelError(f"{repo_id} is neither a local folder nor in the local Hugging Face cache; "
                         f"download it once (`hf download {repo_id}`) or pass --model FOLDER") from None
