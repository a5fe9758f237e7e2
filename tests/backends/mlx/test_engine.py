"""The MLX engine against torch and the NumPy reference on the bundled model (one thread, CPU MLX here).

Tolerances, measured here on the bundled model (float32 in both engines): token log-probs differ by up to
~2e-5 between MLX and torch (different kernels and summation order), so log-prob and logit checks use
1e-4; LoRA gradients agree within 1e-4 of their largest entry; the loss function alone agrees with the
NumPy reference within 1e-6 (float32 against float64).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from backends import adapter_convert
from backends.base import BackendError, Cancelled, LoraConfig, ModelSpec, OptimConfig, Sampling, TrainSample
from backends.grpo_reference import grpo_loss_reference
from tests.backends.conformance import BUNDLED, installed, load_engine

pytestmark = [pytest.mark.mlx, pytest.mark.skipif(not (installed("mlx") and installed("torch")),
                                                  reason="needs mlx and torch")]

QUESTIONS = [[{"role": "user", "content": f"What is {a} {op} {b}?"}] for a, op, b in
             [(3, "+", 4), (1, "+", 2), (5, "+", 3), (9, "-", 0), (7, "-", 1), (2, "+", 6)]]
BATCH = [
    TrainSample(QUESTIONS[0], "<answer>7</answer>", 1.2),
    TrainSample(QUESTIONS[0], "3 + 4 = 8 <answer>8</answer>", -0.4),
    TrainSample(QUESTIONS[1], "<answer>3</answer>", 0.9),
    TrainSample(QUESTIONS[1], "<answer>12</answer>", -0.9),
    TrainSample(QUESTIONS[1], "It is 3.", 0.0),
]
GREEDY = Sampling(max_new_tokens=24, temperature=0.0)
ONE_STEP = OptimConfig(learning_rate=0.05, epochs=1, minibatches=1)
LOGP_TOL = 1e-4


@pytest.fixture(scope="module")
def torch_adapter(tmp_path_factory):
    """A torch adapter one large step away from zero (B != 0, so it changes the logits), with its optimizer."""
    engine = load_engine("torch", optim=ONE_STEP)
    engine.train_step(BATCH)
    folder = tmp_path_factory.mktemp("torch-adapter")
    engine.save_adapter(folder)
    return folder


def converted(peft_folder, tmp_path):
    target = tmp_path / "as-mlx"
    adapter_convert.peft_to_mlx(peft_folder, target)
    return target


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(r) for r in a] == [len(r) for r in b]
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def test_greedy_generation_equals_torch_token_for_token():
    mlx, torch = load_engine("mlx"), load_engine("torch")
    expected = torch.generate(QUESTIONS, 1, GREEDY)
    assert mlx.generate(QUESTIONS, 1, GREEDY) == expected
    assert len({group[0].text for group in expected}) >= 3  # different prompts really give different answers


def test_greedy_generation_with_a_converted_torch_adapter_equals_torch(torch_adapter, tmp_path):
    mlx, torch = load_engine("mlx"), load_engine("torch")
    torch.load_adapter(torch_adapter)
    mlx.load_adapter(converted(torch_adapter, tmp_path))
    assert mlx.generate(QUESTIONS, 1, GREEDY) == torch.generate(QUESTIONS, 1, GREEDY)


def test_loss_function_and_gradient_equal_the_numpy_reference():
    import mlx.core as mx

    from backends.mlx.grpo_loss import grpo_loss

    rng = np.random.default_rng(3)
    old = rng.normal(-2.0, 1.0, (4, 7))
    new = old + rng.normal(0.0, 0.3, (4, 7))  # ratios from ~0.4 to ~2.5: both clip bounds act
    adv = np.array([[1.2], [-0.4], [-0.8], [0.7]])
    mask = np.arange(7)[None, :] < np.array([[7], [3], [5], [1]])
    ref = grpo_loss_reference(new, old, adv, mask, num_tokens=20)
    args = [mx.array(x.astype(np.float32)) for x in (old, adv)] + [mx.array(mask)]
    (loss, fraction), grad = mx.value_and_grad(lambda lp: grpo_loss(lp, *args, num_tokens=20))(mx.array(new.astype(np.float32)))
    assert 0 < ref.clipped_fraction < 1
    assert loss.item() == pytest.approx(ref.loss, abs=1e-6)
    assert fraction.item() == pytest.approx(ref.clipped_fraction, abs=1e-7)
    np.testing.assert_allclose(np.array(grad), ref.grad_logp, atol=1e-6)


def test_log_probs_loss_and_gradients_equal_torch_on_the_same_weights(torch_adapter, tmp_path):
    mlx, torch = load_engine("mlx"), load_engine("torch")
    torch.load_adapter(torch_adapter)
    mlx.load_adapter(converted(torch_adapter, tmp_path))
    assert max_diff(mlx.token_logprobs(BATCH), torch.token_logprobs(BATCH)) < LOGP_TOL
    mlx_loss, mlx_grads = mlx.loss_and_gradients(BATCH)
    torch_loss, torch_grads = torch.loss_and_gradients(BATCH)
    assert mlx_loss == pytest.approx(torch_loss, abs=1e-6)
    assert set(mlx_grads) == set(torch_grads)
    scale = max(np.abs(g).max() for g in torch_grads.values())
    assert scale > 1e-3  # a real gradient, not zeros
    worst = max(np.abs(mlx_grads[k] - torch_grads[k]).max() for k in torch_grads)
    assert worst < 1e-4 * scale


def test_lora_dropout_turns_the_first_minibatch_reuse_off():
    # A train-mode pass with dropout is one noisy draw, not the policy's log-probs (see backends/update.py).
    assert load_engine("mlx").reuses_first_pass
    assert not load_engine("mlx", lora=LoraConfig(dropout=0.3)).reuses_first_pass


def test_a_torch_run_continues_in_mlx_after_conversion(torch_adapter, tmp_path):
    """The converted adapter and AdamW moments take the next round's step exactly as torch does."""
    mlx, torch = load_engine("mlx", optim=ONE_STEP), load_engine("torch", optim=ONE_STEP)
    torch.load_adapter(torch_adapter)
    mlx.load_adapter(converted(torch_adapter, tmp_path))
    mlx_stats, torch_stats = mlx.train_step(BATCH), torch.train_step(BATCH)
    assert mlx_stats.loss == pytest.approx(torch_stats.loss, abs=1e-5)
    assert mlx_stats.grad_norm == pytest.approx(torch_stats.grad_norm, rel=1e-4)
    # Adam divides by sqrt(v): where a gradient entry is ~0, float noise of 1e-7 moves that weight by up to
    # ~2% of this large step (lr 0.05; median weight difference 4e-7 here), so log-probs drift up to ~1.5e-3.
    assert max_diff(mlx.token_logprobs(BATCH), torch.token_logprobs(BATCH)) < 5e-3


