"""Replicate until confident (sweep/replicate.py): each point's interval against one computed by hand from
a published table of Student's t, the stopping rule, and a replicated sweep on Ray as a user types it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import pytest
from sweep_support import compose_config

import engine
from sweep.plan import plan
from sweep.replicate import ReplicatePolicy, mean_interval, replicate_points
from sweep.store import load_runs

# t(0.975, df) from a table of Student's t distribution (two-sided 95 %), e.g. NIST/SEMATECH e-Handbook
# of Statistical Methods, 1.3.6.7.2.
T_TABLE_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
               10: 2.228, 20: 2.086, 29: 2.045, 100: 1.984}


def _by_hand(values: list[float]) -> tuple[float, float]:
    """Mean and 95 % half-width: t(0.975, n - 1) s / sqrt(n), t from the table above."""
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, T_TABLE_975[n - 1] * s / math.sqrt(n)


def test_every_tabled_count_of_seeds_gets_the_tables_interval() -> None:
    for degrees in T_TABLE_975:
        values = [float(i % 3) for i in range(degrees + 1)]  # 0, 1, 2, 0, ...: a spread at every size
        assert mean_interval(values) == pytest.approx(_by_hand(values), rel=2.5e-4), degrees  # 3 decimals


def test_the_interval_is_t_s_over_root_n() -> None:
    # 1, 2, 3: mean 2, s = 1, half-width 4.303 / sqrt(3) = 2.484
    mean, half_width = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half_width == pytest.approx(4.303 / math.sqrt(3), rel=2.5e-4)
    values = [10.2, 9.7, 10.9, 10.1, 9.5, 10.4]
    assert mean_interval(values) == pytest.approx(_by_hand(values), rel=2.5e-4)  # the table's 3 decimals
    assert mean_interval([5.0, 5.0, 5.0]) == (5.0, 0.0)
    assert mean_interval([5.0])[1] == math.inf


def test_a_point_stops_at_the_minimum_when_confident_and_otherwise_asks_what_its_spread_needs() -> None:
    policy = ReplicatePolicy(until_ci_pct=5.0, min_seeds=3, max_seeds=10)
    assert policy.seeds_wanted([], 0) == 3
    assert policy.seeds_wanted([2.0, 2.0, 2.0], 3) == 3  # no randomness: the minimum
    assert policy.seeds_wanted([100.0, 101.0, 99.0], 3) == 3  # +-2.48 %: within 5 %
    # mean 100, s = 10: n with t(n - 1) 10 / sqrt(n) <= 5 is 18 (t(17) = 2.110: 4.97; at 17, t(16) = 2.120: 5.14),
    # more than the maximum
    assert policy.seeds_wanted([90.0, 100.0, 110.0], 3) == 10
    # s = 3: n = 4 gives t(3) 3 / 2 = 4.77 <= 5 (n = 3: 7.45)
    assert ReplicatePolicy(until_ci_pct=5.0).seeds_wanted([97.0, 100.0, 103.0], 3) == 4
    assert policy.seeds_wanted([90.0, 100.0, 110.0], 10) == 10  # at the maximum: stop
    assert policy.seeds_wanted([], 3) == 3  # no run gave the metric: more seeds would not either


def test_settings_out_of_range_name_their_key() -> None:
    for section, key in (({"until_ci_pct": 0}, "until_ci_pct"), ({"until_ci_pct": "5"}, "until_ci_pct"),
                         ({"metric": "status"}, "metric"), ({"min_seeds": 1}, "min_seeds"),
                         ({"max_seeds": 2}, "max_seeds"), ({"seeds": 3}, "seeds")):
        with pytest.raises(engine.ConfigError, match=f"replicate.{key}"):
            ReplicatePolicy.of({"replicate": section})


def test_waves_add_seeds_until_each_point_is_confident(tmp_path: Path) -> None:
    """Two points, their metric a function of the seed: the first constant, the second spread."""
    base = [f"results_dir={tmp_path}", "name=r", "workload=collective", "workload.bytes=1024"]
    runs = plan([[*base, "network.npus=4"], [*base, "network.npus=8"]], compose_config)
    spread = {0: 100.0, 1: 110.0, 2: 90.0, 3: 104.0, 4: 96.0, 5: 100.0, 6: 101.0, 7: 99.0, 8: 100.0, 9: 100.0}
    waves: list[list[tuple[int, int]]] = []

    def run_wave(wave: list[Any]) -> dict[str, Mapping[str, Any]]:
        waves.append([(run.config["network"]["npus"], run.config["seed"]) for run in wave])
        return {run.run_id: {"status": "ok", "iteration_time_s": 1.0 if run.config["network"]["npus"] == 4
                             else spread[run.config["seed"]]} for run in wave}

    points = replicate_points(runs, ReplicatePolicy(until_ci_pct=5.0), run_wave)
    assert waves[0] == [(4, 0), (4, 1), (4, 2), (8, 0), (8, 1), (8, 2)]  # the minimum, every point
    assert points[0].tried == 3 and points[0].values == [1.0, 1.0, 1.0]
    # 8 NPUs: 100, 110, 90 (+-24.8 %) asks for 10 (the estimate says 18), ...
    assert [seed for npus, seed in waves[1]] == list(range(3, 10)) and points[1].tried == 10
    mean, half_width = _by_hand(points[1].values)
    assert half_width <= 0.05 * mean  # ... and 10 seeds bring it within 5 %: 100 +- 3.3
    assert len(waves) == 2


ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.mark.slow
def test_a_switch_stops_at_the_minimum_and_a_leaf_spine_with_ecmp_collisions_takes_more(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sweep", "-m", "network=switch,leaf_spine", "network.npus=16",
               "network.hosts_per_leaf=4", "network.spines=2", "workload=astra_dlrm", "replicate.until_ci_pct=0.2",
               "replicate.max_seeds=8", "ray.num_cpus=2", "name=replicated"]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, **ENV}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    runs = load_runs(tmp_path / "results" / "replicated")
    switch = runs[runs["network.topology"] == "switch"].sort_values("seed")
    leaf_spine = runs[runs["network.topology"] == "leaf_spine"].sort_values("seed")
    # one switch: no ECMP; only the hosts' transmit jitter (nanoseconds) varies with the seed, far inside
    # the 0.2 % asked, so the minimum
    assert list(switch["seed"]) == [0, 1, 2]
    switch_mean, switch_half_width = _by_hand(list(switch["iteration_time_s"]))
    assert switch_half_width <= 0.002 * switch_mean
    seeds = len(leaf_spine)
    assert list(leaf_spine["seed"]) == list(range(seeds)) and 3 < seeds <= 8
    mean, half_width = _by_hand(list(leaf_spine["iteration_time_s"]))
    assert half_width <= 0.002 * mean or seeds == 8  # within 0.2 %, or at the maximum
    # and not within it at the minimum (why it took more)
    first_mean, first_half_width = _by_hand(list(leaf_spine["iteration_time_s"])[:3])
    assert first_half_width > 0.002 * first_mean
    assert "replicate: 2 points" in done.stdout

    again = subprocess.run(command, cwd=tmp_path, env={**os.environ, **ENV}, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert "  ran 0 in " in again.stdout and len(load_runs(tmp_path / "results" / "replicated")) == len(runs)
    assert "ray:" not in again.stderr  # nothing left to run: no Ray started (it took 8.6 s)
