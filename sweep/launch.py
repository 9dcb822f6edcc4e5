"""A Hydra multirun as one sweep: what the launcher and sweepers of hydra_plugins/netsweep_ray_launcher/
hand their work to (the plugin keeps only their configs and registration).

`grid_points` expands the grid exactly as Hydra's basic sweeper does (command-line sweeps such as
`tcp=newreno,cubic`, `seed=range(100)`, and an experiment's `hydra.sweeper.params`), and
`SweepLauncher.launch` runs all of it in one batch, without composing every job first and without
writing `multirun.yaml`: `sweep.plan` (every point resolved and validated before anything starts;
composing once per combination of config-group choices), `sweep.cluster` (Ray tasks running
`sweep.runner.execute`), `sweep.driver` (resume, rows stored as runs finish, Ctrl-C safe) and
`sweep.progress` (progress bar, summary table). Hydra's task function (the single-run command) is not
called: a run on a worker needs nothing from Hydra. With `replicate.until_ci_pct` the grid runs in
waves of seeds (`sweep.replicate`); with `hydra.launcher.refine_budget` in two fidelities
(`sweep.fidelity`); `hydra/sweeper: optuna` is a search instead (`run_search`, the loop in
`sweep.search`), whose batches `SweepLauncher.run_points` runs. Another launcher (submitit's) runs each
point as a job of the single-run command (`launch_as_jobs`).

Exit codes: 0 when every run is done with status ok (in a search: whatever its trials' status, a failed
run being a failed trial); 1 when a run ended with `error` or `timeout` (all other runs still ran and
are stored); 2 for a grid point that cannot run, a launcher setting out of range, or a `ray.address`
nothing answers at or that refuses this process (nothing launched); 130 when interrupted by Ctrl-C or
SIGTERM, at any moment (what finished is stored, a local Ray and every process it started are stopped;
the same command resumes; `sweep/__main__.py` gives 130 to an interrupt while planning).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generator, Iterator, Mapping, NoReturn, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn
from hydra.errors import HydraException, OverrideParseException
from hydra.plugins.launcher import Launcher
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import engine

from .cli import EXIT_BAD_CONFIG, EXIT_RUN_FAILED
from .cluster import RAY_LOG, RayExecutor, check_local_run_memory
from .driver import Executor, run_sweep
from .fidelity import (
    RefinePolicy,
    default_screen_backend,
    format_refusals,
    format_selection,
    plan_screens,
    run_two_fidelity,
    screen_refusals,
)
from .interrupts import EXIT_INTERRUPTED
from .local_ray import RayStartError
from .plan import BackendRefusal, GridComposer, GridError, PlannedRun, format_refused, plan, resolved_dict
from .progress import SweepSummary, format_summary
from .replicate import ReplicatedPoint, ReplicatePolicy, check_one_seed_per_point, format_replicated, replicate_points
from .rows import RunResult
from .search import SEARCH_EXTRA_HINT, Search, check_filled, check_objectives, corner_points, search_space
from .store import load_table


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


def _refuse(message: str) -> NoReturn:
    """End the command before anything runs: one line on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_CONFIG) from None


@contextlib.contextmanager
def _ray_failures_exit() -> Iterator[None]:
    """Ray that cannot be used ends the command in one line, with nothing run: exit 2 for a cluster
    nothing answers at or that refuses us, 1 for a machine too busy for Ray's start-up."""
    try:
        yield
    except ConnectionError as exc:
        _refuse(str(exc))
    except RayStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_RUN_FAILED) from None


def _stored_rows(runs: Sequence[PlannedRun]) -> dict[str, dict[str, Any]]:
    """The stored runs row of each of `runs` (planned runs), by run_id: its newest attempt."""
    stored: dict[str, dict[str, Any]] = {}
    for dataset in dict.fromkeys(run.dataset for run in runs):
        rows = load_table(dataset, "runs")
        wanted = rows[rows["run_id"].isin({run.run_id for run in runs})]
        stored.update((row["run_id"], row) for row in wanted.to_dict("records"))
    return stored


def launch_as_jobs(points: list[list[str]], launcher: Launcher, config_loader: ConfigLoader,
                   config: DictConfig) -> Sequence[JobReturn]:
    """The grid `points` run by a launcher that runs each point as a job of the single-run command
    (submitit's): the grid is planned first (a point that cannot run refuses it, one line, exit 2,
    nothing submitted), then the jobs run, and the sweep's summary is printed from the rows they
    stored, as `SweepLauncher` prints it; exit 1 if a run ended `error` or `timeout`. The empty folder
    submitit leaves named after its template (`.submitit/%j`) is removed."""
    try:
        runs = plan(points, GridComposer(config_loader, config).compose)
    except (GridError, engine.ConfigError) as exc:
        _refuse(str(exc))
    started_at = datetime.now(UTC)
    start = time.perf_counter()
    returns = launcher.launch(points, initial_job_idx=0)
    template = OmegaConf.select(config, "hydra.launcher.submitit_folder", default=None)
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


