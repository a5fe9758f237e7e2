"""A model folder's swarm.toml: applied to that model only, below every layer the user sets."""

import json
import os
import shutil

import pytest

from swarm_app.cli import main
from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.kernel.settings import Settings, describe, load_settings
from swarm_app.session.recommendations import FILE_NAME, apply_recommendations
from swarm_app.session.session import Session

BUNDLED = bundled_model_dir()


def recommending(folder, text):
    (folder / FILE_NAME).write_text(text, encoding="utf-8")
    return folder


def layered(tmp_path, config="", env=None, flags=None, command_defaults=None) -> Settings:
    config_file = tmp_path / "config.toml"
    config_file.write_text(config, encoding="utf-8")
    return load_settings(config_file, env or {}, flags or {}, command_defaults=command_defaults)


def test_the_bundled_model_takes_its_own_settings_and_others_as_before(tmp_path):
    bundled = layered(tmp_path)
    expected = {"model.temperature": 0.8, "train.local": 8, "train.external": 24, "train.minibatches": 1,
                "train.weight_decay": 1.0, "train.negative_weight": 0.25, "train.eval_every": 25,
                "train.external_policy": "adaptive", "train.signal_target": 14.0}
    assert apply_recommendations(bundled, BUNDLED) == expected
    assert (bundled.train.eval_every, bundled.train.local, bundled.model.temperature) == (25, 8, 0.8)
    assert bundled.train.negative_weight == 0.25
    assert not set(expected) & bundled.given
    copy = tmp_path / "copy"
    shutil.copytree(BUNDLED, copy, ignore=shutil.ignore_patterns(FILE_NAME, "*.gguf"))
    plain = layered(tmp_path)
    assert apply_recommendations(plain, copy) == {}
    assert describe(plain) == describe(layered(tmp_path))  # every setting as without the model layer


@pytest.mark.parametrize("layer", ["config", "env", "flag", "command default"])
def test_every_layer_the_user_sets_beats_the_model(tmp_path, stub_model, layer):
    folder = recommending(stub_model, "[train]\neval_every = 25\nminibatches = 4\n")
    # 5 is the built-in default: only the record of who set it tells it apart from "not set"
    settings = {"config": lambda: layered(tmp_path, config="[train]\neval_every = 5\n"),
                "env": lambda: layered(tmp_path, env={"SWARM_TRAIN_EVAL_EVERY": "5"}),
                "flag": lambda: layered(tmp_path, flags={"train.eval_every": "5"}),
                "command default": lambda: layered(tmp_path, command_defaults={"train.eval_every": 5})}[layer]()
    assert apply_recommendations(settings, folder) == {"train.minibatches": 4}
    assert settings.train.eval_every == 5 and settings.train.minibatches == 4


def test_a_value_code_set_is_kept(stub_model):
    settings = Settings()
    settings.train.eval_every = 0  # how tests and benchmarks build settings: no layer, a non-default value
    assert apply_recommendations(settings, recommending(stub_model, "[train]\neval_every = 25\n")) == {}
    assert settings.train.eval_every == 0


@pytest.mark.parametrize("text, needle", [
    ("[train]\nseed = 3\n", "train.seed is the user's to choose"),
    ("[model]\nbackend = \"torch\"\n", "model.backend is the user's to choose"),
    ("[peer]\nmdns = false\n", "[peer] cannot be recommended"),
    ("[train]\neval_evry = 3\n", "unknown setting train.eval_evry"),
    ("[train]\neval_every = -1\n", "train.eval_every = -1 is out of range"),
    ("[train\n", "is not valid TOML"),
])
def test_a_bad_file_names_itself_and_the_key(stub_model, text, needle):
    folder = recommending(stub_model, text)
    settings = layered(stub_model.parent, env={"SWARM_TRAIN_EVAL_EVERY": "5", "SWARM_TRAIN_SEED": "1"})
    with pytest.raises(UsageError) as raised:  # checked also where a layer above replaces the value
        apply_recommendations(settings, folder)
    assert needle in raised.value.message and str(folder / FILE_NAME) in raised.value.message


def test_a_run_on_the_bundled_model_uses_its_cadence(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_TRAIN_EVAL_N", "8")
    run_dir = tmp_path / "run"
    assert main(["run", "--no-ui", "--backend", "torch", "--rounds", "5", "--local", "2", "--completions", "2",
                 "--seed", "1", "--run-dir", str(run_dir)]) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(r["heldout_acc"] is None for r in rows)  # the app's default would have evaluated at round 5
    started = json.loads((run_dir / "run.json").read_text())["settings"]["train"]
    assert started["eval_every"] == 25 and started["eval_n"] == 8


def test_an_env_value_reaches_the_run_over_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_TRAIN_EVAL_EVERY", "3")
    settings = load_settings(None, os.environ, {"run.run_dir": str(tmp_path / "run"), "model.backend": "torch"})
    session = Session(settings)
    try:
        session.open()
        assert session.trainer.plan.eval_every == 3
    finally:
        session.close()
