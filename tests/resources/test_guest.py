"""Levels and pause rules from injected sensor readings (no real battery or load needed)."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from swarm_app.resources.guest import PauseRules, Readings, in_window, limits, parse_schedule

NOON = datetime(2026, 12, 2, 12, 0)


def reading(battery=None, cpu=0.0, rss=100 << 20, now=NOON) -> Readings:
    return Readings(battery, cpu, rss, now)


def test_levels_cap_threads_and_lower_priority():
    assert (limits("light", 8).max_threads, limits("light", 8).nice) == (1, 19)
    assert limits("medium", 8).max_threads == 4 and limits("medium", 1).max_threads == 1
    assert limits("full", 8).max_threads == 8
    assert limits("full", 8, threads_cap=2).max_threads == 2
    assert limits("full", 8, cpu_share=25).max_threads == 2


def test_battery_pauses_and_power_resumes():
    rules = PauseRules()
    assert rules.decide(reading(battery=True)) .reason == "on battery"
    assert not rules.decide(reading(battery=False)).paused
    assert not rules.decide(reading(battery=None)).paused  # a desktop has no battery
    assert not PauseRules(on_battery=False).decide(reading(battery=True)).paused


def test_a_busy_owner_pauses_only_when_asked_and_without_flapping():
    assert not PauseRules().decide(reading(cpu=90)).paused  # off by default (on at level light)
    rules = PauseRules(when_busy=True, busy_cpu_percent=50, busy_for=2)
    assert [rules.decide(reading(cpu=c)).paused for c in (90, 90, 90, 10, 90, 10, 10, 10)] == [
        False, True, True, True, True, True, False, False]


def test_schedule_and_memory_cap():
    rules = PauseRules(schedule="22:00-07:00")
    assert rules.decide(reading(now=NOON)).paused and "schedule" in rules.decide(reading(now=NOON)).reason
    assert not rules.decide(reading(now=datetime(2026, 12, 2, 23, 30))).paused
    assert not rules.decide(reading(now=datetime(2026, 12, 3, 6, 59))).paused
    assert PauseRules(memory_bytes=1 << 30).decide(reading(rss=2 << 30)).paused
    assert in_window(parse_schedule("09:00-17:00"), NOON.time())
    with pytest.raises(ValueError):
        parse_schedule("nine to five")


def test_the_nodes_own_cpu_is_not_counted_as_other_programs_load(monkeypatch):
    """read_sensors: other programs' CPU = the machine's less this process's. The machine is made to read 100%
    busy; this process burns CPU between two readings, so the second must see less than 100% as others' (a new
    psutil.Process each reading saw 0% of its own, and a busy node could pause itself as if the user were busy)."""
    import psutil

    from swarm_app.resources.guest import read_sensors

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 100.0)
    read_sensors()
    ends = time.process_time() + 0.3
    while time.process_time() < ends:
        pass
    assert read_sensors().others_cpu_percent < 99.0
