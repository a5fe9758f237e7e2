"""`swarm chat` on the bundled model with real run folders: the run's adapter answers, --base answers with
other weights, bad input is one line with exit 2 and leaves the folder as it was."""

from __future__ import annotations

import json

import pytest

from backends import registry
from backends.base import Sampling, TrainSample
from swarm_app.chat.talk import Talker, prompt_messages
from swarm_app.cli import main
from swarm_app.kernel.paths import bundled_model_dir
from swarm_app.kernel.settings import Settings
from swarm_app.session.engine import model_spec
from swarm_app.training.checkpoint import Checkpoints, CheckpointState

PROMPT = "What is 3 + 4?"
GREEDY = Sampling(max_new_tokens=48, temperature=0.0)


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder as a node leaves it (run.json, a checkpoint of round 3 whose adapter moved far from the
    base model), and the greedy answer that adapter gives to PROMPT."""
    run_dir = tmp_path_factory.mktemp("chat") / "run"
    settings = Settings()
    settings.model.threads = 1
    settings.train.learning_rate = 0.01
    backend = registry.load("torch", model_spec(settings, bundled_model_dir()))
    try:
        backend.train_step([TrainSample(prompt_messages(PROMPT), "<answer>7</answer>", 1.0),
                            TrainSample(prompt_messages(PROMPT), "<answer>11</answer>", -1.0)] * 4)
        Checkpoints(run_dir).save(CheckpointState(3, 3, backend.model_id, "torch"), backend.save_adapter)
        answer = backend.generate([prompt_messages(PROMPT)], 1, GREEDY)[0][0].text
    finally:
        backend.close()
    (run_dir / "run.json").write_text(json.dumps({"model": str(bundled_model_dir()), "preset": "easy", "seed": 1,
                                                  "backend": "torch"}))
    return run_dir, answer


def test_prompt_answers_with_the_run_s_adapter_and_writes_nothing(trained_run, capsys):
    run_dir, answer = trained_run
    before = snapshot(run_dir)
    assert main(["chat", "--run-dir", str(run_dir), "--threads", "1", "--prompt", PROMPT]) == 0
    out, err = capsys.readouterr()
    assert out == answer + "\n"
    assert "the adapter of round 3" in err and "torch engine" in err
    assert snapshot(run_dir) == before and not (run_dir / "node.lock").exists()


def test_base_loads_other_weights_than_the_run_s_adapter(trained_run):
    run_dir, _ = trained_run
    sample = [TrainSample(prompt_messages(PROMPT), "<answer>7</answer>", 0.0)]
    logps = {}
    for name, folder in (("adapter", run_dir), ("base", None)):
        settings = Settings()
        settings.model.threads, settings.model.backend = 1, "torch"
        talker = Talker(settings, folder)
        talker.open()
        try:
            logps[name] = talker.opened.backend.token_logprobs(sample)[0]
        finally:
            talker.close()
    fresh = registry.load("torch", model_spec(Settings(), bundled_model_dir(), trainable=False, threads=1))
    try:
        assert logps["base"] == pytest.approx(fresh.token_logprobs(sample)[0], abs=1e-6)
        fresh.load_adapter(Checkpoints(run_dir).load_latest()[1])
        assert logps["adapter"] == pytest.approx(fresh.token_logprobs(sample)[0], abs=1e-6)
    finally:
        fresh.close()
    assert abs(sum(logps["adapter"]) - sum(logps["base"])) > 1.0  # the update moved the model


def test_task_shows_the_question_the_right_answer_and_the_score(trained_run, capsys, monkeypatch):
    import io

    run_dir, _ = trained_run
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["chat", "--run-dir", str(run_dir), "--threads", "1", "--task", "basic_arithmetic"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("question (basic_arithmetic, held-out item ")
    from swarm_app.kernel import tasks

    index = int(lines[0].split("held-out item ")[1].split(")")[0])
    spec = tasks.preset("easy")[0]
    task = tasks.regenerate(tasks.TaskRef(spec.dataset, spec.digest, tasks.HELDOUT_SEED, index), heldout=True)
    assert lines[0].endswith(task.question) and lines[1].startswith("answer: ")
    reward = tasks.score(task, lines[1][len("answer: "):])
    assert lines[2].startswith(f"right answer: {task.answer} ") and lines[2].endswith(f"score {reward:g}")


def test_a_run_without_a_checkpoint_answers_with_the_base_model(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"model": str(bundled_model_dir()), "preset": "easy"}))
    assert main(["chat", "--run-dir", str(run_dir), "--backend", "torch", "--threads", "1", "--prompt", PROMPT]) == 0
    out, err = capsys.readouterr()
    assert "no checkpoint yet" in err
    assert main(["chat", "--base", "--backend", "torch", "--threads", "1", "--prompt", PROMPT]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("extra, needle", [
    (["--run-dir", "{missing}", "--prompt", "hi"], "no run folder"),
    (["--task", "nonsense"], "not a task of the run's preset 'easy'"),
    (["--temperature", "warm", "--prompt", "hi"], "--temperature 'warm' is not a number"),
    (["--max-tokens", "0", "--prompt", "hi"], "--max-tokens 0 must be between"),
    (["--task", "easy", "--prompt", "hi"], "--prompt and --task"),
    (["--model", "/no/such/model", "--prompt", "hi"], "trains"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(trained_run, tmp_path, capsys, extra, needle):
    run_dir, _ = trained_run
    before = snapshot(run_dir)
    extra = [arg.format(missing=tmp_path / "missing") for arg in extra]
    argv = ["chat", "--threads", "1", *([] if "--run-dir" in extra else ["--run-dir", str(run_dir)]), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert snapshot(run_dir) == before and not (tmp_path / "missing").exists()


def test_json_lines_answers_prompts_and_survives_a_bad_line(trained_run, capsys, monkeypatch):
    """The TUI's chat process: a bad line is answered with an error and the next prompt still gets its answer."""
    import io

    run_dir, answer = trained_run
    monkeypatch.setattr("sys.stdin", io.StringIO('not json\n{"prompt": "What is 3 + 4?"}\n'))
    assert main(["chat", "--run-dir", str(run_dir), "--threads", "1", "--json-lines"]) == 0
    messages = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert messages[0] == {"ready": True, "source": f"the adapter of round 3 of {run_dir}"}
    assert "error" in messages[1]
    pieces = [m["piece"] for m in messages[2:-1]]
    assert len(pieces) > 1 and "".join(pieces) == answer
    assert messages[-1] == {"done": True, "text": answer, "source": messages[0]["source"]}
