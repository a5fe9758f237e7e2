"""Issue 10's failures of the node's own files and inputs, each as a user meets it: through the real
CLI or Session with the fake backend, real files in a temp dir, real sockets on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from swarm_app import cli
from swarm_app.kernel import tasks
from swarm_app.kernel.rollouts import Rollout
from swarm_app.session.session import Session
from swarm_app.training.checkpoint import Checkpoints
from swarm_app.training.loop import rescore
from tests.session.test_session import make_settings, rows, run


def swarm(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_args(stub_model, run_dir, rounds, *extra):
    return ("run", "--no-ui", "--backend", "fake", "--model", str(stub_model), "--run-dir", str(run_dir),
            "--rounds", str(rounds), *extra)


@contextlib.contextmanager
def read_only(path):
    """Make `path` unwritable even for root (chattr +i there; mode bits do not stop root)."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: cannot make a folder read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


# --- metrics.jsonl


def test_a_garbage_line_in_metrics_is_set_aside_and_no_row_is_lost(stub_model, tmp_path):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 5))
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write("garbage a person pasted\n")
    run(make_settings(stub_model, run_dir, 7))
    run(make_settings(stub_model, run_dir, 8))
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert (run_dir / "metrics.rejected.jsonl").read_text() == "garbage a person pasted\n"


# --- the run folder


