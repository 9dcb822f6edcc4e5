"""How many distinct simulations a named sweep plans: grid points against distinct run_ids.

Plans the grid of `conf/experiment/NAME.yaml` (the cartesian product of its `hydra.sweeper.params`,
as the sweeper expands it) with the sweep's own planner (`sweep.plan.plan`: composition, validation,
run_id) and counts the points and their distinct run_ids. Points that share a run_id are one
simulation: the sweep runs it once (`sweep.driver` skips the repeats).

Usage: python benchmarks/count_simulations.py tcp_params [more experiment names]
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from pathlib import Path

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from sweep.cli import CONF_DIR
from sweep.plan import GridComposer, plan


def grid_points(experiment: str, fixed: list[str]) -> list[list[str]]:
    """The override list of every point of the experiment's grid, each ending with `fixed`."""
    params = OmegaConf.load(Path(CONF_DIR) / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    parsed = OverridesParser.create().parse_overrides([f"{key}={value}" for key, value in params.items()])
    axes: list[list[str]] = [[f"{override.key_or_group}={value}" for value in override.sweep_string_iterator()]
                             if override.is_sweep_override() else [f"{key}={value}"]
                             for override, (key, value) in zip(parsed, params.items())]
    return [[*point, *fixed] for point in itertools.product(*axes)]


def main() -> None:
    for experiment in sys.argv[1:] or ["tcp_params"]:
        with tempfile.TemporaryDirectory() as results_dir:
            fixed = [f"experiment={experiment}", f"results_dir={results_dir}"]
            start = time.perf_counter()
            with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
                loader = GlobalHydra.instance().config_loader()
                master = loader.load_configuration("config", fixed, RunMode.MULTIRUN)
                runs = plan(grid_points(experiment, fixed), GridComposer(loader, master).compose)
            distinct = len({run.run_id for run in runs})
            print(f"{experiment}: {len(runs):,} grid points, {distinct:,} distinct run_ids "
                  f"({len(runs) - distinct:,} repeats; planned in {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
