"""The torch engine's decode loop: new token ids for a batch of left-padded prompts, one model call a step.

Owns: a KV cache preallocated for the whole call and written in place (transformers' DynamicCache grows by
torch.cat every step: 45% of the decode loop on the bundled model), the shared-prompt prefill (each
distinct prompt through the model once, its cache repeated for its copies), the token choice (argmax at
temperature 0; else transformers' temperature and top-p warpers over the whole distribution, as generate()
applies them, then one inverse-CDF draw per row: torch.multinomial took 47 ms a step for 16 rows over a
152k vocabulary, this 6 ms), and dropping rows from the batch once they have
emitted a stop token. Imports torch and transformers at module level: engine.py imports this module only
when it generates. Must not import swarm_app, nor know about chat templates or completions.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import CacheLayerMixin, get_layer_types_and_kwargs
from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from backends.base import Sampling
from backends.torch.batching import prompt_cache


class PreallocatedLayer(CacheLayerMixin):
    """One attention layer's keys and values in buffers sized for the whole call, filled in place.

    `update` returns views of the filled part, so attention reads only the tokens seen so far (a StaticCache
    returns the whole buffer and masks the rest: more attention work on every step).
    """

    is_sliding = False

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states, value_states) -> None:
        rows, heads = key_states.shape[:2]
        self.keys = key_states.new_empty((rows, heads, self.capacity, key_states.shape[-1]))
        self.values = value_states.new_empty((rows, heads, self.capacity, value_states.shape[-1]))
        self.device, self.is_initialized = key_states.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, self.length = self.length, self.length + key_states.shape[-2]
        if self.length > self.capacity:
            raise ValueError(f"the preallocated KV cache holds {self.capacity} tokens, {self.length} were given")
        self.keys[:, :, start : self.length] = key_states
        self.values[:, :, start : self.length] = value_states
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def batch_select_indices(self, indices) -> None:
        """Keep the rows `indices` (non-decreasing), copying only the filled part: more rows (a prompt's cache
        repeated for its copies) go to new buffers, fewer (finished rows dropped) move within the old ones."""
        if not self.is_initialized:
            return
        grow = len(indices) > self.keys.shape[0]
        select = self._repeated if grow else self._kept
        self.keys, self.values = select(self.keys, indices), select(self.values, indices)

    def _repeated(self, buffer, indices):
        out = buffer.new_empty((len(indices), *buffer.shape[1:]))
        rows, counts = torch.unique_consecutive(indices, return_counts=True)
        start = 0
        for row, count in zip(rows.tolist(), counts.tolist()):  # a broadcast copy per run: no temporary
            out[start : start + count, :, : self.length] = buffer[row, :, : self.length]
            start += count
        return out

    def _kept(self, buffer, indices):
        buffer[: len(indices), :, : self.length] = buffer[indices, :, : self.length]
        return buffer[: len(indices)]


def sampling_generator(seed: int | None, device, own):
    """The generator a generate() call draws from: a fresh one seeded with `seed` (the call's own stream: the
    same seed gives the same tokens whatever else the process samples meanwhile), else the engine's `own`.
    A seeded torch.Generator gives the same stream as torch.manual_seed with that seed did."""
    if seed is None:
        return own
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def new_cache(model, capacity: int) -> Cache:
    """A preallocated cache of `capacity` tokens where every layer is plain full attention; otherwise (sliding
    windows, linear attention: layers that keep less than every token) transformers' own DynamicCache."""
    config = model.config.get_text_config(decoder=True)
    layer_types, _ = get_layer_types_and_kwargs(config)
    if any(kind != "full_attention" for kind in layer_types):
        return DynamicCache(config=model.config)
    return Cache(layers=[PreallocatedLayer(capacity) for _ in layer_types])


def shared_prompt_rows(ids) -> list[int] | None:
    """The first row of each run of identical rows of `ids`; None when no row repeats its predecessor."""
    firsts = [0] + [i for i in range(1, len(ids)) if not torch.equal(ids[i], ids[i - 1])]
    return None if len(firsts) == len(ids) else firsts


