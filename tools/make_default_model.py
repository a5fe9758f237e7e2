"""Build the bundled default model `assets/models/swarm-tiny` from a seed, offline, on a CPU.

Three steps, each a pure function of the seed and the flags:
1. a byte-level BPE tokenizer (one token per digit, ChatML specials, a chat template whose default
   system prompt is `swarm_app.kernel.tasks.SYSTEM_PROMPT`) trained on rendered items of the `easy` preset;
2. a small decoder with model_type "llama" (not qwen2: AutoTokenizer would swap in Qwen2Tokenizer),
   with a top-level `rope_theta` in config.json for mlx-lm;
3. supervised warm-up with a completion-only loss: prompt = the task's messages through the chat
   template exactly as the app renders them, target = `<answer>ANSWER</answer><|im_end|>`.

Training items come from `tasks.draw` with TaskRef seed `--seed` (never HELDOUT_SEED). reasoning-gym
builds item i of seed s from Random(s + i), so refs at different seeds can still be the same item:
draws whose s + i equals a held-out or validation item's are skipped. The run is short on purpose:
the model must start weak but not hopeless on the held-out set, so that GRPO has reward spread to use.
It also ends at the constant learning rate, with no decay: a decayed build scores higher at the start
and then gains far less under GRPO (benchmarks/results/learning/README.md).
It stops after `--steps` (not after a time budget, so that reruns are reproducible) and writes the
folder with a model card holding the scores from tools/measure_model.py. The defaults are the
bundled model's settings:

    python tools/make_default_model.py --seed 0
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import shutil
import statistics
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout: swarm_app need not be installed

import measure_model  # noqa: E402  (tools/ is sys.path[0] when run as a script)
from model_card import model_card  # noqa: E402

from swarm_app.kernel import tasks  # noqa: E402

log = logging.getLogger("make_default_model")

PAD, IM_START, IM_END = "<|pad|>", "<|im_start|>", "<|im_end|>"
VALIDATION_SEED_OFFSET = 1_000_003
"""Validation refs use TaskRef seed `--seed + this`: not a training seed, not HELDOUT_SEED."""


def chat_template() -> str:
    """ChatML; without a system message, the app's system prompt is inserted."""
    system = tasks.SYSTEM_PROMPT
    assert "{" not in system and "}" not in system, "the system prompt is pasted into Jinja as literal text"
    return (
        "{% if messages[0]['role'] != 'system' %}"
        f"{IM_START}system\n{system}{IM_END}\n"
        "{% endif %}"
        "{% for message in messages %}"
        f"{IM_START}{{{{ message['role'] }}}}\n{{{{ message['content'] }}}}{IM_END}\n"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{IM_START}assistant\n{{% endif %}}"
    )


def target_answer(task: tasks.Task) -> str | None:
    """The shortest of a few answers that the dataset's verifier scores 1, or None (the item is skipped).

    propositional_logic has no stored answer: its generator's example conclusion is used, which a
    small model cannot always get right, leaving GRPO something to find (e.g. restating a premise).
    decimal_arithmetic accepts any value within one unit of its last decimal place, so its 5-digit
    answers (0.33673) are also offered rounded to that place (0.3): a short target is easier to learn.
    """
    candidates = [task.answer]
    if task.ref.dataset == "propositional_logic":
        candidates = [str(task.entry["metadata"]["example_answer"])]
    elif task.ref.dataset == "decimal_arithmetic":
        places = tasks.known_specs()[task.ref.config_digest].config.get("max_num_decimal_places", 3)
        rounded = Decimal(task.answer).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        candidates.append(str(abs(rounded) if rounded == 0 else rounded))
    for answer in sorted(candidates, key=len):
        if tasks.score(task, f"<answer>{answer}</answer>") >= 1.0:
            return answer
    return None


def seen_fraction(refs: list[tasks.TaskRef], questions: set[str]) -> dict[str, float]:
    """Per task, the fraction of `refs` whose question text also came up in training.

    Different items can share a text when a task has few distinct questions (1-digit +/- has 242):
    the held-out set excludes training items, not training questions.
    """
    seen: dict[str, list[float]] = {}
    for ref in refs:
        seen.setdefault(ref.dataset, []).append(float(tasks.regenerate(ref, heldout=True).question in questions))
    return {name: round(statistics.fmean(v), 3) for name, v in seen.items()}


