"""`set_threads`: the count the session's thread tuner picks is the one the engine computes on next.

On the real bundled model: torch's intra-op pool is read inside the model's own forward while it
generates and trains (so the count is in effect where the work is done, not only set somewhere);
llama.cpp's context reports the count it decodes with (llama_n_threads). MLX has no thread setting: its
engine says so (False), and the session then keeps its load-time count.
"""

from __future__ import annotations

import pytest

from backends.base import Sampling, TrainSample
from tests.backends.conformance import load_engine

PROMPT = [[{"role": "user", "content": "What is 3 + 4?"}]]
SHORT = Sampling(max_new_tokens=4, temperature=0.0, seed=0)


def test_torch_computes_on_the_count_it_was_last_given():
    torch = pytest.importorskip("torch")
    engine = load_engine("torch")
    seen: list[int] = []
    hook = engine._model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        assert engine.set_threads(2) is True
        engine.generate(PROMPT, 1, SHORT)
        in_generation, seen[:] = set(seen), []
        assert engine.set_threads(1) is True
        completion = engine.generate(PROMPT, 1, SHORT)[0][0]
        engine.train_step([TrainSample(PROMPT[0], completion.text, 1.0)])
        in_training = set(seen)
    finally:
        hook.remove()
        torch.set_num_threads(before)
        engine.close()
    assert in_generation == {2} and in_training == {1}, (in_generation, in_training)


@pytest.mark.llamacpp
def test_llama_cpp_decodes_on_the_count_it_was_last_given(tmp_path):
    pytest.importorskip("llama_cpp")
    engine = load_engine("llama_cpp", cache_dir=str(tmp_path))
    try:
        engine.generate(PROMPT, 1, SHORT)  # the context exists from the first decode on
        decoder = engine._require_decoder()
        assert engine.set_threads(2) is True
        engine.generate(PROMPT, 1, SHORT)
        assert decoder._lib.llama_n_threads(decoder._ctx) == 2
        engine.set_threads(1)
        assert decoder._lib.llama_n_threads(decoder._ctx) == 1
    finally:
        engine.close()


@pytest.mark.mlx
def test_mlx_says_it_cannot_change_its_threads():
    pytest.importorskip("mlx_lm")
    engine = load_engine("mlx")
    try:
        assert engine.set_threads(2) is False
    finally:
        engine.close()
