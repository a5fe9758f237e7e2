"""`swarm experiment --nodes 2,4,...`: per size, the paired differences with solo and their t-based 95%
intervals, the headline rule fixed in code, and sizes.json in the issue's format."""

import math

import pytest

from swarm_app.experiment.plan import Cell, Config, Plan, cell_settings, compared_configs, differences, fingerprint, parse_configs
from swarm_app.experiment.sizes import headline_config, paired, sizes_file, t_quantile
from swarm_app.experiment.summary import summarize
from swarm_app.kernel.settings import Settings, set_value
from tests.experiment.test_experiment import _cell, _costing


def test_the_interval_is_students_t_over_the_seeds():
    got = paired([1.0, 2.0, 6.0])
    sd = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)
    half = 4.303 * sd / math.sqrt(3)  # t(0.975, 2 df) from any table
    assert got["diff_mean"] == pytest.approx(3.0)
    assert got["diff_ci95"] == pytest.approx([3.0 - half, 3.0 + half], rel=1e-3)
    assert paired([2.5])["diff_ci95"] is None  # one seed: no interval
    assert t_quantile(1) == pytest.approx(12.706, rel=1e-3) and t_quantile(1000) == pytest.approx(1.96, rel=1e-2)


def test_the_headline_is_the_adaptive_config_whatever_the_data_say():
    assert headline_config(["32/0", "16/16", "8/24", "8/24:adaptive"]) == "8/24:adaptive"
    assert headline_config(["32/0", "16/16", "8/24"]) == "8/24"  # else the most peers' groups
    assert headline_config(["32/0"]) is None
    assert [c.name for c in compared_configs(32, 8)] == ["32/0", "8/24", "8/24:adaptive"]
    assert parse_configs("32/0,8/24:adaptive")[1] == Config(8, 24, "adaptive")


def test_sizes_json_holds_each_size_with_its_intervals_at_equal_cpu_and_equal_rounds():
    base = {"accuracy": 0.30, "per_task": {"a": 0.30}}
    by_size = {}
    for nodes, shared in ((2, [0.36, 0.38]), (4, [0.40, 0.44])):
        plan = Plan(nodes, (Config(8, 0), Config(4, 4)), 2, 2, 2, 8, 0, 1)
        cells = [_costing(_cell("8/0", 0, [0.40, 0.40]), 2.0), _costing(_cell("4/4", 0, [shared[0]] * 2), 1.0),
                 _costing(_cell("8/0", 1, [0.40, 0.40]), 2.0), _costing(_cell("4/4", 1, [shared[1]] * 2), 1.0)]
        by_size[nodes] = (2, summarize(plan, base, cells)["configs"])
    table = sizes_file(by_size)
    assert table["policy"] == "4/4" and [s["nodes"] for s in table["sizes"]] == [2, 4]
    two = table["sizes"][0]
    assert (two["seeds"], two["rounds"]) == (2, 2)
    # at equal CPU solo is read at round 1 (+5 points); sharing gained +6 and +8: differences +1 and +3
    assert two["equal_cpu"]["values"] == pytest.approx([1.0, 3.0])
    assert two["equal_cpu"]["diff_mean"] == pytest.approx(2.0)
    lo, hi = two["equal_cpu"]["diff_ci95"]
    assert [lo, hi] == pytest.approx([2.0 - 12.706, 2.0 + 12.706], rel=1e-3)  # sd sqrt(2) / sqrt(2 seeds) x t(1 df)
    assert two["equal_cpu"]["ratio"] == pytest.approx(7.0 / 5.0)
    assert two["equal_rounds"]["values"] == pytest.approx([-4.0, -2.0])  # +6, +8 against +10 at round 2


def test_a_bare_config_is_the_fixed_update_whatever_the_models_default_and_old_folders_still_match():
    """`8/24` trains the fixed update ("uniform") even where the model's swarm.toml makes "adaptive" its default,
    and a folder written when "uniform" was the default keeps its cells (the grid sets the policy per cell)."""
    plan = Plan(nodes=2, configs=compared_configs(32, 8), seeds=1, rounds=3, eval_every=3, eval_n=8, eval_samples=0,
                threads=1)
    old, new = Settings(), Settings()
    set_value(new, "train", "external_policy", "adaptive", source="the model's swarm.toml")
    policies = {c.name: cell_settings(new, plan, Cell(c, 0)).train.external_policy for c in plan.configs}
    assert policies == {"32/0": "uniform", "8/24": "uniform", "8/24:adaptive": "adaptive"}
    assert cell_settings(new, plan, Cell(Config(8, 24, "fill"), 0)).train.external_policy == "fill"
    assert differences(fingerprint(old, plan, "m"), fingerprint(new, plan, "m")) == []
