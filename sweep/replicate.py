"""Replicate until confident: each grid point gets seeds `seed`, `seed + 1`, ... until the 95 % confidence
interval of its metric's mean is within `replicate.until_ci_pct` percent of the mean, or it has
`replicate.max_seeds` (off while `until_ci_pct` is null).

A point runs `min_seeds` seeds first; after each wave, a point whose interval is still too wide gets as many
more seeds as the interval's width says it needs (the sample's standard deviation taken as the truth:
n with t(0.975, n - 1) s / sqrt(n) <= the target), up to `max_seeds`. The interval is Student's t on the
runs that ended `ok`; a point whose runs all give the same value (no randomness: one switch, no loss)
stops at `min_seeds`. Every replica is an ordinary run of the dataset (its `seed` column says which), so
the same command resumes: stored seeds are not run again and a point already confident adds none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import engine

from .runner import run_id
from .schema import numeric_runs_columns

if TYPE_CHECKING:
    from .plan import PlannedRun

CONFIDENCE = 0.95


def _half_width(deviation: float, count: int) -> float:
    """Half-width of the 95 % Student-t interval of a mean of `count` values of standard deviation `deviation`."""
    # imported here: scipy.stats takes most of a second to import, and every command imports this module
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.5 + CONFIDENCE / 2, count - 1)) * deviation / math.sqrt(count)


def _mean_deviation(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) of two values or more."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % Student-t confidence interval); the half-width is inf for fewer
    than two values, 0 for values all equal (exactly: not a rounding error's width)."""
    if len(values) < 2:
        return sum(values) / len(values), math.inf
    if max(values) == min(values):
        return values[0], 0.0
    mean, deviation = _mean_deviation(values)
    return mean, _half_width(deviation, len(values))


@dataclass(frozen=True)
class ReplicatePolicy:
    """The `replicate` section of the config (see the module docstring)."""

    until_ci_pct: float | None = None
    metric: str = "iteration_time_s"
    min_seeds: int = 3
    max_seeds: int = 10

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ReplicatePolicy:
        """The policy of a run's config; raise `engine.ConfigError` naming the key that is wrong."""
        section = dict(config.get("replicate") or {})
        unknown = sorted(set(section) - {"until_ci_pct", "metric", "min_seeds", "max_seeds"})
        if unknown:
            raise engine.ConfigError(f"replicate.{unknown[0]}", section[unknown[0]],
                                     "a key of replicate: until_ci_pct, metric, min_seeds, max_seeds")
        policy = cls(**section)
        pct = policy.until_ci_pct
        if pct is not None and (isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct < 100):
            raise engine.ConfigError("replicate.until_ci_pct", pct,
                                     "a percentage of the mean (between 0 and 100), or null: off")
        if policy.metric not in numeric_runs_columns():
            raise engine.ConfigError("replicate.metric", policy.metric,
                                     "a numeric column of the runs table, such as iteration_time_s (docs/results.md)")
        if isinstance(policy.min_seeds, bool) or not isinstance(policy.min_seeds, int) or policy.min_seeds < 2:
            raise engine.ConfigError("replicate.min_seeds", policy.min_seeds, "an integer >= 2 (an interval needs two)")
        if isinstance(policy.max_seeds, bool) or not isinstance(policy.max_seeds, int) \
                or policy.max_seeds < policy.min_seeds:
            raise engine.ConfigError("replicate.max_seeds", policy.max_seeds,
                                     f"an integer >= replicate.min_seeds ({policy.min_seeds})")
        return policy

    @property
    def enabled(self) -> bool:
        return self.until_ci_pct is not None

    def confident(self, values: Sequence[float]) -> bool:
        """Whether the interval of these values is within the target (all equal: it is)."""
        mean, half_width = mean_interval(values)
        return half_width <= abs(mean) * self.until_ci_pct / 100 if self.until_ci_pct is not None else True

    def seeds_wanted(self, values: Sequence[float], tried: int) -> int:
        """How many seeds a point that `tried` seeds and got `values` (its ok runs) should have in all."""
        if tried < self.min_seeds:
            return self.min_seeds
        if tried >= self.max_seeds or (len(values) >= 2 and self.confident(values)) or not values:
            return tried  # (no run gave the metric: more seeds would not either)
        if len(values) < 2:
            return tried + 1
        mean, deviation = _mean_deviation(values)
        if mean == 0:
            return tried + 1
        target = abs(mean) * self.until_ci_pct / 100  # type: ignore[operator]  # enabled: a number
        needed = len(values)
        while needed < self.max_seeds and _half_width(deviation, needed) > target:
            needed += 1
        return min(self.max_seeds, max(tried + 1, needed + (tried - len(values))))


