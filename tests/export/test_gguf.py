"""`swarm export RUN --gguf DIR`: a trained run's files load in llama-cpp-python (base + LoRA adapter)
and answer the held-out items greedily exactly as torch does with the adapter."""

from __future__ import annotations

import importlib.util

import pytest

from swarm_app.cli import main
from swarm_app.kernel import tasks

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gguf") is None,
                                 reason="needs llama-cpp-python and gguf (extra [llamacpp])")


def trained_run(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["run", "--no-ui", "--offline", "--backend", "torch", "--threads", "1", "--rounds", "2",
                 "--local", "4", "--completions", "4", "--seed", "1", "--run-dir", str(run_dir)]) == 0
    return run_dir


def llama_greedy(base, adapter, prompts, max_new):
    import llama_cpp

    llm = llama_cpp.Llama(str(base), lora_path=str(adapter), n_ctx=512, n_threads=1, verbose=False,
                          type_k=0, type_v=0, logits_all=False)
    out = []
    for ids in prompts:
        tokens = []
        for token in llm.generate(ids, temp=0.0, top_k=0, min_p=0.0, repeat_penalty=1.0, reset=True):
            tokens.append(token)
            if len(tokens) >= max_new:
                break
        out.append(tokens)
    return out


@needs_llama
@pytest.mark.llamacpp
@pytest.mark.timeout(300)
def test_the_exported_run_answers_like_torch_with_the_adapter(tmp_path, capsys):
    from backends.base import ModelSpec, Sampling
    from backends.torch.engine import TorchBackend
    from swarm_app.kernel.paths import bundled_model_dir
    from swarm_app.training.checkpoint import Checkpoints

    run_dir = trained_run(tmp_path)
    assert main(["export", str(run_dir), "--gguf", str(tmp_path / "gguf"), "--ollama", "swarm-tiny-trained"]) == 0
    printed = capsys.readouterr().out
    assert "exported round 2" in printed and "ollama create swarm-tiny-trained" in printed
    modelfile = (tmp_path / "gguf" / "Modelfile").read_text()
    assert "FROM ./base.gguf" in modelfile and "ADAPTER ./adapter.gguf" in modelfile and "<|im_end|>" in modelfile

    torch_engine = TorchBackend()
    torch_engine.load(ModelSpec(str(bundled_model_dir()), trainable=False))
    torch_engine.load_adapter(Checkpoints(run_dir).load_latest()[1])
    items = [tasks.regenerate(ref, heldout=True) for ref in tasks.heldout(tasks.preset("easy"), 10)]
    prompts = [torch_engine._encode_prompt(t.messages()) for t in items]
    greedy = Sampling(max_new_tokens=24, temperature=0.0)
    from_torch = [c.text for (c,) in torch_engine.generate([t.messages() for t in items], 1, greedy)]
    stops = set(torch_engine._stop_ids)
    from_llama = []
    for seq in llama_greedy(tmp_path / "gguf" / "base.gguf", tmp_path / "gguf" / "adapter.gguf", prompts, 24):
        end = next((i for i, t in enumerate(seq) if t in stops), len(seq))
        from_llama.append(torch_engine._tok.decode(seq[:end], skip_special_tokens=True))
    assert from_llama == from_torch
    assert len(set(from_torch)) > 1  # real answers, not one repeated string


def test_export_refuses_what_is_not_a_trained_run(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--gguf", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert ("not a run folder" in err) or ("needs the gguf package" in err)
