"""What the app says is what it does (issue 29): the settings a run uses after the model's swarm.toml in
the help, doctor and the start line; one parameter count of the bundled model everywhere, counted from
its weights; a quick start that says it joins the LAN swarm; "offline" when it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swarm_app.cli import main
from swarm_app.kernel import sizing
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.session.recommendations import read_recommendations

ROOT = Path(__file__).resolve().parent.parent


def bundled_parameters() -> int:
    """Counted from model.safetensors (the embedding is tied to the output layer: stored, and counted, once)."""
    from safetensors import safe_open

    with safe_open(str(bundled_model_dir() / "model.safetensors"), "np") as weights:
        return sum(weights.get_slice(name).get_shape()[0] * _rest(weights.get_slice(name).get_shape())
                   for name in weights.keys())


def _rest(shape: list[int]) -> int:
    size = 1
    for dim in shape[1:]:
        size *= dim
    return size


def test_one_parameter_count_of_the_bundled_model_everywhere():
    count = bundled_parameters()
    millions = f"{count / 1e6:.1f} M"
    assert round(sizing.BUNDLED.params / 1e5) == round(count / 1e5) and millions in sizing.BUNDLED.label
    assert f"{millions} parameters" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{count:,}-parameter" in (bundled_model_dir() / "README.md").read_text(encoding="utf-8")
    stale = [str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                                                *(ROOT / "swarm_app").rglob("*.py")]
             if re.search(r"\b4\.2 M\b", p.read_text(encoding="utf-8"))]
    assert stale == []


def test_help_names_the_peers_groups_per_round_the_bundled_model_runs(capsys):
    external = read_recommendations(bundled_model_dir())["train.external"]
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    help_of_external = text.split("--external J", 1)[1].split("[train.external]", 1)[0]
    assert f"{external} with the bundled model" in help_of_external and "swarm.toml" in help_of_external


def test_doctor_reports_the_questions_the_run_uses(capsys):
    local = read_recommendations(bundled_model_dir())["train.local"]
    assert main(["doctor", "--json", "--listen", "127.0.0.1:0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run"]["local"] == local
    assert report["recommended"].get("local", local) == local  # no second, contradicting figure
    assert main(["doctor", "--listen", "127.0.0.1:0"]) == 0
    assert f"I = {local} questions" in capsys.readouterr().out


def test_the_quick_start_says_it_joins_the_lan_swarm_and_what_offline_changes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "--offline" in quick_start and "LAN" in quick_start and "mDNS" in quick_start
    assert "work offline" not in quick_start


def test_the_headless_start_line_says_offline_and_the_questions_per_round(stub_model, tmp_path, capsys):
    assert main(["run", "--no-ui", "--offline", "--backend", "fake", "--model", str(stub_model),
                 "--run-dir", str(tmp_path / "run"), "--rounds", "1", "--local", "3"]) == 0
    out = capsys.readouterr().out
    start = next(line for line in out.splitlines() if line.startswith("run "))
    assert "offline" in start and "runs I = 3" in out
