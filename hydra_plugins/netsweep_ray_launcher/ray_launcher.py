"""`hydra/launcher: ray_netsweep` and `hydra/sweeper: netsweep`: a Hydra multirun as one sweep on Ray.

The sweeper expands the grid exactly as Hydra's basic sweeper does (command-line sweeps such as
`tcp=newreno,cubic`, `seed=range(100)`, and an experiment's `hydra.sweeper.params`) and hands all of
it to the launcher in one batch, without composing every job first and without writing
`multirun.yaml`. The launcher does the sweep with `sweep.plan` (every point resolved and validated
before anything starts; composing once per combination of config-group choices), `sweep.cluster`
(Ray tasks running `sweep.runner.execute`), `sweep.driver` (resume, rows stored as runs finish,
Ctrl-C safe) and `sweep.progress` (progress bar, summary table). Hydra's task function (the
single-run command) is not called: a run on a worker needs nothing from Hydra.

Exit codes: 0 when every run is done with status ok; 1 when a run ended with `error` or `timeout`
(all other runs still ran and are stored); 2 for a grid point that cannot run, a launcher setting
out of range, or a `ray.address` nothing answers at or that refuses this process (nothing launched); 130 when interrupted by
Ctrl-C or SIGTERM, at any moment (what finished is stored, a local Ray and every process it started
are stopped; the same command resumes; `sweep/__main__.py` gives 130 to an interrupt while planning).
"""

# No `from __future__ import annotations`: Hydra executes plugin modules outside sys.modules while
# it scans them, where dataclasses cannot resolve string annotations.
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class RayNetsweepLauncherConf:
    """`hydra.launcher.*`; where Ray runs is the root config's `ray.address` and `ray.num_cpus`."""

    _target_: str = "hydra_plugins.netsweep_ray_launcher.ray_launcher.RayNetsweepLauncher"
    max_in_flight: Optional[int] = None  # runs submitted and not yet back; null = 16 per CPU
    max_retries: int = 2  # reruns of a run whose worker process died, before it is an error row
    max_wall_time_s: Optional[float] = None  # a run still going after this wall time: status timeout
    run_memory_mb: Optional[float] = None  # memory each run declares to Ray and is held to; null = estimated
    flush_rows: int = 10_000  # write Parquet parts once this many rows are buffered ...
    flush_interval_s: float = 10.0  # ... or this many seconds after the last write
    report: bool = False  # at the end, build each dataset's report and print its summary
    skip_refused: bool = False  # leave out (and list) grid points their engine.backend refuses, instead of refusing the grid
    # Two-fidelity sweeps (sweep/fidelity.py): every point on screen_backend first, then at most
    # refine_budget of them at the grid's backend: a calibration sample, the top points, the at-risk ones.
    screen_backend: Optional[str] = None  # analytical, alpha_beta, phase or hybrid; null = hybrid from 256 NPUs, else analytical
    refine_budget: Optional[int] = None  # refined runs at most; null (and no screen_backend) = one fidelity
    refine_top: int = 10  # the fastest points by screened iteration time ...
    refine_top_per: List[str] = field(default_factory=list)  # ... per value of each of these axes
    refine_sample: int = 0  # points drawn at random to measure the screen's error
    refine_seed: int = 0  # seed of that draw


@dataclass
class NetsweepSweeperConf:
    _target_: str = "hydra_plugins.netsweep_ray_launcher.ray_launcher.NetsweepSweeper"
    params: Optional[Dict[str, str]] = None  # named sweeps: {key or group: "v1,v2,..."}


ConfigStore.instance().store(group="hydra/launcher", name="ray_netsweep", node=RayNetsweepLauncherConf,
                             provider="netsweep")
ConfigStore.instance().store(group="hydra/sweeper", name="netsweep", node=NetsweepSweeperConf,
                             provider="netsweep")


class NetsweepSweeper(BasicSweeper):
    """Hydra's basic sweeper, with the whole grid in one batch and no per-job composition."""

    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(max_batch_size=None, params=params)

    def sweep(self, arguments: List[str]) -> Any:
        assert self.hydra_context is not None and self.launcher is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        (grid,) = self.split_arguments(overrides, max_batch_size=None)
        return [self.launcher.launch(grid, initial_job_idx=0)]


