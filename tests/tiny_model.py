"""A tiny untrained llama-type model folder for tests, built offline in a few seconds.

Owns: the test model (random weights, 2 layers, hidden 64) and its byte-level BPE tokenizer (digits one
token each, ChatML special tokens and chat template), written in standard HF format so every backend
loads it through its normal code path. Must not download anything or be used outside tests (the
bundled default model in assets/ is built by its own script).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)
VOCAB_SIZE = 384
"""256 byte symbols + 3 special tokens + ~125 merges: small, but long enough for real words."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS_LINES = (
    "You are a helpful assistant. Think step by step, then give the final answer.",
    "Put your final answer between <answer> and </answer> tags.",
    "What is 3 + 4? <answer>7</answer>",
    "What is 9 - 5? <answer>4</answer>",
    "Convert the binary number 1011 to base 10. <answer>11</answer>",
    "Simplify the fraction 6/8 to its lowest terms. <answer>3/4</answer>",
    "What day of the week is it 3 days after Monday? <answer>Thursday</answer>",
    "Compute 2.5 + 1.3 and give the result with one decimal. <answer>3.8</answer>",
    "The answer is the sum of the two numbers in the question.",
    "Let me think about this problem carefully before answering.",
)


def _corpus() -> list[str]:
    numbers = [f"{a} + {b} = {a + b}, {a} - {b} = {a - b}" for a in range(10) for b in range(10)]
    return list(_CORPUS_LINES) * 20 + numbers


def build_tokenizer():
    """A trained byte-level BPE (tokenizers.Tokenizer) with one token per digit."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def _update_json(path: Path, **values) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(values)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Write config, random weights and tokenizer (with chat template) into `folder`; return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(), eos_token=IM_END, pad_token=PAD, additional_special_tokens=[IM_START]
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    # save_jinja_files=False keeps the template inside tokenizer_config.json, where older readers look.
    hf_tok.save_pretrained(folder, save_jinja_files=False)
    # transformers 5 writes its own class name; this one loads in transformers 4.x as well.
    _update_json(folder / "tokenizer_config.json", tokenizer_class="PreTrainedTokenizerFast")

    config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    # transformers 5 keeps the RoPE base only under rope_parameters; mlx-lm reads the top-level key.
    _update_json(folder / "config.json", rope_theta=config.rope_parameters["rope_theta"])
    log.debug("tiny model (%d parameters) written to %s", model.num_parameters(), folder)
    return folder
