"""The torch engine's own decode loop (backends/torch/decode.py) against transformers' generate(), on the
bundled model (one thread), plus a tiny Qwen2 for grouped-query attention with q/k/v biases.

generate() is the reference: greedy tokens must be the same token for token, with the preallocated cache,
the shared-prompt prefill and finished rows leaving the batch. Sampling draws from generate()'s
distribution (its own warpers) by inverse CDF: tested against the probabilities, and seeded runs repeat.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.base import Cancelled, ModelSpec, Sampling  # noqa: E402
from backends.torch.batching import cache_kwarg, pad  # noqa: E402
from backends.torch.decode import PreallocatedLayer, decode, draw, new_cache, token_chooser  # noqa: E402
from backends.torch.engine import GENERATE_CHUNK, TorchBackend  # noqa: E402
from swarm_app.kernel import tasks  # noqa: E402
from tests.backends.conformance import BUNDLED  # noqa: E402

GREEDY = Sampling(max_new_tokens=40, temperature=0.0)


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(1)
    backend = TorchBackend()
    backend.load(ModelSpec(str(BUNDLED), threads=1))
    yield backend
    backend.close()


def questions(preset: str, count: int) -> list:
    return [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset(preset), 0, 0, count)]


def left_padded(engine, messages: list, n: int):
    rows = [engine.encode_prompt(m) for m in messages for _ in range(n)]
    return pad(rows, engine.tokenizer.pad_token_id, left=True, device=engine.device())


def cache_arg(engine) -> str:
    """The forward() argument that takes the KV cache, read as the engine reads it: from the model under the
    PEFT wrapper, whose own forward() names neither."""
    return cache_kwarg(engine.model.get_base_model())


def generate_reference(model, ids, mask, sampling: Sampling, stop_ids: list[int], pad_id: int) -> list[list[int]]:
    """transformers' generate() on the same rows, each cut after its first stop token."""
    options = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=pad_id, do_sample=sampling.temperature > 0,
                   eos_token_id=stop_ids or None)
    if sampling.temperature > 0:
        options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, **options)[:, ids.shape[1] :].tolist()
    return [row[: next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row))] for row in out]


def batch_sizes_seen(model) -> tuple[list[int], object]:
    """Rows of every forward pass through `model`'s output layer, recorded by a forward hook."""
    sizes: list[int] = []
    head = model.get_output_embeddings()
    return sizes, head.register_forward_hook(lambda mod, args, out: sizes.append(out.shape[0]))


@pytest.mark.parametrize(("preset", "n"), [("easy", 8), ("easy", 1), ("paper", 4), ("paper", 1)])
def test_greedy_tokens_equal_generate(engine, preset, n):
    # n > 1: copies of each prompt share one prefill; n == 1: no row repeats, whole prompts in the first step.
    ids, mask = left_padded(engine, questions(preset, 8), n)
    expected = generate_reference(engine.model, ids, mask, GREEDY, engine.stop_ids, engine.tokenizer.pad_token_id)
    with torch.inference_mode():
        got = decode(engine.model, cache_arg(engine), ids, mask, GREEDY, engine.stop_ids)
    assert got == expected
    assert len({len(row) for row in got}) > 1  # rows stopped at different steps, so the batch shrank


def test_rows_leave_the_batch_when_they_stop_and_keep_their_tokens(engine):
    ids, mask = left_padded(engine, questions("paper", 6), 2)
    expected = generate_reference(engine.model, ids, mask, GREEDY, engine.stop_ids, engine.tokenizer.pad_token_id)
    sizes, hook = batch_sizes_seen(engine.model)
    try:
        with torch.inference_mode():
            got = decode(engine.model, cache_arg(engine), ids, mask, GREEDY, engine.stop_ids)
    finally:
        hook.remove()
    assert got == expected
    # Each step over the rows still going, and only those; the prefill (one row per distinct prompt) skips
    # the LM head, so the first size the head sees is every row's first step.
    stopped = [sum(1 for row in got if len(row) <= step and row[-1] in engine.stop_ids) for step in range(41)]
    assert sizes == [len(got) - stopped[step - 1] for step in range(1, max(map(len, got)) + 1)]
    assert sizes[-1] < len(got)


def test_seeded_sampling_repeats_and_copies_of_a_prompt_differ(engine):
    ids, mask = left_padded(engine, questions("easy", 3), 3)
    sampling = Sampling(max_new_tokens=12, temperature=0.7, top_p=0.9)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        with torch.inference_mode():
            runs.append(decode(engine.model, cache_arg(engine), ids, mask, sampling, []))
    assert runs[0] == runs[1]
    assert len({tuple(row) for row in runs[0][:3]}) > 1  # copies of one prompt drew different tokens


