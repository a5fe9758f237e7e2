"""`train.external_policy`: "uniform" trains on what peers hand out; "fill" answers further own questions in
the places they left empty, drawn from (seed, round) so a rerun asks the same ones."""

from __future__ import annotations

from backends.base import Sampling
from backends.fake import FakeBackend
from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Inbox
from swarm_app.training.loop import RoundPlan, Trainer
from tests.training.test_diagnostics import ONE_RIGHT, peer_rollout

EASY = tasks.preset("easy")


SEED, ROUND = 6, 1
"""A draw where one of the fill's two extra groups has a reward spread under the fake engine (L = 8)."""


def run(policy: str, peers: int, local: int = 4, external: int = 3):
    inbox = Inbox([peer_rollout("basic_arithmetic", i, ONE_RIGHT) for i in range(peers)])
    plan = RoundPlan(EASY, local, external, 8, seed=SEED, sampling=Sampling(max_new_tokens=16, temperature=1.0),
                     external_policy=policy)
    backend = FakeBackend()
    trained = []
    original = backend.train_step
    backend.train_step = lambda batch, progress=None: trained.append(batch) or original(batch, progress)
    row = Trainer(backend, plan, inbox).run_round(ROUND)
    return row, inbox, trained[0] if trained else []


def test_uniform_trains_on_what_arrives_and_fill_takes_the_empty_places_with_own_questions():
    uniform, _, _ = run("uniform", peers=1)
    assert (uniform.n_local, uniform.n_external) == (4, 1)
    filled, inbox, batch = run("fill", peers=1)
    assert (filled.n_local, filled.n_external) == (6, 1)  # I + J groups: 4 own, 1 peer's, 2 own in its place
    first, extra = tasks.draw(EASY, SEED, ROUND, 4), tasks.draw(EASY, SEED, ROUND, 7)[4:6]
    prompts = {sample.messages[1]["content"] for sample in batch}
    extra_questions = {tasks.regenerate(ref).question for ref in extra}
    assert not extra_questions & {tasks.regenerate(ref).question for ref in first}
    # the extra groups are own groups: shared when they have a spread, trained on when they do
    published = {r.question for r in inbox.published}
    assert {q for q in extra_questions if q in prompts} == {q for q in extra_questions if q in published} != set()
    again, _, _ = run("fill", peers=1)
    assert again.reward_local_sum == filled.reward_local_sum and again.n_local == 6


def test_fill_adds_nothing_when_peers_hand_out_j_groups_or_j_is_0():
    full, _, _ = run("fill", peers=3)
    assert (full.n_local, full.n_external) == (4, 3)
    alone, _, _ = run("fill", peers=0, external=0)
    assert (alone.n_local, alone.n_external) == (4, 0)
