"""The round loop and checkpoints through a real Session with the fake backend and real files."""

import asyncio
import json
import threading

import pytest

from swarm_app.kernel import tasks
from swarm_app.kernel.errors import CheckpointError, UsageError
from swarm_app.kernel.events import RoundFinished, RunStopped
from swarm_app.kernel.rollouts import Inbox, Rollout
from swarm_app.kernel.settings import Settings
from swarm_app.session.session import Session, SessionOptions
from swarm_app.training.checkpoint import Checkpoints
from swarm_app.training.loop import rescore


def make_settings(stub_model, run_dir, rounds, **train):
    settings = Settings()
    settings.peer.enabled = False  # the default joins the LAN (0.0.0.0:47470, mDNS); networked tests opt in
    settings.model.path, settings.model.backend = str(stub_model), "fake"
    settings.run.run_dir = str(run_dir)
    settings.train.rounds = rounds
    settings.train.eval_every = 0
    settings.train.seed = 0  # -1 draws one at random: a run of 4 rounds could then draw no group with spread
    for key, value in train.items():
        setattr(settings.train, key, value)
    return settings


def run(settings, exchange=None, **options):
    events = []
    session = Session(settings, SessionOptions(**options), exchange=exchange)
    session.subscribe(events.append)
    last = asyncio.run(session.run())
    return last, events, session


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_rounds_write_metrics_and_resume_up_to_the_total(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    last, events, _ = run(make_settings(stub_model, run_dir, 3))
    assert last == 3 and [e.metrics.round for e in events if isinstance(e, RoundFinished)] == [1, 2, 3]
    last, events, _ = run(make_settings(stub_model, run_dir, 5))
    assert last == 5 and [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4, 5]
    row = rows(run_dir)[-1]
    for key in ("reward_local", "reward_external", "n_local", "n_external", "tokens", "gen_s", "train_s", "loss"):
        assert key in row
    assert row["n_local"] == 8 and row["n_external"] == 0 and row["reward_external"] is None
    # already at the total: nothing more runs
    last, events, _ = run(make_settings(stub_model, run_dir, 5))
    assert last == 5 and not [e for e in events if isinstance(e, RoundFinished)]


def test_resume_restores_the_adapter_state(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    _, _, first = run(make_settings(stub_model, run_dir, 4))
    updates = first.trainer.backend.updates
    assert updates > 0
    session = Session(make_settings(stub_model, run_dir, 5))  # at 4 the run is finished: nothing loads
    session.open()
    assert session.trainer.backend.updates == updates and session.next_round == 5


def test_rows_after_the_last_checkpoint_are_dropped_on_resume(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 3))
    with open(run_dir / "metrics.jsonl", "a") as handle:  # a round that crashed before its checkpoint
        handle.write(json.dumps({"round": 4}) + "\n" + '{"round": 5, "torn')
    run(make_settings(stub_model, run_dir, 5))
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4, 5]


def test_stop_abandons_the_round_and_saves(stub_model, tmp_path):
    settings = make_settings(stub_model, tmp_path / "run", 0)
    events = []
    session = Session(settings)

    def stop_after_two(event):
        events.append(event)
        if isinstance(event, RoundFinished) and event.metrics.round == 2:
            session.stop()

    session.subscribe(stop_after_two)
    assert asyncio.run(session.run()) == 2
    assert isinstance(events[-1], RunStopped) and events[-1].reason == "interrupted"
    state, _ = Checkpoints(tmp_path / "run").load_latest()
    assert state.round == 2 and state.metrics_rows == 2


def test_an_unreadable_latest_json_resumes_from_the_newest_checkpoint(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 2))
    latest = run_dir / "checkpoints" / "latest.json"
    latest.write_text("{not json")
    session = Session(make_settings(stub_model, run_dir, 4))
    session.open()
    assert session.next_round == 3
    assert json.loads(latest.read_text())["dir"] == "round-000002"


def test_no_intact_checkpoint_is_refused_with_the_damage_kept(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 2))
    for folder in (run_dir / "checkpoints").glob("round-*"):
        (folder / "fake_adapter.json").write_text("{torn")
    with pytest.raises(CheckpointError, match="--fresh"):
        Session(make_settings(stub_model, run_dir, 4)).open()
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert [n[:len("damaged-round-00000x")] for n in names if n.startswith("damaged-")] == [
        "damaged-round-000001", "damaged-round-000002"]


def test_fresh_moves_the_old_run_aside(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 2))
    last, _, _ = run(make_settings(stub_model, run_dir, 1), fresh=True)
    assert last == 1 and [r["round"] for r in rows(run_dir)] == [1]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and len(rows(aside[0])) == 2


def test_resuming_with_another_preset_is_refused(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 1))
    settings = make_settings(stub_model, run_dir, 2)
    settings.tasks.preset = "paper"
    with pytest.raises(UsageError, match="started with preset 'easy'"):
        Session(settings).open()


