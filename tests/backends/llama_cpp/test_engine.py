"""The llama.cpp engine against the torch engine on the bundled model and on a small random qwen2 model:
conversion (F32 and Q8_0, the shipped GGUF, the cache), greedy equality token for token, equality again
after every adapter swap (train steps and an adapter load), and batched generation."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
pytest.importorskip("torch")

from backends import gguf_export  # noqa: E402
from backends.base import BackendError, OptimConfig, Sampling, TrainSample  # noqa: E402
from backends.gguf_export import convert_model, permute_rows  # noqa: E402
from tests.backends.conformance import BUNDLED, load_engine  # noqa: E402

pytestmark = pytest.mark.llamacpp

GREEDY = Sampling(max_new_tokens=32, temperature=0.0)
BATCH = [TrainSample([{"role": "user", "content": "What is 2 + 5?"}], "<answer>7</answer>", 1.0),
         TrainSample([{"role": "user", "content": "What is 2 + 5?"}], "<answer>9</answer>", -1.0)]


@pytest.fixture(scope="module")
def prompts():
    from swarm_app.kernel import tasks

    return [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset("easy"), 0, 0, 8)]


def test_permutation_interleaves_the_two_rope_halves_per_head():
    rows = np.arange(8).reshape(8, 1)  # 2 heads of 4 rows: halves (0 1)(2 3) -> pairs 0 2 1 3
    assert permute_rows(rows, 2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_a_model_of_another_architecture_is_refused_with_the_next_step(tmp_path):
    import json
    import shutil

    folder = tmp_path / "gemma"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gemma2"}))
    with pytest.raises(BackendError, match="llama and qwen2 models only.*'gemma2'.*--backend torch"):
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


def test_the_bundled_model_runs_on_its_shipped_gguf_without_a_conversion(tmp_path):
    engine = load_engine("llama_cpp", cache_dir=str(tmp_path))
    assert engine.base_gguf == BUNDLED / "model.f16.gguf"
    assert not (tmp_path / "gguf").exists()
    engine.close()


def test_a_shipped_gguf_of_other_weights_is_ignored_and_the_model_converted_once_into_the_cache(tmp_path):
    import json
    import shutil

    folder = tmp_path / "swarm-tiny"
    shutil.copytree(BUNDLED, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "note": "changed"}))  # a new content key
    first = load_engine("llama_cpp", folder, cache_dir=str(tmp_path / "cache"))
    cached = list((tmp_path / "cache" / "gguf").glob("*.gguf"))
    assert len(cached) == 1 and cached[0].name.startswith("swarm-tiny-") and first.base_gguf == cached[0]
    mtime = cached[0].stat().st_mtime_ns
    first.close()
    load_engine("llama_cpp", folder, cache_dir=str(tmp_path / "cache")).close()
    assert cached[0].stat().st_mtime_ns == mtime


def test_batches_of_more_rows_than_one_context_pass_are_complete_and_reproducible(tmp_path):
    from swarm_app.kernel import tasks

    many = [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset("easy"), 0, 1, 9)]
    engine = load_engine("llama_cpp", cache_dir=str(tmp_path))
    sampling = Sampling(max_new_tokens=24, seed=5)
    first = engine.generate(many, 8, sampling)  # 72 rows: two passes of the 64-sequence context
    assert [len(group) for group in first] == [8] * 9
    assert all(0 < c.n_tokens <= 24 for group in first for c in group)
    assert engine.generate(many, 8, sampling) == first
    assert engine.generate(many, 8, Sampling(max_new_tokens=24, seed=6)) != first
    assert len({c.text for c in first[0]}) > 1  # the copies of a prompt sample independently


def test_a_progress_callback_that_raises_cancelled_stops_generation_between_steps(prompts, tmp_path):
    from backends.base import Cancelled

    engine = load_engine("llama_cpp", cache_dir=str(tmp_path))
    seen = []

    def progress(done, total):
        seen.append(done)
        if done >= 3:
            raise Cancelled()

    with pytest.raises(Cancelled):
        engine.generate(prompts, 8, Sampling(max_new_tokens=48, seed=1), progress)
    assert seen == [1, 2, 3]
    assert len(engine.generate(prompts[:1], 2, Sampling(max_new_tokens=8, seed=1))[0]) == 2  # still usable


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory):
    """A small random qwen2 model (GQA, q/k/v biases, a vocabulary padded past the tokenizer's ids) with the
    bundled tokenizer: the layout of Qwen2.5, the app's default real model, at a size a test can afford."""
    import shutil

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("qwen2") / "tiny-qwen2"
    config = Qwen2Config(vocab_size=608, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # biases that matter: a converter that dropped them would change the answers
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0, 0.5)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUNDLED / name, folder / name)
    return folder