@dataclass
class LaunchSettings:
    """`hydra.launcher.*` of `hydra/launcher=ray_netsweep` (the plugin's `RayNetsweepLauncherConf` holds
    their defaults and what each means); where Ray runs is the root config's `ray.address` and `ray.num_cpus`."""

    max_in_flight: int | None
    max_retries: int
    max_wall_time_s: float | None
    run_memory_mb: float | None
    flush_rows: int
    flush_interval_s: float
    report: bool
    skip_refused: bool
    screen_backend: str | None
    refine_budget: int | None
    refine_top: int
    refine_top_per: tuple[str, ...]
    refine_sample: int
    refine_seed: int

    def __post_init__(self) -> None:
        self.refine_top_per = tuple(self.refine_top_per)  # Hydra gives a ListConfig

    def check(self) -> None:
        """Raise `engine.ConfigError` for a launcher setting out of range."""
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


@dataclass
class _KeptUp:
    """The executor a search or a replicated sweep keeps up between its batches (`ray_kept_up`), for
    `run_sweep`, which enters the executor it is given only when it has runs to do: the first entering
    starts it, in the launcher's `ray_kept_up` stack (so a batch with nothing to run starts no Ray);
    entering again and leaving do nothing."""

    launcher: SweepLauncher
    executor: Executor

    def __enter__(self) -> _KeptUp:
        self.executor = self.launcher.keep_up(self.executor)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        pass

    def results(self, runs: Sequence[PlannedRun]) -> Generator[tuple[PlannedRun, RunResult] | None, None, None]:
        return self.executor.results(runs)


