"""A search instead of a grid: `python -m sweep -m hydra/sweeper=optuna ...` (the `search` extra).

The search space is written as a grid is, in Hydra's override grammar, on the command line or in an
experiment's `hydra.sweeper.params`: a choice (`network.spines=1,2,4,8` or `choice(...)`, a group such
as `tcp=newreno,dctcp`) is a categorical parameter, an integer `range(a,b[,step])` an integer one, an
`interval(a,b)` a real one (`tag(log,interval(a,b))` on a log scale); a plain `key=value` is fixed.
Optuna's sampler proposes points; each is a run of the sweep (planned, run on Ray, stored like a grid
point's) and the study is told the value of its runs column(s) `hydra.sweeper.objective`. A run that
ends with `error` or `timeout`, or that cannot run at all, is a failed trial, never a zero.

- `n_trials` counts distinct runs: the simulator is deterministic, so a point the sampler proposes
  again is told its stored value at once and is not a new trial (a finite space ends when every point
  is done).
- Resume: the runs already stored in the dataset that are points of this space (same run_id as the
  point would have) are given to the study first, in the order they were run, whatever their status,
  and count towards `n_trials`: the same command again runs nothing; a larger `n_trials` adds runs.
- Batches of `n_jobs` points run at once (Ray keeps running between batches).
- Checked before Ray starts, as a grid is: the space's corners (`corner_points`: every choice, both
  ends of each range and interval) must run, and each objective must be a column every backend among
  them fills (`check_filled`); a point the sampler proposes between them that cannot run is a failed trial.

`Search` is the loop, independent of Hydra and Ray: the launcher is any object with `stored_rows`,
`run_ids` and `run_points` (see `TrialLauncher`); `sweep.launch.run_search` builds it for the Hydra
sweeper of hydra_plugins/netsweep_ray_launcher/.
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, TextIO

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Transformer

import engine

from .schema import numeric_runs_columns

# Proposals in a row that repeat points already done before the search says the sampler has
# nothing new to offer (a small space, a converged sampler) and stops short of `n_trials`.
REPEATS_MAX = 200
# Points of the space checked before anything runs (`corner_points`): every combination of its choices
# and its ranges' ends up to this many (a grid of them plans in about a second); beyond, each
# parameter's values one at a time.
CORNERS_MAX = 1_000
DIRECTIONS = ("minimize", "maximize")
SEARCH_EXTRA_HINT = "hydra/sweeper=optuna needs Optuna: pip install 'netsweep[search]'"


class TrialLauncher(Protocol):
    """What a search needs of the launcher: plan, look up and run points given as override lines."""

    def stored_rows(self, overrides: Sequence[str]) -> list[dict[str, Any]]:
        """The `runs` rows of the dataset that this point writes to, newest attempt of each run."""

    def run_ids(self, points: Sequence[Sequence[str]]) -> list[str | None]:
        """Each point's run_id, or None for a point that cannot run."""

    def run_points(self, points: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        """Run the points not yet stored, together; each point's `runs` row (stored or new), or a row
        `{"status": "error", "error": why}` for a point that cannot run."""


@dataclass(frozen=True)
class SearchSpace:
    """The parameters Optuna chooses (key -> distribution) and the override lines every point carries."""

    distributions: dict[str, Any]
    fixed: tuple[str, ...]

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        """The override lines of the point `params`."""
        return [*self.fixed, *_override_lines(params)]

    def size(self) -> float:
        """How many points the space has (inf with a real parameter)."""
        import optuna

        total = 1.0
        for distribution in self.distributions.values():
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                total *= len(distribution.choices)
            elif isinstance(distribution, optuna.distributions.IntDistribution):
                total *= (distribution.high - distribution.low) // distribution.step + 1
            else:
                return math.inf
        return total

    def params_of(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The point of this space a stored `runs` row holds (by its preset and config columns), or
        None if one of its values is not in the space."""
        params = {}
        for key, distribution in self.distributions.items():
            value = _in_distribution(row.get(key), distribution)
            if value is _OUTSIDE:
                return None
            params[key] = value
        return params


def _override_value(value: Any) -> str:
    """`value` as Hydra's grammar reads it back (choices are already in its syntax)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


_OUTSIDE = object()


def _missing(value: Any) -> bool:
    """Whether a value read from a table is null (None, NaN, pandas' NA)."""
    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


def _in_distribution(value: Any, distribution: Any) -> Any:
    """The value of `distribution` equal to a stored column value, or `_OUTSIDE`."""
    import optuna

    if _missing(value):
        value = None
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        for choice in distribution.choices:
            if isinstance(choice, str):
                if (value is None and choice == "null") or (isinstance(value, str) and value == choice):
                    return choice
            elif value is not None and choice is not None and not isinstance(value, str) \
                    and float(value) == float(choice):
                return choice
        return _OUTSIDE
    if value is None or isinstance(value, str):
        return _OUTSIDE
    if isinstance(distribution, optuna.distributions.IntDistribution):
        number = int(value)
        inside = number == value and distribution.low <= number <= distribution.high \
            and (number - distribution.low) % distribution.step == 0
        return number if inside else _OUTSIDE
    return float(value) if distribution.low <= float(value) <= distribution.high else _OUTSIDE


def search_space(lines: Sequence[str]) -> SearchSpace:
    """The search space of override lines (see the module docstring); raise `engine.ConfigError`
    for a sweep Optuna cannot search (a glob, a range of reals)."""
    import optuna

    distributions: dict[str, Any] = {}
    fixed = []
    for line, override in zip(lines, OverridesParser.create().parse_overrides(list(lines))):
        key = override.get_key_element()
        if not override.is_sweep_override():
            fixed.append(line)
            continue
        if override.is_interval_sweep():
            interval = override.value()
            # what an interval sweep holds, both ends given (the grammar requires them)
            assert isinstance(interval, IntervalSweep) and interval.start is not None and interval.end is not None
            distributions[key] = optuna.distributions.FloatDistribution(
                float(interval.start), float(interval.end), log="log" in interval.tags)
        elif override.is_range_sweep():
            swept = list(override.sweep_iterator(transformer=Transformer.encode))
            values = [value for value in swept if isinstance(value, int)]
            if not values or len(values) < len(swept):
                raise engine.ConfigError(key, line.partition("=")[2],
                                         "a range of integers (a list of reals as choice(...), or interval(a,b))")
            step = values[1] - values[0] if len(values) > 1 else 1
            distributions[key] = optuna.distributions.IntDistribution(min(values), max(values), step=abs(step))
        elif override.is_choice_sweep():
            # Hydra types the items as any parsed value, but Transformer.encode writes lists and dicts as strings
            distributions[key] = optuna.distributions.CategoricalDistribution(
                list(override.sweep_iterator(transformer=Transformer.encode)))  # type: ignore[arg-type]
        else:
            raise engine.ConfigError(key, line.partition("=")[2],
                                     "a choice, an integer range(...) or an interval(...) to search")
    return SearchSpace(distributions, tuple(fixed))


def corner_points(space: SearchSpace) -> list[list[str]]:
    """The points of `space` checked before a search starts, as a grid is: every choice and each end
    of every range and interval, in all their combinations (up to `CORNERS_MAX`), or else each
    parameter's such values with the others at their first."""
    import optuna

    corners = {key: list(distribution.choices)
               if isinstance(distribution, optuna.distributions.CategoricalDistribution)
               else list(dict.fromkeys([distribution.low, distribution.high]))
               for key, distribution in space.distributions.items()}
    if math.prod(len(values) for values in corners.values()) <= CORNERS_MAX:
        combinations = [dict(zip(corners, values)) for values in itertools.product(*corners.values())]
    else:
        first = {key: values[0] for key, values in corners.items()}
        combinations = [{**first, key: value} for key, values in corners.items() for value in values]
    return [space.overrides(params) for params in combinations]


def check_filled(objectives: Sequence[str], backends: Sequence[str]) -> None:
    """Raise `engine.ConfigError` for an objective that one of the search's `engine.backend`s never
    fills (`NetworkBackend.FILLS`): every trial there would fail."""
    from engine.backends import backend_class
    from engine.backends.base import BACKEND_COLUMNS

    for objective in objectives:
        for backend in dict.fromkeys(backends):
            fills = backend_class(backend).FILLS
            if objective in BACKEND_COLUMNS and objective not in fills:
                raise engine.ConfigError("hydra.sweeper.objective", objective,
                                         f"a column engine.backend={backend} fills: it leaves {objective} empty "
                                         "in every run (docs/backends.md), so every trial would fail")


def _words(value: Any) -> list[Any]:
    """A setting that is a word or a list of them, as a list (empty for anything else: null, a number)."""
    if isinstance(value, str):
        return [value]
    return list(value) if isinstance(value, Sequence) else []


def check_objectives(objective: Any, direction: Any) -> tuple[list[str], list[str]]:
    """`hydra.sweeper.objective` and `hydra.sweeper.direction` (each a word or a list of them) as
    lists; raise `engine.ConfigError` unless there is at least one objective, each a numeric `runs`
    column, and one direction per objective, each `minimize` or `maximize`."""
    objectives = _words(objective)
    if not objectives:
        raise engine.ConfigError("hydra.sweeper.objective", objective,
                                 "a numeric column of the runs table, such as iteration_time_s, or a non-empty "
                                 "list of them")
    for name in objectives:
        if not isinstance(name, str) or name not in numeric_runs_columns():
            raise engine.ConfigError("hydra.sweeper.objective", name,
                                     "a numeric column of the runs table, such as iteration_time_s, comm_s, "
                                     "max_fct_s or timeouts (docs/results.md), or a list of them")
    directions = _words(direction)
    for name in directions:
        if name not in DIRECTIONS:
            raise engine.ConfigError("hydra.sweeper.direction", name, "minimize or maximize, or a list of them")
    if len(directions) != len(objectives):
        raise engine.ConfigError("hydra.sweeper.direction", direction,
                                 f"one direction per objective ({len(objectives)}: {', '.join(objectives)})")
    return objectives, directions


def trial_values(row: Mapping[str, Any], objectives: Sequence[str]) -> list[float] | None:
    """The objectives' values of a run's row, or None for a failed trial (status not ok, or an
    objective the run left empty)."""
    if row.get("status") != "ok":
        return None
    values = []
    for objective in objectives:
        value = row.get(objective, math.nan)  # an absent column: missing as NaN is
        if _missing(value) or not math.isfinite(float(value)):
            return None
        values.append(float(value))
    return values


def _failure(row: Mapping[str, Any], objectives: Sequence[str]) -> str:
    """Why a trial failed, in a few words."""
    if row.get("status") != "ok":
        error = str(row.get("error") or "").strip().splitlines()
        return f"{row.get('status')}" + (f": {error[-1]}" if error else "")
    return f"empty {', '.join(objectives)}"


@dataclass
class Search:
    """One study: `run` asks Optuna for points, has the launcher run them and tells the values."""

    study: Any  # optuna.Study, its directions those of `objectives`
    space: SearchSpace
    objectives: Sequence[str]
    launcher: TrialLauncher
    n_trials: int
    n_jobs: int
    out: TextIO = field(default_factory=lambda: sys.stdout)
    done: dict[tuple[Any, ...], list[float] | None] = field(default_factory=dict)  # point -> values (None: failed)
    resumed: int = 0
    ran: int = 0

    def _key(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params[key] for key in self.space.distributions)

    def _tell(self, trial: Any, values: list[float] | None) -> None:
        """Tell the study a trial's values, or that it failed (None)."""
        import optuna

        self.study.tell(trial, values, state=None if values is not None else optuna.trial.TrialState.FAIL)

    def resume(self) -> None:
        """Give the study the runs of this space already stored (see the module docstring)."""
        import optuna

        first = {key: _first_value(distribution) for key, distribution in self.space.distributions.items()}
        rows = sorted(self.launcher.stored_rows(self.space.overrides(first)),
                      key=lambda row: (str(row.get("started_at")), str(row.get("run_id"))))
        candidates = [(row, params) for row in rows if (params := self.space.params_of(row)) is not None]
        run_ids = self.launcher.run_ids([self.space.overrides(params) for _, params in candidates])
        for (row, params), run_id in zip(candidates, run_ids):
            if run_id != row.get("run_id") or self._key(params) in self.done:
                continue  # another grid's or search's run, with other fixed values
            values = trial_values(row, self.objectives)
            state = optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL
            self.study.add_trial(optuna.trial.create_trial(params=params, distributions=self.space.distributions,
                                                           values=values, state=state))
            self.done[self._key(params)] = values
            self.resumed += 1

    def run(self) -> None:
        """Resume, then run batches of new points until `n_trials` are done or no new point comes."""
        self.resume()
        if self.resumed:
            print(f"search: {self.resumed} runs of this space already stored, given to the study", file=self.out)
        size = self.space.size()
        repeats = 0
        while len(self.done) < min(self.n_trials, size) and repeats < REPEATS_MAX:
            batch: list[Any] = []
            twins: list[Any] = []  # proposed again within the batch: told its first's value after it
            keys: set[tuple[Any, ...]] = set()
            while len(batch) < min(self.n_jobs, self.n_trials - len(self.done)) and repeats < REPEATS_MAX \
                    and len(self.done) + len(batch) < size:
                trial = self.study.ask(self.space.distributions)
                key = self._key(trial.params)
                if key in self.done:  # told what it gave, at once: nothing runs
                    values = self.done[key]
                    self._tell(trial, values)
                    repeats += 1
                elif key in keys:
                    twins.append(trial)
                    repeats += 1
                else:
                    batch.append(trial)
                    keys.add(key)
                    repeats = 0
            if not batch:
                break
            rows = self.launcher.run_points([self.space.overrides(trial.params) for trial in batch])
            for trial, row in zip(batch, rows):
                values = trial_values(row, self.objectives)
                self._tell(trial, values)
                self.done[self._key(trial.params)] = values
                self.ran += 1
                self._say(len(self.done), trial.params, values, row)
            for trial in twins:
                values = self.done[self._key(trial.params)]
                self._tell(trial, values)
        if len(self.done) < min(self.n_trials, size):
            print(f"search: the sampler proposed only points already done {REPEATS_MAX} times in a row: "
                  f"stopped at {len(self.done)} of {self.n_trials} trials", file=self.out)
        self._say_best()

    def _say(self, number: int, params: Mapping[str, Any], values: list[float] | None,
             row: Mapping[str, Any]) -> None:
        point = _point_words(params)
        outcome = (", ".join(f"{objective}={value:.6g}" for objective, value in zip(self.objectives, values))
                   if values is not None else f"failed ({_failure(row, self.objectives)})")
        print(f"trial {number}/{self.n_trials}: {outcome}   {point}", file=self.out)

    def _say_best(self) -> None:
        """The best trial (one objective) or the Pareto front (several), with their points."""
        import optuna

        completed = [trial for trial in self.study.get_trials(deepcopy=False)
                     if trial.state == optuna.trial.TrialState.COMPLETE]
        failed = sum(1 for values in self.done.values() if values is None)
        print(f"search: {len(self.done)} trials ({self.resumed} stored before, {self.ran} run now, "
              f"{failed} failed)", file=self.out)
        if not completed:
            print("search: no trial finished ok", file=self.out)
            return
        best = [self.study.best_trial] if len(self.objectives) == 1 else self.study.best_trials
        best = list({self._key(trial.params): trial for trial in best}.values())  # a repeat is the same point
        title = "best" if len(best) == 1 and len(self.objectives) == 1 else f"Pareto front ({len(best)} trials)"
        print(f"search: {title}:", file=self.out)
        for trial in sorted(best, key=lambda trial: trial.values):
            values = ", ".join(f"{objective}={value:.6g}" for objective, value in zip(self.objectives, trial.values))
            point = _point_words(trial.params)
            print(f"  {values}   {point}", file=self.out)


def _override_lines(params: Mapping[str, Any]) -> list[str]:
    """A point's `key=value` override lines."""
    return [f"{key}={_override_value(value)}" for key, value in params.items()]


def _point_words(params: Mapping[str, Any]) -> str:
    """A point as its override lines, on one line."""
    return " ".join(_override_lines(params))


def _first_value(distribution: Any) -> Any:
    """A value of `distribution` (to find the dataset a point of the space writes to)."""
    choices = getattr(distribution, "choices", None)
    return choices[0] if choices is not None else distribution.low
