"""The text side of a llama.cpp engine that only generates (chat, eval): the model's HF tokenizer, its stop
tokens and the LoRA adapter's weights, read without torch.

A trainable llama.cpp engine takes all of this from its torch half (backends/torch/engine.py), which must
load the model in torch anyway. An engine that only generates needs none of torch: importing torch, peft
and the model classes and loading the weights a second time cost ~2.5 s of the ~3.4 s that `swarm chat
--prompt` took to its first token on 2 cores (benchmarks/chat_first_token.py). Prompts still go through
the same tokenizer and chat template (backends/chat.py), so the ids equal the trainable engine's.
Must not import swarm_app or torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from backends.base import BackendError, Messages, ModelSpec
from backends.chat import IM_END, check_model_folder, encode_prompt, load_tokenizer, model_folder, stop_ids

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


class PromptText:
    """What generation needs of the model besides its GGUF: the tokenizer, the stop ids, the model's id."""

    def __init__(self, spec: ModelSpec) -> None:
        folder = model_folder(spec.path)
        check_model_folder(folder)
        self.tokenizer = load_tokenizer(folder)
        end_id = self.tokenizer.get_vocab().get(IM_END, self.tokenizer.eos_token_id)
        self.stop_ids = stop_ids(self.tokenizer, end_id, checkpoint_eos(folder))
        self.model_id = spec.reported_id()

    def encode_prompt(self, messages: Messages) -> list[int]:
        return encode_prompt(self.tokenizer, messages, self.model_id)


def checkpoint_eos(folder: Path) -> int | list[int] | None:
    """The end tokens the checkpoint names, as transformers reads them: generation_config.json, else config.json."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
            except (OSError, ValueError) as exc:
                raise BackendError(f"cannot read {path}: {exc}") from exc
    return None


def read_adapter(folder: Path) -> tuple[dict[str, np.ndarray], float]:
    """A PEFT adapter folder's LoRA weights (its state dict, as numpy) and its alpha."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        state = load_file(str(folder / ADAPTER_WEIGHTS))
        return state, float(config["lora_alpha"])
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
        raise BackendError(f"cannot read the adapter in {folder}: {exc}") from exc
