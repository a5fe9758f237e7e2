"""The torch engine on the tiny untrained llama: sampling, the GRPO update, adapter files and errors.

CPU only, one thread; the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.base import BackendError, Hardware, LoraConfig, ModelSpec, OptimConfig, Sampling, TrainSample  # noqa: E402
from backends.chat import IM_END  # noqa: E402
from backends.torch.batching import pad  # noqa: E402
from backends.torch.decode import shared_prompt_rows  # noqa: E402
from backends.torch.engine import TorchBackend  # noqa: E402

SHORT = [{"role": "user", "content": "What is 3 + 4?"}]
LONG = [
    {"role": "system", "content": "You are a helpful assistant. Think step by step."},
    {"role": "user", "content": "Convert the binary number 1011 to base 10, then add 5 to it."},
]
GREEDY = Sampling(max_new_tokens=8, temperature=0.0)


def make_backend(path, **spec_fields) -> TorchBackend:
    backend = TorchBackend()
    backend.load(ModelSpec(path=str(path), threads=1, **spec_fields))
    return backend


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    torch.set_num_threads(1)
    b = make_backend(tiny_model_dir)
    yield b
    b.close()


def completion_logps(backend: TorchBackend, samples: list[TrainSample]) -> list[float]:
    """Summed log-prob of each sample's completion (+ end token) under the current policy."""
    return [sum(row) for row in backend.token_logprobs(samples)]


def completion_tokens(backend: TorchBackend, samples: list[TrainSample]) -> list[int]:
    """Tokens of each sample's completion, its end token included (what the token mean counts)."""
    return [len(row) for row in backend.token_logprobs(samples)]


