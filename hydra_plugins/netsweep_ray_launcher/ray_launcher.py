"""`hydra/launcher: ray_netsweep`, `hydra/sweeper: netsweep` and `hydra/sweeper: optuna`: a Hydra
multirun as one sweep on Ray.

This module holds what Hydra needs to find and configure them: their configs (registered in Hydra's
ConfigStore) and the three plugin classes, each handing its work to `sweep.launch` (grid expansion,
planning, the run on Ray, two fidelities, replicates, a search; the exit codes are there): the
netsweep sweeper hands the whole grid to the launcher in one batch, and another launcher (submitit's)
runs it as one job per point.
"""

# No `from __future__ import annotations`: Hydra executes plugin modules outside sys.modules while
# it scans them, where dataclasses cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

if TYPE_CHECKING:  # `sweep.launch` is imported on first use: Hydra imports this module at every start-up
    from sweep.launch import SweepLauncher


@dataclass
class RayNetsweepLauncherConf:
    """`hydra.launcher.*`; where Ray runs is the root config's `ray.address` and `ray.num_cpus`."""

    _target_: str = "hydra_plugins.netsweep_ray_launcher.ray_launcher.RayNetsweepLauncher"
    max_in_flight: int | None = None  # runs submitted and not yet back; null = 16 per CPU
    max_retries: int = 2  # reruns of a run whose worker process died, before it is an error row
    max_wall_time_s: float | None = None  # a run still going after this wall time: status timeout
    run_memory_mb: float | None = None  # memory each run reserves and is held to; null = reserve its estimate, no limit
    flush_rows: int = 10_000  # write Parquet parts once this many rows are buffered ...
    flush_interval_s: float = 10.0  # ... or this many seconds after the last write
    report: bool = False  # at the end, build each dataset's report and print its summary
    # leave out (and list) grid points their engine.backend refuses, instead of refusing the grid
    skip_refused: bool = False
    # Two-fidelity sweeps (sweep/fidelity.py): every point on screen_backend first, then at most
    # refine_budget of them at the grid's backend: a calibration sample, the top points, the at-risk ones.
    # screen_backend: a backend whose class SCREENS; null = the default (hybrid from 256 NPUs, else analytical)
    screen_backend: str | None = None
    refine_budget: int | None = None  # refined runs at most; null (and no screen_backend) = one fidelity
    refine_top: int = 10  # the fastest points by screened iteration time ...
    refine_top_per: list[str] = field(default_factory=list)  # ... per value of each of these axes
    refine_sample: int = 0  # points drawn at random to measure the screen's error
    refine_seed: int = 0  # seed of that draw


@dataclass
class NetsweepSweeperConf:
    _target_: str = "hydra_plugins.netsweep_ray_launcher.ray_launcher.NetsweepSweeper"
    params: dict[str, str] | None = None  # named sweeps: {key or group: "v1,v2,..."}


@dataclass
class OptunaSweeperConf:
    """`hydra/sweeper=optuna`: a search (sweep/search.py) instead of the grid; the keys of Hydra's own
    Optuna sweeper plugin where they mean the same (`hydra-optuna-sweeper` need not be installed)."""

    _target_: str = "hydra_plugins.netsweep_ray_launcher.ray_launcher.OptunaSweeper"
    _recursive_: bool = False  # the sampler is instantiated by the sweeper, after its seed is settled
    objective: Any = "iteration_time_s"  # the runs column to optimise, or a list of them (multi-objective)
    direction: Any = "minimize"  # minimize or maximize, or a list: one per objective
    n_trials: int = 20  # distinct runs of the study, the ones already stored included
    n_jobs: int = 2  # runs at once, per batch the sampler proposes
    # An Optuna sampler, instantiated by Hydra; a null seed takes the config's `seed`
    sampler: Any = field(default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": None})
    params: dict[str, str] | None = None  # the search space: {key or group: "choice/range/interval"}


ConfigStore.instance().store(group="hydra/launcher", name="ray_netsweep", node=RayNetsweepLauncherConf,
                             provider="netsweep")
ConfigStore.instance().store(group="hydra/sweeper", name="netsweep", node=NetsweepSweeperConf,
                             provider="netsweep")
ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="netsweep")


class LaunchingSweeper(Sweeper):
    """A sweeper that hands its points to the configured launcher (what `setup` keeps)."""

    def __init__(self, params: dict[str, str] | None = None) -> None:
        self.params = params or {}
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)


class NetsweepSweeper(LaunchingSweeper):
    """A grid as Hydra's basic sweeper expands it (`hydra.sweeper.params`, then the command line's
    overrides), launched whole in one batch: the launcher composes the points itself."""

    def sweep(self, arguments: list[str]) -> Any:
        from sweep.launch import grid_points, launch_as_jobs

        assert self.hydra_context is not None and self.config is not None and self.launcher is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*(f"{key}={value}" for key, value in self.params.items()), *arguments])
        points = grid_points(overrides)
        if isinstance(self.launcher, RayNetsweepLauncher):
            return [self.launcher.launch(points, initial_job_idx=0)]
        return [launch_as_jobs(points, self.launcher, self.hydra_context.config_loader, self.config)]


class OptunaSweeper(LaunchingSweeper):
    """Optuna proposes points of the search space; netsweep's launcher runs them (`sweep.launch.run_search`)."""

    def __init__(self, params: dict[str, str] | None = None, **settings: Any) -> None:
        super().__init__(params)
        self.settings = settings  # OptunaSweeperConf's other keys, as given: `run_search` checks them

    def sweep(self, arguments: list[str]) -> Any:
        from sweep.launch import SearchSettings, run_search

        assert self.config is not None
        launcher = self.launcher.sweep if isinstance(self.launcher, RayNetsweepLauncher) else self.launcher
        run_search(launcher, SearchSettings(params=self.params, **self.settings), arguments, self.config)
        return []


class RayNetsweepLauncher(Launcher):
    """Plan, run on Ray, store, report: `sweep.launch.SweepLauncher`."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings  # RayNetsweepLauncherConf's keys
        self.sweep: SweepLauncher | None = None  # made by `setup`

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from sweep.launch import LaunchSettings, SweepLauncher

        self.sweep = SweepLauncher(LaunchSettings(**self.settings), hydra_context.config_loader, config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.sweep is not None
        return [JobReturn(overrides=list(run.overrides), status=JobStatus.COMPLETED, _return_value=run.run_id)
                for run in self.sweep.launch(job_overrides)]
