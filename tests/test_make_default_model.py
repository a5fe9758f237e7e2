"""The bundled model's build script, at a toy size: it runs to the end for any preset and writes a loadable folder."""

import subprocess
import sys
from pathlib import Path

import pytest

from backends.base import ModelSpec, Sampling
from backends.torch.engine import TorchBackend
from swarm_app.kernel import tasks

ROOT = Path(__file__).resolve().parents[1]
TOY = ["--steps", "4", "--batch-size", "4", "--micro-batches", "1", "--warmup", "1", "--eval-every", "2",
       "--val-n", "4", "--heldout-n", "9", "--samples", "2", "--tokenizer-items", "200",
       "--hidden", "32", "--intermediate", "64", "--layers", "1", "--heads", "2"]


@pytest.mark.parametrize(("preset", "decay"), [("easy", []), ("paper", ["--decay-frac", "0.5"])])
def test_toy_build_writes_a_model_folder_the_app_loads(tmp_path, preset, decay):
    out = tmp_path / "model"
    # A subprocess: the script sets torch's thread count for the whole process.
    done = subprocess.run([sys.executable, "tools/make_default_model.py", "--preset", preset, "--out", str(out), *TOY,
                           *decay], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"Task preset `{preset}`" in card
    schedule = "linear decay to 10% over the last 50% of steps" if decay else "then constant to the end: no decay"
    assert schedule in card
    assert ("arc_1d and bf" in card) == (preset == "easy")  # the easy-only paragraph on left-out tasks
    # the build writes the recommended settings the bundled folder ships (a rebuild keeps them)
    shipped = ROOT / "assets" / "models" / "swarm-tiny" / "swarm.toml"
    assert (out / "swarm.toml").read_text(encoding="utf-8") == shipped.read_text(encoding="utf-8")

    backend = TorchBackend()
    backend.load(ModelSpec(path=str(out), threads=1, trainable=False))
    task = tasks.regenerate(tasks.heldout(tasks.preset(preset), 1)[0], heldout=True)
    [completions] = backend.generate([task.messages()], 1, Sampling(max_new_tokens=4, temperature=0.0))
    assert len(completions) == 1
