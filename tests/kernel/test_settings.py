"""Settings: precedence defaults < config file < SWARM_* env < flags, and errors that name the key."""

from pathlib import Path

import pytest

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.settings import Settings, apply_env, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_source(tmp_path):
    settings = load_settings(tmp_path / "absent.toml", {}, {})
    assert settings == Settings()
    assert (settings.train.local, settings.train.completions, settings.train.external) == (8, 8, 0)


def test_precedence_file_then_env_then_flags(tmp_path):
    config = write(tmp_path / "c.toml", "[train]\nlocal = 4\ncompletions = 6\nseed = 3\n")
    env = {"SWARM_TRAIN_COMPLETIONS": "5", "SWARM_TRAIN_SEED": "9"}
    settings = load_settings(config, env, {"train.seed": 11, "train.local": None})
    assert settings.train.local == 4          # file beats default
    assert settings.train.completions == 5    # env beats file
    assert settings.train.seed == 11          # flag beats env
    assert settings.train.external == 0       # untouched default


def test_env_strings_and_lists_are_parsed(tmp_path):
    env = {"SWARM_MODEL_TEMPERATURE": "0.5", "SWARM_LORA_TARGET_MODULES": "q_proj, v_proj", "SWARM_RUN_UI": "false",
           "SWARM_HOME": "/ignored", "SWARM_UNRELATED_THING": "x"}
    settings = load_settings(tmp_path / "absent.toml", env, {})
    assert settings.model.temperature == 0.5
    assert settings.lora.target_modules == ["q_proj", "v_proj"]
    assert settings.run.ui is False


@pytest.mark.parametrize("text, needle", [
    ("[train]\nlocall = 4\n", "unknown setting train.locall; known: local"),
    ("[trian]\nlocal = 4\n", "unknown section [trian]"),
    ("[train]\nlocal = 0\n", "train.local = 0 is out of range; allowed: 1 to 256"),
    ("[train]\nlocal = 'many'\n", "train.local must be int"),
    ("[run]\nlog_format = 'xml'\n", "choose one of: text, json"),
    ("[train\nlocal = 4\n", "is not valid TOML"),
])
def test_bad_config_names_the_key(tmp_path, text, needle):
    config = write(tmp_path / "c.toml", text)
    with pytest.raises(UsageError) as info:
        load_settings(config, {}, {})
    assert needle in info.value.message
    assert str(config) in info.value.message


def test_bad_env_and_flag_name_their_source(tmp_path):
    with pytest.raises(UsageError, match="SWARM_TRAIN_COMPLETIONS.*out of range"):
        load_settings(tmp_path / "absent.toml", {"SWARM_TRAIN_COMPLETIONS": "1"}, {})
    with pytest.raises(UsageError, match="command line: train.local = 999 is out of range"):
        load_settings(tmp_path / "absent.toml", {}, {"train.local": 999})


def test_strict_env_refuses_an_unknown_section():
    env = {"SWARM_SAMPLING_TEMPERATURE": "0.5"}  # the field lives in [model]: a plain run ignores the variable
    settings = Settings()
    apply_env(settings, env)
    assert settings == Settings()
    with pytest.raises(UsageError, match=r"SWARM_SAMPLING_TEMPERATURE: no settings section \[sampling\]; known: model"):
        apply_env(settings, env, strict=True)


def test_explicit_config_file_must_exist(tmp_path):
    with pytest.raises(UsageError, match="cannot read config file"):
        load_settings(tmp_path / "missing.toml", {}, {}, config_required=True)
