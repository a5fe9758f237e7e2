"""Batching helpers of the torch engine: padding, KV caches that let several sequences share one pass over
their common prompt, and the attention kernel of a training pass. (Splitting a batch under the logit budget
is plain Python that mlx shares: backends/grpo_batch.py.) Must not import torch or transformers at module
level (see backends/torch/engine.py).
"""

from __future__ import annotations

import contextlib

EAGER_ATTENTION_BUDGET = 1 << 28
"""Bytes of attention weights (all layers, fp32) a CPU training pass may keep for backward in eager attention."""


def pad(rows: list[list[int]], pad_id: int, left: bool, device):
    """(input_ids, attention_mask) for token rows, padded on the left or on the right."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
    return ids.to(device), mask.to(device)


def cache_kwarg(model) -> str:
    """The forward() argument that takes a KV cache: `cache` in recent transformers, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prompt_cache(model, kwarg: str, ids, mask, copies: list[int], cache=None):
    """A KV cache of the rows of `ids` (left-padded; `mask` marks real tokens), row i repeated `copies[i]` times.

    This is how a prompt shared by several sequences goes through the model once: the cache stands in for
    it in every copy, and with gradients enabled they flow back through the copies into that one pass.
    `kwarg` is the forward() argument that takes the cache (see `cache_kwarg`); `cache` is an empty one to
    fill (a DynamicCache when None). The pass skips the LM head where the model exposes its decoder: the
    cache needs no logits, and a bf16 CPU head over one position copied the whole transposed embedding
    matrix (573 ms per call on a 152k x 896 vocabulary, a fifth of a 0.5B model's round update).
    """
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config) if cache is None else cache
    body = decoder_of(model)
    head_args = {"logits_to_keep": 1} if body is model else {}
    body(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=True,
         **head_args, **{kwarg: cache})
    rows = torch.repeat_interleave(torch.arange(len(copies)), torch.tensor(copies))
    cache.batch_select_indices(rows.to(ids.device))
    return cache


def decoder_of(model):
    """The model's transformer body without its LM head (through a PEFT wrapper, LoRA layers included), or
    the model itself where it does not expose one."""
    get_decoder = getattr(model, "get_decoder", None)
    body = get_decoder() if callable(get_decoder) else None
    return model if body is None else body


@contextlib.contextmanager
def training_attention(model, device, rows: int, queries: int, keys: int):
    """Run one training forward pass with eager attention on a CPU when its attention weights are small.

    torch's CPU flash-attention kernel is slow on a training pass's short rows (49 queries over 149 keys:
    5.4 ms a layer backwards); the plain matmul-softmax-matmul does that work in a fraction of it and took
    a 0.5B model's update from 5.7-6.2 s to 5.2-5.3 s on 2 threads, but it keeps every layer's attention
    weights for backward, so it is used only while they fit EAGER_ATTENTION_BUDGET. Decoding stays on SDPA
    (faster there: 4.8 vs 5.05 s), as do GPUs. The backward pass follows the graph recorded here.
    """
    config = model.config.get_text_config()
    weights = 4 * rows * config.num_attention_heads * queries * keys * config.num_hidden_layers
    before = model.config._attn_implementation
    if device.type != "cpu" or before != "sdpa" or weights > EAGER_ATTENTION_BUDGET:
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)

