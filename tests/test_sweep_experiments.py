"""Every named sweep in conf/experiment/ composes, and every point of its grid is a valid run.

A grid point is what Hydra's basic sweeper makes of `hydra.sweeper.params`: the cartesian product of
the listed values, applied as overrides after `experiment=NAME`. Composing each point with Hydra costs
about 50 ms, and the full grids hold thousands of points, so each point is built in two steps that
together do what one composition does: Hydra composes every distinct choice of config-group presets
the grid makes (`network=hierarchical`, `workload=dlrm_large`), then the point's value overrides
(`tcp.min_rto_ms=1`), typed by Hydra's override parser, replace keys that must already exist. A test
checks that this gives exactly what Hydra composes for a few points of every grid.
"""

from __future__ import annotations

import copy
import functools
import itertools
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from sweep_support import GROUPS, compose_config, group_options

import engine
from sweep.cli import CONF_DIR
from sweep.runner import run_id

EXPERIMENTS = group_options("experiment")
PARSER = OverridesParser.create()


def sweep_params(experiment: str) -> dict[str, str]:
    """`hydra.sweeper.params` of an experiment file, as written (`{"network.npus": "8,16"}`)."""
    config = OmegaConf.load(Path(CONF_DIR) / "experiment" / f"{experiment}.yaml")
    return {key: str(value) for key, value in OmegaConf.to_container(config.hydra.sweeper.params).items()}


def grid(experiment: str) -> list[dict[str, Any]]:
    """Every point of the experiment's grid as {key or group: typed value}, in the sweeper's order."""
    overrides = PARSER.parse_overrides([f"{key}={value}" for key, value in sweep_params(experiment).items()])
    keys = [override.key_or_group for override in overrides]
    values = [list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
              for override in overrides]
    return [dict(zip(keys, point)) for point in itertools.product(*values)]


@functools.cache
def build_points(experiment: str) -> list[dict[str, Any]]:
    """The resolved config of every grid point (see the module docstring); callers must not change them."""
    composed: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
    configs = []
    for point in grid(experiment):
        choices = tuple((key, value) for key, value in point.items() if key in GROUPS)
        if choices not in composed:
            composed[choices] = compose_config([f"experiment={experiment}", *(f"{k}={v}" for k, v in choices)])
        config = copy.deepcopy(composed[choices])
        for key, value in point.items():
            if key in GROUPS:
                continue
            *path, leaf = key.split(".")
            section = config
            for part in path:
                section = section[part]
            assert leaf in section, f"{experiment}: {key} is not a key of the config"
            section[leaf] = value
        configs.append(config)
    return configs


def test_experiments_exist() -> None:
    for study in ("scaling_npus", "nic_speed", "tcp_params", "tcp_incast", "dlrm_sizes", "collectives"):
        assert study in EXPERIMENTS and f"{study}_quick" in EXPERIMENTS, study
    assert "quickstart" in EXPERIMENTS


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_grid_point_is_a_valid_run(experiment: str) -> None:
    """Each point composes and passes the engine's validation; the experiment names its dataset."""
    configs = build_points(experiment)
    assert configs, f"{experiment} sweeps nothing"
    for config in configs:
        engine.load_config(config)
    names = {config["name"] for config in configs}
    assert len(names) == 1 and names != {"default"}, f"{experiment} must set its own `name`"


def test_experiment_names_differ() -> None:
    names = [compose_config([f"experiment={experiment}"])["name"] for experiment in EXPERIMENTS]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_grid_points_equal_hydra_composition(experiment: str) -> None:
    """The shortcut of `build_points` against Hydra's own composition, on the first and last points
    of the grid Hydra's basic sweeper expands (which must have as many points as `grid`)."""
    overrides = PARSER.parse_overrides([f"{key}={value}" for key, value in sweep_params(experiment).items()])
    (hydra_points,) = BasicSweeper.split_arguments(overrides, max_batch_size=None)
    ours = build_points(experiment)
    assert len(hydra_points) == len(ours)
    for index in (0, -1):
        assert compose_config([f"experiment={experiment}", *hydra_points[index]]) == ours[index]


def test_quickstart_is_small() -> None:
    """The README's main job stays a minute's work: 10 to 30 runs, every one a training run."""
    configs = build_points("quickstart")
    assert 10 <= len(configs) <= 30
    assert {config["workload"]["type"] for config in configs} == {"dlrm"}
    assert {config["name"] for config in configs} == {"quickstart"}


def test_tcp_params_runs_each_simulation_once() -> None:
    """The ECN threshold marks only ECN-capable traffic (DCTCP here: tcp.ecn is off in the newreno and
    cubic presets), so at the newreno and cubic points its 4 values are one simulation, one run_id.
    Per congestion control and ECN value: 4 min RTOs x 2 handshakes x 3 initial windows x 2 delayed
    ACKs x 6 buffers x 2 workloads = 576 points; newreno 576 + cubic 576 + dctcp 4 x 576 = 3,456
    distinct simulations of the 6,912 points (3 x 4 x 576)."""
    configs = build_points("tcp_params")
    assert len(configs) == 6_912
    assert len({run_id(config) for config in configs}) == 576 + 576 + 4 * 576 == 3_456
