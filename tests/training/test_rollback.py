"""Automatic rollback: the rule (training/rollback.py) and a real Session that goes back to its best checkpoint
when held-out accuracy falls (session/rollback.py), with a fake engine whose held-out answers turn wrong, and
with the bundled model at 100x its learning rate."""

import asyncio
import json
import random

import pytest

from backends import registry
from swarm_app.kernel.errors import SwarmError
from swarm_app.kernel.events import RolledBack
from swarm_app.kernel.settings import Settings
from swarm_app.session.session import Session
from swarm_app.training import rollback
from swarm_app.training.rollback import Best, judge, noise_threshold
from tests.training.falling_fake import FallingBackend


def test_the_threshold_is_z_standard_errors_of_the_difference():
    assert noise_threshold(0.5, 0.5, 64, 64) == pytest.approx(4 * (2 * 0.25 / 64) ** 0.5)
    assert noise_threshold(0.45, 0.05, 64, 64) == pytest.approx(4 * (0.25 * 0.75 * 2 / 64) ** 0.5)


def test_a_collapse_fires_and_a_noise_size_dip_does_not():
    best = Best(25, 0.45, 64)
    fall = judge(best, 50, 0.05, 64)
    assert fall is not None and (fall.from_round, fall.to_round, fall.best, fall.now, fall.n) == (50, 25, 0.45, 0.05, 64)
    assert judge(best, 50, 0.30, 64) is None  # -15 points at n = 64: within the noise of the best of many
    assert judge(best, 25, 0.0, 64) is None  # never against itself


def test_it_rarely_fires_when_accuracy_does_not_move():
    """2,000 runs of 50 evaluations at a constant 40% (independent binomial draws over 64 items, which wobble
    more than a fixed item list does): the rule fires in under 5% of them."""
    rng = random.Random(0)
    fired = 0
    for _ in range(2000):
        best = None
        for t in range(1, 51):
            acc = sum(rng.random() < 0.4 for _ in range(64)) / 64
            if judge(best, t, acc, 64) is not None:
                fired += 1
                break
            if rollback.improves(best, acc):
                best = Best(t, acc, 64)
    assert fired / 2000 < 0.05


# -- a session whose held-out accuracy falls ------------------------------------------------------
@pytest.fixture
def falling(monkeypatch):
    monkeypatch.setitem(registry.ENGINES, "fake", "tests.training.falling_fake:FallingBackend")
    FallingBackend.learn_heldout("easy", 64)
    return FallingBackend


def settings_for(stub_model, run_dir, rounds, **train):
    settings = Settings()
    settings.peer.enabled = False
    settings.model.path, settings.model.backend = str(stub_model), "fake"
    settings.run.run_dir = str(run_dir)
    settings.train.rounds, settings.train.eval_every, settings.train.seed = rounds, 2, 0
    for key, value in train.items():
        setattr(settings.train, key, value)
    return settings


def run(settings):
    events = []
    session = Session(settings)
    session.subscribe(events.append)
    asyncio.run(session.run())
    return events


def rows(run_dir, kind=None):
    every = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in every if r.get("type") == kind]


def adapter(run_dir, round_index):
    folder = run_dir / "checkpoints" / f"round-{round_index:06d}"
    return {**json.loads((folder / "fake_adapter.json").read_text()), "rounds": json.loads((folder / "rounds.json").read_text())}


def test_a_fall_rolls_back_to_the_best_checkpoint_and_says_so(stub_model, tmp_path, falling):
    run_dir = tmp_path / "run"
    events = run(settings_for(stub_model, run_dir, 4))
    accuracy = {r["round"]: r["heldout_acc"] for r in rows(run_dir) if r["heldout_acc"] is not None}
    assert list(accuracy) == [2, 4] and accuracy[2] > 0.95 and accuracy[4] == 0.0  # the fall landed
    [row] = rows(run_dir, "rollback")
    threshold = round(noise_threshold(accuracy[2], 0.0, 64, 64), 4)
    assert {k: row[k] for k in ("round", "from_round", "to_round", "best", "now", "threshold", "n")} == \
        {"round": 4, "from_round": 4, "to_round": 2, "best": accuracy[2], "now": 0.0, "threshold": threshold, "n": 64}
    [said] = [e for e in events if isinstance(e, RolledBack)]
    assert (said.round, said.to_round, said.threshold) == (4, 2, threshold)
    assert adapter(run_dir, 4) == adapter(run_dir, 2)  # round 4's checkpoint holds the best adapter
    checkpoints = run_dir / "checkpoints"
    assert json.loads((checkpoints / "best.json").read_text())["round"] == 2
    assert sorted(p.name for p in checkpoints.glob("round-*")) == ["round-000002", "round-000003", "round-000004"]

    # a resumed run goes on from the rolled-back adapter, the same best, and falls (and rolls back) again
    events = run(settings_for(stub_model, run_dir, 6))
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4, 5, 6]
    assert [(r["from_round"], r["to_round"]) for r in rows(run_dir, "rollback")] == [(4, 2), (6, 2)]
    assert adapter(run_dir, 6) == adapter(run_dir, 2)


