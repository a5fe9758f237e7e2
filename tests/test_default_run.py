"""The README's first command on bundled defaults: no --model, the engine auto picks here, the easy preset."""

import json

from backends import registry
from swarm_app.cli import main
from swarm_app.kernel.hardware import detect


def test_run_and_eval_on_bundled_defaults(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "--no-ui", "--rounds", "2", "--local", "4", "--completions", "4", "--run-dir", str(run_dir),
                 "--seed", "3", "--log-format", "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    started = [e for e in events if e["event"] == "RunStarted"]
    assert events[0]["event"] == "ModelLoading"  # the first line comes before the slow part
    auto = registry.choose("auto", detect())[0]  # llama_cpp where installed, else torch (no GPU here)
    assert started[0]["model_id"] == "swarm-tiny" and started[0]["backend"] == auto and started[0]["preset"] == "easy"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    assert sum(r["groups_with_signal"] for r in rows) > 0  # the bundled model gets some groups right, some wrong
    assert main(["eval", "--n", "24", "--json", "--adapter", str(run_dir)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 24 and 0.0 < result["accuracy"] < 1.0
