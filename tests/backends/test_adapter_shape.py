"""adapter_shape: the rank and alpha an adapter folder was trained with, in either engine's format."""

import json

import pytest

from backends.adapter_convert import PEFT_CONFIG, adapter_shape, mlx_config, peft_config
from backends.base import BackendError


def write_config(folder, config):
    folder.mkdir()
    (folder / PEFT_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_reads_peft_and_mlx_configs(tmp_path):
    assert adapter_shape(write_config(tmp_path / "peft", peft_config(8, 24, 0.0, ["q_proj"]))) == (8, 24)
    assert adapter_shape(write_config(tmp_path / "mlx", mlx_config(64, 128, 0.0, ["self_attn.q_proj"], 4))) == (64, 128)


@pytest.mark.parametrize("config", [{}, {"r": "8", "lora_alpha": 16}, {"r": 0, "lora_alpha": 16},
                                    {"lora_parameters": {"scale": 2.0}}])
def test_a_config_without_a_shape_is_a_clear_error(tmp_path, config):
    with pytest.raises(BackendError, match="names no LoRA rank and alpha"):
        adapter_shape(write_config(tmp_path / "a", config))


def test_a_folder_without_a_lora_config_has_no_shape(tmp_path):
    assert adapter_shape(tmp_path) is None  # another engine's format: its own load_adapter judges the folder
