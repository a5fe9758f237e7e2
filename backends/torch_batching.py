"""Batching helpers of the torch engine: padding, splitting a batch under a logit budget, and KV caches that
let several sequences share one pass over their common prompt. Must not import torch or transformers at
module level (see torch_lora.py).
"""

from __future__ import annotations

LOGIT_BUDGET = 1 << 26
"""Logit elements per training forward pass (256 MiB in fp32); minibatches are split to stay under it."""


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


def split_by_budget(lengths: list[int], vocab: int, budget: int = LOGIT_BUDGET) -> list[list[int]]:
    """Consecutive index groups whose padded logits (rows x longest x vocab) stay under `budget`."""
    groups: list[list[int]] = []
    longest = 0
    for i, length in enumerate(lengths):
        longest = max(longest, length)
        if groups and (len(groups[-1]) + 1) * longest * vocab <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
            longest = length
    return groups