class RayNetsweepLauncher(Launcher):
    """Plan, run on Ray, store, report (see the module docstring)."""

    def __init__(self, max_in_flight: Optional[int] = None, max_retries: int = 2,
                 max_wall_time_s: Optional[float] = None, run_memory_mb: Optional[float] = None,
                 flush_rows: int = 10_000, flush_interval_s: float = 10.0, report: bool = False, skip_refused: bool = False,
                 screen_backend: Optional[str] = None, refine_budget: Optional[int] = None, refine_top: int = 10,
                 refine_top_per: Sequence[str] = (), refine_sample: int = 0, refine_seed: int = 0) -> None:
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.max_wall_time_s = max_wall_time_s
        self.run_memory_mb = run_memory_mb
        self.report = report
        self.skip_refused = skip_refused
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self.screen_backend = screen_backend
        self.refine_budget = refine_budget
        self.refine_top = refine_top
        self.refine_top_per = tuple(refine_top_per)
        self.refine_sample = refine_sample
        self.refine_seed = refine_seed
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def _check(self) -> None:
        """Raise `engine.ConfigError` for a launcher setting out of range."""
        import engine

        for key, value, valid, allowed in (
            ("max_in_flight", self.max_in_flight, self.max_in_flight is None or self.max_in_flight >= 1,
             "a positive integer, or null for 16 per CPU"),
            ("max_retries", self.max_retries, self.max_retries >= 0, "an integer >= 0"),
            ("max_wall_time_s", self.max_wall_time_s, self.max_wall_time_s is None or self.max_wall_time_s > 0,
             "a number > 0, or null for no limit"),
            ("run_memory_mb", self.run_memory_mb, self.run_memory_mb is None or self.run_memory_mb > 0,
             "a number of MiB > 0, or null to estimate each run's from its config"),
            ("flush_rows", self.flush_rows, self.flush_rows >= 1, "a positive integer"),
            ("flush_interval_s", self.flush_interval_s, self.flush_interval_s >= 0, "a number >= 0"),
        ):
            if not valid:
                raise engine.ConfigError(f"hydra.launcher.{key}", value, allowed)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        # Imported here: Hydra imports this module at every start-up, single runs included.
        import engine
        from sweep.cli import EXIT_BAD_CONFIG, EXIT_RUN_FAILED
        from sweep.cluster import RAY_LOG, RayExecutor, check_local_run_memory
        from sweep.driver import run_sweep
        from sweep.interrupts import EXIT_INTERRUPTED
        from sweep.local_ray import RayStartError
        from sweep.plan import GridComposer, GridError, format_refused, plan
        from sweep.progress import format_summary

        from sweep.fidelity import (RefinePolicy, default_screen_backend, format_refusals, format_selection,
                                    plan_screens, run_two_fidelity, screen_refusals)

        start = time.perf_counter()
        composer = GridComposer(self.hydra_context.config_loader, self.config)
        policy = None
        refusals = ""
        try:
            self._check()
            refused: list[Any] | None = [] if self.skip_refused else None
            runs = plan(job_overrides, composer.compose, refused)
            if runs:
                check_local_run_memory(self.run_memory_mb, runs[0].config["ray"]["address"])
            screens = []
            if (self.screen_backend is not None or self.refine_budget is not None) and runs:
                policy = RefinePolicy(self.screen_backend or default_screen_backend(runs), self.refine_budget,  # type: ignore[arg-type]
                                      self.refine_top, self.refine_top_per, self.refine_sample, self.refine_seed)
                policy.check()
                policy.check_grid(runs)
                screens = plan_screens(runs, policy.screen_backend)
                refusals = format_refusals(screen_refusals(runs, screens, policy.screen_backend), policy.screen_backend)
        except (GridError, engine.ConfigError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None
        distinct = len({(run.dataset, run.run_id) for run in runs})
        print(f"planned {len(runs)} runs ({composer.compositions} Hydra compositions, "
              f"{time.perf_counter() - start:.1f} s)"
              # points that differ only in keys their presets never read are one simulation, run once
              + (f"; {distinct} distinct simulations" if distinct < len(runs) else "")
              + (f"; two fidelities: every point on {policy.screen_backend}, then at most "
                 f"{policy.budget_runs} at the grid's backend" if policy is not None else ""))
        if refused:
            print(format_refused(refused, len(job_overrides)))
        if refusals:
            print(refusals)

        if not runs:
            return []
        ray_settings = runs[0].config["ray"]  # validated with the run; not part of what is simulated
        executor = RayExecutor(address=ray_settings["address"], num_cpus=ray_settings["num_cpus"],
                               max_in_flight=self.max_in_flight, max_retries=self.max_retries,
                               max_wall_time_s=self.max_wall_time_s, run_memory_mb=self.run_memory_mb,
                               log_path=runs[0].dataset / RAY_LOG)  # Ray's own output: not on the terminal
        try:
            if policy is None:
                summary = run_sweep(runs, executor, self.flush_rows, self.flush_interval_s)
                print(format_summary(summary))
                interrupted, failed = summary.interrupted, summary.failed
            else:
                result = run_two_fidelity(runs, screens, policy, executor, self.flush_rows, self.flush_interval_s)
                print(f"screen ({policy.screen_backend}):")
                print(format_summary(result.screen))
                if result.refine is not None:
                    print(format_selection(result, policy))
                    print(format_summary(result.refine))
                interrupted, failed = result.interrupted, result.failed
        except ConnectionError as exc:  # a cluster nothing answers at, or that refuses us: nothing ran
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None
        except RayStartError as exc:  # a machine too busy for Ray's start-up: nothing ran
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_RUN_FAILED) from None
        if self.report and not interrupted:
            from sweep.report import print_report

            for dataset in dict.fromkeys(run.dataset for run in runs):
                print_report(dataset)
        if interrupted:
            raise SystemExit(EXIT_INTERRUPTED)
        if failed:
            raise SystemExit(EXIT_RUN_FAILED)
        return [JobReturn(overrides=list(run.overrides), status=JobStatus.COMPLETED, _return_value=run.run_id)
                for run in runs]
