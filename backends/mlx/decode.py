"""Decoding helpers of the MLX engine: a prompt's KV cache shared by its completions, and the token choice.

Must not import swarm_app, and imports mlx and mlx_lm only inside its functions.
"""

from __future__ import annotations

from backends.base import Sampling


def empty_cache(model) -> list:
    from mlx_lm.models.cache import make_prompt_cache

    return make_prompt_cache(model)


def prefill(model, head: list[int], copies: int) -> list | None:
    """A KV cache of `head` computed once and repeated `copies` times along the batch (None when empty).

    With gradients on, they flow back through the copies into the one pass (as in torch_batching.prompt_cache).
    """
    import mlx.core as mx

    if not head:
        return None
    cache = empty_cache(model)
    model(mx.array([head]), cache=cache)
    for layer in cache:
        layer.keys = mx.repeat(layer.keys[..., : layer.offset, :], copies, axis=0)
        layer.values = mx.repeat(layer.values[..., : layer.offset, :], copies, axis=0)
    return cache


def pick(logits, sampling: Sampling, key):
    """Greedy at temperature 0, else a sample from the tempered distribution cut to the top-p mass."""
    import mlx.core as mx

    if sampling.temperature == 0:
        return mx.argmax(logits, axis=-1)
    logits = logits / sampling.temperature
    if sampling.top_p < 1.0:
        probs = mx.softmax(logits, axis=-1)
        ordered = mx.sort(probs, axis=-1)[:, ::-1]
        before = mx.cumsum(ordered, axis=-1) - ordered  # mass of the more likely tokens
        kept = mx.where(before < sampling.top_p, ordered, mx.inf).min(axis=-1, keepdims=True)
        logits = mx.where(probs >= kept, logits, -mx.inf)
    return mx.random.categorical(logits, key=key)
