"""The llama.cpp engine against the torch engine on the bundled model: conversion, greedy equality token
for token, and equality again after every adapter swap (train steps and an adapter load)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
pytest.importorskip("torch")

from backends.base import BackendError, OptimConfig, Sampling, TrainSample  # noqa: E402
from backends.gguf_export import convert_model, permute_rows  # noqa: E402
from tests.backends.conformance import BUNDLED, load_engine  # noqa: E402

pytestmark = pytest.mark.llamacpp

GREEDY = Sampling(max_new_tokens=32, temperature=0.0)
BATCH = [TrainSample([{"role": "user", "content": "What is 2 + 5?"}], "<answer>7</answer>", 1.0),
         TrainSample([{"role": "user", "content": "What is 2 + 5?"}], "<answer>9</answer>", -1.0)]


@pytest.fixture(scope="module")
def prompts():
    from swarm_app import tasks

    return [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset("easy"), 0, 0, 8)]


def test_permutation_interleaves_the_two_rope_halves_per_head():
    rows = np.arange(8).reshape(8, 1)  # 2 heads of 4 rows: halves (0 1)(2 3) -> pairs 0 2 1 3
    assert permute_rows(rows, 2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_a_model_of_another_architecture_is_refused_with_the_next_step(tmp_path):
    import json
    import shutil

    folder = tmp_path / "qwen"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    with pytest.raises(BackendError, match="llama models only.*--backend torch"):
        convert_model(folder, tmp_path / "out.gguf")


def test_greedy_generation_equals_torch_token_for_token(prompts, tmp_path):
    torch_side, llama_side = load_engine("torch"), load_engine("llama_cpp", cache_dir=str(tmp_path))
    assert llama_side.generate(prompts, 1, GREEDY) == torch_side.generate(prompts, 1, GREEDY)


def test_after_each_adapter_swap_generations_equal_torch_with_the_adapter(prompts, tmp_path):
    optim = OptimConfig(learning_rate=1e-2)
    torch_side = load_engine("torch", optim=optim)
    llama_side = load_engine("llama_cpp", optim=optim, cache_dir=str(tmp_path))
    before = llama_side.generate(prompts, 1, GREEDY)
    for _ in range(3):
        torch_side.train_step(BATCH)
        llama_side.train_step(BATCH)
        assert llama_side.generate(prompts, 1, GREEDY) == torch_side.generate(prompts, 1, GREEDY)
    assert llama_side.generate(prompts, 1, GREEDY) != before  # the adapter really changed the answers
    torch_side.save_adapter(tmp_path / "adapter")
    reloaded = load_engine("llama_cpp", optim=optim, cache_dir=str(tmp_path))
    reloaded.load_adapter(tmp_path / "adapter")
    assert reloaded.generate(prompts, 1, GREEDY) == torch_side.generate(prompts, 1, GREEDY)


def test_the_base_gguf_is_converted_once_and_cached_by_content(tmp_path):
    first = load_engine("llama_cpp", cache_dir=str(tmp_path))
    cached = list((tmp_path / "gguf").glob("*.gguf"))
    assert len(cached) == 1 and cached[0].name.startswith("swarm-tiny-")
    mtime = cached[0].stat().st_mtime_ns
    first.close()
    load_engine("llama_cpp", cache_dir=str(tmp_path)).close()
    assert cached[0].stat().st_mtime_ns == mtime
