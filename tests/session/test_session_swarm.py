"""Sessions that join a real swarm: two nodes on 127.0.0.1, each with its own peer node, over aiohttp."""

import asyncio
import json

from swarm_app.kernel.events import RoundFinished, SwarmJoined
from swarm_app.session.session import Session
from tests.session.test_session import make_settings


def networked(settings, seed, peers=()):
    settings.peer.enabled = True
    settings.peer.listen = "127.0.0.1:0"
    settings.peer.mdns = False
    settings.peer.peers = list(peers)
    settings.train.seed = seed
    return settings


def test_two_sessions_exchange_rollouts(stub_model, tmp_path, monkeypatch):
    async def scenario():
        first_events, second_events = [], []
        joined = asyncio.Event()

        def on_first(event):
            first_events.append(event)
            if isinstance(event, SwarmJoined):
                joined.set()

        slow = dict(local=2, completions=2, external=2)
        first = Session(networked(make_settings(stub_model, tmp_path / "a", 0, **slow), 1))
        first.subscribe(on_first)
        first_run = asyncio.create_task(first.run())
        await asyncio.wait_for(joined.wait(), 60)
        address = next(e.address for e in first_events if isinstance(e, SwarmJoined))
        monkeypatch.setenv("SWARM_HOME", str(tmp_path / "second-home"))  # another user: another identity
        second = Session(networked(make_settings(stub_model, tmp_path / "b", 0, **slow), 2, [address]))
        second.subscribe(second_events.append)
        second_run = asyncio.create_task(second.run())
        for _ in range(600):
            rows = [e.metrics for e in second_events if isinstance(e, RoundFinished)]
            if rows and rows[-1].rollouts_accepted >= 4 and rows[-1].rollouts_published >= 2:
                break  # both directions: it received from the first and published its own
            await asyncio.sleep(0.1)
        first.stop()
        second.stop()
        await asyncio.gather(first_run, second_run)
        return first_events, second_events

    first_events, second_events = asyncio.run(scenario())
    last = [e.metrics for e in second_events if isinstance(e, RoundFinished)][-1]
    assert last.rollouts_accepted >= 4 and last.rollouts_published >= 2
    row = json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "peers" in row and "rollouts_accepted" in row


def test_a_random_seed_is_kept_with_the_run(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 1)
    settings.train.seed = -1
    first = Session(settings)
    first.open()
    first.close()  # one node per run folder: the first lets go of it
    again = Session(make_settings(stub_model, tmp_path / "run", 2))
    again.settings.train.seed = -1
    again.open()
    stored = json.loads((tmp_path / "run" / "run.json").read_text())["seed"]
    assert first.seed == again.seed == stored >= 0


def shared_before(events) -> int:
    """Own groups with a reward spread in the rounds finished so far (what the node published)."""
    return sum(e.metrics.groups_with_signal - e.metrics.n_external for e in events if isinstance(e, RoundFinished))


def test_metrics_endpoint_shows_training_and_swarm_figures(stub_model, tmp_path):
    import aiohttp

    async def scenario():
        events = []
        settings = networked(make_settings(stub_model, tmp_path / "run", 0, local=4, completions=4), 3)
        session = Session(settings)
        session.subscribe(events.append)
        task = asyncio.create_task(session.run())
        for _ in range(600):  # until a round had an own group with a reward spread: those are published
            if shared_before(events):
                break
            await asyncio.sleep(0.05)
        shared = shared_before(events)
        address = next(e.address for e in events if isinstance(e, SwarmJoined))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"http://{address}/metrics") as response:
                text = await response.text()
        session.stop()
        await task
        return text, shared

    text, shared = asyncio.run(scenario())
    gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")}
    assert gauges["swarm_train_round"] >= 1
    assert 0.0 <= gauges["swarm_train_reward_local"] <= 1.0
    assert gauges["rsp_published_total"] >= shared >= 1  # own groups with a reward spread, signed and shared


def test_an_adaptive_node_beside_a_peer_that_sends_nothing_trains_on_the_solo_count(stub_model, tmp_path, monkeypatch):
    # A real link over aiohttp to a peer on --no-share (a fresh join, a receive-only node): a fixed 8/24 node
    # trained on 8 questions a round there, a quarter of what it asks alone. The adaptive one asks I + J.
    async def scenario():
        quiet_events, events = [], []
        joined = asyncio.Event()

        def on_quiet(event):
            quiet_events.append(event)
            if isinstance(event, SwarmJoined):
                joined.set()

        quiet_settings = networked(make_settings(stub_model, tmp_path / "quiet", 0, local=2, completions=2), 1)
        quiet_settings.peer.share = False
        quiet = Session(quiet_settings)
        quiet.subscribe(on_quiet)
        quiet_run = asyncio.create_task(quiet.run())
        await asyncio.wait_for(joined.wait(), 60)
        address = next(e.address for e in quiet_events if isinstance(e, SwarmJoined))
        monkeypatch.setenv("SWARM_HOME", str(tmp_path / "second-home"))  # another user: another identity
        settings = networked(make_settings(stub_model, tmp_path / "node", 0, local=8, external=24, completions=2,
                                           external_policy="adaptive", signal_target=14.0), 2, [address])
        node = Session(settings)
        node.subscribe(events.append)
        node_run = asyncio.create_task(node.run())
        for _ in range(600):
            linked = [e.metrics for e in events if isinstance(e, RoundFinished) and e.metrics.peers]
            if len(linked) >= 4:
                break
            await asyncio.sleep(0.1)
        quiet.stop()
        node.stop()
        await asyncio.gather(quiet_run, node_run)
        return [e.metrics for e in events if isinstance(e, RoundFinished)]

    rows = asyncio.run(scenario())
    linked = [row for row in rows if row.peers]
    assert len(linked) >= 4  # the link was up for these rounds: the claim is about a connected peer
    assert all(row.n_external == 0 for row in rows)  # and it sent nothing
    assert [row.n_local for row in linked] == [32] * len(linked)
