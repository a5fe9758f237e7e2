"""A run started in torch moves to MLX (and back) with `swarm convert`; before that, --backend mlx
is refused with the conversion command."""

from __future__ import annotations

import importlib.util
import json

import pytest

from swarm_app.cli import main
from swarm_app.training.checkpoint import Checkpoints

needs_mlx = pytest.mark.skipif(importlib.util.find_spec("mlx") is None or importlib.util.find_spec("mlx_lm") is None,
                               reason="needs mlx (extra [mlx])")


def run(run_dir, backend, rounds, *extra):
    return main(["run", "--no-ui", "--offline", "--backend", backend, "--threads", "1", "--rounds", str(rounds),
                 "--local", "2", "--completions", "4", "--seed", "2", "--run-dir", str(run_dir), *extra])


@needs_mlx
@pytest.mark.mlx
@pytest.mark.timeout(300)
def test_a_torch_run_resumes_in_mlx_after_conversion(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run(run_dir, "torch", 1) == 0
    capsys.readouterr()
    assert run(run_dir, "mlx", 2) == 2
    assert "swarm convert --to mlx" in capsys.readouterr().err
    assert main(["convert", "--to", "mlx", "--run-dir", str(run_dir)]) == 0
    assert "round 1 converted for mlx" in capsys.readouterr().out
    assert (run_dir / "checkpoints" / "torch-round-000001" / "adapter_model.safetensors").is_file()
    assert run(run_dir, "mlx", 2, "--log-format", "json") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["start_round"] for e in events if e["event"] == "RunStarted"] == [2]
    assert Checkpoints(run_dir).load_latest()[0].backend == "mlx"
    assert main(["convert", "--to", "torch", "--run-dir", str(run_dir)]) == 0
    assert run(run_dir, "torch", 3) == 0
    rows = [json.loads(line)["round"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3]


def test_convert_says_what_is_wrong(tmp_path, capsys):
    assert main(["convert", "--to", "mlx", "--run-dir", str(tmp_path)]) == 2
    assert "no checkpoint to convert" in capsys.readouterr().err
    assert main(["convert", "--to", "fake", "--run-dir", str(tmp_path)]) == 2
