"""A model too large for memory is refused before loading, with both figures and the next step."""

from __future__ import annotations

import json

import pytest

from backends.base import BackendError, ModelSpec
from backends.memory_fit import check_fits, needed_bytes
from swarm_app.kernel.paths import bundled_model_dir


def big_model(tmp_path, gib: int, dtype: str = "bfloat16"):
    folder = tmp_path / "huge-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"dtype": dtype}))
    with open(folder / "model.safetensors", "wb") as handle:
        handle.truncate(gib * 1024**3)  # sparse: no disk is used
    return folder


def test_the_estimate_follows_the_stored_dtype(tmp_path):
    folder = big_model(tmp_path, 2, "bfloat16")
    assert needed_bytes(folder, 4) == pytest.approx(2 * 2 * 1024**3 * 1.3, rel=1e-6)  # 1 G params held in fp32
    assert needed_bytes(bundled_model_dir(), 4) < 64 * 1024**2


def test_a_model_too_large_is_refused_with_both_figures(tmp_path):
    folder = big_model(tmp_path, 40)
    with pytest.raises(BackendError, match=r"needs about 104\.0 GiB to train but RAM has 16\.0 GiB free"):
        check_fits(folder, 4, 16 * 1024**3, "RAM")
    check_fits(bundled_model_dir(), 4, 16 * 1024**3, "RAM")  # the bundled model fits anywhere


def test_the_torch_engine_checks_before_loading(tmp_path):
    from backends.torch.engine import TorchBackend

    folder = big_model(tmp_path, 4096)  # 4 TiB of bf16 weights: more than any machine's RAM
    (folder / "tokenizer.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("{{ messages }}")  # a whole model folder but for its size
    with pytest.raises(BackendError, match="swarm doctor says what fits"):
        TorchBackend().load(ModelSpec(str(folder)))
