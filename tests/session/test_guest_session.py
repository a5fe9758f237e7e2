"""The session's use of the thread tuner: each round runs on the count the tuner gives, and the engine is
told it. A real Session over real files, with the fake engine made a CPU engine whose threads can change and
whose completions take longer the more threads it has (as on a machine whose other core is busy): the
tuner probes 2 threads once, finds them slower, and the rounds after run on 1. (The pause rules through a
real `swarm run` are tests/tui/test_terminal.py's battery test.)"""

from __future__ import annotations

import asyncio
import json
import time

from backends import registry
from backends.base import Hardware
from backends.fake import FakeBackend
from swarm_app.session.session import Session
from tests.session.test_session import make_settings

DELAY_S = 0.004
"""Per completion and thread: a round of 8 x 8 completions takes ~0.26 s on 1 thread, ~0.5 s on 2."""

TWO_CORES = Hardware(cpu_count=2, physical_cores=2, ram_bytes=8 * 2**30)


class ThreadedFake(FakeBackend):
    calls: list[int] = []

    def load(self, spec) -> None:
        super().load(spec)
        self.threads_now = spec.threads

    def set_threads(self, threads: int) -> bool:
        self.threads_now = threads
        ThreadedFake.calls.append(threads)
        return True

    def _complete(self, prompt, index, sampling):
        time.sleep(DELAY_S * self.threads_now)
        return super()._complete(prompt, index, sampling)


class BothCpusFree:
    """The CPUs other programs left free, as guest.FreeCpus reads them: both, always. The probe is gated on
    free CPUs (resources/threads.py), so on a machine busy with other jobs (a loaded CI runner, the full
    suite beside other work) the real reading would skip the probe this test is about."""

    def __init__(self, cpus: int) -> None:
        self.cpus = cpus

    def read(self) -> float:
        return 2.0


def tuned_rounds(stub_model, tmp_path, monkeypatch, free_cpus: type) -> list[dict]:
    """The rows of an 8-round session on the fake CPU engine whose threads the tuner may set (1 or 2), with the
    CPUs other programs leave free read by `free_cpus`."""
    monkeypatch.setitem(registry.ENGINES, "fake", "tests.session.test_guest_session:ThreadedFake")
    monkeypatch.setattr("swarm_app.resources.policy.FreeCpus", free_cpus)
    monkeypatch.setattr(ThreadedFake, "calls", [])
    settings = make_settings(stub_model, tmp_path / "run", 8)
    settings.resources.level, settings.resources.cpu_share = "full", 100
    settings.resources.pause_when_busy, settings.resources.pause_on_battery = False, False
    settings.model.threads = 0  # adapt (the test suite fixes 1 elsewhere)
    settings.resources.threads = 2  # the level's cap: candidates 1 and 2 on any machine with 2 cores or more
    session = Session(settings)
    session.hardware = TWO_CORES  # the fake engine probes no hardware: say it (open() keeps a set one)
    asyncio.run(session.run())
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_each_round_runs_on_the_tuners_count_and_a_slower_probe_is_dropped(stub_model, tmp_path, monkeypatch):
    rows = tuned_rounds(stub_model, tmp_path, monkeypatch, BothCpusFree)
    threads = [row["threads"] for row in rows]
    print(f"\nthreads per round {threads}; set_threads calls {ThreadedFake.calls}")
    assert 2 in threads, threads  # the tuner probed 2 threads and the round really ran on them...
    assert ThreadedFake.calls[1:len(threads) + 1] == threads  # ...because the engine was told, before each round
    # (after the first call, which the policy makes when the engine is attached; the session may set it once more
    # after the last round)
    assert threads[-3:] == [1, 1, 1], threads  # 2 threads were slower: the tuner went back to 1


class NoCpuFree(BothCpusFree):
    def read(self) -> float:
        return 0.0


def test_no_probe_runs_while_other_programs_keep_the_cpus_busy(stub_model, tmp_path, monkeypatch):
    """The same session with the other CPU read busy: the tuner never tries 2 threads (issue 38: the probe round
    behind a busy core cost a short run a quarter of its time)."""
    rows = tuned_rounds(stub_model, tmp_path, monkeypatch, NoCpuFree)
    assert len(rows) == 8 and {row["threads"] for row in rows} == {1}
    assert 2 not in ThreadedFake.calls[1:]  # (the first call is the level's cap, set when the engine attaches)
