"""The model card (README.md) of a folder written by tools/make_default_model.py, from the build's own facts."""

from __future__ import annotations

import json
from pathlib import Path

# The card's "Limits" paragraph for the `easy` preset: why four of the paper's nine specialties are not in it.
EASY_LEFT_OUT = """Four of the SAPO paper's nine specialties are not in the `easy` preset. arc_1d and bf: at any setting
tried a model of this size scores 0 on them. calendar_arithmetic (weekday of a 2023 date) and
propositional_logic: an earlier build trained on them answered each with one fixed string ("Sunday",
right for 24% of items; "(P ∨ R)", which the verifier accepted for 77%), so they gave GRPO answer
priors to reshuffle instead of questions to read."""


NO_DECAY = """ A build whose rate decays over its last 20% starts higher but gains far less
  under GRPO: +5.9 against +12.9 points greedy in 30 minutes (benchmarks/results/learning/README.md,
  "A model that stops before its learning rate decays")."""


def model_card(facts: dict, out: Path) -> str:
    """README.md of the folder: how it was made and what it scores, from this run's own numbers."""
    a, greedy, sampling = facts["args"], facts["report"]["greedy"], facts["report"].get("sampling", {})
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file() and f.name != "README.md")
    rows = "\n".join(
        f"| {name} | {v['accuracy']:.3f} | {v['exact']:.3f} | {sampling.get('per_task_spread', {}).get(name, 0):.3f} | "
        f"{v['distinct_answers']} of {v['distinct_true_answers']} | {v['mode_share']:.2f} ({v['true_mode_share']:.2f}) |"
        for name, v in greedy["per_task"].items())
    specs = "\n".join(f"| {s['dataset']} | `{json.dumps(s['config'], ensure_ascii=False)}` | {s['weight']} |"
                      for s in facts["specs"])
    curve = "\n".join(f"| {h['step']} | {h['minutes']} | {h['loss']} | {h.get('val_accuracy', '')} | "
                      f"{h.get('val_exact', '')} | {'kept' if h['step'] == facts['kept_step'] else ''} |"
                      for h in facts["history"])
    command = " ".join(["python tools/make_default_model.py", *facts["argv"]])
    seen = ", ".join(f"{name} {value:.0%}" for name, value in facts["heldout_seen"].items())
    pad, im_start, im_end = facts["specials"]
    schedule, why = ((f"constant, then linear decay to 10% over the last {a['decay_frac']:.0%} of steps", "")
                     if a["decay_frac"] else ("then constant to the end: no decay", NO_DECAY))
    left_out = EASY_LEFT_OUT if a["preset"] == "easy" else f"Task preset `{a['preset']}`: see swarm_app/kernel/tasks.py."
    return f"""# swarm-tiny

The default model bundled with swarm-app: a {facts['n_params']:,}-parameter decoder (`model_type: llama`)
with its own {facts['vocab']}-token tokenizer, made from nothing but reasoning-gym data so that a fresh
install, the tests and CI run offline. It is deliberately weak: a starting point on which GRPO has
reward signal on the `{a['preset']}` task preset, not a useful model.

## How it was made

    {command}

Seed {a['seed']}; reasoning-gym {facts['reasoning_gym']}, torch {facts['torch']}, 1 torch thread on a 2-core
CPU shared with other jobs. Training took {facts['train_seconds'] / 60:.1f} min of wall time
({facts['train_cpu_seconds'] / 60:.1f} min of CPU time, validation included; {facts['total_seconds'] / 60:.1f} min
wall in all, with the tokenizer, the final evaluation and saving). The run is deterministic: the same
command on the same versions with 1 thread gives the same weights.

- Tokenizer: byte-level BPE trained on {a['tokenizer_items']} rendered training items; every digit is its own
  token; specials `{pad}` (pad), `{im_start}`, `{im_end}` (eos); no BOS. ChatML chat template in
  tokenizer_config.json; without a system message it inserts the app's system prompt. Load it with
  `PreTrainedTokenizerFast` and set `padding_side` after loading.
- Model: hidden {a['hidden']}, {a['layers']} layers, {a['heads']} heads, MLP {a['intermediate']}, tied
  embeddings, RoPE base 10000 (also written as top-level `rope_theta` for mlx-lm), float32,
  {size / 1e6:.1f} MB on disk.
- Data: {a['steps']} steps of {a['batch_size']} items from `tasks.draw(preset, seed={a['seed']}, round=step)`,
  TaskRef seed {a['seed']} (never the held-out seed); {facts['skipped_draws']} draws skipped (an item
  reasoning-gym would also generate for a held-out or validation ref, or with no verifiable target).
  Prompt = the task's messages through the chat template with the generation prompt, as the app
  renders them; target = `<answer>ANSWER</answer>{im_end}`, loss on the target only. ANSWER is the
  ground truth, except for decimal_arithmetic (rounded to the one decimal its verifier checks) and,
  in presets that have it, propositional_logic (the generator's example conclusion).
- Optimizer: AdamW (0.9, 0.95), weight decay 0.1, lr {a['lr']} with {a['warmup']} warm-up steps, {schedule};
  gradient clip 1.0.{why}

Task preset `{a['preset']}`:

| dataset | config | weight |
|---|---|---|
{specs}

## Scores

Held-out set `tasks.heldout(preset("{a['preset']}"), {greedy['n']})` (its own seed, never trained on).
Greedy accuracy (mean reward) {greedy['accuracy']:.3f}, exact {greedy['exact']:.3f}, answer tags present
{greedy['answer_format']:.3f}. With {sampling.get('samples')} samples per question at temperature
{sampling.get('temperature')} (top_k 0, top_p 1), {sampling.get('spread_fraction', 0):.3f} of the question
groups have a non-zero reward spread (mean sampled reward {sampling.get('mean_reward', 0):.3f}).

Answers per task: how many distinct greedy answers the model gave, against how many the items have, and
the share of items that got its most common answer (the truth's in brackets). Few distinct answers and a
large share mean the model answers from the task's answer prior without reading the question.

| task | greedy accuracy | greedy exact | groups with spread | distinct answers | most common answer |
|---|---|---|---|---|---|
{rows}

Measure again with `python tools/measure_model.py assets/models/swarm-tiny --n {greedy['n']}`.

No held-out item was trained on, but some tasks have few distinct questions, so the same question
text can come from another seed and index. Fraction of held-out questions whose text also occurred
in training: {seen}.

Validation curve (greedy, {a['val_n']} questions from a non-held-out seed; loss = mean over the interval).
The folder holds the weights of step {facts['kept_step']}, the point with the highest validation exact match:

| step | minutes | loss | validation accuracy | validation exact | |
|---|---|---|---|---|---|
{curve}

## Recommended settings

`swarm.toml` holds the settings the app applies to this model only, below config.toml, `SWARM_*` and
flags (the file says why for each): rollouts at T = 0.8, 32 questions per round in one optimizer step with
LoRA weight decay 1.0, negatives at a quarter weight, and a held-out evaluation every 25 rounds instead of
5. With them, 30 minutes of `swarm run --no-ui` on 2 CPU cores (3 seeds side by side, 407-419 rounds
each) raised the bundled build's held-out greedy accuracy from 0.320 to 0.456, 0.460 and 0.432 (+12.9
points on average; benchmarks/results/learning/README.md). They were found on the earlier build, whose
learning rate decayed at the end.

## Limits

{left_out} Answers are bare `<answer>...</answer>` spans with no
reasoning text.
Not for any use but testing and demonstrating swarm-app.
"""
