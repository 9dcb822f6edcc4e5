"""`hydra/launcher: ray_netsweep` and `hydra/sweeper: netsweep`: a Hydra multirun as one sweep on Ray.

The sweeper expands the grid exactly as Hydra's basic sweeper does (command-line sweeps such as
`tcp=newreno,cubic`, `seed=range(100)`, and an experiment's `hydra.sweeper.params`) and hands all of
it to the launcher in one batch, without composing every job first and without writing
`multirun.yaml`. The launcher does the sweep with `sweep.plan` (every point resolved and validated
before anything starts; composing once per combination of config-group choices), `sweep.cluster`
(Ray tasks running `sweep.runner.execute`), `sweep.driver` (resume, rows stored as runs finish,
Ctrl-C safe) and `sweep.progress` (progress bar, summary table). Hydra's task function (the
single-run command) is not called: a run on a worker needs nothing from Hydra. With
`replicate.until_ci_pct` the grid runs in waves of seeds (`sweep.replicate`); `hydra/sweeper: optuna`
is a search instead (`sweep.search`), whose batches the launcher runs through `run_points`.

Exit codes: 0 when every run is done with status ok (in a search: whatever its trials' status, a failed
run being a failed trial); 1 when a run ended with `error` or `timeout` (all other runs still ran and
are stored); 2 for a grid point that cannot run, a launcher setting out of range, or a `ray.address`
nothing answers at or that refuses this process (nothing launched); 130 when interrupted by Ctrl-C or
SIGTERM, at any moment (what finished is stored, a local Ray and every process it started are stopped;
the same command resumes; `sweep/__main__.py` gives 130 to an interrupt while planning).
"""

# No `from __future__ import annotations`: Hydra executes plugin modules outside sys.modules while
# it scans them, where dataclasses cannot resolve string annotations.
import contextlib
import itertools
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException, OverrideParseException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf


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