def test_a_read_only_run_folder_is_refused_before_anything_runs(stub_model, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with read_only(run_dir):
        code, out, err = swarm(capsys, *run_args(stub_model, run_dir, 2))
    assert code == 2
    assert "cannot write in" in err and str(run_dir) in err and "Traceback" not in err
    assert "loading the model" not in out and list(run_dir.iterdir()) == []


@pytest.mark.parametrize("fresh", [False, True])
def test_a_run_dir_that_is_a_file_is_refused(stub_model, tmp_path, capsys, fresh):
    run_dir = tmp_path / "run"
    run_dir.write_text("not a folder")
    code, _, err = swarm(capsys, *run_args(stub_model, run_dir, 1), *(["--fresh"] if fresh else []))
    assert code == 2 and f"--run-dir {run_dir} is a file" in err and "Traceback" not in err
    assert run_dir.read_text() == "not a folder"


def test_a_checkpoint_folder_that_cannot_be_written_ends_with_a_message(stub_model, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert swarm(capsys, *run_args(stub_model, run_dir, 1))[0] == 0
    with read_only(run_dir / "checkpoints"):
        code, _, err = swarm(capsys, *run_args(stub_model, run_dir, 2))
    assert code == 1 and "cannot write" in err and "resumes from the last checkpoint" in err
    assert "Traceback" not in err
    assert Checkpoints(run_dir).load_latest()[0].round == 1


def test_a_finished_run_says_so_without_loading_the_model(stub_model, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert swarm(capsys, *run_args(stub_model, run_dir, 1))[0] == 0
    code, out, _ = swarm(capsys, *run_args(stub_model, run_dir, 1, "--log-format", "json"))
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(e["event"], e.get("step")) for e in events] == [
        ("ModelLoading", "checking the settings"), ("RunStopped", None)]  # no "loading the model" step
    assert events[-1]["last_round"] == 1 and events[-1]["reason"] == "already finished"
    code, out, _ = swarm(capsys, *run_args(stub_model, run_dir, 1))
    assert "already finished its 1 rounds" in out and "starting at round 2" not in out


# --- checkpoints


def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(stub_model, tmp_path, caplog):
    run_dir = tmp_path / "run"
    run(make_settings(stub_model, run_dir, 3))
    damaged = run_dir / "checkpoints" / "round-000003"
    (damaged / "fake_adapter.json").write_text('{"updates": ')  # torn by a bad disk
    with caplog.at_level(logging.WARNING):
        last, _, session = run(make_settings(stub_model, run_dir, 4))
    assert "resuming from the intact checkpoint of round 2" in caplog.text
    assert last == 4 and [r["round"] for r in rows(run_dir)] == [1, 2, 3, 4]
    aside = [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("damaged-round-000003")]
    assert len(aside) == 1 and (aside[0] / "fake_adapter.json").read_text() == '{"updates": '
    assert Checkpoints(run_dir).load_latest()[0].round == 4


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_damaged_optimizer_state_falls_back_instead_of_resetting(tiny_model_dir, tmp_path, caplog, damage):
    settings = make_settings(tiny_model_dir, tmp_path / "run", 2, local=2, completions=2)
    settings.model.backend, settings.model.max_new_tokens = "torch", 8
    run(settings)
    optimizer = tmp_path / "run" / "checkpoints" / "round-000002" / "optimizer.pt"
    if damage == "truncate":
        optimizer.write_bytes(optimizer.read_bytes()[:100])
    else:
        optimizer.unlink()
    settings.train.rounds = 3
    session = Session(settings)
    with caplog.at_level(logging.WARNING):
        session.open()
    try:
        assert session.next_round == 2
        assert "optimizer state" in caplog.text and "delete it" not in caplog.text
        assert "resuming from the intact checkpoint of round 1" in caplog.text
    finally:
        session.close()


# --- the network inputs


def busy_port():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


def test_a_busy_listen_port_fails_at_once_and_writes_nothing(stub_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    holder, port = busy_port()
    with holder:
        code, out, err = swarm(capsys, *run_args(stub_model, tmp_path / "run", 2), "--no-mdns",
                               "--listen", f"127.0.0.1:{port}")
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err and "--listen" in err
    assert "loading the model" not in out and not (tmp_path / "run").exists()


def test_a_busy_default_port_moves_to_a_free_one_and_says_so_plainly(stub_model, tmp_path, caplog, monkeypatch):
    from swarm_app.kernel.settings import PeerSettings

    holder, port = busy_port()
    monkeypatch.setattr(PeerSettings, "listen", f"127.0.0.1:{port}")  # stands in for 0.0.0.0:47470
    settings = make_settings(stub_model, tmp_path / "run", 1)
    settings.peer.enabled, settings.peer.mdns, settings.peer.listen = True, False, f"127.0.0.1:{port}"
    session = Session(settings)
    with holder, caplog.at_level(logging.WARNING):
        session.open()
    assert session.peer_config.listen == "127.0.0.1:0"
    assert f"port {port} is taken" in caplog.text and "listening on a free port instead" in caplog.text
    assert "choose another address" not in caplog.text


def test_an_unreachable_peer_is_reported_and_nothing_counts_as_sent(stub_model, tmp_path, caplog):
    settings = make_settings(stub_model, tmp_path / "run", 2)
    settings.peer.enabled, settings.peer.mdns = True, False
    settings.peer.listen, settings.peer.peers = "127.0.0.1:0", ["127.0.0.1:1"]
    with caplog.at_level(logging.WARNING):
        run(settings)
    assert caplog.text.count("127.0.0.1:1 cannot be reached") == 1  # once, not every round
    assert [(r["peers"], r["rollouts_sent"]) for r in rows(tmp_path / "run")] == [(0, 0), (0, 0)]


# --- held-out items


def heldout_rollout():
    task = tasks.regenerate(tasks.heldout(tasks.preset("easy"), 1)[0], heldout=True)
    return Rollout(task.ref, task.question, task.answer, (f"<answer>{task.answer}</answer>", "<answer>x</answer>"),
                   "peer-model", 1, "peer", 0)


def test_a_peer_rollout_for_a_held_out_item_never_reaches_training():
    rollout = heldout_rollout()
    assert rollout.ref.seed == tasks.HELDOUT_SEED
    assert rescore(rollout) is None
    with pytest.raises(KeyError, match="held-out"):
        tasks.regenerate(rollout.ref)


# --- swarm eval


def test_eval_says_which_model_and_adapter_it_scored(stub_model, tmp_path, capsys):
    code, out, _ = swarm(capsys, "eval", "--backend", "fake", "--model", str(stub_model), "--n", "5")
    assert code == 0 and f"model {stub_model}, no adapter: the base model" in out
    run_dir = tmp_path / "run"
    assert swarm(capsys, *run_args(stub_model, run_dir, 1))[0] == 0
    code, out, _ = swarm(capsys, "eval", "--backend", "fake", "--model", str(stub_model), "--n", "5",
                         "--adapter", str(run_dir), "--json")
    report = json.loads(out)
    assert report["model"] == str(stub_model) and report["adapter"] == str(run_dir / "checkpoints" / "round-000001")


# --- descriptor shortage


@pytest.mark.skipif(sys.platform == "win32", reason="needs the resource module")
def test_a_metrics_write_waits_out_a_descriptor_shortage(tmp_path):
    script = textwrap.dedent(f"""
        import os, resource, threading, time
        from pathlib import Path
        from swarm_app.training.metrics_log import MetricsLog
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        hog = []
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        def release():
            time.sleep(0.8)
            for fd in hog:
                os.close(fd)
        threading.Thread(target=release).start()
        MetricsLog(Path({str(tmp_path / 'metrics.jsonl')!r})).append({{"round": 1}})
        print("written")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no file descriptor free" in done.stderr
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"round": 1}
