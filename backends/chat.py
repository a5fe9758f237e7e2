"""Prompts as token ids, the same way in every engine that tokenizes in Python (torch, mlx, and
llama_cpp through torch): the model folder's own fast tokenizer and chat template, and the tokens
that end a completion. Imports transformers only inside `load_tokenizer`; never swarm_app.
"""

from __future__ import annotations

import json
from pathlib import Path

from backends.base import BackendError, Messages

IM_END = "<|im_end|>"
"""The end-of-turn token of ChatML templates (the bundled model, Qwen)."""


def model_folder(path: str) -> Path:
    """`path` as a folder; hub ids and the bundled model are resolved by the app before the engine sees them."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise BackendError(f"model folder {folder} does not exist: check the path (resolve hub ids first)")
    return folder


def model_folder_problem(folder: Path) -> str | None:
    """What keeps `folder` from being a model folder an engine can open, or None: the one rule, which the
    app checks before any engine loads (swarm_app/session/model.py) and every engine checks again. A fast
    tokenizer (tokenizer.json) is required: load_tokenizer reads exactly that file, never tokenizer.model."""
    if not folder.is_dir():
        return f"{folder} is not a folder; pass a Hugging Face model folder"
    if not (folder / "config.json").is_file():
        return f"{folder} has no config.json; pass a Hugging Face model folder (save_pretrained output)"
    if not (folder / "tokenizer.json").is_file():
        return (f"{folder} has no tokenizer (tokenizer.json); save the model's fast tokenizer into it "
                "(AutoTokenizer.from_pretrained(...).save_pretrained(folder))")
    if not _has_chat_template(folder):
        return (f"{folder} has no chat template; use an instruct/chat model or add chat_template to "
                "tokenizer_config.json")
    return None


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("chat_template"))


def check_model_folder(folder: Path) -> None:
    problem = model_folder_problem(folder)
    if problem is not None:
        raise BackendError(problem)


def load_tokenizer(folder: Path):
    """The saved fast tokenizer, exactly (AutoTokenizer may swap in a class that tokenizes differently)."""
    from transformers import PreTrainedTokenizerFast

    try:
        tok = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read the tokenizer in {folder}: {exc}") from exc
    tok.padding_side = "left"  # not kept by save/load
    if not tok.chat_template:
        raise BackendError(f"the tokenizer in {folder} has no chat template: add a 'chat_template' to "
                           "tokenizer_config.json (or a chat_template.jinja), e.g. from the model's instruct version")
    if tok.eos_token_id is None:
        raise BackendError(f"the tokenizer in {folder} has no eos token: set eos_token in tokenizer_config.json")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def stop_ids(tok, end_id: int, checkpoint_eos: int | list[int] | None) -> list[int]:
    """Tokens that end a completion: the tokenizer's eos, the end-of-turn token and the checkpoint's eos ids."""
    extra = checkpoint_eos if isinstance(checkpoint_eos, list) else [checkpoint_eos]
    return sorted({tok.eos_token_id, end_id, *(i for i in extra if i is not None)})


def encode_prompt(tok, messages: Messages, model_id: str) -> list[int]:
    """The chat prompt's token ids, ready for the assistant's turn."""
    from jinja2 import TemplateError

    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError as exc:
        raise BackendError(f"the chat template of {model_id} rejected a prompt: {exc}") from exc
    # The template already holds every special token the model expects (BOS included).
    return tok(text, add_special_tokens=False)["input_ids"]
