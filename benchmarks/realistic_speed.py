"""Rollout and round speed at a realistic size: a random-weight model with Qwen2.5-0.5B's architecture.

The model is built from Qwen2.5-0.5B's config (494 M parameters, 24 layers, GQA 14/2 heads, q/k/v biases,
151,936-token vocabulary, tied embeddings), no download, with seeded random weights, and saved once as
an ordinary Hugging Face folder (fp32 safetensors, ~2 GB, cached in --work). It carries the bundled
model's tokenizer with its vocabulary padded to the model's 151,936 ids by added tokens "<x565>", ...
(prompts tokenize as with the bundled model; every generated id decodes to text that encodes back to
that id, so the app, which trains on the completion's text, sees as many tokens as were generated), so the
app loads it through the same code as any model. Random weights almost never emit a stop token, so every
completion runs to --new-tokens: the token counts of all contenders are equal.

Measured in one run, on the same I questions of the easy preset (their real prompts), L completions each,
T = 1, --threads threads for every contender. The app's torch engine holds the model in its default number
format (model.precision = auto: bf16 on a CPU with native bf16 such as AVX512-BF16, fp32 elsewhere;
`torch_dtype` in the results says which):
- torch: the app's generate() (one pass over each shared prompt) against raw transformers `generate` over
  the I x L left-padded rows, on the same weights; goal >= 1.5x (issue 15);
- llama.cpp: the app's llama_cpp engine (Q8_0 base GGUF, the F32 LoRA adapter attached) against the
  app's torch generate in fp32 (`torch_fp32`, loaded for this where auto chose bf16); goal >= 2x;
  `over_torch_app` is the ratio against the torch engine as `auto` loads it;
- one full round: the app (generate, reward, GRPO update with its defaults: 2 minibatches, 1 epoch), on
  the torch engine and on the llama_cpp engine (the one `auto` picks on a machine without a GPU where it
  is installed), against TRL's GRPOTrainer doing the same work (the same prompts, LoRA, lr, clip, no KL,
  no gradient checkpointing (TRL's default, which the app does not do), the same reward: crc32 of the
  completion text mod 2, so groups have spread), timed from train() to the end of the round's second
  optimizer step; goal >= 3x faster. TRL runs twice: fp32 (`trl`) and in bf16 (`trl_bf16`: the model
  loaded in bf16 and TRL's own bf16 mixed precision, its default), the like-for-like figure where the
  app holds the model in bf16.
Results go to --out after every part (a kill keeps what was measured).

    python -m benchmarks.realistic_speed [--questions 2] [--completions 8] [--new-tokens 48] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
"""Qwen2.5-0.5B's config.json (architecture fields)."""


