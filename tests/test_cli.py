"""The command line: clear one-line errors with exit code 2 that write nothing, and import hygiene."""

import json
import os
import subprocess
import sys

import pytest

from swarm_app.cli import COMMANDS, build_parser, main
from swarm_app.commands.flags import load_settings_for
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.session.recommendations import read_recommendations


def swarm(*args, env=None):
    return subprocess.run([sys.executable, "-m", "swarm_app", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_version_and_cli_import_load_no_heavy_modules():
    code = ("import sys, swarm_app.cli; heavy = {'torch', 'textual', 'mlx', 'llama_cpp', 'transformers', 'aiohttp'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    result = swarm("--version")
    assert result.returncode == 0 and result.stdout.startswith("swarm-app ")


def test_cli_import_defers_what_only_a_running_command_needs():
    """Every `swarm` command (--help too) pays for what cli.py imports: asyncio with ssl, the events (two dozen
    dataclasses) and the engines' base class, once more than half of that import, wait for the command that
    uses them."""
    code = ("import sys, swarm_app.cli; later = {'asyncio', 'ssl', 'swarm_app.kernel.events', 'backends.base'}; "
            "print(sorted(later & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture
def existing_run(tmp_path):
    """A run folder with content that bad input must leave untouched."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"round": 1}\n')
    return run_dir


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("extra, needle", [
    (["--model", "/no/such/model"], "does not exist"),
    (["--model", "{nontokenizer}"], "has no tokenizer"),
    (["--model", "{nochat}"], "has no chat template"),
    (["--tasks", "nonsense"], "unknown task preset 'nonsense'"),
    (["--backend", "warp"], "choose one of"),
    (["--local", "0"], "train.local = 0 is out of range"),
    (["--completions", "1"], "train.completions = 1 is out of range"),
    (["--rounds", "many"], "train.rounds must be int, got 'many'"),
    (["--config", "{badconfig}"], "not valid TOML"),
    (["--config", "/no/such/config.toml"], "cannot read config file"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, existing_run, capsys, extra, needle):
    nontokenizer = tmp_path / "m1"
    nontokenizer.mkdir()
    (nontokenizer / "config.json").write_text("{}")
    nochat = tmp_path / "m2"
    nochat.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (nochat / name).write_text("{}")
    badconfig = tmp_path / "bad.toml"
    badconfig.write_text("[train\n")
    paths = {"nontokenizer": nontokenizer, "nochat": nochat, "badconfig": badconfig}
    extra = [arg.format(**paths) for arg in extra]
    before = snapshot(existing_run)
    code = main(["run", "--no-ui", "--backend", "fake", "--run-dir", str(existing_run), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and needle in err[0], err
    assert snapshot(existing_run) == before


def test_eval_samples_scores_held_out_rollouts_repeatably(capsys):
    command = ["eval", "--backend", "torch", "--threads", "1", "--n", "10", "--samples", "3", "--json"]
    assert main(command) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(command) == 0
    sampled = first["sampled"]
    assert json.loads(capsys.readouterr().out)["sampled"] == sampled  # seeded draws
    rollout_temperature = read_recommendations(bundled_model_dir()).get("model.temperature", 1.0)  # its swarm.toml
    assert (sampled["questions"], sampled["samples"], sampled["temperature"]) == (10, 3, rollout_temperature)
    assert 0.0 < sampled["mean_reward"] < 1.0 and set(sampled["per_task"]) == set(first["per_task"])
    assert main(["eval", "--backend", "fake", "--samples", "99"]) == 2
    assert "--samples 99" in capsys.readouterr().err


def test_eval_takes_the_lora_shape_from_the_adapter(tmp_path, capsys):
    """An adapter trained at a non-default rank scores without repeating its LoRA settings on the command line."""
    from backends import registry
    from backends.base import TrainSample
    from swarm_app.kernel import tasks
    from swarm_app.kernel.settings import Settings
    from swarm_app.session.engine import model_spec
    from swarm_app.training.evaluation import evaluate

    settings = Settings()
    settings.model.threads = 1
    settings.lora.rank, settings.lora.alpha = 4, 12
    backend = registry.load("torch", model_spec(settings, bundled_model_dir()))
    try:
        task = tasks.regenerate(tasks.draw(tasks.preset("easy"), 0, 1, 1)[0])
        backend.train_step([TrainSample(task.messages(), "<answer>7</answer>", 1.0)])
        backend.save_adapter(tmp_path / "adapter")
        expected = evaluate(backend, tasks.heldout(tasks.preset("easy"), 6), settings.model.max_new_tokens)
    finally:
        backend.close()
    assert main(["eval", "--backend", "torch", "--threads", "1", "--n", "6", "--json",
                 "--adapter", str(tmp_path / "adapter")]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert (scored["accuracy"], scored["per_task"]) == (expected.accuracy, expected.per_task)


def test_eval_json_with_the_fake_backend(stub_model, capsys):
    assert main(["eval", "--backend", "fake", "--model", str(stub_model), "--tasks", "easy", "--n", "10", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 10 and 0.0 <= result["accuracy"] <= 1.0
    assert set(result["per_task"]) <= {s for s in ("basic_arithmetic", "base_conversion", "calendar_arithmetic",
                                                    "fraction_simplification", "decimal_arithmetic",
                                                    "arc_1d", "bf", "binary_matrix", "propositional_logic")}


@pytest.mark.parametrize("command", ["run", "demo", "watch", "chat", "identity", "export", "convert", "eval", "doctor"])
def test_every_command_has_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: swarm {command} ")


def test_every_settings_flag_defaults_to_not_given():
    parser = build_parser()
    names = [command.__name__.rsplit(".", 1)[1] for command in COMMANDS]
    for name in names:
        args = parser.parse_args([name, "show"] if name == "identity" else
                                 [name, "RUN", "--gguf", "D"] if name == "export" else
                                 [name, "--to", "mlx"] if name == "convert" else [name])
        given = {key: value for key, value in vars(args).items() if "." in key}
        assert all(value is None for value in given.values()), (name, given)
    run_keys = [key for key in vars(parser.parse_args(["run"])) if "." in key]
    assert "train.rounds" in run_keys and "peer.enabled" in run_keys and "run.ui" in run_keys


def test_demo_defaults_sit_under_config_env_and_flags(isolated_home, monkeypatch, capsys):
    def train(*argv):
        t = load_settings_for(build_parser().parse_args(list(argv))).train
        return t.rounds, t.external, t.seed

    assert train("demo") == (10, 4, 0) and train("run") == (0, 0, -1)
    config = isolated_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[train]\nrounds = 2\nexternal = 1\n")
    assert train("demo") == (2, 1, 0) and train("run") == (2, 1, -1)
    monkeypatch.setenv("SWARM_TRAIN_ROUNDS", "3")
    assert train("demo") == (3, 1, 0)
    assert train("demo", "--rounds", "5", "--external", "0") == (5, 0, 0)
    assert train("run", "--rounds", "5") == (5, 1, -1)
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "Default here: 10, unless SWARM_TRAIN_ROUNDS or config.toml sets it" in " ".join(capsys.readouterr().out.split())


def test_the_machine_line_says_when_threads_override_the_advice(stub_model, tmp_path, capsys):
    from swarm_app.kernel.hardware import detect
    from swarm_app.kernel.sizing import recommend

    advised = recommend(detect(), "fake").threads
    given = advised + 1
    assert main(["run", "--no-ui", "--backend", "fake", "--model", str(stub_model), "--run-dir", str(tmp_path / "run"),
                 "--rounds", "1", "--offline", "--threads", str(given), "--log-format", "json"]) == 0
    started = next(e for e in map(json.loads, capsys.readouterr().out.splitlines()) if e["event"] == "RunStarted")
    assert started["advice"].endswith(f"; running {given} threads as set (model.threads)")


# --- issue 29: small CLI traps


def every_parser(parser=None):
    """The top-level parser and every parser below it (commands, and their own subcommands)."""
    import argparse

    parser = parser or build_parser()
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += every_parser(sub)
    return found


def test_no_parser_takes_an_abbreviation_for_a_flag(stub_model, tmp_path, capsys):
    assert all(parser.allow_abbrev is False for parser in every_parser())
    with pytest.raises(SystemExit) as exit_info:  # `--round 3` once ran as `--rounds 3`
        main(["run", "--no-ui", "--backend", "fake", "--model", str(stub_model), "--run-dir", str(tmp_path / "run"),
              "--round", "3"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --round" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [["hub", "--max-inbound", "abc"], ["demo", "--nodes", "x"], ["nothing"],
                                  ["run", "--bogus"]])
def test_a_bad_flag_or_value_is_one_line_with_where_the_usage_is(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.splitlines()) == 1 and "usage:" not in err and "--help)" in err, err


@pytest.mark.parametrize("argv", [["run", "-v"], ["run", "--log-level", "debug"], ["-v", "run"],
                                  ["--log-level", "info", "doctor"], ["doctor", "--verbose"], ["eval", "--log-level", "warning"]])
def test_verbose_and_log_level_go_before_or_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert args.command == next(a for a in argv if a in ("run", "doctor", "eval"))
    assert args.verbose or args.log_level in ("debug", "info", "warning")


def test_a_log_level_after_the_command_reaches_stderr():
    done = swarm("doctor", "--listen", "127.0.0.1:0", "--log-level", "debug", "--json",
                 env={"SWARM_PEER_ENABLED": "false"})
    assert done.returncode == 0, done.stderr
    assert "debug" in done.stderr.lower() or "info" in done.stderr.lower()


def test_identity_import_takes_force_before_the_file(tmp_path, capsys):
    from swarm_app.peer.core.identity import Identity

    assert main(["identity", "show"]) == 0
    other = tmp_path / "other.pem"
    other.write_bytes(Identity.generate().to_pem())
    assert main(["identity", "import", str(other)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["identity", "import", "--force", str(other)]) == 0
    assert main(["identity", "import", str(other), "--force"]) == 0


def test_eval_shows_progress_while_it_runs(stub_model):
    import re

    done = swarm("eval", "--backend", "fake", "--model", str(stub_model), "--n", "150", env={"SWARM_PEER_ENABLED": "false"})
    assert done.returncode == 0, done.stderr
    assert "held-out accuracy" in done.stdout and "/150" not in done.stdout  # stdout keeps the result only
    assert [int(n) for n in re.findall(r"(\d+)/150 questions", done.stderr)] == [64, 128, 150]
    assert "loading" in done.stderr