def test_draws_follow_the_probabilities_and_skip_what_top_p_removed():
    torch.manual_seed(0)
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(40_000, 1)
    counts = torch.bincount(draw(probs), minlength=5).float() / len(probs)
    assert torch.allclose(counts, probs[0], atol=0.01) and counts[1] == 0 and counts[4] == 0
    logits = torch.tensor([[3.0, 2.0, 1.0, -1.0]])
    chooser = token_chooser(Sampling(temperature=1.0, top_p=0.7))  # keeps the two likeliest (0.67 + 0.24)
    assert set(torch.cat([chooser(logits) for _ in range(2000)]).tolist()) == {0, 1}


def test_top_p_this_small_is_greedy(engine):
    ids, mask = left_padded(engine, questions("easy", 4), 2)
    narrow = Sampling(max_new_tokens=16, temperature=1.0, top_p=1e-6)
    with torch.inference_mode():
        greedy = decode(engine.model, cache_arg(engine), ids, mask, GREEDY, engine.stop_ids)
        assert decode(engine.model, cache_arg(engine), ids, mask, narrow, engine.stop_ids) == \
            [row[:16] for row in greedy]


def test_completions_count_their_stop_token(engine):
    ids, mask = left_padded(engine, questions("easy", 4), 1)
    with torch.inference_mode():
        rows = decode(engine.model, cache_arg(engine), ids, mask, Sampling(max_new_tokens=5, temperature=0.0),
                      engine.stop_ids)
    completions = engine.generate(questions("easy", 4), 1, Sampling(max_new_tokens=5, temperature=0.0))
    for row, (completion,) in zip(rows, completions):
        stopped = row[-1] in engine.stop_ids
        assert completion.n_tokens == len(row) <= 5
        assert completion.text == engine.tokenizer.decode(row[:-1] if stopped else row, skip_special_tokens=True)


def test_progress_reports_decode_steps_over_all_chunks_and_can_cancel(engine):
    seen = []

    def stop_at(done, total):
        seen.append((done, total))
        if done == 10:
            raise Cancelled

    prompts = questions("easy", 2) * (GENERATE_CHUNK // 2)  # two chunks of GENERATE_CHUNK rows at n = 2
    sampling = Sampling(max_new_tokens=8, temperature=0.0)
    with pytest.raises(Cancelled):
        engine.generate(prompts, 2, sampling, stop_at)
    # Greedy: the easy answers stop within 8 tokens, so the second chunk starts at step 8 of 16.
    first_chunk = [d for d, _ in seen if d <= 8]
    assert {t for _, t in seen} == {16}
    assert first_chunk == list(range(1, len(first_chunk) + 1))
    assert seen[-1] == (10, 16) and (9, 16) in seen


def test_preallocated_layer_keeps_what_a_dynamic_cache_keeps():
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    ours, theirs = PreallocatedLayer(capacity=9), DynamicLayer()
    prompt = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    for layer in (ours, theirs):
        layer.update(*prompt)
        layer.batch_select_indices(torch.tensor([0, 0, 0, 1, 1]))  # each prompt repeated for its copies
    for step in range(3):
        new = torch.randn(5 - step, 3, 1, 4), torch.randn(5 - step, 3, 1, 4)
        keys, values = ours.update(*new)
        expected_keys, expected_values = theirs.update(*new)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        assert ours.get_seq_length() == theirs.get_seq_length() == 6 + step
        keep = torch.tensor([i for i in range(5 - step) if i != 1])  # a row stops
        for layer in (ours, theirs):
            layer.batch_select_indices(keep)
    with pytest.raises(ValueError, match="holds 9 tokens"):
        ours.update(torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4))


@pytest.mark.parametrize("sliding", [False, True])
def test_grouped_query_attention_with_biases_qwen2(sliding):
    # With a sliding-window layer the loop falls back to transformers' DynamicCache, which trims that layer.
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.3, tie_word_embeddings=False, use_sliding_window=sliding,
                         sliding_window=6, max_window_layers=1)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    assert model.model.layers[0].self_attn.k_proj.bias is not None
    cache = new_cache(model, 8)
    assert isinstance(cache, DynamicCache) == sliding
    assert sliding or all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 96, (length,), generator=gen).tolist() for length in (7, 12, 9)]
    ids, mask = pad([p for p in prompts for _ in range(2)], 0, left=True, device="cpu")
    stops = [5, 6, 7, 8, 9]  # frequent enough at random weights that some rows stop early
    sampling = Sampling(max_new_tokens=24, temperature=0.0)
    expected = generate_reference(model, ids, mask, sampling, stops, 0)
    assert len({len(row) for row in expected}) > 1
    with torch.inference_mode():
        assert decode(model, "cache", ids, mask, sampling, stops) == expected