def round_robin_refs(specs: list[tasks.TaskSpec], seed: int, n: int, label: str) -> list[tasks.TaskRef]:
    rng = random.Random(f"{label}:{seed}")
    return [tasks.TaskRef(s.dataset, s.digest, seed, rng.randrange(tasks.DATASET_SIZE))
            for s in (specs[i % len(specs)] for i in range(n))]


def effective_items(refs: list[tasks.TaskRef]) -> set[tuple[str, str, int]]:
    """reasoning-gym's identity of an item: (dataset, config, seed + index)."""
    return {(r.dataset, r.config_digest, r.seed + r.index) for r in refs}


class TrainingStream:
    """Training examples for step k: `tasks.draw(specs, seed, k, batch)` minus reserved items."""

    def __init__(self, specs, seed: int, batch_size: int, reserved: set[tuple[str, str, int]]):
        if not 0 <= seed < tasks.HELDOUT_SEED:
            raise SystemExit(f"--seed must be in [0, {tasks.HELDOUT_SEED}): HELDOUT_SEED is reserved")
        self.specs, self.seed, self.batch_size, self.reserved = specs, seed, batch_size, reserved
        self.skipped = 0
        self.questions: set[str] = set()

    def batch(self, step: int) -> list[tuple[tasks.Task, str]]:
        out = []
        for ref in tasks.draw(self.specs, self.seed, step, self.batch_size):
            task = tasks.regenerate(ref)
            answer = target_answer(task)
            if (ref.dataset, ref.config_digest, ref.seed + ref.index) in self.reserved or answer is None:
                self.skipped += 1
                continue
            self.questions.add(task.question)
            out.append((task, answer))
        return out


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE: GPT-2's split, then every digit its own piece, so no merge contains a digit.

    In this order llama.cpp's "gpt-2" pre-tokenizer (which does not isolate digits) gives the same ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(add_prefix_space=False),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=[PAD, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
                                   chat_template=chat_template(), model_max_length=1024)


def render_chatml(messages: list[dict[str, str]]) -> str:
    """What `chat_template()` renders with add_generation_prompt=True (used before a tokenizer exists)."""
    if messages[0]["role"] != "system":
        messages = [{"role": "system", "content": tasks.SYSTEM_PROMPT}, *messages]
    turns = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return f"{turns}{IM_START}assistant\n"


def check_tokenizer(tokenizer, texts: list[str], items: list[tasks.Task]) -> None:
    """Round trip, one token per digit, and the Jinja template agreeing with `render_chatml`."""
    for task in items:
        for messages in (task.messages(), task.messages()[1:]):
            if measure_model.render_messages(tokenizer, messages) != render_chatml(messages):
                raise SystemExit("the chat template renders differently from render_chatml")
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.decode(ids) != text:
            raise SystemExit(f"tokenizer does not round-trip: {text[:80]!r}")
        digits = [t for t in tokenizer.convert_ids_to_tokens(ids) if any(c.isdigit() for c in t)]
        if any(len(t) != 1 for t in digits):
            raise SystemExit(f"a token holds a digit and more: {digits}")


