"""Put a model back into the constant-learning-rate phase of its pre-training, and save it as a model folder.

Issue 14's test of why the bundled model gains little under GRPO. Its pre-training (tools/make_default_model.py)
gained its last ~10 validation points while the learning rate decayed from 1e-3 to 1e-4 (its model card's
curve). This script takes the finished model and runs N more full-weight pre-training steps at the
constant rate again, through the build's own training loop (its AdamW, 50 warm-up steps, loss and clip;
batches of 16 from the build's training stream at steps 4000 and on, which the build never drew). The
result holds what the weights look like before the decay. Then
`SWARM_MODEL_PATH=OUT python -m benchmarks.solo_learning ...` measures how much GRPO's LoRA steps gain on it.
Deterministic at one thread (about 0.43 s a step on a 2-core CPU).

The measured runs took the bundled model as it was before it became a no-decay build (4000 steps, decay over
the last 20%), which git still holds:

    mkdir -p out/decayed && for f in config.json generation_config.json model.safetensors swarm.toml \
        tokenizer.json tokenizer_config.json; do git show a71f656:assets/models/swarm-tiny/$f > out/decayed/$f; done
    PYTHONPATH=tools python -m benchmarks.research.reheat_model --model out/decayed --steps 300 --out out/reheated-300
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

from swarm_app.kernel import tasks


def build_script():
    """tools/make_default_model.py, which imports its siblings in tools/ by bare name: run with PYTHONPATH=tools."""
    try:
        import make_default_model
    except ModuleNotFoundError as exc:
        if exc.name != "make_default_model":
            raise
        raise SystemExit("this script uses tools/make_default_model.py: run it from the repository root as "
                         f"PYTHONPATH=tools python -m benchmarks.research.{Path(__file__).stem} ...") from None
    return make_default_model


class LaterDraws:
    """The build's training stream from step `first` on: what the build itself never drew."""

    def __init__(self, stream, first: int) -> None:
        self.stream, self.first = stream, first

    def batch(self, step: int):
        return self.stream.batch(self.first + step)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True,
                        help="a folder tools/make_default_model.py wrote with a decayed learning rate")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--first-step", type=int, default=4000, help="the training stream's step to start drawing at")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    build = build_script()

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    specs = tasks.preset("easy")
    validation = build.round_robin_refs(specs, build.VALIDATION_SEED_OFFSET, 140, "validation")  # build seed 0
    stream = build.TrainingStream(specs, 0, 16, build.effective_items(tasks.heldout(specs, 500) + validation))
    later = LaterDraws(stream, args.first_step)
    started = time.perf_counter()
    # The build's own loop, the decay switched off and no validation: its optimizer, warm-up, loss and clip.
    loop = argparse.Namespace(steps=args.steps, lr=args.lr, warmup=50, decay_frac=0.0, micro_batches=2, eval_every=50)
    build.train(model, tokenizer, later, [], loop)  # logs the loss every 50 steps
    model.eval()
    shutil.copytree(args.model, args.out, dirs_exist_ok=True)
    for stale in [*args.out.glob("*.gguf"), args.out / "README.md"]:  # they describe the weights before this
        stale.unlink(missing_ok=True)
    model.save_pretrained(args.out)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
