"""Hugging Face llama or qwen2 -> GGUF (base model) and PEFT LoRA -> GGUF LoRA adapter, with the `gguf` package.

Owns the tensor-name map and the llama.cpp layout rules: for llama, q and k rows
(and LoRA B of q and k) are permuted into llama.cpp's interleaved RoPE layout, using the KV head count
for k; qwen2 uses NEOX RoPE in llama.cpp (HF's layout: no permutation) and has q/k/v biases. The
tokenizer is written as a ByteLevel BPE (`tokenizer.ggml.pre` from HF's pre-tokenizer, the token list
padded to the model's vocab size as llama.cpp requires) with `add_bos_token` as HF's post-processor has it.
Base weights are F32 (exact: what `swarm export` writes), F16 or Q8_0 (matrices only; norms and biases
stay F32; the engine's choice is `weight_type_for`). Weights are read with safetensors' NumPy loader: no torch here. Any other
architecture is a BackendError naming the engine that can run it. Must not import swarm_app.
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
LAYER_KEY = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
ARCHITECTURES = ("llama", "qwen2")
"""HF model_type values that convert; the GGUF architecture has the same name."""
WEIGHT_TYPES = ("f32", "f16", "q8_0")
CONVERTER_VERSION = "2"
"""Part of the cache key: bump it when the conversion changes."""
CONTENT_KEY_FIELD = "swarm.content_key"
"""Written into every base GGUF: which HF files (and converter) it was made from."""


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name of a HF weight ("model.layers.0.self_attn.q_proj.weight" -> "blk.0.attn_q.weight")."""
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    match = LAYER_KEY.fullmatch(hf_name)
    if not match or match[2] not in LAYER_NAMES:
        raise BackendError(f"tensor {hf_name} has no GGUF name: only llama and qwen2 models convert; use --backend torch")
    return f"blk.{match[1]}.{LAYER_NAMES[match[2]]}.{match[3]}"


def permute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half q/k row order -> llama.cpp's interleaved RoPE order (rows = heads x head_dim)."""
    return weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _heads_for(gguf: str, config: dict) -> int | None:
    """Head count to permute by (llama q: attention heads, k: KV heads), None for other tensors and qwen2."""
    if config.get("model_type") != "llama":
        return None
    if ".attn_q." in gguf:
        return config["num_attention_heads"]
    if ".attn_k." in gguf:
        return config.get("num_key_value_heads", config["num_attention_heads"])
    return None


def read_config(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") not in ARCHITECTURES:
        raise BackendError(f"the llama_cpp engine converts {' and '.join(ARCHITECTURES)} models only and {folder.name} "
                           f"is {config.get('model_type')!r}: use --backend torch")
    if config.get("model_type") == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise BackendError(f"{folder.name} has biases in its layers, which llama.cpp's llama graph does not apply: "
                           "use --backend torch")
    return config


def weight_type_for(config: dict) -> str:
    """The base GGUF's weight type for a model: F16 up to ~134 M parameters (on the bundled model its greedy
    answers equal torch fp32's on 128 of 128 questions, at half F32's size), Q8_0 above (half of F16's
    memory traffic, which bounds CPU generation). The LoRA adapter is always F32."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    params = config["vocab_size"] * hidden + layers * (4 * hidden * hidden + 3 * hidden * config["intermediate_size"])
    return "q8_0" if params > 1 << 27 else "f16"


NOT_THE_MODEL = frozenset({"solo_curve.json"})
"""JSON files the app keeps beside a model that do not change the converted model (the bundled model's solo
curve for the sharing panel): left out of the content key, so the shipped GGUF stays the one used."""


def content_key(folder: Path) -> str:
    """A hash of the files that define the converted model (config, tokenizer, weights) and the converter."""
    digest = hashlib.sha256(CONVERTER_VERSION.encode())
    defining = [p for p in sorted(folder.glob("*.json")) if p.name not in NOT_THE_MODEL]
    for path in defining + sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def convert_model(folder: Path, out: Path, weights: str = "f32") -> Path:
    """Write `folder`'s model as a GGUF at `out` with `weights` ("f32", "f16" or "q8_0"), atomically (a temp file,
    then rename). The file records the folder's content key (`CONTENT_KEY_FIELD`)."""
    import gguf
    from safetensors.numpy import load_file

    if weights not in WEIGHT_TYPES:
        raise BackendError(f"GGUF weights {weights!r}: choose one of {', '.join(WEIGHT_TYPES)}")
    config = read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BackendError(f"{folder} has no .safetensors weights: save the model with safe_serialization=True")
    tmp = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(tmp), config["model_type"])
    _write_hparams(writer, config, weights)
    _write_tokenizer(writer, folder, config["vocab_size"])
    writer.add_string(CONTENT_KEY_FIELD, content_key(folder))
    for path in files:
        for name, weight in load_file(str(path)).items():
            target = gguf_name(name)
            heads = _heads_for(target, config)
            array = np.ascontiguousarray((permute_rows(weight, heads) if heads else weight).astype(np.float32))
            if weights == "q8_0" and array.ndim == 2 and array.shape[-1] % 32 == 0:
                writer.add_tensor(target, gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0),
                                  raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            elif weights == "f16" and array.ndim == 2:
                writer.add_tensor(target, array.astype(np.float16))
            else:
                writer.add_tensor(target, array)
    _finish(writer)
    tmp.replace(out)
    return out