def build_model(tokenizer, args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=tokenizer.convert_tokens_to_ids(IM_START), eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(config)


def encode_example(tokenizer, task: tasks.Task, answer: str) -> tuple[list[int], int]:
    """Token ids of prompt + completion + eos, and the prompt length (no loss on the prompt)."""
    prompt = tokenizer(measure_model.render(tokenizer, task), add_special_tokens=False)["input_ids"]
    completion = tokenizer(f"<answer>{answer}</answer>", add_special_tokens=False)["input_ids"]
    return prompt + completion + [tokenizer.eos_token_id], len(prompt)


def step_loss(model, examples: list[tuple[list[int], int]], pad_id: int, micro_batches: int,
              shared: int = 0) -> list[float]:
    """Backward of the mean completion-token cross entropy; returns each example's mean token loss.

    The first `shared` tokens (system prompt and chat header, the same in every example: about a
    third of an average prompt) go through the model once per step and are reused as a KV cache by
    every example; gradients still flow through them. The rest is sorted by length into
    `micro_batches` chunks to cut padding (prompts differ 4x in length).
    """
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    head = examples[0][0][:shared]
    assert all(ids[:shared] == head for ids, _ in examples), "prompts must share the first `shared` tokens"
    prefix = model.model(input_ids=torch.tensor([head]), use_cache=True).cache if shared else None
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    n_target = sum(len(ids) - n_prompt for ids, n_prompt in examples)
    size = math.ceil(len(examples) / micro_batches)
    per_example = [0.0] * len(examples)
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        width = max(len(examples[i][0]) for i in chunk) - shared
        ids = torch.full((len(chunk), width), pad_id)
        labels = torch.full((len(chunk), width), -100)
        mask = torch.zeros((len(chunk), shared + width), dtype=torch.long)
        for row, i in enumerate(chunk):
            seq, n_prompt = examples[i]
            ids[row, :len(seq) - shared] = torch.tensor(seq[shared:])
            labels[row, n_prompt - shared:len(seq) - shared] = torch.tensor(seq[n_prompt:])
            mask[row, :len(seq)] = 1
        cache = None
        if prefix is not None:
            cache = DynamicCache()
            for index, layer in enumerate(prefix.layers):
                cache.update(layer.keys.expand(len(chunk), -1, -1, -1), layer.values.expand(len(chunk), -1, -1, -1),
                             index)
        logits = model(input_ids=ids, attention_mask=mask, cache=cache,
                       position_ids=torch.arange(shared, shared + width).expand(len(chunk), -1)).logits[:, :-1]
        token_loss = F.cross_entropy(logits.transpose(1, 2), labels[:, 1:], ignore_index=-100, reduction="none")
        (token_loss.sum() / n_target).backward(retain_graph=prefix is not None)
        counts = (labels[:, 1:] != -100).sum(1)
        for row, i in enumerate(chunk):
            per_example[i] = (token_loss[row].sum() / counts[row]).item()
    return per_example


def shared_prefix(tokenizer) -> int:
    """Length of the token prefix every rendered prompt starts with (system turn + user header)."""
    ids = [tokenizer(render_chatml([{"role": "user", "content": q}]), add_special_tokens=False)["input_ids"]
           for q in ("1", "x")]
    return next(n for n, (a, b) in enumerate(zip(*ids)) if a != b)


def learning_rate(step: int, args) -> float:
    """Linear warm-up, constant, then linear decay to 10% over the last `decay_frac` of the steps."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    decay_start = int(args.steps * (1 - args.decay_frac))
    if step < decay_start:
        return args.lr
    return args.lr * (1 - 0.9 * (step - decay_start) / max(1, args.steps - decay_start))


def train(model, tokenizer, stream: TrainingStream, validation: list[tasks.TaskRef], args) -> tuple[list[dict], int]:
    """Supervised steps; returns the curve and the step whose weights the model holds at the end: the
    validation point with the highest exact-match rate (greedy accuracy jumps several points between
    neighbouring checkpoints, so the last one is a matter of luck)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    history, losses, started = [], [], time.perf_counter()
    best: tuple[float, int, dict] | None = None
    shared = shared_prefix(tokenizer)
    for step in range(args.steps):
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args)
        batch = stream.batch(step)
        examples = [encode_example(tokenizer, t, a) for t, a in batch]
        example_losses = step_loss(model, examples, tokenizer.pad_token_id, args.micro_batches, shared)
        losses.extend((t.ref.dataset, x) for (t, _), x in zip(batch, example_losses))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            point = {"step": step + 1, "minutes": round((time.perf_counter() - started) / 60, 2),
                     "loss": round(statistics.fmean(x for _, x in losses), 4),
                     "loss_per_task": {name: round(statistics.fmean(x for n, x in losses if n == name), 3)
                                       for name in dict.fromkeys(n for n, _ in losses)}}
            losses = []
            if validation:
                model.eval()
                tokenizer.padding_side = "left"
                report = measure_model.greedy_report(model, tokenizer, validation)
                point.update(val_accuracy=report["accuracy"], val_exact=report["exact"],
                             val_per_task={k: v["accuracy"] for k, v in report["per_task"].items()})
                if best is None or report["exact"] > best[0]:
                    best = (report["exact"], step + 1, {k: v.detach().clone() for k, v in model.state_dict().items()})
            history.append(point)
            log.info(json.dumps(point))
    if best is None:
        return history, args.steps
    model.load_state_dict(best[2])
    log.info("kept the weights of step %d (validation exact match %.4f)", best[1], best[0])
    return history, best[1]