def prefill(model, kwarg: str, ids, mask, cache: Cache) -> int:
    """Fill `cache` with every row of `ids` but its last token, each run of identical rows computed once.

    Rows come as n copies of each prompt: the prompt (~200 tokens on the easy preset) then goes through the
    model once instead of n times. Returns the tokens now cached: 0 when no row repeats (the first decode
    step then takes whole prompts, as generate() does) or the prompts are one token long.
    """
    firsts = shared_prompt_rows(ids)
    if firsts is None or ids.shape[1] < 2:
        return 0
    copies = [end - start for start, end in zip(firsts, [*firsts[1:], len(ids)])]
    prompt_cache(model, kwarg, ids[firsts, :-1], mask[firsts, :-1], copies, cache=cache)
    return ids.shape[1] - 1


def draw(probs, generator=None):
    """One token per row of `probs` (rows x vocab, each row summing to ~1), by inverse CDF with one uniform per
    row from `generator` (None: torch's global one). A token of probability 0 is never drawn (searching right
    of u skips flat stretches of the CDF)."""
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), device=probs.device, dtype=cdf.dtype, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


def token_chooser(sampling: Sampling, generator=None) -> Callable:
    """fp32 last-position logits -> one token per row: argmax at temperature <= 0; else generate()'s
    temperature then top-p warpers (top_k off, so the whole distribution counts) and one draw per row from
    `generator` (an engine's own: nodes in one process never share torch's global generator)."""
    if sampling.temperature <= 0:
        return lambda logits: torch.argmax(logits, dim=-1)
    warpers = LogitsProcessorList()
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return lambda logits: draw(torch.softmax(warpers(None, logits), dim=-1), generator)


def decode(model, kwarg: str, ids, mask, sampling: Sampling, stop_ids: list[int],
           on_step: Callable[[int], None] | None = None,
           on_token: Callable[[int, int], None] | None = None, generator=None) -> list[list[int]]:
    """New token ids per row of the left-padded prompts `ids` (`mask` marks real tokens), each up to and
    including its first stop token, at most `sampling.max_new_tokens`. `on_token(row, token)` hears each
    token as it is chosen (streaming), `on_step(k)` runs after step k; an exception either raises ends the
    loop. `kwarg` is the forward() argument that takes the cache; tokens are drawn from `generator` (see
    token_chooser)."""
    rows, width = ids.shape
    new_tokens = sampling.max_new_tokens
    if new_tokens < 1:
        return [[] for _ in range(rows)]
    choose = token_chooser(sampling, generator)
    stops = torch.tensor(stop_ids, device=ids.device)
    cache = new_cache(model, width + new_tokens - 1)  # the last token chosen is never fed back
    cached = prefill(model, kwarg, ids, mask, cache)
    # Position ids as generate() derives them from the mask: pads at 0, so left padding shifts nothing.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
    attention = torch.cat([mask, mask.new_ones((rows, new_tokens - 1))], dim=1)
    live = torch.arange(rows, device=ids.device)  # the row of `ids` each batch row stands for
    out, feed = [[] for _ in range(rows)], ids[:, cached:]
    for step in range(1, new_tokens + 1):
        logits = model(input_ids=feed, attention_mask=attention[:, : width + step - 1], position_ids=positions,
                       use_cache=True, logits_to_keep=1, **{kwarg: cache}).logits
        chosen = choose(logits[:, -1].float())
        for row, token in zip(live.tolist(), chosen.tolist()):
            out[row].append(token)
            if on_token is not None:
                on_token(row, token)
        if on_step is not None:
            on_step(step)
        going = ~torch.isin(chosen, stops)
        if not bool(going.all()):  # drop the rows that stopped: the remaining steps compute only the others
            keep = going.nonzero().squeeze(1)
            if len(keep) == 0:
                break
            cache.batch_select_indices(keep)
            live, chosen, attention, positions = live[keep], chosen[keep], attention[keep], positions[keep]
        feed, positions = chosen[:, None], positions[:, -1:] + 1
    return out