def test_mlx_adapter_converted_to_peft_gives_torch_the_same_logits(tmp_path):
    mlx = load_engine("mlx", optim=ONE_STEP)
    mlx.train_step(BATCH)
    mlx.save_adapter(tmp_path / "mlx")
    adapter_convert.mlx_to_peft(tmp_path / "mlx", tmp_path / "peft")
    torch = load_engine("torch", optim=ONE_STEP)
    torch.load_adapter(tmp_path / "peft")  # reads optimizer.pt too: the moments converted back
    assert max_diff(torch.token_logprobs(BATCH), mlx.token_logprobs(BATCH)) < LOGP_TOL
    assert logit_gap(mlx, torch, token_ids(torch, BATCH[1])) < LOGP_TOL


def token_ids(engine, sample: TrainSample) -> list[int]:
    """The sample's prompt and completion as one row of token ids."""
    return engine.encode_prompt(sample.messages) + engine.tokenizer(sample.completion, add_special_tokens=False)["input_ids"]


def logit_gap(mlx, torch_engine, ids: list[int]) -> float:
    import mlx.core as mx
    import torch

    with torch.no_grad():
        expected = torch_engine.model(input_ids=torch.tensor([ids])).logits.numpy()
    return float(np.abs(np.array(mlx.model(mx.array([ids]))) - expected).max())


def test_peft_to_mlx_and_back_is_exact_and_keeps_torch_parameter_order(torch_adapter, tmp_path):
    import torch
    from safetensors.numpy import load_file

    adapter_convert.mlx_to_peft(converted(torch_adapter, tmp_path), tmp_path / "back")
    original = load_file(str(torch_adapter / adapter_convert.PEFT_WEIGHTS))
    back = load_file(str(tmp_path / "back" / adapter_convert.PEFT_WEIGHTS))
    assert set(back) == set(original) and all(np.array_equal(back[k], original[k]) for k in original)
    engine = load_engine("torch")
    names = [n.replace(".default", "") for n, p in engine.model.named_parameters() if p.requires_grad]
    assert adapter_convert.torch_order(list(original)) == names
    first, again = (torch.load(f / "optimizer.pt", weights_only=True) for f in (torch_adapter, tmp_path / "back"))
    assert first["state"].keys() == again["state"].keys()
    for i, moments in first["state"].items():
        assert torch.equal(moments["exp_avg"], again["state"][i]["exp_avg"])
        assert torch.equal(moments["exp_avg_sq"], again["state"][i]["exp_avg_sq"])
        assert float(moments["step"]) == float(again["state"][i]["step"])
    config = json.loads((tmp_path / "as-mlx" / "adapter_config.json").read_text())
    assert config["lora_parameters"]["scale"] == 2.0 and config["num_layers"] == 4  # alpha 32 / rank 16


