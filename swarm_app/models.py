"""Finding a model folder: the bundled default, a local folder, or a Hugging Face id in the local cache.

Only cheap file checks happen here, before anything heavy is imported or anything is written, so a
bad `--model` fails in milliseconds with a message that says what to do.
"""

from __future__ import annotations

import json
from pathlib import Path

from swarm_app.errors import ModelError
from swarm_app.paths import bundled_model_dir


def resolve_model(path: str) -> Path:
    """The local folder of `path` ("" means the bundled model). Raises ModelError."""
    if not path:
        folder = bundled_model_dir()
        if not folder.is_dir():
            raise ModelError(f"the bundled model is missing from {folder}; reinstall swarm-app or pass --model FOLDER")
        return check_model_folder(folder)
    candidate = Path(path).expanduser()
    if candidate.exists():
        return check_model_folder(candidate)
    if _looks_like_hub_id(path):
        return check_model_folder(_from_hf_cache(path))
    raise ModelError(f"model folder {candidate} does not exist; pass --model with a folder that holds config.json")


def check_model_folder(folder: Path) -> Path:
    if not folder.is_dir():
        raise ModelError(f"--model {folder} is not a folder; pass a Hugging Face model folder")
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder} has no config.json; pass a Hugging Face model folder (save_pretrained output)")
    if not ((folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file()):
        raise ModelError(f"{folder} has no tokenizer (tokenizer.json); save the tokenizer into the model folder")
    if not _has_chat_template(folder):
        raise ModelError(f"{folder} has no chat template; use an instruct/chat model or add chat_template to tokenizer_config.json")
    return folder


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("chat_template"))


def _looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "~"))


def _from_hf_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download  # deferred: only for hub ids
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise ModelError(f"{repo_id} is neither a local folder nor in the Hugging Face cache; "
                         f"download it once (`hf download {repo_id}`) or pass --model FOLDER") from None
