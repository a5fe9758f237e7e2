"""Tasks: TaskRef regeneration is byte-identical across processes; extraction and scoring edge cases."""

import json
import subprocess
import sys

import pytest

from swarm_app.kernel import tasks
from swarm_app.kernel.errors import UsageError

REGENERATE = """
import json, sys
from swarm_app.kernel import tasks
refs = [tasks.TaskRef.from_dict(d) for d in json.loads(sys.stdin.read())]
print(json.dumps([[t.question, t.answer] for t in (tasks.regenerate(r, heldout=True) for r in refs)]))
"""


def some_refs():
    refs = []
    for name in ("easy", "paper"):
        specs = tasks.preset(name)
        refs += tasks.draw(specs, seed=7, round_index=3, count=12) + tasks.heldout(specs, len(specs))
    return refs


def test_regeneration_is_byte_identical_in_other_processes():
    refs = some_refs()
    here = [[t.question, t.answer] for t in (tasks.regenerate(r, heldout=True) for r in refs)]
    payload = json.dumps([r.to_dict() for r in refs])
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", REGENERATE], input=payload, capture_output=True, text=True,
                             check=True, env={"PYTHONHASHSEED": hash_seed, "PATH": ""})
        assert json.loads(out.stdout) == here


def test_draws_are_a_pure_function_of_seed_and_round():
    specs = tasks.preset("easy")
    assert tasks.draw(specs, 1, 5, 8) == tasks.draw(specs, 1, 5, 8)
    assert tasks.draw(specs, 1, 5, 8) != tasks.draw(specs, 1, 6, 8)
    assert tasks.draw(specs, 1, 5, 8) != tasks.draw(specs, 2, 5, 8)


def test_a_smaller_draw_is_the_start_of_a_larger_one():
    # Configs of one seed (8/24 and 32/0) and the own questions a round adds beyond I must ask the same
    # questions where they overlap: the draw of 8 is the first 8 of the draw of 32.
    specs = tasks.preset("easy")
    for t in range(1, 30):
        assert tasks.draw(specs, 3, t, 8) == tasks.draw(specs, 3, t, 32)[:8]


def test_draws_follow_the_task_weights():
    specs = tasks.preset("easy")
    drawn = [ref.dataset for t in range(400) for ref in tasks.draw(specs, 5, t, 32)]
    total = sum(s.weight for s in specs)
    for spec in specs:
        assert abs(drawn.count(spec.dataset) / len(drawn) - spec.weight / total) < 0.02


def test_training_draws_never_touch_the_heldout_seed():
    specs = tasks.preset("easy")
    heldout = set(tasks.heldout(specs, 100))
    assert all(ref.seed == tasks.HELDOUT_SEED for ref in heldout)
    drawn = {ref for t in range(50) for ref in tasks.draw(specs, tasks.HELDOUT_SEED - 1, t, 8)}
    assert not drawn & heldout
    assert all(ref.seed < tasks.HELDOUT_SEED for ref in drawn)


def test_heldout_covers_every_task_equally():
    specs = tasks.preset("paper")
    counts = {}
    for ref in tasks.heldout(specs, 90):
        counts[ref.dataset] = counts.get(ref.dataset, 0) + 1
    assert set(counts.values()) == {10} and len(counts) == 9


def test_regenerating_decimal_items_leaves_the_decimal_precision_alone():
    import decimal

    before = decimal.getcontext().prec
    for ref in some_refs():
        tasks.regenerate(ref, heldout=True)
    assert decimal.getcontext().prec == before  # decimal_arithmetic sets it to its config's 5 digits


def test_unknown_config_digest_is_refused():
    ref = tasks.draw(tasks.preset("easy"), 0, 1, 1)[0]
    with pytest.raises(KeyError):
        tasks.regenerate(tasks.TaskRef(ref.dataset, "0" * 16, ref.seed, ref.index))
    with pytest.raises(KeyError):
        tasks.regenerate(tasks.TaskRef("bf", ref.config_digest, ref.seed, ref.index))


def test_unknown_preset_names_the_choices():
    with pytest.raises(UsageError, match="choose one of: paper, easy"):
        tasks.preset("hard")


@pytest.mark.parametrize("text, expected", [
    ("<answer>42</answer>", "42"),
    ("first <answer>1</answer> then <answer> 2 </answer>", "2"),
    ("<answer>7", None),
    ("7</answer>", None),
    ("no tags at all", None),
    ("<answer></answer>", ""),
    ("<answer>a <answer>b</answer>", "b"),
    ("<answer>x</answer> trailing <answer>unclosed", "x"),
])
def test_extract_answer(text, expected):
    assert tasks.extract_answer(text) == expected


def arithmetic_task():
    spec = next(s for s in tasks.preset("easy") if s.dataset == "basic_arithmetic")
    return tasks.regenerate(tasks.draw([spec], 0, 1, 1)[0])


def test_score_rewards_only_the_extracted_answer():
    task = arithmetic_task()
    assert tasks.score(task, f"<answer>{task.answer}</answer>") == 1.0
    assert tasks.score(task, f"reasoning... <answer> {task.answer} </answer>") == 1.0
    # partial credit from a right answer buried in a longer string is not given
    assert tasks.score(task, f"The answer is {task.answer}") == 0.0
    assert tasks.score(task, f"<answer>{task.answer}</answer> no wait <answer>12345</answer>") == 0.0
    assert tasks.score(task, "<answer>\x00\ufffd garbage</answer>") == 0.0


def test_taskref_round_trips_through_dict():
    ref = tasks.draw(tasks.preset("paper"), 3, 9, 1)[0]
    assert tasks.TaskRef.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref


def test_generating_tasks_on_threads_leaves_stdout_alone(capsys):
    """bf's compiler prints dots; silencing it must not swap sys.stdout under other threads."""
    import sys
    import threading

    stdout = sys.stdout
    spec = next(s for s in tasks.preset("paper") if s.dataset == "bf")
    refs = tasks.draw([spec], 5, 1, 24)

    def work(part):
        for ref in part:
            tasks.score(tasks.regenerate(ref), "<answer>x</answer>")

    threads = [threading.Thread(target=work, args=(refs[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sys.stdout is stdout
    assert "." not in capsys.readouterr().out