def full_forward_logps(backend: TorchBackend, sample: TrainSample) -> torch.Tensor:
    """The completion's token log-probs (+ end token) from one plain forward pass over prompt + completion."""
    prompt = backend.encode_prompt(sample.messages)
    completion = backend.tokenizer(sample.completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + completion + [backend.tokenizer.convert_tokens_to_ids(IM_END)]])
    logits = backend.model(input_ids=ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return logp[len(prompt) - 1 :]


def lora_and_base_params(backend: TorchBackend) -> tuple[dict, dict]:
    params = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    lora = {k: v for k, v in params.items() if "lora_" in k}
    return lora, {k: v for k, v in params.items() if "lora_" not in k}


PAIR = [
    TrainSample(messages=SHORT, completion="<answer>7</answer>", advantage=1.0),
    TrainSample(messages=SHORT, completion="The answer is 12.", advantage=-1.0),
]


def test_tiny_model_tokenizer(tiny_model_dir):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tiny_model_dir))
    assert 256 < len(tok) <= 512 and tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    assert tok.tokenize("2048") == ["2", "0", "4", "8"]
    text = tok.apply_chat_template(SHORT, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"


# -- loading and generation ----------------------------------------------------------------------


def test_is_available_and_model_id(backend, tiny_model_dir):
    ok, why = TorchBackend.is_available(Hardware())
    assert ok and "CPU" in why
    assert backend.model_id == Path(tiny_model_dir).name
    n_params = sum(p.numel() for p in backend.model.parameters())
    assert backend.memory() > 4 * n_params  # fp32 weights plus the AdamW moments of the LoRA parameters


def test_generate_shapes_and_token_counts(backend):
    out = backend.generate([SHORT, LONG], 3, Sampling(max_new_tokens=12, seed=1))
    assert [len(row) for row in out] == [3, 3]
    for completion in (c for row in out for c in row):
        assert isinstance(completion.text, str)
        assert 1 <= completion.n_tokens <= 12
        assert "<|im_end|>" not in completion.text and "<|pad|>" not in completion.text


def test_same_seed_same_completions_and_global_rng_untouched(backend):
    state = torch.get_rng_state()
    first = backend.generate([SHORT, LONG], 4, Sampling(max_new_tokens=16, seed=7))
    again = backend.generate([SHORT, LONG], 4, Sampling(max_new_tokens=16, seed=7))
    other = backend.generate([SHORT, LONG], 4, Sampling(max_new_tokens=16, seed=8))
    assert first == again
    assert first != other
    assert len({c.text for c in first[0]}) > 1  # the n samples of one prompt differ
    assert torch.equal(torch.get_rng_state(), state)


def test_greedy_is_deterministic(backend):
    first = backend.generate([SHORT, LONG], 2, GREEDY)
    again = backend.generate([SHORT, LONG], 2, GREEDY)
    assert first == again
    assert first[0][0] == first[0][1] and first[1][0] == first[1][1]


def _step_logits(backend: TorchBackend, prompts: list, row: int, n: int = 1) -> torch.Tensor:
    """Next-token logits of `row` at every greedy decoding step, captured at the output layer."""
    seen: list[torch.Tensor] = []
    rows = len(prompts) * n  # the shared-prompt prefill (one row per distinct prompt) is not a decoding step

    def keep(mod, args, out):
        if out.shape[0] == rows:
            seen.append(out[row, -1].detach().clone())

    head = backend.model.get_output_embeddings()
    handle = head.register_forward_hook(keep)
    try:
        backend.generate(prompts, n, GREEDY)
    finally:
        handle.remove()
    return torch.stack(seen)


def test_left_padding_does_not_change_a_prompts_logits(backend):
    assert len(backend.encode_prompt(LONG)) > len(backend.encode_prompt(SHORT)) + 10
    alone = _step_logits(backend, [SHORT], row=0)
    padded = _step_logits(backend, [LONG, SHORT], row=1)
    steps = min(len(alone), len(padded))
    assert steps >= 1
    assert torch.allclose(alone[:steps], padded[:steps], atol=1e-4)
    assert not torch.allclose(alone[0], _step_logits(backend, [LONG], row=0)[0], atol=1e-2)  # the check can fail


def test_a_shared_prompt_prefill_does_not_change_the_logits(backend):
    ids, mask = pad([backend.encode_prompt(p) for p in (SHORT, SHORT, LONG)], 0, left=True, device="cpu")
    assert shared_prompt_rows(ids) == [0, 2]  # copies of a prompt do share a prefill
    alone = _step_logits(backend, [SHORT, LONG], row=1)  # one row per prompt: nothing shared
    shared = _step_logits(backend, [SHORT, LONG], row=3, n=3)  # rows S S S L L L: the first copy of LONG
    assert len(alone) == len(shared) >= 2
    assert torch.allclose(alone, shared, atol=1e-4)


def test_right_padding_in_training_does_not_change_log_probs(backend):
    short = TrainSample(messages=SHORT, completion="7", advantage=1.0)
    long = TrainSample(messages=LONG, completion="The answer is 16, since 1011 is 11.", advantage=1.0)
    alone = completion_logps(backend, [short])
    together = completion_logps(backend, [long, short])
    assert together[1] == pytest.approx(alone[0], abs=1e-4)


def test_shared_prompt_pass_gives_the_log_probs_and_gradients_of_full_passes(tiny_model_dir):
    backend = make_backend(tiny_model_dir, optim=OptimConfig(learning_rate=1e-2, minibatches=1))
    backend.train_step(PAIR)  # LoRA B starts at zero: one step so that gradients reach A and B
    completions = ("16", "<answer>16</answer>", "It is sixteen, since 1011 is eleven.")
    batch = [TrainSample(messages=LONG, completion=c, advantage=1.0) for c in completions]
    shared = torch.tensor([x for row in backend.token_logprobs(batch) for x in row])
    full = torch.cat([full_forward_logps(backend, s) for s in batch]).detach()
    assert shared.shape == full.shape
    assert torch.allclose(shared, full, atol=1e-5)
    # At ratio 1 with every A = 1, the loss is -sum(log-probs) / tokens: its gradient is the log-probs' one, scaled.
    _, shared_grads = backend.loss_and_gradients(batch)
    params = {name.replace(".default", ""): p for name, p in backend.model.named_parameters() if p.requires_grad}
    full_sum = torch.cat([full_forward_logps(backend, s) for s in batch]).sum()
    full_grads = dict(zip(params, torch.autograd.grad(full_sum, list(params.values()))))
    assert set(shared_grads) == set(full_grads)
    assert any(g.abs().max() > 1e-4 for g in full_grads.values())
    for name, g in full_grads.items():
        # atol: float noise of a different summation order, next to entries up to ~3 in size.
        assert torch.allclose(torch.from_numpy(shared_grads[name]) * -len(full), g, rtol=1e-4, atol=1e-5)


def test_log_probs_refuse_sequences_with_different_prompts(backend):
    seqs = [backend._encode_sample(s) for s in (TrainSample(SHORT, "7", 1.0), TrainSample(LONG, "7", 1.0))]
    with pytest.raises(ValueError, match="one shared prompt"):
        backend._token_logps(seqs)


# -- training ------------------------------------------------------------------------------------


def test_train_step_changes_only_lora_parameters(tiny_model_dir):
    backend = make_backend(tiny_model_dir)
    lora_before, base_before = lora_and_base_params(backend)
    stats = backend.train_step(PAIR)
    lora_after, base_after = lora_and_base_params(backend)
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    assert any(not torch.equal(lora_before[k], lora_after[k]) for k in lora_before if "lora_B" in k)
    assert stats.tokens == sum(completion_tokens(backend, PAIR))
    assert stats.steps == 2  # one epoch, two minibatches of one sample
    assert stats.grad_norm > 0


def test_train_step_moves_positive_completion_up_and_negative_down(tiny_model_dir):
    backend = make_backend(tiny_model_dir, optim=OptimConfig(learning_rate=1e-2, minibatches=1))
    before = completion_logps(backend, PAIR)
    for _ in range(4):
        backend.train_step(PAIR)
    after = completion_logps(backend, PAIR)
    assert after[0] > before[0] + 0.5
    assert after[1] < before[1] - 0.5


def test_zero_advantages_train_nothing(tiny_model_dir):
    backend = make_backend(tiny_model_dir)
    lora_before, _ = lora_and_base_params(backend)
    stats = backend.train_step([replace(s, advantage=0.0) for s in PAIR])
    assert (stats.steps, stats.tokens) == (0, 0)
    assert all(torch.equal(v, lora_and_base_params(backend)[0][k]) for k, v in lora_before.items())


def test_first_step_loss_is_the_token_mean_over_all_completion_tokens(tiny_model_dir):
    # At the round's first step the ratio is 1, so the loss is -sum(A_i * n_i) / sum(n_i), where
    # zero-advantage samples add tokens to the divisor but nothing to the sum.
    backend = make_backend(tiny_model_dir, optim=OptimConfig(epochs=1, minibatches=1))
    batch = [*PAIR, TrainSample(messages=LONG, completion="Nothing to learn here at all.", advantage=0.0)]
    n = completion_tokens(backend, batch)
    stats = backend.train_step(batch)
    assert stats.tokens == sum(n)
    assert stats.loss == pytest.approx(-(1.0 * n[0] - 1.0 * n[1]) / sum(n), rel=1e-5)


def test_clip_acts_only_when_the_policy_moved_within_the_round(tiny_model_dir):
    one_step = make_backend(tiny_model_dir, optim=OptimConfig(learning_rate=5e-2, epochs=1, minibatches=1))
    stats = one_step.train_step(PAIR)
    assert stats.steps == 1 and stats.clipped_fraction == 0.0  # ratio is exactly 1 at the round's first step
    several = make_backend(tiny_model_dir, optim=OptimConfig(learning_rate=5e-2, epochs=3, minibatches=1))
    stats = several.train_step(PAIR)
    assert stats.steps == 3
    assert stats.clipped_fraction > 0.0


def test_untrainable_model_refuses_to_train(tiny_model_dir):
    backend = make_backend(tiny_model_dir, trainable=False)
    with pytest.raises(BackendError, match="trainable=False"):
        backend.train_step(PAIR)


# -- adapter files -------------------------------------------------------------------------------


def test_save_and_load_adapter_round_trip(tiny_model_dir, tmp_path):
    optim = OptimConfig(learning_rate=1e-2, minibatches=1)
    trained = make_backend(tiny_model_dir, optim=optim)
    trained.train_step(PAIR)
    trained.save_adapter(tmp_path / "adapter")
    names = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= names

    fresh = make_backend(tiny_model_dir, optim=optim)
    assert completion_logps(fresh, PAIR) != completion_logps(trained, PAIR)
    fresh.load_adapter(tmp_path / "adapter")
    assert completion_logps(fresh, PAIR) == completion_logps(trained, PAIR)
    # The optimizer moments came back too: one more identical step lands on the same weights.
    trained.train_step(PAIR)
    fresh.train_step(PAIR)
    lora_trained, lora_fresh = lora_and_base_params(trained)[0], lora_and_base_params(fresh)[0]
    assert all(torch.allclose(lora_trained[k], lora_fresh[k], atol=1e-6) for k in lora_trained)


def test_load_adapter_rejects_what_is_not_a_matching_adapter(backend, tiny_model_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackendError, match="not a LoRA adapter folder"):
        backend.load_adapter(tmp_path / "empty")
    other = make_backend(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8))
    other.save_adapter(tmp_path / "rank4")
    with pytest.raises(BackendError, match="rank 4"):
        backend.load_adapter(tmp_path / "rank4")
    shutil.copytree(tmp_path / "rank4", tmp_path / "broken")
    (tmp_path / "broken" / "adapter_config.json").write_text(json.dumps({"r": 16, "lora_alpha": 32}))
    (tmp_path / "broken" / "adapter_model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(BackendError, match="adapter weights"):
        backend.load_adapter(tmp_path / "broken")


# -- errors and model sources --------------------------------------------------------------------


def _copy_model(tiny_model_dir, dest: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(tiny_model_dir, dest, ignore=shutil.ignore_patterns(*drop) if drop else None)
    return dest


def test_missing_folder(tmp_path):
    with pytest.raises(BackendError, match="does not exist"):
        make_backend(tmp_path / "nowhere")


def test_folder_without_config(tiny_model_dir, tmp_path):
    folder = _copy_model(tiny_model_dir, tmp_path / "m", drop=("config.json",))
    with pytest.raises(BackendError, match="no config.json"):
        make_backend(folder)


def test_folder_without_tokenizer(tiny_model_dir, tmp_path):
    folder = _copy_model(tiny_model_dir, tmp_path / "m", drop=("tokenizer*",))
    with pytest.raises(BackendError, match=r"no tokenizer \(tokenizer\.json\).*save_pretrained"):
        make_backend(folder)


def test_tokenizer_without_chat_template(tiny_model_dir, tmp_path):
    folder = _copy_model(tiny_model_dir, tmp_path / "m")
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    del config["chat_template"]
    config_file.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(BackendError, match=f"{folder.name}.*no chat template.*chat_template"):
        make_backend(folder)


def test_lora_targets_that_do_not_exist(tiny_model_dir):
    with pytest.raises(BackendError, match="q_proj"):  # the message lists the layers that do exist
        make_backend(tiny_model_dir, lora=LoraConfig(target_modules=("c_attn", "c_proj")))


def test_a_hub_id_is_not_a_folder_to_the_engine():
    # The app's resolver (swarm_app.session.model.resolve) turns hub ids into folders; the engine takes only folders.
    with pytest.raises(BackendError, match="does not exist"):
        make_backend("nobody-here/no-such-model-4242")


def test_the_model_id_given_in_the_spec_is_the_one_reported(tiny_model_dir):
    backend = make_backend(tiny_model_dir, model_id="tiny/llama")
    assert backend.model_id == "tiny/llama"
    backend.close()


def test_calls_before_load_raise():
    backend = TorchBackend()
    with pytest.raises(BackendError, match="load"):
        backend.generate([SHORT], 1, GREEDY)
    assert backend.memory() == 0