def build_model(folder: Path, seed: int) -> Path:
    """The random Qwen2.5-0.5B-shaped model in `folder` (built once; reused when complete)."""
    if (folder / "done").is_file():
        return folder
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from swarm_app.kernel.paths import bundled_model_dir

    started = time.perf_counter()
    bundled = bundled_model_dir()
    special = json.loads((bundled / "generation_config.json").read_text())
    config = Qwen2Config(**QWEN25_05B, bos_token_id=special["bos_token_id"], eos_token_id=special["eos_token_id"],
                         pad_token_id=special["pad_token_id"])
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    tmp = folder.with_suffix(".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.copy(bundled / "tokenizer_config.json", tmp / "tokenizer_config.json")
    tokenizer = json.loads((bundled / "tokenizer.json").read_text())
    taken = set(tokenizer["model"]["vocab"].values()) | {t["id"] for t in tokenizer["added_tokens"]}
    tokenizer["added_tokens"] += [{"id": i, "content": f"<x{i}>", "single_word": False, "lstrip": False, "rstrip": False,
                                   "normalized": False, "special": False}
                                  for i in range(config.vocab_size) if i not in taken]
    (tmp / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (tmp / "done").write_text(f"{sum(p.numel() for p in model.parameters())} parameters\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
    print(f"built {folder} in {time.perf_counter() - started:.0f} s", flush=True)
    return folder


def reward(text: str) -> float:
    return float(zlib.crc32(text.encode()) % 2)


def generate_rate(engine, messages, completions: int, sampling) -> tuple[float, float]:
    """(new tokens/s, seconds) of one engine.generate call."""
    started = time.perf_counter()
    out = engine.generate(messages, completions, sampling)
    took = time.perf_counter() - started
    return sum(c.n_tokens for group in out for c in group) / took, took


def app_round(engine, messages, completions: int, sampling) -> dict:
    """One round through the engine: generate, reward, group advantages, train_step."""
    from backends.base import TrainSample
    from swarm_app.training.grpo import group_advantages

    started = time.perf_counter()
    groups = engine.generate(messages, completions, sampling)
    gen_s = time.perf_counter() - started
    batch = []
    for prompt, group in zip(messages, groups):
        advantages = group_advantages([reward(c.text) for c in group])
        batch += [TrainSample(prompt, c.text, a) for c, a in zip(group, advantages)]
    engine.train_step(batch)
    round_s = time.perf_counter() - started
    return {"gen_s": round(gen_s, 2), "train_s": round(round_s - gen_s, 2), "round_s": round(round_s, 2)}


def trl_round(folder: Path, messages, completions: int, new_tokens: int, work: Path, bf16: bool) -> dict:
    """One round of TRL's GRPOTrainer doing the app's work: I x L completions, then 2 optimizer steps;
    `bf16`: under TRL's own bf16 mixed precision (on a CPU, autocast), else fp32."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from backends.base import LoraConfig as AppLora
    from backends.base import OptimConfig

    lora, optim = AppLora(), OptimConfig()
    rows = len(messages) * completions
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            marks.append(time.perf_counter())

    def crc_reward(completions, **kwargs):
        return [reward(c[-1]["content"] if isinstance(c, list) else c) for c in completions]

    config = GRPOConfig(
        output_dir=str(work / "trl"), per_device_train_batch_size=rows // optim.minibatches,
        steps_per_generation=optim.minibatches, num_iterations=optim.epochs, num_generations=completions,
        max_completion_length=new_tokens, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
        epsilon=optim.clip_low, epsilon_high=optim.clip_high, loss_type="dapo", learning_rate=optim.learning_rate,
        max_grad_norm=optim.max_grad_norm, max_steps=optim.minibatches * optim.epochs, logging_steps=1,
        report_to=[], save_strategy="no", use_cpu=True, bf16=bf16, gradient_checkpointing=False,
        dataloader_num_workers=0, seed=0, shuffle_dataset=False)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16 if bf16 else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    trainer = GRPOTrainer(model=model, reward_funcs=crc_reward, args=config, processing_class=tokenizer,
                          train_dataset=Dataset.from_list([{"prompt": m} for m in messages]),
                          peft_config=LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=list(lora.target_modules), task_type="CAUSAL_LM"),
                          callbacks=[Clock()])
    trainer.train()
    return {"round_s": round(marks[-1] - marks[0], 2), "steps": len(marks) - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=2, help="I (default 2: a round here takes minutes)")
    parser.add_argument("--completions", type=int, default=8, help="L")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=0, help="per engine (default: one per physical core, "
                        "the app's default)")
    parser.add_argument("--seed", type=int, default=0, help="of the random weights")
    parser.add_argument("--parts", default="torch,llama_cpp,round,trl,trl_bf16")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "swarm-realistic-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "realistic_speed.json")
    args = parser.parse_args()
    import torch

    from backends import registry
    from backends.base import ModelSpec, Sampling
    from benchmarks.engine_speed import raw_torch_rate
    from swarm_app.kernel import tasks

    if args.threads == 0:
        from swarm_app.kernel import hardware

        args.threads = hardware.detect().physical_cores or 1
    torch.set_num_threads(args.threads)
    parts = args.parts.split(",")
    folder = build_model(args.work / f"qwen2.5-0.5b-random-{args.seed}-v3", args.seed)
    messages = [tasks.regenerate(ref).messages() for ref in tasks.draw(tasks.preset("easy"), 0, 0, args.questions)]
    sampling = Sampling(max_new_tokens=args.new_tokens, seed=1)
    results: dict = {"model": "random Qwen2.5-0.5B architecture", "I": args.questions, "L": args.completions,
                     "new_tokens": args.new_tokens, "threads": args.threads}

    def save(part: str, entry: dict) -> None:
        results[part] = entry
        print(part, json.dumps(entry), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")

    def load_torch(precision: str):
        engine = registry.create("torch")
        engine.load(ModelSpec(str(folder), threads=args.threads, cache_dir=str(args.work / "cache"),
                              precision=precision))
        engine.generate(messages[:1], 2, Sampling(max_new_tokens=4, seed=0))  # warm-up
        return engine

    torch_engine = load_torch("auto")
    dtype = next(p.dtype for n, p in torch_engine._model.named_parameters() if n.endswith("base_layer.weight"))
    results["torch_dtype"] = str(dtype).removeprefix("torch.")  # model.precision = auto on this machine
    results["prompt_tokens"] = [len(torch_engine._encode_prompt(m)) for m in messages]
    app_rate, app_s = generate_rate(torch_engine, messages, args.completions, sampling)
    if "torch" in parts:
        raw_rate = raw_torch_rate(torch_engine, messages, args.completions, args.new_tokens)  # the same weights
        save("torch", {"app_tok_s": round(app_rate, 2), "app_s": round(app_s, 1), "raw_generate_tok_s": round(raw_rate, 2),
                       "app_over_raw": round(app_rate / raw_rate, 3)})
    if "round" in parts:
        save("round", app_round(torch_engine, messages, args.completions, sampling))
    torch_engine.close()
    fp32_rate = app_rate
    if "llama_cpp" in parts and dtype != torch.float32:
        fp32_engine = load_torch("fp32")
        fp32_rate, fp32_s = generate_rate(fp32_engine, messages, args.completions, sampling)
        fp32_engine.close()
        save("torch_fp32", {"app_tok_s": round(fp32_rate, 2), "app_s": round(fp32_s, 1)})
    if "llama_cpp" in parts:
        llama = registry.create("llama_cpp")
        started = time.perf_counter()
        llama.load(ModelSpec(str(folder), threads=args.threads, cache_dir=str(args.work / "cache")))
        load_s = time.perf_counter() - started
        llama.generate(messages[:1], 2, Sampling(max_new_tokens=4, seed=0))  # warm-up
        rate, took = generate_rate(llama, messages, args.completions, sampling)
        save("llama_cpp", {"base": llama.base_gguf.name, "load_s": round(load_s, 1), "tok_s": round(rate, 2),
                           "s": round(took, 1), "over_torch_fp32": round(rate / fp32_rate, 3),
                           "over_torch_app": round(rate / app_rate, 3),
                           "round": app_round(llama, messages, args.completions, sampling)})
        llama.close()
    for part, bf16 in (("trl", False), ("trl_bf16", True)):
        if part not in parts:
            continue
        entry = trl_round(folder, messages, args.completions, args.new_tokens, args.work, bf16)
        if "round" in results:
            entry["app_torch_speedup"] = round(entry["round_s"] / results["round"]["round_s"], 3)
        if "llama_cpp" in results:
            entry["app_llama_cpp_speedup"] = round(entry["round_s"] / results["llama_cpp"]["round"]["round_s"], 3)
        save(part, entry)


if __name__ == "__main__":
    main()