def write_config_extras(out: Path, model) -> None:
    """Top-level rope_theta for mlx-lm (transformers 5 writes it only under rope_parameters)."""
    path = out / "config.json"
    config = json.loads(path.read_text())
    config["rope_theta"] = float(model.config.rope_parameters["rope_theta"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


RECOMMENDED_SETTINGS = Path(__file__).with_name("swarm-tiny.swarm.toml")
"""The swarm.toml a build writes into its folder (the bundled model ships it): settings measured for it."""


def write_recommendations(out: Path) -> None:
    """swarm.toml: what this model needs that the app's defaults (written for real models) do not give."""
    shutil.copyfile(RECOMMENDED_SETTINGS, out / "swarm.toml")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="seeds everything: tokenizer data, init, draws")
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "models" / "swarm-tiny")
    p.add_argument("--preset", default="easy")
    p.add_argument("--steps", type=int, default=3000, help="training budget in optimizer steps")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--micro-batches", type=int, default=2, help="length-sorted chunks per step (padding)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--decay-frac", type=float, default=0.0,
                   help="share of the steps at the end over which lr decays linearly to 10%% (0: none)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--val-n", type=int, default=140, help="validation questions (not held-out) per eval")
    p.add_argument("--heldout-n", type=int, default=500, help="held-out questions for the model card")
    p.add_argument("--samples", type=int, default=8, help="samples per question for the reward-spread score")
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--tokenizer-items", type=int, default=3000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    specs = tasks.preset(args.preset)
    validation = round_robin_refs(specs, args.seed + VALIDATION_SEED_OFFSET, args.val_n, "validation")
    reserved = effective_items(tasks.heldout(specs, args.heldout_n) + validation)
    stream = TrainingStream(specs, args.seed, args.batch_size, reserved)

    # round -1: a draw no training step makes (steps count from 0)
    corpus = TrainingStream(specs, args.seed, args.tokenizer_items, reserved).batch(-1)
    texts = [render_chatml(t.messages()) + f"<answer>{a}</answer>{IM_END}" for t, a in corpus]
    tokenizer = train_tokenizer(texts, args.vocab_size)
    check_tokenizer(tokenizer, texts, [t for t, _ in corpus])
    model = build_model(tokenizer, args)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tokenizer %d tokens, model %d parameters", len(tokenizer), n_params)

    train_started, train_cpu = time.perf_counter(), time.process_time()
    history, kept_step = train(model, tokenizer, stream, validation, args)
    train_seconds, train_cpu = time.perf_counter() - train_started, time.process_time() - train_cpu

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out, save_jinja_files=False)  # template inside tokenizer_config.json
    write_config_extras(args.out, model)
    write_recommendations(args.out)
    write_gguf(args.out)
    report = measure_model.measure(args.out, args.preset, args.heldout_n, samples=args.samples, seed=args.seed)
    facts = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
             "argv": argv if argv is not None else sys.argv[1:], "specials": (PAD, IM_START, IM_END),
             "n_params": n_params, "vocab": len(tokenizer),
             "train_seconds": round(train_seconds), "train_cpu_seconds": round(train_cpu),
             "total_seconds": round(time.perf_counter() - started),
             "skipped_draws": stream.skipped, "history": history, "kept_step": kept_step, "report": report,
             "heldout_seen": seen_fraction(tasks.heldout(specs, args.heldout_n), stream.questions),
             "specs": [{"dataset": s.dataset, "config": s.config, "weight": s.weight} for s in specs],
             "reasoning_gym": tasks.reasoning_gym_version(), "torch": torch.__version__}
    (args.out / "README.md").write_text(model_card(facts, args.out))
    log.info(json.dumps({k: facts[k] for k in ("n_params", "train_seconds", "train_cpu_seconds", "total_seconds")}))
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def write_gguf(folder: Path) -> None:
    """The GGUF the llama_cpp engine runs on, shipped beside the weights so that engine needs no conversion
    (it checks the content key recorded inside; skipped with a note where gguf is not installed)."""
    import importlib.util

    from backends import gguf_export

    if importlib.util.find_spec("gguf") is None:
        log.warning("gguf is not installed: no GGUF written (pip install gguf, then run this again)")
        return
    config = json.loads((folder / "config.json").read_text())
    weights = gguf_export.weight_type_for(config)
    gguf_export.convert_model(folder, folder / f"model.{weights}.gguf", weights)


if __name__ == "__main__":
    sys.exit(main())
