"""The adaptive thread count, sans-IO: a simulated machine whose speed per thread count changes."""

from __future__ import annotations

import pytest

from swarm_app.resources.guest import FreeCpus
from swarm_app.resources.threads import ThreadTuner, candidates


def run(tuner: ThreadTuner, seconds_for, rounds: int, work: float = 1000.0, free=lambda r: None) -> list[int]:
    """Drive `rounds` rounds; `seconds_for(threads, round)` is how long a round takes, `free(round)` the CPUs
    other programs left free during it. The session asks `abort_probe` during a round: here once, at the
    time the round would end."""
    used = []
    for r in range(rounds):
        threads, best = tuner.threads, tuner.best
        seconds = seconds_for(threads, r)
        if tuner.abort_probe(seconds):
            seconds = tuner.abort_after * seconds_for(best, r)  # cut short at abort_after usual rounds
        used.append(threads)
        tuner.record(work, seconds, free(r))
    return used


def test_candidates():
    assert candidates(1) == [1] and candidates(2) == [1, 2] and candidates(6) == [1, 2, 4, 6] and candidates(8) == [1, 2, 4, 8]


def test_an_idle_machine_settles_on_every_core():
    tuner = ThreadTuner(2)
    used = run(tuner, lambda t, r: 1.0 if t == 2 else 1.6, 100)
    assert tuner.best == 2 and used[0] == 1  # starts safe, moves up after one trial round
    assert used[2:].count(1) <= 5  # re-checks one round in 25


def test_a_busy_machine_stays_on_one_thread_and_a_bad_probe_is_cut_short():
    tuner = ThreadTuner(2)
    run(tuner, lambda t, r: 1.0 if t == 1 else 40.0, 100)  # 2 threads stall 40x behind a busy sibling
    assert tuner.best == 1
    assert tuner.probes <= 5  # the first trial and one in 25 rounds


def test_it_follows_the_machine_when_a_load_starts():
    tuner = ThreadTuner(2)
    used = run(tuner, lambda t, r: (1.0 if t == 2 else 1.6) if r < 50 else (1.0 if t == 1 else 20.0), 100)
    assert used[45] == 2 and tuner.best == 1
    assert used[-40:].count(2) <= 2  # noticed within a round or two, not after the next scheduled probe


def test_more_cores_find_the_middle():
    tuner = ThreadTuner(8)
    speed = {1: 1.0, 2: 1.8, 4: 3.0, 8: 2.0}  # hyperthreads and a busy neighbour: 4 is best
    run(tuner, lambda t, r: 1.0 / speed[t], 200)
    assert tuner.best == 4


def test_one_lucky_probe_round_does_not_move_it_for_good():
    tuner = ThreadTuner(2)
    # 2 threads are slower here (a busy sibling), but the first trial round of 2 happens to run fast
    used = run(tuner, lambda t, r: 1.0 if t == 1 else (0.5 if r == 1 else 1.5), 60)
    assert tuner.best == 1
    assert used[2:].count(2) <= 2 + 2  # the trial's confirmation rounds, then one probe in 25


def test_the_slow_first_round_is_not_taken_as_one_threads_pace():
    tuner = ThreadTuner(2)
    # the first round loads kernels (3x slower); afterwards 2 threads are 5% slower than 1 (a busy sibling)
    used = run(tuner, lambda t, r: 3.0 if r == 0 else (1.0 if t == 1 else 1.05), 24)
    assert tuner.best == 1 and used[:2] == [1, 1]
    assert used.count(2) == 1  # one trial round, lost


def test_a_probe_waits_while_the_cpus_it_needs_are_busy():
    tuner = ThreadTuner(2)
    busy = lambda r: 1.0 if r < 6 else 1.9  # noqa: E731 - one of 2 CPUs taken by another program, then free again
    used = run(tuner, lambda t, r: 1.0 if t == 1 else (40.0 if r < 6 else 0.6), 10, free=busy)
    assert used[:7] == [1] * 7 and tuner.waited == 5  # rounds 2-6 would have probed; none did
    assert used[7] == 2 and tuner.best == 2  # the first round after the CPUs were free again probes, and wins


def test_a_probe_at_fewer_threads_never_waits():
    tuner = ThreadTuner(2, probe_every=3)
    used = run(tuner, lambda t, r: 1.0 if t == 2 else 1.6, 12, free=lambda r: 2.0 if r < 4 else 0.2)
    assert tuner.best == 2 and 1 in used[4:]  # probing 1 thread below the best needs no free CPU


def test_a_losing_probe_is_cut_short_at_one_and_a_half_usual_rounds():
    tuner = ThreadTuner(2)
    tuner.record(1000.0, 3.0)  # the warm-up round: not measured
    assert tuner.record(1000.0, 1.0) == 2  # one usual round of 1 s on one thread, then the probe at 2
    assert not tuner.abort_probe(1.4)
    assert tuner.abort_probe(1.6) and tuner.threads == 1


def test_free_cpus_are_the_cpus_less_what_other_programs_used():
    samples = iter([(10.0, 100.0, 20.0), (12.0, 103.0, 21.8), (12.0, 104.0, 22.0), (14.0, 104.5, 22.5)])
    free = FreeCpus(2, sample=lambda: next(samples))
    assert free.read() is None  # no window yet
    assert free.read() == pytest.approx(1.4)  # the machine busy 3 CPU-s in 2 s, 1.8 of them this process's
    assert free.read() is None  # no time passed
    assert free.read() == 2.0  # only this process worked