def grid_points(overrides: Sequence[Override]) -> list[list[str]]:
    """Every combination of the overrides' values, as the override lines of each point, in the order
    of Hydra's basic sweeper: the first override's values vary slowest; a key given twice keeps its
    first place and its last values. A sweep must list its values (comma-separated, `choice`,
    `range`): an `interval` has none to list (`hydra/sweeper=optuna` searches one)."""
    lines: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            lines[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            lines[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise HydraException(f"{override.input_line}: a grid lists its values (a,b,c, choice or range); an "
                                 "interval has none to list (hydra/sweeper=optuna searches intervals)")
    return [list(point) for point in itertools.product(*lines.values())]


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
        assert self.hydra_context is not None and self.launcher is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*(f"{key}={value}" for key, value in self.params.items()), *arguments])
        points = grid_points(overrides)
        if isinstance(self.launcher, RayNetsweepLauncher):
            return [self.launcher.launch(points, initial_job_idx=0)]
        return [self._launch_as_jobs(points)]

    def _launch_as_jobs(self, points: list[list[str]]) -> Sequence[JobReturn]:
        """A launcher that runs each point as a job of the single-run command (submitit's): the grid is
        planned first (a point that cannot run refuses it, one line, exit 2, nothing submitted), then
        the jobs run, and the sweep's summary is printed from the rows they stored, as the Ray launcher
        prints it; exit 1 if a run ended `error` or `timeout`. The empty folder submitit leaves named
        after its template (`.submitit/%j`) is removed."""
        import engine
        from sweep.cli import EXIT_BAD_CONFIG, EXIT_RUN_FAILED
        from sweep.plan import GridComposer, GridError, plan
        from sweep.progress import SweepSummary, format_summary

        assert self.hydra_context is not None and self.config is not None and self.launcher is not None
        try:
            runs = plan(points, GridComposer(self.hydra_context.config_loader, self.config).compose)
        except (GridError, engine.ConfigError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        returns = self.launcher.launch(points, initial_job_idx=0)
        template = OmegaConf.select(self.config, "hydra.launcher.submitit_folder", default=None)
        if template is not None and "%j" in str(template):
            with contextlib.suppress(OSError):  # not there, or not empty: not submitit's leftover
                Path(str(template)).rmdir()
        summary = SweepSummary(grid_points=len(runs), datasets=list(dict.fromkeys(run.dataset for run in runs)),
                               wall_s=time.perf_counter() - start)
        stored = _stored_rows(runs)
        for run_id in dict.fromkeys(run.run_id for run in runs):
            row = stored.get(run_id)
            if row is not None and datetime.fromisoformat(str(row["started_at"])) < started_at:  # the job skipped it
                summary.skipped += 1
            elif row is not None:
                summary.record(row)
        print(format_summary(summary))
        if summary.failed:
            raise SystemExit(EXIT_RUN_FAILED)
        return returns


class OptunaSweeper(LaunchingSweeper):
    """Optuna proposes points of the search space; netsweep's launcher runs them (sweep/search.py)."""

    def __init__(self, objective: Any = "iteration_time_s", direction: Any = "minimize", n_trials: int = 20,
                 n_jobs: int = 2, sampler: Any = None, params: dict[str, str] | None = None) -> None:
        super().__init__(params)
        self.objective = objective  # as given: checked and made lists in `sweep`, where a mistake is one line
        self.direction = direction
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.sampler = sampler

    def sweep(self, arguments: list[str]) -> Any:
        import engine
        from sweep.cli import EXIT_BAD_CONFIG
        from sweep.search import SEARCH_EXTRA_HINT, Search, check_objectives, corner_points, search_space

        assert self.config is not None
        if not isinstance(self.launcher, RayNetsweepLauncher):
            print(f"error: hydra/sweeper=optuna runs its trials with netsweep's launcher (hydra/launcher=ray_netsweep),"
                  f" not {type(self.launcher).__name__}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG)
        try:
            import optuna
        except ImportError:
            print(f"error: {SEARCH_EXTRA_HINT}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None
        try:
            objectives, directions = check_objectives(self.objective, self.direction)
            for key, value, valid in (("n_trials", self.n_trials, self.n_trials >= 1),
                                      ("n_jobs", self.n_jobs, self.n_jobs >= 1)):
                if not valid:
                    raise engine.ConfigError(f"hydra.sweeper.{key}", value, "a positive integer")
            space = search_space([f"{key}={value}" for key, value in self.params.items()] + list(arguments))
            if not space.distributions:
                raise engine.ConfigError("hydra.sweeper.params", dict(self.params),
                                         "at least one key to search: a choice a,b,c, range(a,b) or interval(a,b), "
                                         "here or on the command line")
        except (engine.ConfigError, OverrideParseException) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None
        self.launcher.check_settings_or_exit()
        self.launcher.check_search_or_exit(corner_points(space), objectives)
        sampler_config = dict(OmegaConf.to_container(self.sampler, resolve=True)) if self.sampler else {}
        if "seed" in sampler_config and sampler_config["seed"] is None:
            sampler_config["seed"] = int(self.config.seed)  # the same command proposes the same points
        sampler = instantiate(sampler_config) if sampler_config else None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(directions=directions, sampler=sampler)
        search = Search(study, space, objectives, self.launcher, self.n_trials, self.n_jobs)
        print(f"search: {self.n_trials} trials, {self.n_jobs} at a time, {type(study.sampler).__name__} "
              f"over {', '.join(space.distributions)}; objective "
              f"{', '.join(f'{d} {o}' for d, o in zip(directions, objectives))}")
        with self.launcher.ray_kept_up():
            search.run()
        return []


@contextlib.contextmanager
def _ray_failures_exit() -> Iterator[None]:
    """Ray that cannot be used ends the command in one line, with nothing run: exit 2 for a cluster
    nothing answers at or that refuses us, 1 for a machine too busy for Ray's start-up."""
    from sweep.cli import EXIT_BAD_CONFIG, EXIT_RUN_FAILED
    from sweep.local_ray import RayStartError

    try:
        yield
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_CONFIG) from None
    except RayStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_RUN_FAILED) from None


def _stored_rows(runs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The stored runs row of each of `runs` (planned runs), by run_id: its newest attempt."""
    from sweep.store import load_table

    stored: dict[str, dict[str, Any]] = {}
    for dataset in dict.fromkeys(run.dataset for run in runs):
        rows = load_table(dataset, "runs")
        wanted = rows[rows["run_id"].isin({run.run_id for run in runs})]
        stored.update((row["run_id"], row) for row in wanted.to_dict("records"))
    return stored


@dataclass
class _KeptUp:
    """The executor a search or a replicated sweep keeps up between its batches (`ray_kept_up`), for
    `run_sweep`, which enters the executor it is given only when it has runs to do: the first entering
    starts it, in the launcher's `ray_kept_up` stack (so a batch with nothing to run starts no Ray);
    entering again and leaving do nothing."""

    launcher: Any  # the RayNetsweepLauncher (a string annotation would not resolve here: see the imports)
    executor: Any

    def __enter__(self) -> "_KeptUp":
        self.executor = self.launcher.keep_up(self.executor)
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def results(self, runs: Sequence[Any]) -> Iterator[Any]:
        return self.executor.results(runs)


class RayNetsweepLauncher(Launcher):
    """Plan, run on Ray, store, report (see the module docstring)."""

    def __init__(self, max_in_flight: int | None = None, max_retries: int = 2,
                 max_wall_time_s: float | None = None, run_memory_mb: float | None = None,
                 flush_rows: int = 10_000, flush_interval_s: float = 10.0, report: bool = False,
                 skip_refused: bool = False,
                 screen_backend: str | None = None, refine_budget: int | None = None, refine_top: int = 10,
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
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self._composer: Any = None  # sweep.plan.GridComposer of this multirun, made on first use
        self._held: contextlib.ExitStack | None = None  # within `ray_kept_up`: what keeps Ray up
        self._held_executor: Any = None

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
        from sweep.cluster import check_local_run_memory
        from sweep.driver import run_sweep
        from sweep.fidelity import (
            RefinePolicy,
            default_screen_backend,
            format_refusals,
            format_selection,
            plan_screens,
            run_two_fidelity,
            screen_refusals,
        )
        from sweep.interrupts import EXIT_INTERRUPTED
        from sweep.plan import GridError, format_refused, plan
        from sweep.progress import format_summary
        from sweep.replicate import ReplicatePolicy, check_one_seed_per_point, format_replicated

        start = time.perf_counter()
        composer = self._grid_composer()
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
            replicate = ReplicatePolicy.of(runs[0].config) if runs else ReplicatePolicy()
            if replicate.enabled:
                if policy is not None:
                    raise engine.ConfigError("replicate.until_ci_pct", replicate.until_ci_pct,
                                             "null (off) in a two-fidelity sweep, which picks the points to refine "
                                             "by one run each")
                check_one_seed_per_point(runs)
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
        with _ray_failures_exit():
            if replicate.enabled:
                summary, points = self._replicate(runs, replicate)
                print(format_summary(summary))
                print(format_replicated(points, replicate))
                interrupted, failed = summary.interrupted, summary.failed
            elif policy is None:
                summary = run_sweep(runs, self._executor(runs), self.flush_rows, self.flush_interval_s)
                print(format_summary(summary))
                interrupted, failed = summary.interrupted, summary.failed
            else:
                with self.ray_kept_up():  # one Ray for both stages
                    result = run_two_fidelity(runs, screens, policy, self._executor(runs), self.flush_rows,
                                              self.flush_interval_s)
                print(f"screen ({policy.screen_backend}):")
                print(format_summary(result.screen))
                if result.refine is not None:
                    print(format_selection(result, policy))
                    print(format_summary(result.refine))
                interrupted, failed = result.interrupted, result.failed
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

    def _grid_composer(self) -> Any:
        from sweep.plan import GridComposer

        assert self.config is not None and self.hydra_context is not None
        if self._composer is None:
            self._composer = GridComposer(self.hydra_context.config_loader, self.config)
        return self._composer

    def _executor(self, runs: Sequence[Any]) -> Any:
        """The Ray executor for `runs` (from their `ray` settings, which are validated with the runs and
        are no part of what is simulated): a new one, or inside `ray_kept_up` the one kept up."""
        from sweep.cluster import RAY_LOG, RayExecutor

        if self._held_executor is not None:
            return _KeptUp(self, self._held_executor)
        ray_settings = runs[0].config["ray"]
        executor = RayExecutor(address=ray_settings["address"], num_cpus=ray_settings["num_cpus"],
                               max_in_flight=self.max_in_flight, max_retries=self.max_retries,
                               max_wall_time_s=self.max_wall_time_s, run_memory_mb=self.run_memory_mb,
                               log_path=runs[0].dataset / RAY_LOG)  # Ray's own output: not on the terminal
        return executor if self._held is None else _KeptUp(self, executor)

    def keep_up(self, executor: Any) -> Any:
        """Within `ray_kept_up`: the executor kept up, `executor` entered now if none is yet."""
        assert self._held is not None
        if self._held_executor is None:
            with _ray_failures_exit():
                self._held_executor = self._held.enter_context(executor)
        return self._held_executor

    @contextlib.contextmanager
    def ray_kept_up(self) -> Iterator[None]:
        """Within: the Ray that the first `run_sweep` starts stays up for the next ones (the batches of
        a search, the waves of a replicated sweep), and is stopped on leaving (or an interrupt)."""
        with contextlib.ExitStack() as held:
            self._held = held
            try:
                yield
            finally:
                self._held, self._held_executor = None, None

    def check_settings_or_exit(self) -> None:
        """`hydra.launcher.*` out of range ends the command: one line, exit 2."""
        import engine
        from sweep.cli import EXIT_BAD_CONFIG

        try:
            self._check()
        except engine.ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG) from None

    def check_search_or_exit(self, points: Sequence[Sequence[str]], objectives: Sequence[str]) -> None:
        """Before a search starts Ray, its points (`sweep.search.corner_points`) are checked as a grid's
        are (every point must run, unless `skip_refused` lets its backend refuse it) and each objective
        against every backend among them (`sweep.search.check_filled`): a mistake ends the command, one
        line, exit 2."""
        import engine
        from sweep.cli import EXIT_BAD_CONFIG
        from sweep.plan import GridError, plan
        from sweep.search import check_filled

        refused: list[Any] | None = [] if self.skip_refused else None
        for overrides in points:
            problem = None
            try:
                runs = plan([overrides], self._grid_composer().compose, refused)
                check_filled(objectives, [run.sim_config.engine.backend for run in runs])
            except GridError as exc:  # its message counts grid points: this is a point of the search
                problem = f"{exc.__cause__} (search point: {' '.join(overrides)})"
            except engine.ConfigError as exc:
                problem = str(exc)
            if problem is not None:
                print(f"error: {problem}", file=sys.stderr)
                raise SystemExit(EXIT_BAD_CONFIG)

    def _plan_one(self, overrides: Sequence[str]) -> Any:
        """The planned run of one search point, or why it cannot run (a string)."""
        import engine
        from sweep.plan import GridError, plan

        try:
            (run,) = plan([overrides], self._grid_composer().compose)
        except GridError as exc:
            return str(exc.__cause__ or exc)
        except engine.ConfigError as exc:
            return str(exc)
        return run

    def stored_rows(self, overrides: Sequence[str]) -> list[dict[str, Any]]:
        """`sweep.search.TrialLauncher.stored_rows`: the runs rows of the dataset of this point. The
        search's fixed part is checked here, once: what makes no point of it runnable ends the command
        (one line, exit 2)."""
        import engine
        from sweep.cli import EXIT_BAD_CONFIG
        from sweep.cluster import check_local_run_memory
        from sweep.replicate import ReplicatePolicy
        from sweep.store import load_table

        run = self._plan_one(overrides)
        problem = run if isinstance(run, str) else None
        if problem is None:
            try:
                if ReplicatePolicy.of(run.config).enabled:
                    raise engine.ConfigError("replicate.until_ci_pct", run.config["replicate"]["until_ci_pct"],
                                             "null (off) in a search: a trial is one run")
                check_local_run_memory(self.run_memory_mb, run.config["ray"]["address"])
            except engine.ConfigError as exc:
                problem = str(exc)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_CONFIG)
        if not (run.dataset / "runs").is_dir():
            return []
        return load_table(run.dataset, "runs").to_dict("records")

    def run_ids(self, points: Sequence[Sequence[str]]) -> list[str | None]:
        """`sweep.search.TrialLauncher.run_ids`."""
        planned = [self._plan_one(overrides) for overrides in points]
        return [None if isinstance(run, str) else run.run_id for run in planned]

    def run_points(self, points: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        """`sweep.search.TrialLauncher.run_points`: plan each point on its own (one that cannot run is
        a failed trial, not the search's end), run the new ones on the Ray kept up by `searching`,
        and read back every point's runs row. Ctrl-C ends the search (exit 130) with what finished stored."""
        from sweep.driver import run_sweep
        from sweep.interrupts import EXIT_INTERRUPTED

        planned = [self._plan_one(overrides) for overrides in points]
        runs = [run for run in planned if not isinstance(run, str)]
        if runs:
            with _ray_failures_exit():
                summary = run_sweep(runs, self._executor(runs), self.flush_rows, self.flush_interval_s,
                                    show_progress=False)
            if summary.interrupted:
                raise SystemExit(EXIT_INTERRUPTED)
        stored = _stored_rows(runs)
        return [{"status": "error", "error": run} if isinstance(run, str) else stored[run.run_id] for run in planned]

    def _replicate(self, runs: Sequence[Any], replicate: Any) -> Any:
        """Run `runs` replicated (`sweep.replicate`) in waves on one Ray; the summary of all waves and the points."""
        from sweep.driver import run_sweep
        from sweep.progress import SweepSummary
        from sweep.replicate import replicate_points

        total = SweepSummary(grid_points=len(runs), datasets=list(dict.fromkeys(run.dataset for run in runs)))

        def run_wave(wave: list[Any]) -> dict[str, dict[str, Any]] | None:
            summary = run_sweep(wave, self._executor(wave), self.flush_rows, self.flush_interval_s)
            total.add(summary)
            return None if summary.interrupted else _stored_rows(wave)

        with self.ray_kept_up():
            points = replicate_points(runs, replicate, run_wave)
        return total, points