def peer_rollout(spec_name="basic_arithmetic", round_index=1, completions=None, **changes):
    spec = next(s for s in tasks.preset("easy") if s.dataset == spec_name)
    task = tasks.regenerate(tasks.draw([spec], 99, round_index, 1)[0])
    texts = completions or (f"<answer>{task.answer}</answer>", "<answer>nope</answer>", "", "<answer>0.5</answer>")
    fields = dict(ref=task.ref, question=task.question, answer=task.answer, completions=tuple(texts),
                  model_id="peer-model", round=1, author="peer-a", created_ms=0)
    fields.update(changes)
    return Rollout(**fields)


def test_external_groups_are_rescored_and_filtered(stub_model, tmp_path):
    good = [peer_rollout(round_index=i) for i in range(3)]
    no_spread = peer_rollout(round_index=7, completions=("<answer>x</answer>",) * 4)
    forged = peer_rollout(round_index=8, answer="123456")
    inbox = Inbox([no_spread, forged] + good)
    settings = make_settings(stub_model, tmp_path / "run", 1, external=2)
    _, events, _ = run(settings, exchange=inbox)
    row = [e for e in events if isinstance(e, RoundFinished)][0].metrics
    assert row.n_external == 2
    assert row.reward_external == pytest.approx(0.25)  # one right answer in four, re-scored here
    # only own groups with a reward spread are shared: peers would drop the others unread
    assert len(inbox.published) == row.groups_with_signal - row.n_external and all(r.round == 1 for r in inbox.published)
    assert all(len(set(rescore(r).rewards)) > 1 for r in inbox.published)


def test_rescore_never_trusts_the_peer():
    assert rescore(peer_rollout(answer="999")) is None
    assert rescore(peer_rollout(question="What is 2+2?")) is None
    bad_ref = peer_rollout()
    bad_ref = Rollout(tasks.TaskRef(bad_ref.ref.dataset, "f" * 16, 1, 1), *list(bad_ref.__dict__.values())[1:])
    assert rescore(bad_ref) is None
    group = rescore(peer_rollout())
    assert group.rewards == [1.0, 0.0, 0.0, 0.0]


def test_negative_weight_reaches_the_update(stub_model, tmp_path):
    # the fake engine's loss is minus the mean advantage of the samples it is given: plain GRPO's groups
    # sum to zero, and with the negative samples weighted 0 only the better completions are left
    run(make_settings(stub_model, tmp_path / "plain", 2))
    run(make_settings(stub_model, tmp_path / "positive", 2, negative_weight=0.0))
    # (a round whose groups all lack a reward spread has no update and no loss)
    plain = [row for row in rows(tmp_path / "plain") if row["loss"] is not None]
    positive = [row for row in rows(tmp_path / "positive") if row["loss"] is not None]
    assert plain and positive
    assert all(abs(row["loss"]) < 1e-4 for row in plain)
    assert all(row["loss"] < -0.1 for row in positive)


def test_every_engine_call_runs_on_the_one_engine_thread(stub_model, tmp_path, monkeypatch):
    # Each thread that runs torch or llama.cpp ops gets its own OpenMP team, and idle teams spin on the
    # cores the working one needs: rounds, evaluations and checkpoints must all run on one thread.
    from backends.fake import FakeBackend

    seen: dict[str, set] = {}
    for name in ("generate", "train_step", "save_adapter"):
        def recording(self, *args, _original=getattr(FakeBackend, name), _name=name, **kwargs):
            seen.setdefault(_name, set()).add((threading.get_ident(), threading.current_thread().name))
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(FakeBackend, name, recording)
    settings = make_settings(stub_model, tmp_path / "run", 6, eval_every=2)
    run(settings)
    assert set(seen) == {"generate", "train_step", "save_adapter"}  # evaluations generate too
    threads = set().union(*seen.values())
    assert len(threads) == 1 and next(iter(threads))[1].startswith("swarm-engine")


def test_a_node_without_peers_answers_its_j_places_itself_and_one_with_peers_leaves_them_to_them(stub_model, tmp_path):
    offline = make_settings(stub_model, tmp_path / "offline", 1, local=3, external=5)
    run(offline)
    assert (rows(tmp_path / "offline")[0]["n_local"], rows(tmp_path / "offline")[0]["n_external"]) == (8, 0)
    inbox = Inbox()
    run(make_settings(stub_model, tmp_path / "peers", 1, local=3, external=5), exchange=inbox)
    assert rows(tmp_path / "peers")[0]["n_local"] == 3  # connected, the peers sent nothing yet: only own questions
    run(make_settings(stub_model, tmp_path / "alone", 1, local=3, external=5), exchange=Inbox(connected=False))
    assert rows(tmp_path / "alone")[0]["n_local"] == 8  # a peer node with no peer connected