def test_a_qwen2_model_generates_in_llama_cpp_as_in_torch_before_and_after_updates(qwen2_folder, prompts, tmp_path):
    optim = OptimConfig(learning_rate=1e-2)
    torch_side = load_engine("torch", qwen2_folder, optim=optim)
    llama_side = load_engine("llama_cpp", qwen2_folder, optim=optim, cache_dir=str(tmp_path))
    assert llama_side.base_gguf.name.endswith(".f16.gguf")
    greedy = Sampling(max_new_tokens=12, temperature=0.0)
    assert llama_side.generate(prompts, 1, greedy) == torch_side.generate(prompts, 1, greedy)
    for _ in range(2):
        torch_side.train_step(BATCH)
        llama_side.train_step(BATCH)
    assert llama_side.generate(prompts, 1, greedy) == torch_side.generate(prompts, 1, greedy)


def test_q8_0_weights_quarter_the_file_and_still_generate(qwen2_folder, tmp_path):
    import llama_cpp

    f32 = convert_model(qwen2_folder, tmp_path / "f32.gguf")
    q8 = convert_model(qwen2_folder, tmp_path / "q8.gguf", "q8_0")
    assert q8.stat().st_size < 0.35 * f32.stat().st_size
    llm = llama_cpp.Llama(str(q8), n_ctx=128, verbose=False)
    assert llm.n_vocab() == 608  # the token list is padded to the model's vocabulary
    tokens = []
    for token in llm.generate([1, 5, 9], temp=0.0):
        tokens.append(token)
        if len(tokens) == 5:
            break
    assert len(tokens) == 5 and all(0 <= t < 608 for t in tokens)
    llm.close()


def test_the_weight_type_follows_the_model_size():
    import json

    assert gguf_export.weight_type_for(json.loads((BUNDLED / "config.json").read_text())) == "f16"
    qwen25_05b = {"hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864, "vocab_size": 151936}
    assert gguf_export.weight_type_for(qwen25_05b) == "q8_0"


def test_the_pre_tokenizer_is_named_for_llama_cpp():
    qwen = {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex":
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"}},
            {"type": "ByteLevel", "use_regex": False}]}
    llama3 = {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"}}
    assert gguf_export._pre_tokenizer_name(qwen) == "qwen2"
    assert gguf_export._pre_tokenizer_name(llama3) == "llama-bpe"
    assert gguf_export._pre_tokenizer_name({"type": "ByteLevel", "use_regex": True}) == "gpt-2"


def test_an_engine_that_only_generates_answers_as_the_trainable_one_with_the_same_adapter(prompts, tmp_path):
    """trainable=False (chat, eval) reads the tokenizer and the adapter without torch: the same answers, greedy
    and sampled, before and after the adapter, as the trainable engine; training is refused with the reason."""
    optim = OptimConfig(learning_rate=1e-2)
    trainable = load_engine("llama_cpp", optim=optim, cache_dir=str(tmp_path))
    generator = load_engine("llama_cpp", trainable=False, cache_dir=str(tmp_path))
    sampled = Sampling(max_new_tokens=24, temperature=1.0, seed=3)
    assert generator.generate(prompts, 1, GREEDY) == trainable.generate(prompts, 1, GREEDY)
    before = generator.generate(prompts, 1, GREEDY)
    for _ in range(3):
        trainable.train_step(BATCH)
    trainable.save_adapter(tmp_path / "adapter")
    generator.load_adapter(tmp_path / "adapter")
    after = generator.generate(prompts, 1, GREEDY)
    assert after != before  # the adapter landed
    assert after == trainable.generate(prompts, 1, GREEDY)
    assert generator.generate(prompts, 2, sampled) == trainable.generate(prompts, 2, sampled)
    with pytest.raises(BackendError, match="trainable=False"):
        generator.train_step(BATCH)


def test_an_engine_that_only_generates_imports_no_torch(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from backends import registry; from backends.base import ModelSpec, Sampling; "
            f"e = registry.create('llama_cpp'); e.load(ModelSpec(path={str(BUNDLED)!r}, trainable=False, "
            f"cache_dir={str(tmp_path)!r})); "
            "e.generate([[{'role': 'user', 'content': 'What is 2 + 5?'}]], 1, Sampling(max_new_tokens=4, temperature=0)); "
            "print(sorted(m for m in ('torch', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
