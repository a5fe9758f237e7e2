"""Measure a model folder on a task preset: held-out greedy accuracy and GRPO signal, printed as JSON.

Two numbers decide whether a bundled model suits RL: greedy accuracy on the fixed held-out list
(`tasks.heldout`), overall and per task, and the fraction of question groups whose L samples at
temperature T do not all get the same reward (a group with no spread has zero advantage everywhere,
so GRPO learns nothing from it). Accuracy here is the mean reward of `tasks.score` (rewards lie in
[0, 1]; propositional_logic gives partial credit); `exact` counts rewards of 1 only.

Generation is a minimal batched loop over `transformers.generate` with left padding, so this tool
does not depend on the app's backends. It is a developer tool: it prints, and sets torch to 1 thread
by default (on a shared machine more threads than free cores make timings swing up to 10x).

    python tools/measure_model.py assets/models/swarm-tiny --n 500 --samples 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout: swarm_app need not be installed

from swarm_app.kernel import tasks  # noqa: E402

MAX_NEW_TOKENS = 48
"""The app's default `Sampling.max_new_tokens`: completions must fit in it."""


def load(model_dir: Path | str):
    """Model (eval mode, float32) and tokenizer (left padding) from a HF folder."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    tokenizer.padding_side = "left"  # not kept by save/load
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    model.eval()
    return model, tokenizer


def render_messages(tokenizer, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def render(tokenizer, task: tasks.Task) -> str:
    """The prompt exactly as the app renders it: the task's messages through the chat template."""
    return render_messages(tokenizer, task.messages())


def generate(model, tokenizer, prompts: list[str], *, temperature: float = 0.0, samples: int = 1,
             max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 64, seed: int = 0) -> list[list[str]]:
    """`samples` completions per prompt (greedy when temperature is 0), decoded without special tokens.

    Prompts are sorted by length before batching to keep left padding short; sampling uses the full
    distribution (top_k=0, top_p=1), as GRPO rollouts do.
    """
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    jobs = [i for i in order for _ in range(samples)]
    results: list[list[str]] = [[] for _ in prompts]
    torch.manual_seed(seed)
    options = {"do_sample": False} if temperature == 0 else {
        "do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start:start + batch_size]
        batch = tokenizer([prompts[i] for i in chunk], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, **options)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        for i, text in zip(chunk, texts):
            results[i].append(text)
    return results


def _by_task(refs: list[tasks.TaskRef], values: list[float]) -> dict[str, float]:
    grouped: dict[str, list[float]] = {}
    for ref, value in zip(refs, values):
        grouped.setdefault(ref.dataset, []).append(value)
    return {name: round(statistics.fmean(v), 4) for name, v in grouped.items()}


def greedy_report(model, tokenizer, refs: list[tasks.TaskRef]) -> dict:
    """Greedy accuracy (mean reward), exact-match rate and answer-format rate, overall and per task."""
    items = [tasks.regenerate(ref, heldout=True) for ref in refs]
    completions = generate(model, tokenizer, [render(tokenizer, t) for t in items])
    rewards = [tasks.score(t, c[0]) for t, c in zip(items, completions)]
    exact = [float(r >= 1.0) for r in rewards]
    answers = [tasks.extract_answer(c[0]) for c in completions]
    formatted = [float(a is not None) for a in answers]
    exact_by_task = _by_task(refs, exact)
    return {
        "n": len(refs),
        "accuracy": round(statistics.fmean(rewards), 4),
        "exact": round(statistics.fmean(exact), 4),
        "answer_format": round(statistics.fmean(formatted), 4),
        "per_task": {name: {"accuracy": acc, "exact": exact_by_task[name],
                            **answer_diversity([a for r, a in zip(refs, answers) if r.dataset == name],
                                               [str(t.answer) for t in items if t.ref.dataset == name])}
                     for name, acc in _by_task(refs, rewards).items()},
        "examples": [{"dataset": t.ref.dataset, "answer": t.answer, "completion": c[0]}
                     for t, c in list(zip(items, completions))[:len(set(r.dataset for r in refs))]],
    }


def answer_diversity(answers: list[str | None], truths: list[str]) -> dict:
    """Does the model read the question? A model that learned only a task's answer prior gives most items
    the same answer: compare its distinct answers and the share of its most common one with the truth's."""
    def mode_share(values: list) -> float:
        return round(Counter(values).most_common(1)[0][1] / len(values), 4)

    return {"distinct_answers": len(set(answers)), "mode_share": mode_share(answers),
            "distinct_true_answers": len(set(truths)), "true_mode_share": mode_share(truths)}


def spread_report(model, tokenizer, refs: list[tasks.TaskRef], samples: int = 8, temperature: float = 1.0,
                  seed: int = 0) -> dict:
    """Fraction of question groups (`samples` completions each) whose rewards are not all equal, and of those
    with at least one completion fully right (pass@samples)."""
    items = [tasks.regenerate(ref, heldout=True) for ref in refs]
    groups = generate(model, tokenizer, [render(tokenizer, t) for t in items], temperature=temperature,
                      samples=samples, seed=seed)
    rewards = [[tasks.score(t, c) for c in group] for t, group in zip(items, groups)]
    spread = [float(max(r) > min(r)) for r in rewards]
    solved = [float(max(r) >= 1.0) for r in rewards]
    return {
        "questions": len(refs),
        "samples": samples,
        "temperature": temperature,
        "spread_fraction": round(statistics.fmean(spread), 4),
        "mean_reward": round(statistics.fmean(x for r in rewards for x in r), 4),
        "pass_at_samples": round(statistics.fmean(solved), 4),
        "per_task_spread": _by_task(refs, spread),
        "per_task_pass_at_samples": _by_task(refs, solved),
        "per_task_mean_reward": _by_task(refs, [statistics.fmean(r) for r in rewards]),
    }


def measure(model_dir: Path | str, preset: str = "easy", n: int = 500, spread_n: int | None = None,
            samples: int = 8, temperature: float = 1.0, seed: int = 0) -> dict:
    """Both reports for `model_dir` on the first `n` held-out refs of `preset` (`spread_n` for sampling)."""
    model, tokenizer = load(model_dir)
    specs = tasks.preset(preset)
    started = time.perf_counter()
    report = {"model": str(model_dir), "preset": preset,
              "greedy": greedy_report(model, tokenizer, tasks.heldout(specs, n))}
    if samples > 0:
        refs = tasks.heldout(specs, n if spread_n is None else spread_n)
        report["sampling"] = spread_report(model, tokenizer, refs, samples, temperature, seed)
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--preset", default="easy")
    parser.add_argument("--n", type=int, default=500, help="held-out questions for greedy accuracy")
    parser.add_argument("--spread-n", type=int, default=None, help="held-out questions for sampling (default: n)")
    parser.add_argument("--samples", type=int, default=8, help="completions per question (0: skip sampling)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    report = measure(args.model_dir, args.preset, args.n, args.spread_n, args.samples, args.temperature, args.seed)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
