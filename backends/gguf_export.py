"""Hugging Face llama -> GGUF (base model) and PEFT LoRA -> GGUF LoRA adapter, with the `gguf` package.

Owns the tensor-name map and the two llama.cpp layout rules (FIELD-NOTES, llama.cpp): q and k rows
(and LoRA B of q and k) are permuted into llama.cpp's RoPE layout, using the KV head count for k;
the tokenizer is written as a ByteLevel BPE with `tokenizer.ggml.pre = "gpt-2"` and `add_bos_token`
as HF's post-processor has it. Weights are read with safetensors' NumPy loader: no torch here.
Only the llama architecture (untied or tied embeddings, no biases) is supported; anything else is a
BackendError naming the engine that can run it. Must not import swarm_app.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np

from backends.base import BackendError

LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
LAYER_KEY = re.compile(r"model\.layers\.(\d+)\.(.+)\.weight")
CONVERTER_VERSION = "1"
"""Part of the cache key: bump it when the conversion changes."""


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name of a HF llama weight ("model.layers.0.self_attn.q_proj.weight" -> "blk.0.attn_q.weight")."""
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    match = LAYER_KEY.fullmatch(hf_name)
    if not match or match[2] not in LAYER_NAMES:
        raise BackendError(f"tensor {hf_name} has no GGUF name: only llama models convert; use --backend torch")
    return f"blk.{match[1]}.{LAYER_NAMES[match[2]]}.weight"


def permute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half q/k row order -> llama.cpp's interleaved RoPE order (rows = heads x head_dim)."""
    return weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _heads_for(gguf: str, config: dict) -> int | None:
    """Head count to permute by (q: attention heads, k: KV heads), None for other tensors."""
    if ".attn_q." in gguf:
        return config["num_attention_heads"]
    if ".attn_k." in gguf:
        return config.get("num_key_value_heads", config["num_attention_heads"])
    return None


def read_config(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "llama":
        raise BackendError(f"the llama_cpp engine converts llama models only and {folder.name} is "
                           f"{config.get('model_type')!r}: use --backend torch")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise BackendError(f"{folder.name} has biases in its layers, which this converter does not write: use --backend torch")
    return config


def content_key(folder: Path) -> str:
    """A hash of the files that define the converted model (config, tokenizer, weights) and the converter."""
    digest = hashlib.sha256(CONVERTER_VERSION.encode())
    for path in sorted(folder.glob("*.json")) + sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def convert_model(folder: Path, out: Path) -> Path:
    """Write `folder`'s llama model as an F32 GGUF at `out` (atomically: a temp file, then rename)."""
    import gguf
    from safetensors.numpy import load_file

    config = read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BackendError(f"{folder} has no .safetensors weights: save the model with safe_serialization=True")
    tmp = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    _write_hparams(writer, config)
    _write_tokenizer(writer, folder)
    for path in files:
        for name, weight in load_file(str(path)).items():
            target = gguf_name(name)
            heads = _heads_for(target, config)
            array = np.ascontiguousarray((permute_rows(weight, heads) if heads else weight).astype(np.float32))
            writer.add_tensor(target, array)
    _finish(writer)
    tmp.replace(out)
    return out


def _write_hparams(writer, config: dict) -> None:
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope))
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-5))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(0)  # all F32


def _write_tokenizer(writer, folder: Path) -> None:
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    model = data["model"]
    if model.get("type") != "BPE":
        raise BackendError(f"the tokenizer of {folder.name} is {model.get('type')}, not a byte-level BPE: use --backend torch")
    vocab = {**model["vocab"], **{t["content"]: t["id"] for t in data.get("added_tokens", [])}}
    special = {t["id"] for t in data.get("added_tokens", []) if t.get("special")}
    tokens = [""] * (max(vocab.values()) + 1)
    for text, index in vocab.items():
        tokens[index] = text
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in special else 1 for i in range(len(tokens))])  # 3: control, 1: normal
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])])
    tok_config = _json_or_empty(folder / "tokenizer_config.json")
    eos = vocab.get(_token_text(tok_config.get("eos_token")))
    pad = vocab.get(_token_text(tok_config.get("pad_token")))
    if eos is not None:
        writer.add_eos_token_id(eos)
    if pad is not None:
        writer.add_pad_token_id(pad)
    writer.add_add_bos_token(_adds_bos(data))


def _adds_bos(tokenizer: dict) -> bool:
    """True when HF's post-processor prepends a token (a TemplateProcessing with one before $A)."""
    post = tokenizer.get("post_processor") or {}
    processors = post.get("processors", [post])
    for proc in processors:
        single = proc.get("single") or []
        if proc.get("type") == "TemplateProcessing" and single and "SpecialToken" in single[0]:
            return True
    return False


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _json_or_empty(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def export_lora(state: dict[str, np.ndarray], config: dict, alpha: float, out: Path) -> Path:
    """Write a PEFT LoRA state dict ("...q_proj.lora_A.weight" -> array) as a GGUF LoRA adapter."""
    import gguf

    tmp = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    for name, weight in sorted(state.items()):
        base, part = _split_lora_name(name)
        target = gguf_name(base)
        heads = _heads_for(target, config) if part == "lora_b" else None
        array = np.ascontiguousarray((permute_rows(weight, heads) if heads else weight).astype(np.float32))
        writer.add_tensor(f"{target}.{part}", array)
    _finish(writer)
    tmp.replace(out)
    return out


def _split_lora_name(name: str) -> tuple[str, str]:
    """("model.layers.0.self_attn.q_proj.weight", "lora_a") from PEFT's state-dict key."""
    match = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])\.weight", name)
    if not match:
        raise BackendError(f"{name} is not a LoRA A/B weight: only plain LoRA adapters export to GGUF")
    return f"{match[1]}.weight", f"lora_{match[2].lower()}"


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