def test_rope_base_only_under_rope_parameters_still_loads_right(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["rope_theta"]
    config["rope_parameters"]["rope_theta"] = 500.0  # not mlx-lm's default of 10000: ignoring it shows
    (folder / "config.json").write_text(json.dumps(config))
    mlx, torch = load_engine("mlx", model_dir=folder), load_engine("torch", model_dir=folder)
    assert logit_gap(mlx, torch, token_ids(torch, BATCH[0])) < LOGP_TOL


def test_sampling_is_seeded_and_follows_top_p():
    mlx = load_engine("mlx")
    seeded = Sampling(max_new_tokens=10, temperature=1.0, top_p=0.9, seed=11)
    first = mlx.generate(QUESTIONS[:2], 4, seeded)
    assert mlx.generate(QUESTIONS[:2], 4, seeded) == first
    assert len({c.text for group in first for c in group}) > 1
    # top_p this small keeps only the most likely token: sampling becomes greedy.
    narrow = Sampling(max_new_tokens=10, temperature=1.0, top_p=1e-6, seed=5)
    greedy = Sampling(max_new_tokens=10, temperature=0.0)
    assert mlx.generate(QUESTIONS[:2], 2, narrow) == [g * 2 for g in mlx.generate(QUESTIONS[:2], 1, greedy)]


def test_progress_reports_decode_steps_and_can_cancel():
    mlx = load_engine("mlx")
    seen = []

    def stop_at_three(done, total):
        seen.append((done, total))
        if done == 3:
            raise Cancelled

    with pytest.raises(Cancelled):
        mlx.generate(QUESTIONS[:2], 2, Sampling(max_new_tokens=8, temperature=1.0, seed=1), stop_at_three)
    assert seen == [(1, 16), (2, 16), (3, 16)]


def test_bad_input_names_the_next_step(tmp_path):
    from backends.mlx.engine import MlxBackend

    engine = MlxBackend()
    with pytest.raises(BackendError, match="does not exist"):
        engine.load(ModelSpec(path=str(tmp_path / "nowhere")))
    folder = tmp_path / "odd"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "no_such_arch"}))
    with pytest.raises(BackendError, match="no_such_arch.*--backend torch"):
        engine.load(ModelSpec(path=str(folder)))
    (folder / "model.safetensors").unlink()
    with pytest.raises(BackendError, match="safetensors"):
        engine.load(ModelSpec(path=str(folder)))
    mlx = load_engine("mlx")
    torch = load_engine("torch")
    torch.save_adapter(tmp_path / "peft")
    with pytest.raises(BackendError, match="adapter_convert --to mlx"):
        mlx.load_adapter(tmp_path / "peft")


def test_memory_counts_weights_adapter_and_moments():
    mlx = load_engine("mlx")
    params = 4_200_000  # the bundled model: ~4.2 M float32 weights (tied embeddings counted once)
    assert 0.8 * params * 4 < mlx.memory() < 1.5 * params * 4
    assert mlx.device() == "mlx:cpu" or mlx.device() == "mlx:gpu"


def test_the_engine_can_be_called_from_any_thread(tmp_path):
    """The session loads on one thread and runs rounds on whichever pool thread is free: MLX keeps its
    streams per thread, so what loading reads from disk is materialized there, not left lazy."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from backends.mlx.engine import MlxBackend

    engine = MlxBackend()
    def load_and_resume() -> None:  # what the session's loading thread does
        engine.load(ModelSpec(str(BUNDLED)))
        engine.save_adapter(tmp_path / "adapter")
        engine.load_adapter(tmp_path / "adapter")

    loader = threading.Thread(target=load_and_resume)
    loader.start()
    loader.join()
    prompt = [{"role": "user", "content": "1 + 2 = ?"}]
    batch = [TrainSample(prompt, " <answer>3</answer>", 1.0), TrainSample(prompt, " <answer>4</answer>", -1.0)]
    for k in range(3):  # a new thread each time, as asyncio.to_thread may give
        with ThreadPoolExecutor(1) as pool:
            out = pool.submit(engine.generate, [prompt], 2, Sampling(max_new_tokens=8, seed=k)).result()
            stats = pool.submit(engine.train_step, batch).result()
        assert len(out[0]) == 2 and stats.tokens > 0
    engine.close()
