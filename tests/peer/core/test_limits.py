"""Receive budgets fit what honest senders send: two fast honest nodes never penalize each other."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from swarm_app.peer.core.actions import Send
from swarm_app.peer.core.addressbook import AddressBook
from swarm_app.peer.core.admission import Admission, AdmissionLimits
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.limits import fitted_limits
from swarm_app.peer.core.pool import RolloutPool, SeenCache
from swarm_app.peer.core.protocol import NodeCore, ProtocolConfig
from swarm_app.peer.core.scores import PeerBook, ScorePolicy
from swarm_app.peer.io.local_nodes import local_swarm, wait_until_meshed
from tests.peer.helpers import fast_config, make_rollouts
from tests.peer.sim import Simulation

CONFIGS = [ProtocolConfig(), ProtocolConfig(pull_interval_s=0.3), ProtocolConfig(own_push_rate=40, own_push_burst=512),
           ProtocolConfig(pull_cost=20, pull_interval_s=1.0)]


@pytest.mark.parametrize("config", CONFIGS)
def test_receive_budgets_are_at_least_twice_what_an_honest_sender_spends(config):
    pulls = 1 / (0.9 * config.pull_interval_s)
    # on one connection: a full own-push burst, then pushes, pulls (pull_cost) and samples (1)
    assert config.conn_burst >= 2 * (config.own_push_burst + config.pull_cost + 2)
    assert config.conn_rate >= 2 * (config.own_push_rate + pulls * (config.pull_cost + 1))
    # per author: its pushes plus one rollout per pull answer
    limits = fitted_limits(AdmissionLimits(), config)
    assert limits.author_burst >= 2 * (config.own_push_burst + 1)
    assert limits.author_rate >= 2 * (config.own_push_rate + pulls)


def test_the_core_refuses_an_author_budget_below_the_honest_one():
    identity, rng = Identity.generate(), __import__("random").Random(1)
    limits = AdmissionLimits(author_rate=1.0, author_burst=10)
    admission = Admission(RolloutPool(identity.node_id, 10, 10**6, 600_000), SeenCache(10, 600_000), limits)
    with pytest.raises(ValueError, match="per-author admission budget"):
        NodeCore(identity, admission, ProtocolConfig(), PeerBook(ScorePolicy(), rng), AddressBook(rng), rng)


def test_a_late_pull_answer_is_taken_and_an_unasked_one_is_still_punished():
    sim = Simulation(2, ProtocolConfig(pull_interval_s=1.0, pull_timeout_s=0.5), seed=3)
    sim.dial(1, sim.nodes[0].addr)
    core = sim.nodes[0].core
    conn = next(iter(core.links.conns))
    pull = next(a for a in core.tick(sim.now + 0.1) if isinstance(a, Send) and a.message["t"] == "pull")
    core.tick(sim.now + 2.0)  # the answer did not come within pull_timeout_s
    assert core.tally["pull_timeouts"] == 1
    late = f'{{"t":"sample","re":{pull.message["id"]},"items":[]}}'
    assert core.on_frame(conn, late, sim.now + 2.5) == []
    assert core.tally["late_samples"] == 1 and "bad_message" not in core.tally.rejections()
    core.on_frame(conn, late, sim.now + 2.6)  # the same answer twice, or one never asked for: unsolicited
    assert core.tally.rejections()["bad_message"] == 1


async def test_two_fast_honest_nodes_publishing_thousands_never_ban_each_other():
    config = fast_config()  # pulls every 0.3 s on top of pushes: both budgets are exercised
    protocol = config.protocol
    async with local_swarm(2, config) as (a, b):
        assert await wait_until_meshed([a, b], timeout_s=10)
        rollouts = make_rollouts(40, seed=61)  # re-published: each copy is a new signed rollout (own seq, ts)
        for second in range(8):
            for k in range(250):  # 250/s each: far above own_push_rate, so pushes run at their cap
                a.publish(rollouts[k % 40])
                b.publish(dataclasses.replace(rollouts[(k + 7) % 40], model_id="b"))
                if k % 50 == 0:
                    await asyncio.sleep(0)
            await asyncio.sleep(1.0)
        await asyncio.sleep(2.0)
        for node, other in ((a, b), (b, a)):
            stats = node.stats()
            assert stats.published == 2000
            assert stats.bans == 0 and stats.neighbours == 1
            assert stats.rejected.get("conn_rate", 0) == 0 and stats.rejected.get("author_rate", 0) == 0
            assert stats.accepted > protocol.own_push_burst  # the burst and then the sustained rate got through
            row = next(p for p in stats.peers if p.node_id == other.node_id)
            assert row.connected and not row.banned and row.score > -10
