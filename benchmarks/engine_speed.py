"""Rollout speed of the engines on the bundled model, each against its raw library in the same run.

For torch and llama.cpp (and mlx where installed), one thread each, I = 8 questions of the easy preset,
L = 8 completions, up to 48 new tokens at T = 1:
- rollout tokens/s through the engine's generate() against the raw library on the same prompts
  (torch: one transformers `generate` call over the 64 left-padded rows; llama.cpp: `create_completion`
  per row on the engine's GGUF, the library's plain API, F32 KV cache as the engine's); goal >= 0.9x raw
  (issue 15);
- the median time of a full SAPO round (generate, score, GRPO update) through the app's Trainer, over
  --rounds rounds after one warm-up, relative to torch on CPU (goal for llama.cpp: faster).

    python benchmarks/engine_speed.py [--rounds 5] [--out benchmarks/results/engine_speed.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path

from backends import registry
from backends.base import ModelSpec, Sampling
from swarm_app.kernel import tasks
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.training.loop import RoundPlan, Trainer

I, L, NEW_TOKENS = 8, 8, 48  # noqa: E741  (I and L: the paper's names)


def prompts() -> list:
    return [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset("easy"), 0, 0, I)]


def app_rate(engine, messages) -> float:
    started = time.perf_counter()
    out = engine.generate(messages, L, Sampling(max_new_tokens=NEW_TOKENS, seed=1))
    return sum(c.n_tokens for group in out for c in group) / (time.perf_counter() - started)


def raw_torch_rate(engine, messages, completions: int = L, new_tokens: int = NEW_TOKENS) -> float:
    import torch

    from backends.torch.batching import pad

    rows = [engine._encode_prompt(m) for m in messages for _ in range(completions)]
    ids, mask = pad(rows, engine._tok.pad_token_id, left=True, device=engine._device)
    torch.manual_seed(1)
    started = time.perf_counter()
    with torch.inference_mode():
        out = engine._model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
                                     top_k=0, eos_token_id=engine._stop_ids, pad_token_id=engine._tok.pad_token_id)
    took = time.perf_counter() - started
    stops = set(engine._stop_ids)
    new = out[:, ids.shape[1]:].tolist()
    tokens = sum(next((i + 1 for i, t in enumerate(row) if t in stops), len(row)) for row in new)
    return tokens / took


def raw_llama_rate(engine, messages) -> float:
    from llama_cpp import Llama

    llm = Llama(str(engine.base_gguf), n_ctx=1024, n_threads=1, n_threads_batch=1, type_k=0, type_v=0, verbose=False)
    tokens = 0
    rows = [engine._trainer._encode_prompt(m) for m in messages]
    started = time.perf_counter()
    for k, ids in enumerate(rows * L):
        llm.set_seed(k)
        done = llm.create_completion(prompt=ids, max_tokens=NEW_TOKENS, temperature=1.0, top_k=0, top_p=1.0,
                                     min_p=0.0, repeat_penalty=1.0)
        tokens += done["usage"]["completion_tokens"]
    return tokens / (time.perf_counter() - started)


RAW = {"torch": raw_torch_rate, "llama_cpp": raw_llama_rate}


def round_times(engine, rounds: int) -> list[float]:
    specs = tasks.preset("easy")
    plan = RoundPlan(specs, I, 0, L, seed=7, sampling=Sampling(max_new_tokens=NEW_TOKENS, temperature=1.0))
    trainer = Trainer(engine, plan)
    trainer.run_round(1)  # warm-up: first-call costs
    return [trainer.run_round(t).round_s for t in range(2, rounds + 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/engine_speed.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    messages, results = prompts(), {}
    engines = ["torch"] + [n for n, mod in (("llama_cpp", "llama_cpp"), ("mlx", "mlx")) if n in registry.names()
                           and importlib.util.find_spec(mod) is not None]
    for name in engines:
        engine = registry.create(name)
        engine.load(ModelSpec(str(bundled_model_dir()), threads=1))
        engine.generate(messages[:1], 2, Sampling(max_new_tokens=8, seed=0))  # warm-up
        entry = {"app_tok_s": round(app_rate(engine, messages), 1)}
        if name in RAW:
            entry["raw_tok_s"] = round(RAW[name](engine, messages), 1)
            entry["app_over_raw"] = round(entry["app_tok_s"] / entry["raw_tok_s"], 3)
        entry["round_s"] = round(statistics.median(round_times(engine, args.rounds)), 3)
        results[name] = entry
        engine.close()
        print(name, json.dumps(entry), flush=True)
    for name, entry in results.items():
        entry["round_over_torch"] = round(entry["round_s"] / results["torch"]["round_s"], 3)
    print(json.dumps(results, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"I": I, "L": L, "max_new_tokens": NEW_TOKENS, "threads": 1,
                                          "engines": results}, indent=2))


if __name__ == "__main__":
    main()