def check_one_seed_per_point(runs: Sequence[PlannedRun]) -> None:
    """Raise `engine.ConfigError` for a grid that sweeps `seed` itself: replicate chooses the seeds."""
    seen: set[str] = set()
    for run in runs:
        point = run_id({**run.config, "seed": 0}, run.sim_config)
        if point in seen:
            raise engine.ConfigError("seed", run.config["seed"],
                                     "one seed per grid point with replicate.until_ci_pct: it adds seed + 1, "
                                     "seed + 2, ... to each point itself")
        seen.add(point)


@dataclass
class ReplicatedPoint:
    """A grid point's replicas so far: how many seeds it tried and the metric of those that ended ok."""

    run: PlannedRun
    tried: int = 0
    values: list[float] = field(default_factory=list)


def replicate_points(runs: Sequence[PlannedRun], policy: ReplicatePolicy,
                     run_wave: Callable[[list[PlannedRun]],
                                        Mapping[str, Mapping[str, Any]] | None]) -> list[ReplicatedPoint]:
    """Run the replicas of every point in waves (`run_wave` runs a list of runs, those already stored
    skipped, and returns the runs row of each by run_id, or None if it was interrupted) until no
    point wants another seed; return the points with their values."""
    points = [ReplicatedPoint(run) for run in runs]
    wanted = [policy.min_seeds] * len(points)
    while True:
        wave = [(point, offset) for point, count in zip(points, wanted) for offset in range(point.tried, count)]
        if not wave:
            return points
        replicas = [point.run.with_seed(point.run.config["seed"] + offset) for point, offset in wave]
        rows = run_wave(replicas)
        if rows is None:
            return points
        for (point, _), run in zip(wave, replicas):
            point.tried += 1
            row = rows.get(run.run_id, {})
            value = row.get(policy.metric)
            if row.get("status") == "ok" and value is not None and math.isfinite(float(value)):
                point.values.append(float(value))
        wanted = [policy.seeds_wanted(point.values, point.tried) for point in points]


def format_replicated(points: Sequence[ReplicatedPoint], policy: ReplicatePolicy) -> str:
    """The launcher's lines on a replicated sweep: how many points reached the target and at how many
    seeds, and those that stopped at the maximum with their interval."""
    confident = [point for point in points if len(point.values) >= 2 and policy.confident(point.values)]
    short = [point for point in points if point not in confident]
    seeds = sorted(point.tried for point in confident)
    shared = set.intersection(*(set(point.run.overrides) for point in points)) if len(points) > 1 else set()
    lines = [f"replicate: {len(points)} points, {sum(point.tried for point in points)} runs; "
             f"{len(confident)} within {policy.until_ci_pct:g} % of the mean of {policy.metric} (95 % interval)"
             + ("" if not seeds else f" at {seeds[0]} seeds" if seeds[0] == seeds[-1]
                else f" at {seeds[0]} to {seeds[-1]} seeds")]
    for point in short:
        point_words = " ".join(line for line in point.run.overrides if line not in shared) or "(no overrides)"
        if len(point.values) >= 2:
            mean, half_width = mean_interval(point.values)
            lines.append(f"  not within it after {point.tried} seeds: +-{100 * half_width / abs(mean):.1f} % "
                         f"({point_words})" if mean else f"  mean 0 after {point.tried} seeds ({point_words})")
        else:
            lines.append(f"  {len(point.values)} of {point.tried} seeds ended ok: no interval ({point_words})")
    return "\n".join(lines)
