"""Put a model back into the constant-learning-rate phase of its pre-training, and save it as a model folder.

Issue 14's test of why the bundled model gains little under GRPO. Its pre-training (tools/make_default_model.py)
gained its last ~10 validation points while the learning rate decayed from 1e-3 to 1e-4 (its model card's
curve). This script takes the finished model and runs N more full-weight pre-training steps at the
constant rate again (AdamW as in the build: betas 0.9/0.95, weight decay 0.1, the same 50 warm-up steps,
gradient clip 1; batches of 16 from the build's own training stream, at steps 4000 and on, which the build
never drew). The result holds what the weights look like before the decay. Then
`SWARM_MODEL_PATH=OUT python benchmarks/solo_learning.py ...` measures how much GRPO's LoRA steps gain on it.
Deterministic at one thread (about 0.43 s a step on a 2-core CPU).

The measured runs took the bundled model as it was before it became a no-decay build (4000 steps, decay over
the last 20%), which git still holds:

    mkdir -p /tmp/decayed && for f in config.json generation_config.json model.safetensors swarm.toml \
        tokenizer.json tokenizer_config.json; do git show a71f656:assets/models/swarm-tiny/$f > /tmp/decayed/$f; done
    python benchmarks/reheat_model.py --model /tmp/decayed --steps 300 --out /tmp/reheated-300
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
import make_default_model as build  # noqa: E402
from swarm_app import tasks  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True,
                        help="a folder tools/make_default_model.py wrote with a decayed learning rate")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--first-step", type=int, default=4000, help="the training stream's step to start drawing at")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    specs = tasks.preset("easy")
    validation = build.round_robin_refs(specs, build.VALIDATION_SEED_OFFSET, 140, "validation")  # build seed 0
    stream = build.TrainingStream(specs, 0, 16, build.effective_items(tasks.heldout(specs, 500) + validation))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    shared = build.shared_prefix(tokenizer)
    started = time.perf_counter()
    model.train()
    for k in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, (k + 1) / 50)
        examples = [build.encode_example(tokenizer, t, a) for t, a in stream.batch(args.first_step + k)]
        build.step_loss(model, examples, tokenizer.pad_token_id, 2, shared)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (k + 1) % 50 == 0:
            print(f"step {k + 1}: {time.perf_counter() - started:.0f} s", flush=True)
    model.eval()
    shutil.copytree(args.model, args.out, dirs_exist_ok=True)
    for stale in [*args.out.glob("*.gguf"), args.out / "README.md"]:  # they describe the weights before this
        stale.unlink(missing_ok=True)
    model.save_pretrained(args.out)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
