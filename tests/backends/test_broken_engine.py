"""An installed but broken engine: a clear message when it was chosen; with auto, the next engine."""

from __future__ import annotations

import json
import logging

from backends import registry
from swarm_app.cli import main


def with_broken_engine(monkeypatch):
    """llama_cpp stands for an engine whose install broke: its class is replaced by one whose load fails."""
    monkeypatch.setitem(registry.ENGINES, "llama_cpp", "tests.backends.broken_engine:BrokenBackend")
    monkeypatch.setattr(registry, "AUTO_PREFERENCE", (("llama_cpp", ""), ("fake", "")))


def test_a_broken_engine_chosen_by_name_is_one_line_with_the_next_step(stub_model, tmp_path, capsys, monkeypatch):
    with_broken_engine(monkeypatch)
    code = main(["run", "--no-ui", "--backend", "llama_cpp", "--model", str(stub_model), "--rounds", "1",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "the llama_cpp engine is installed but does not load here (OSError: libllama.so" in err
    assert "swarm doctor" in err and "Traceback" not in err


def test_auto_falls_back_from_a_broken_engine_and_says_so(stub_model, tmp_path, capsys, monkeypatch, caplog):
    with_broken_engine(monkeypatch)
    with caplog.at_level(logging.WARNING):
        code = main(["run", "--no-ui", "--backend", "auto", "--model", str(stub_model), "--rounds", "1",
                     "--run-dir", str(tmp_path / "run"), "--log-format", "json"])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    started = [e for e in events if e["event"] == "RunStarted"][0]
    assert code == 0 and started["backend"] == "fake" and started["backend_reason"].startswith("fallback")
    assert "using the fake engine instead" in caplog.text


def test_mlx_on_a_machine_without_it_says_how_to_install(stub_model, tmp_path, capsys, monkeypatch):
    import backends.mlx.engine

    monkeypatch.setattr(backends.mlx.engine, "REQUIRED", ("mlx_not_installed_here",))  # as on a machine without mlx
    code = main(["run", "--no-ui", "--backend", "mlx", "--model", str(stub_model), "--rounds", "1",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "backend 'mlx' is not usable here" in err and 'pip install "swarm-app[mlx]"' in err
    assert "Traceback" not in err and not (tmp_path / "run" / "run.json").exists()