class SweepLauncher:
    """Plan, run on Ray, store, report (see the module docstring): `hydra/launcher=ray_netsweep`'s work,
    and the `sweep.search.TrialLauncher` of a search."""

    def __init__(self, settings: LaunchSettings, config_loader: ConfigLoader, config: DictConfig) -> None:
        self.settings = settings
        self.config = config  # the multirun's
        self._config_loader = config_loader
        self._composer: GridComposer | None = None  # of this multirun, made on first use
        self._held: contextlib.ExitStack | None = None  # within `ray_kept_up`: what keeps Ray up
        self._held_executor: Executor | None = None

    def launch(self, job_overrides: Sequence[Sequence[str]]) -> list[PlannedRun]:
        """Plan the grid `job_overrides` and run it (replicated or in two fidelities where its settings
        say so), printing what it planned and the summary; return its runs, or end the command with
        the module docstring's exit code."""
        settings = self.settings
        start = time.perf_counter()
        composer = self.composer
        policy = None
        refusals = ""
        try:
            settings.check()
            refused: list[tuple[Sequence[str], BackendRefusal]] | None = [] if settings.skip_refused else None
            runs = plan(job_overrides, composer.compose, refused)
            if runs:
                check_local_run_memory(settings.run_memory_mb, runs[0].config["ray"]["address"])
            screens = []
            if (settings.screen_backend is not None or settings.refine_budget is not None) and runs:
                # A null refine_budget goes in as it is: `check` refuses it, naming the key, after screen_backend
                policy = RefinePolicy(settings.screen_backend or default_screen_backend(runs),
                                      settings.refine_budget,  # type: ignore[arg-type]
                                      settings.refine_top, settings.refine_top_per, settings.refine_sample,
                                      settings.refine_seed)
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
            _refuse(str(exc))
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
        if runs:
            self._run_grid(runs, policy, screens, replicate)
        return runs

    def _run_grid(self, runs: list[PlannedRun], policy: RefinePolicy | None, screens: list[PlannedRun],
                  replicate: ReplicatePolicy) -> None:
        """Run the planned grid `runs` (replicated, in one fidelity or in two) and print its summary and
        report; end the command with exit 130 if interrupted, 1 if a run failed."""
        settings = self.settings
        with _ray_failures_exit():
            if replicate.enabled:
                summary, points = self._replicate(runs, replicate)
                print(format_summary(summary))
                print(format_replicated(points, replicate))
                interrupted, failed = summary.interrupted, summary.failed
            elif policy is None:
                summary = run_sweep(runs, self._executor(runs), settings.flush_rows, settings.flush_interval_s)
                print(format_summary(summary))
                interrupted, failed = summary.interrupted, summary.failed
            else:
                with self.ray_kept_up():  # one Ray for both stages
                    result = run_two_fidelity(runs, screens, policy, self._executor(runs), settings.flush_rows,
                                              settings.flush_interval_s)
                print(f"screen ({policy.screen_backend}):")
                print(format_summary(result.screen))
                if result.refine is not None:
                    print(format_selection(result, policy))
                    print(format_summary(result.refine))
                interrupted, failed = result.interrupted, result.failed
        if settings.report and not interrupted:
            from .report import print_report  # imported here: matplotlib, for this option only

            for dataset in dict.fromkeys(run.dataset for run in runs):
                print_report(dataset)
        if interrupted:
            raise SystemExit(EXIT_INTERRUPTED)
        if failed:
            raise SystemExit(EXIT_RUN_FAILED)

    @property
    def composer(self) -> GridComposer:
        """The `GridComposer` of this multirun, made on first use."""
        if self._composer is None:
            self._composer = GridComposer(self._config_loader, self.config)
        return self._composer

    def _executor(self, runs: Sequence[PlannedRun]) -> Executor:
        """The Ray executor for `runs` (from their `ray` settings, which are validated with the runs and
        are no part of what is simulated): a new one, or inside `ray_kept_up` the one kept up."""
        if self._held_executor is not None:
            return _KeptUp(self, self._held_executor)
        ray_settings = runs[0].config["ray"]
        settings = self.settings
        executor = RayExecutor(address=ray_settings["address"], num_cpus=ray_settings["num_cpus"],
                               max_in_flight=settings.max_in_flight, max_retries=settings.max_retries,
                               max_wall_time_s=settings.max_wall_time_s, run_memory_mb=settings.run_memory_mb,
                               log_path=runs[0].dataset / RAY_LOG)  # Ray's own output: not on the terminal
        return executor if self._held is None else _KeptUp(self, executor)

    def keep_up(self, executor: Executor) -> Executor:
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
        try:
            self.settings.check()
        except engine.ConfigError as exc:
            _refuse(str(exc))

    def check_search_or_exit(self, points: Sequence[Sequence[str]], objectives: Sequence[str]) -> None:
        """Before a search starts Ray, its points (`sweep.search.corner_points`) are checked as a grid's
        are (every point must run, unless `skip_refused` lets its backend refuse it) and each objective
        against every backend among them (`sweep.search.check_filled`): a mistake ends the command, one
        line, exit 2."""
        refused: list[tuple[Sequence[str], BackendRefusal]] | None = [] if self.settings.skip_refused else None
        for overrides in points:
            try:
                runs = plan([overrides], self.composer.compose, refused)
                check_filled(objectives, [run.sim_config.engine.backend for run in runs])
            except GridError as exc:  # its message counts grid points: this is a point of the search
                _refuse(f"{exc.__cause__} (search point: {' '.join(overrides)})")
            except engine.ConfigError as exc:
                _refuse(str(exc))

    def _plan_one(self, overrides: Sequence[str]) -> PlannedRun | str:
        """The planned run of one search point, or why it cannot run (a string)."""
        try:
            (run,) = plan([overrides], self.composer.compose)
        except GridError as exc:
            return str(exc.__cause__ or exc)
        except engine.ConfigError as exc:
            return str(exc)
        return run

    def stored_rows(self, overrides: Sequence[str]) -> list[dict[str, Any]]:
        """`sweep.search.TrialLauncher.stored_rows`: the runs rows of the dataset of this point. The
        search's fixed part is checked here, once: what makes no point of it runnable ends the command
        (one line, exit 2)."""
        run = self._plan_one(overrides)
        if isinstance(run, str):
            _refuse(run)
        try:
            if ReplicatePolicy.of(run.config).enabled:
                raise engine.ConfigError("replicate.until_ci_pct", run.config["replicate"]["until_ci_pct"],
                                         "null (off) in a search: a trial is one run")
            check_local_run_memory(self.settings.run_memory_mb, run.config["ray"]["address"])
        except engine.ConfigError as exc:
            _refuse(str(exc))
        if not (run.dataset / "runs").is_dir():
            return []
        return load_table(run.dataset, "runs").to_dict("records")

    def run_ids(self, points: Sequence[Sequence[str]]) -> list[str | None]:
        """`sweep.search.TrialLauncher.run_ids`."""
        planned = [self._plan_one(overrides) for overrides in points]
        return [None if isinstance(run, str) else run.run_id for run in planned]

    def run_points(self, points: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        """`sweep.search.TrialLauncher.run_points`: plan each point on its own (one that cannot run is
        a failed trial, not the search's end), run the new ones on the Ray kept up by `ray_kept_up`,
        and read back every point's runs row. Ctrl-C ends the search (exit 130) with what finished stored."""
        planned = [self._plan_one(overrides) for overrides in points]
        runs = [run for run in planned if not isinstance(run, str)]
        if runs:
            with _ray_failures_exit():
                summary = run_sweep(runs, self._executor(runs), self.settings.flush_rows,
                                    self.settings.flush_interval_s, show_progress=False)
            if summary.interrupted:
                raise SystemExit(EXIT_INTERRUPTED)
        stored = _stored_rows(runs)
        return [{"status": "error", "error": run} if isinstance(run, str) else stored[run.run_id] for run in planned]

    def _replicate(self, runs: Sequence[PlannedRun],
                   replicate: ReplicatePolicy) -> tuple[SweepSummary, list[ReplicatedPoint]]:
        """Run `runs` replicated (`sweep.replicate`) in waves on one Ray; the summary of all waves and the points."""
        total = SweepSummary(grid_points=len(runs), datasets=list(dict.fromkeys(run.dataset for run in runs)))

        def run_wave(wave: list[PlannedRun]) -> dict[str, dict[str, Any]] | None:
            summary = run_sweep(wave, self._executor(wave), self.settings.flush_rows, self.settings.flush_interval_s)
            total.add(summary)
            return None if summary.interrupted else _stored_rows(wave)

        with self.ray_kept_up():
            points = replicate_points(runs, replicate, run_wave)
        return total, points


@dataclass
class SearchSettings:
    """`hydra.sweeper.*` of `hydra/sweeper=optuna` (the plugin's `OptunaSweeperConf` holds their defaults
    and what each means), as given: checked by `run_search`, where a mistake is one line."""

    objective: Any
    direction: Any
    n_trials: int
    n_jobs: int
    sampler: DictConfig | None  # an Optuna sampler's config for Hydra's `instantiate`; a null seed takes the config's
    params: Mapping[str, str]  # the search space; the command line's overrides add to it


def run_search(launcher: SweepLauncher | Launcher | None, settings: SearchSettings, arguments: Sequence[str],
               config: DictConfig) -> None:
    """`hydra/sweeper=optuna`: check the search (`launcher` must be netsweep's; a mistake ends the
    command, one line, exit 2), then run it (`sweep.search.Search`) on one Ray."""
    if not isinstance(launcher, SweepLauncher):
        _refuse("hydra/sweeper=optuna runs its trials with netsweep's launcher (hydra/launcher=ray_netsweep),"
                f" not {type(launcher).__name__}")
    try:
        import optuna
    except ImportError:
        _refuse(SEARCH_EXTRA_HINT)
    try:
        objectives, directions = check_objectives(settings.objective, settings.direction)
        for key, value, valid in (("n_trials", settings.n_trials, settings.n_trials >= 1),
                                  ("n_jobs", settings.n_jobs, settings.n_jobs >= 1)):
            if not valid:
                raise engine.ConfigError(f"hydra.sweeper.{key}", value, "a positive integer")
        space = search_space([f"{key}={value}" for key, value in settings.params.items()] + list(arguments))
        if not space.distributions:
            raise engine.ConfigError("hydra.sweeper.params", dict(settings.params),
                                     "at least one key to search: a choice a,b,c, range(a,b) or interval(a,b), "
                                     "here or on the command line")
    except (engine.ConfigError, OverrideParseException) as exc:
        _refuse(str(exc))
    launcher.check_settings_or_exit()
    launcher.check_search_or_exit(corner_points(space), objectives)
    sampler_config = resolved_dict(settings.sampler) if settings.sampler else {}
    if "seed" in sampler_config and sampler_config["seed"] is None:
        sampler_config["seed"] = int(config.seed)  # the same command proposes the same points
    sampler = instantiate(sampler_config) if sampler_config else None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=[optuna.study.StudyDirection[name.upper()] for name in directions],
                                sampler=sampler)  # as create_study turns the words into directions
    search = Search(study, space, objectives, launcher, settings.n_trials, settings.n_jobs)
    print(f"search: {settings.n_trials} trials, {settings.n_jobs} at a time, {type(study.sampler).__name__} "
          f"over {', '.join(space.distributions)}; objective "
          f"{', '.join(f'{d} {o}' for d, o in zip(directions, objectives))}")
    with launcher.ray_kept_up():
        search.run()