def test_a_dip_within_the_noise_does_not_roll_back(stub_model, tmp_path, falling, monkeypatch):
    monkeypatch.setattr(FallingBackend, "WRONG_SHARE", 0.1)
    run_dir = tmp_path / "run"
    events = run(settings_for(stub_model, run_dir, 4))
    accuracy = {r["round"]: r["heldout_acc"] for r in rows(run_dir) if r["heldout_acc"] is not None}
    assert 0.8 < accuracy[4] < accuracy[2]  # it dipped, by less than the noise
    assert not rows(run_dir, "rollback") and not [e for e in events if isinstance(e, RolledBack)]
    assert adapter(run_dir, 4) != adapter(run_dir, 2)


def test_rollback_false_turns_it_off(stub_model, tmp_path, falling):
    run_dir = tmp_path / "run"
    events = run(settings_for(stub_model, run_dir, 4, rollback=False))
    assert {r["round"]: r["heldout_acc"] for r in rows(run_dir)}[4] == 0.0
    assert not rows(run_dir, "rollback") and not [e for e in events if isinstance(e, RolledBack)]
    assert adapter(run_dir, 4)["rounds"] == 4


def test_a_kill_before_the_rollbacks_checkpoint_rolls_back_once_on_resume(stub_model, tmp_path, falling):
    """The disk as a kill leaves it after the rollback row but before round 4's checkpoint: latest.json names
    round 3. The resumed run cuts the row, runs round 4 again and rolls back once."""
    run_dir = tmp_path / "run"
    run(settings_for(stub_model, run_dir, 4))
    checkpoints = run_dir / "checkpoints"
    for path in (checkpoints / "round-000004").iterdir():
        path.unlink()
    (checkpoints / "round-000004").rmdir()
    (checkpoints / "latest.json").write_text(json.dumps({"dir": "round-000003", "round": 3}))
    run(settings_for(stub_model, run_dir, 4))
    assert [(r["from_round"], r["to_round"]) for r in rows(run_dir, "rollback")] == [(4, 2)]
    assert adapter(run_dir, 4) == adapter(run_dir, 2)


def test_a_kill_before_best_json_moved_is_mended_on_resume(stub_model, tmp_path, falling):
    """A kill between round 2's checkpoint and best.json naming it: the resumed run finds the best in the rows."""
    run_dir = tmp_path / "run"
    run(settings_for(stub_model, run_dir, 2))
    (run_dir / "checkpoints" / "best.json").unlink()
    run(settings_for(stub_model, run_dir, 4))
    assert json.loads((run_dir / "checkpoints" / "best.json").read_text())["round"] == 2
    assert [(r["from_round"], r["to_round"]) for r in rows(run_dir, "rollback")] == [(4, 2)]


def test_the_bundled_model_at_100x_its_learning_rate_rolls_back(tmp_path):
    """The real engine: at 100x the learning rate one update collapses the bundled model's held-out accuracy."""
    from safetensors.torch import load_file

    settings = Settings()
    settings.peer.enabled = False
    settings.model.backend, settings.model.threads = "torch", 1
    settings.run.run_dir = str(tmp_path / "run")
    values = {"rounds": 2, "eval_every": 1, "external": 0, "seed": 1, "learning_rate": 0.03}
    for key, value in values.items():
        setattr(settings.train, key, value)
    settings.given |= {f"train.{key}" for key in values}
    events = run(settings)
    run_dir = tmp_path / "run"
    accuracy = [r["heldout_acc"] for r in rows(run_dir)]
    assert accuracy[0] - accuracy[1] > noise_threshold(accuracy[0], accuracy[1], 64, 64)  # the fall landed
    [row] = rows(run_dir, "rollback")
    assert (row["from_round"], row["to_round"], row["now"]) == (2, 1, accuracy[1])
    assert [e.to_round for e in events if isinstance(e, RolledBack)] == [1]
    weights = [load_file(run_dir / "checkpoints" / f"round-00000{t}" / "adapter_model.safetensors") for t in (1, 2)]
    assert weights[0].keys() == weights[1].keys()
    assert all((weights[0][k] == weights[1][k]).all() for k in weights[0])


def test_a_best_json_that_cannot_be_written_is_a_disk_error_that_names_the_file(stub_model, tmp_path, falling):
    """The CI's read-only folder could hit best.json before the next checkpoint: that write, too, must end the
    run with the one-line disk error (the command prints it and exits 1), not an unexpected traceback."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "best.json").mkdir(parents=True)  # os.replace onto a folder fails: IsADirectoryError
    with pytest.raises(SwarmError) as raised:
        run(settings_for(stub_model, run_dir, 2))
    assert raised.value.title == "Disk" and "best.json" in raised.value.message
    assert "resumes from the last checkpoint" in raised.value.message
    assert (run_dir / "checkpoints" / "round-000002").is_dir()  # the round itself was checkpointed first
