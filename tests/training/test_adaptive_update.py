"""`train.external_policy = "adaptive"`: own questions cover what peers' signal groups leave short of the target.

The claims (issue: an update that adapts to supply): alone, or beside peers that send nothing, a node trains on
the solo count of questions; with a little supply it does not lose signal; with a flood it does not grow past
its target; a link that opens or closes never swings the update 4x between two rounds.
"""

from __future__ import annotations

from backends.base import Sampling
from backends.fake import FakeBackend
from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Inbox
from swarm_app.training.loop import RoundPlan, Trainer
from swarm_app.training.supply import AdaptiveUpdate
from tests.training.test_diagnostics import ONE_RIGHT, TWO_RIGHT, peer_rollout

EASY = tasks.preset("easy")
BUNDLED = dict(target=14, floor=8, most=32, external=24)
"""The bundled model's figures: the solo recipe's 14 signal groups, I = 8, I + J = 32."""


def steady(update: AdaptiveUpdate, supply: int, own_rate: float, rounds: int = 40) -> list[tuple[int, int, float]]:
    """Rounds of a node whose pool offers `supply` signal groups a round and whose own groups have a spread at
    `own_rate`: (own questions, external taken, signal groups) per round."""
    out = []
    for _ in range(rounds):
        taken = min(supply, update.external_wanted())
        own = update.own_count(taken)
        signal = round(own * own_rate)
        update.observe(own, signal, taken)
        out.append((own, taken, taken + signal))
    return out


def test_alone_it_asks_the_solo_count_every_round():
    rounds = steady(AdaptiveUpdate(**BUNDLED), supply=0, own_rate=0.6)
    assert {own for own, _, _ in rounds} == {32}


def test_with_a_little_supply_the_signal_stays_at_the_target():
    # one peer at the floor supplies ~3-4 signal groups a round: a fixed 8/24 node would train on ~7.5
    rounds = steady(AdaptiveUpdate(**BUNDLED), supply=4, own_rate=0.45)[10:]
    assert all(13 <= signal <= 16 for _, _, signal in rounds)
    assert all(own < 32 for own, _, _ in rounds)  # and the peer's groups save generation


def test_with_a_flood_it_takes_the_floor_and_no_more_signal_than_the_target():
    rounds = steady(AdaptiveUpdate(**BUNDLED), supply=1000, own_rate=0.45)[10:]
    assert {own for own, _, _ in rounds} == {8}
    assert all(signal <= 15 for _, _, signal in rounds)


def test_a_flapping_supply_never_swings_the_update_4x():
    update = AdaptiveUpdate(**BUNDLED)
    rounds = []
    for block in range(8):  # the link opens and closes every 5 rounds
        rounds += steady(update, supply=1000 if block % 2 else 0, own_rate=0.45, rounds=5)
    for (own_a, _, signal_a), (own_b, _, signal_b) in zip(rounds, rounds[1:]):
        assert max(own_a, own_b) / min(own_a, own_b) <= 2
        assert max(signal_a, signal_b) / min(signal_a, signal_b) < 4
    assert {rounds[4][0], rounds[9][0]} == {32, 8}  # it did reach both ends


def test_a_resumed_update_decides_as_the_uninterrupted_one():
    run = AdaptiveUpdate(**BUNDLED)
    rows = []
    for own, taken, signal in steady(run, supply=5, own_rate=0.4, rounds=12):
        rows.append({"n_local": own, "n_external": taken, "groups_with_signal": signal})
    resumed = AdaptiveUpdate(**BUNDLED)
    resumed.replay(rows)
    assert (resumed.rate, resumed.last_own, resumed.last_signal) == (run.rate, run.last_own, run.last_signal)
    assert (resumed.external_wanted(), resumed.own_count(5)) == (run.external_wanted(), run.own_count(5))


def trainer(inbox: Inbox) -> Trainer:
    plan = RoundPlan(EASY, 8, 24, 4, seed=3, sampling=Sampling(max_new_tokens=16, temperature=1.0),
                     external_policy="adaptive", signal_target=14)
    return Trainer(FakeBackend(), plan, inbox)


def test_a_link_that_opens_mid_run_gives_no_4x_swing_in_questions_or_signal_groups():
    inbox = Inbox(connected=False)
    node = trainer(inbox)
    rows = [node.run_round(t) for t in range(1, 6)]
    assert {row.n_local for row in rows} == {32} and not inbox.used  # alone: the solo count
    inbox.peers = True  # the link opens onto a pool that holds far more than the target
    inbox.pending = [peer_rollout("basic_arithmetic", i, (ONE_RIGHT, TWO_RIGHT)[i % 2]) for i in range(400)]
    rows += [node.run_round(t) for t in range(6, 21)]
    assert rows[-1].n_local == 8 and rows[-1].n_external >= 6  # it went over to the peers' groups
    for before, after in zip(rows, rows[1:]):
        assert max(before.n_local, after.n_local) / min(before.n_local, after.n_local) < 4
        signal = (before.groups_with_signal, after.groups_with_signal)
        assert max(signal) / min(signal) < 4, (before.round, signal)
    # never past the target: peers' groups at most 14, and the signal in all about 14 (J = 24 would give 24+)
    assert max(row.n_external for row in rows) == 14
    assert sum(row.groups_with_signal for row in rows[8:]) / len(rows[8:]) < 16
