"""Own versus external figures of a round (training/diagnostics.py): by hand on the fake engine, and on the
bundled model, where text this model would not write must come out far less likely than its own."""

from __future__ import annotations

import pytest

from backends.base import OptimConfig, Sampling
from backends.fake import FakeBackend
from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Inbox, Rollout
from swarm_app.training.grpo import group_advantages
from swarm_app.training.loop import RoundPlan, Trainer
from tests.backends.conformance import installed, load_engine

EASY = tasks.preset("easy")


def peer_rollout(dataset: str, index: int, completions: tuple[str, ...]) -> Rollout:
    spec = next(s for s in EASY if s.dataset == dataset)
    task = tasks.regenerate(tasks.draw([spec], 99, index, 1)[0])
    texts = tuple(c.replace("RIGHT", task.answer) for c in completions)
    return Rollout(task.ref, task.question, task.answer, texts, "peer-model", 1, "peer-a", 0)


ONE_RIGHT = ("<answer>RIGHT</answer>", "<answer>nope</answer>", "", "<answer>nope</answer>")
TWO_RIGHT = ("<answer>RIGHT</answer>", "<answer>RIGHT</answer>", "", "<answer>nope</answer>")
ALL_WRONG = ("<answer>nope</answer>",) * 4


def trainer(backend, inbox: Inbox, local: int = 6, external: int = 2) -> Trainer:
    plan = RoundPlan(EASY, local, external, 4, seed=5, sampling=Sampling(max_new_tokens=16, temperature=1.0))
    return Trainer(backend, plan, inbox)


def test_figures_on_the_fake_engine_match_a_hand_count():
    inbox = Inbox([peer_rollout("basic_arithmetic", 1, ALL_WRONG), peer_rollout("basic_arithmetic", 2, ONE_RIGHT),
                   peer_rollout("base_conversion", 3, TWO_RIGHT), peer_rollout("basic_arithmetic", 4, ONE_RIGHT)])
    backend = FakeBackend()
    t = trainer(backend, inbox)
    row = t.run_round(1)
    assert row.n_external == 2 and row.external_checked == 3  # the group without a spread was checked, dropped
    assert row.signal_external == pytest.approx(2 / 3)
    one, two = group_advantages([1, 0, 0, 0]), group_advantages([1, 1, 0, 0])
    assert row.advantage_external == pytest.approx(sum(map(abs, one + two)) / 8)
    assert row.logp_own is None and row.clipped_external is None  # the fake engine reports no per-sample figures
    backend.updates = 0  # the fake engine's answers depend on its update count: redraw round 1 as it was
    own = t._generate_own(1)
    signal = [g for g in own if len(set(g.rewards)) > 1]
    assert row.signal_own == pytest.approx(len(signal) / 6)
    by_task = {}
    for g in own:
        by_task.setdefault(g.task.ref.dataset, []).extend(g.rewards)
    used = [d for d in ("basic_arithmetic", "base_conversion") if d in by_task]
    expected = sum(sum(by_task[d]) / len(by_task[d]) for d in used) / len(used) if used else None
    assert row.reward_local_on_external_tasks == pytest.approx(expected)


def test_without_peers_the_external_figures_are_none():
    row = trainer(FakeBackend(), Inbox(), external=0).run_round(1)
    assert (row.external_checked, row.signal_external, row.advantage_external, row.logp_external) == (None,) * 4
    assert row.signal_own is not None


@pytest.mark.skipif(not installed("torch"), reason="torch not installed")
def test_text_the_model_would_not_write_is_far_less_likely_than_its_own():
    # A peer group of made-up prose around the answer: the bundled model writes short digit answers, so
    # this text costs it several nats a token more than its own samples; one step: nothing is clipped.
    foreign = ("Quoth the raven: verily <answer>RIGHT</answer>", "Quoth the raven: verily <answer>nope</answer>",
               "Quoth the raven: nevermore", "Quoth the raven: verily <answer>nope</answer>")
    inbox = Inbox([peer_rollout("basic_arithmetic", i, foreign) for i in range(2)])
    backend = load_engine("torch", optim=OptimConfig(minibatches=1, epochs=1))
    row = trainer(backend, inbox, local=8).run_round(1)
    assert row.n_external == 2
    assert row.logp_own is not None and row.logp_external is not None
    assert row.logp_external < row.logp_own - 1.0
    assert row.clipped_own == 0.0 and row.clipped_external == 0.0  # one step: every ratio is 1