def recorded_content_key(path: Path) -> str | None:
    """The content key a base GGUF was converted from (None: not one of ours, or unreadable)."""
    import gguf

    try:
        field = gguf.GGUFReader(str(path)).get_field(CONTENT_KEY_FIELD)
    except (OSError, ValueError):
        return None
    return field.contents() if field is not None else None


def _write_hparams(writer, config: dict, weights: str) -> None:
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
    writer.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[weights])  # llama.cpp's LLAMA_FTYPE_ALL_F32 / MOSTLY_F16 / _Q8_0


def _write_tokenizer(writer, folder: Path, vocab_size: int) -> None:
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    model = data["model"]
    if model.get("type") != "BPE":
        raise BackendError(f"the tokenizer of {folder.name} is {model.get('type')}, not a byte-level BPE: use --backend torch")
    vocab = {**model["vocab"], **{t["content"]: t["id"] for t in data.get("added_tokens", [])}}
    special = {t["id"] for t in data.get("added_tokens", []) if t.get("special")}
    size = max(vocab_size, max(vocab.values()) + 1)
    tokens = [f"[PAD{i}]" for i in range(size)]  # ids the tokenizer never produces (Qwen: 151665 of 151936)
    for text, index in vocab.items():
        tokens[index] = text
    known = set(vocab.values())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer_name(data.get("pre_tokenizer") or {}))
    writer.add_token_list(tokens)
    # 3: control, 1: normal, 5: unused
    writer.add_token_types([3 if i in special else 1 if i in known else 5 for i in range(size)])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])])
    tok_config = _json_or_empty(folder / "tokenizer_config.json")
    eos = vocab.get(_token_text(tok_config.get("eos_token")))
    pad = vocab.get(_token_text(tok_config.get("pad_token")))
    if eos is not None:
        writer.add_eos_token_id(eos)
    if pad is not None:
        writer.add_pad_token_id(pad)
    writer.add_add_bos_token(_adds_bos(data))


def _pre_tokenizer_name(pre: dict) -> str:
    """llama.cpp's name for HF's pre-tokenizer split: Qwen2's regex (single digits), Llama 3's (digits in
    threes), else GPT-2's."""
    patterns = [str((p.get("pattern") or {}).get("Regex", "")) for p in pre.get("pretokenizers", [pre])
                if p.get("type") == "Split"]
    if any("\\p{N}{1,3}" in p for p in patterns):
        return "llama-bpe"
    if any("\\p{N}|" in p for p in patterns):
        return "qwen2"
    return "gpt-2"


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
    writer = gguf.GGUFWriter(str(tmp), config["model_type"])
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
