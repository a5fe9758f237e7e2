"""The bundled default model (assets/models/swarm-tiny): present, small, loadable offline by transformers,
with the app's chat template, and generating the same text after a save/load round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_app.kernel import tasks

BUNDLED = Path(__file__).resolve().parents[1] / "assets" / "models" / "swarm-tiny"
MAX_BYTES = 25_000_000


@pytest.fixture(scope="module")
def bundled():
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(BUNDLED))
    model = AutoModelForCausalLM.from_pretrained(str(BUNDLED))
    model.eval()
    return model, tokenizer


def heldout_tasks(n: int) -> list[tasks.Task]:
    return [tasks.regenerate(ref, heldout=True) for ref in tasks.heldout(tasks.preset("easy"), n)]


def greedy(model, tokenizer, prompts: list[str]) -> list[str]:
    import torch

    tokenizer.padding_side = "left"  # not kept by save/load
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=48, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def render(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_folder_is_complete_and_small():
    names = {p.name for p in BUNDLED.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "README.md", "swarm.toml"} <= names
    assert sum(p.stat().st_size for p in BUNDLED.iterdir() if p.is_file()) <= MAX_BYTES


def test_config_loads_in_other_engines():
    config = json.loads((BUNDLED / "config.json").read_text())
    assert config["model_type"] == "llama"  # qwen2 would make AutoTokenizer swap the tokenizer
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]  # mlx-lm reads the top level


def test_chat_template_supplies_the_app_system_prompt(bundled):
    _, tokenizer = bundled
    task = heldout_tasks(1)[0]
    with_system = render(tokenizer, task.messages())
    assert render(tokenizer, task.messages()[1:]) == with_system
    assert with_system.startswith(f"<|im_start|>system\n{tasks.SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert with_system.endswith(f"{task.question}<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None


def test_tokenizer_round_trips_with_one_token_per_digit(bundled):
    _, tokenizer = bundled
    for task in heldout_tasks(9):
        text = render(tokenizer, task.messages()) + f"<answer>{task.answer}</answer><|im_end|>"
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        digit_tokens = [t for t in tokenizer.convert_ids_to_tokens(ids) if any(c.isdigit() for c in t)]
        assert all(len(t) == 1 for t in digit_tokens)


def test_gpt2_pretokenizer_gives_the_same_ids(bundled):
    """llama.cpp splits a byte-level BPE with its "gpt-2" pre-tokenizer, which does not isolate digits;
    no merge holds a digit, so the ids must not change."""
    from tokenizers import Tokenizer, pre_tokenizers

    _, tokenizer = bundled
    gpt2_split = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    gpt2_split.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's regex
    for task in heldout_tasks(14):
        text = render(tokenizer, task.messages()) + f"<answer>{task.answer}</answer><|im_end|>"
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert gpt2_split.encode(text, add_special_tokens=False).ids == expected


def test_greedy_generation_survives_save_and_load(bundled, tmp_path):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model, tokenizer = bundled
    prompts = [render(tokenizer, t.messages()) for t in heldout_tasks(6)]
    before = greedy(model, tokenizer, prompts)
    assert sum(tasks.extract_answer(text) is not None for text in before) >= 4  # it learned the format
    assert before == [greedy(model, tokenizer, [p])[0] for p in prompts]  # left padding changes nothing

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    reloaded.eval()
    assert greedy(reloaded, PreTrainedTokenizerFast.from_pretrained(str(tmp_path)), prompts) == before
