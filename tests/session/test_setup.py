"""Deriving a run's engine settings from the settings and the machine (swarm_app/session/engine.py)."""

from __future__ import annotations

from backends.base import Hardware
from swarm_app.kernel.settings import Settings
from swarm_app.kernel.sizing import recommend
from swarm_app.session.engine import engine_threads

FOUR_CORES = Hardware(system="Linux", cpu_count=8, physical_cores=4)


def test_engine_threads_follow_the_sizing_advice_when_unset():
    assert engine_threads(Settings(), recommend(FOUR_CORES, "torch")) == 4


def test_engine_threads_set_in_the_settings_win_over_the_advice():
    # `swarm eval` once ignored model.threads: two evaluations side by side ran 2 threads each on 2 cores
    settings = Settings()
    settings.model.threads = 1
    assert engine_threads(settings, recommend(FOUR_CORES, "torch")) == 1
    assert engine_threads(settings, recommend(FOUR_CORES, "llama_cpp")) == 1
