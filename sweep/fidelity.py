"""Two-fidelity sweeps: every grid point on a fast screening backend, then a chosen few again at the
grid's own backend (packet level).

`hydra.launcher.refine_budget=N` turns a sweep into two stages, screening on
`hydra.launcher.screen_backend` (`analytical`, `alpha_beta`, `phase` or `hybrid`; by default `hybrid`
for a grid with runs of 256 NPUs or more, `analytical` below: `default_screen_backend`):

1. **Screen.** Every grid point runs with `engine.backend` set to the screening backend; a point the
   screening backend refuses runs on the registered backend it extends, if any (`screen_run`: `hybrid`
   refuses fat trees, halving-doubling, ...; those points screen on `phase`, its model without the
   packet-level episodes), and the launcher says which points and why (`screen_refusals`).
2. **Refine.** At most `refine_budget` points run again as planned (the grid's backend), chosen
   from the screen's results by `select_refinements`, in this order of priority:
   - a calibration sample: `refine_sample` points drawn uniformly (seeded by `refine_seed`) from
     those the screen finished, whatever their rank, so that their error measures the screen's;
   - the `refine_top` fastest points by iteration time, among all points or, with
     `refine_top_per`, within each value of each named axis (`workload`, `network.npus`);
   - the points the screen marks at risk (`at_risk`), fastest first, while the budget lasts.

Both runs of a point share its `point_id` (`sweep.runner.point_id`: its config without
`engine.backend`); a refined run's row says why it was chosen (`refine_reason`). Both stages
resume: finished runs of either stage are skipped by run_id, and the selection depends only on the
screen's results, the settings and the seed, so an interrupted sweep picks the same points again.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

import engine
from engine.backends import backend_class, backends_with, extended_backend

from .driver import Executor, run_sweep
from .plan import GridError, PlannedRun, planned_run
from .progress import SweepSummary
from .runner import flatten
from .schema import PRESET_COLUMNS
from .store import load_runs


def screen_backends() -> tuple[str, ...]:
    """The backends that may screen a two-fidelity sweep (their class says `SCREENS`)."""
    return backends_with("SCREENS")


def default_screens() -> list[tuple[int, str]]:
    """(from how many NPUs, backend) of the backends that are the default screen of some grids, by
    NPUs: a grid's default is the last whose NPU count its largest run reaches (`default_screen_backend`)."""
    return sorted((threshold, name) for name in screen_backends()
                  if (threshold := backend_class(name).DEFAULT_SCREEN_FROM_NPUS) is not None)


# At-risk thresholds. A link whose mean load over the run is this close to its capacity queues at
# packet level (an M/M/1 queue holds rho / (1 - rho) packets: 9 at 0.9), where the fluid model
# has no queue at all.
UTILISATION_AT_RISK = 0.9
# The share of messages whose slow start from the initial window would outlast their transmission
# (`engine.transport.cc.slow_start_dominates`) above which the screen's missing slow start is
# likely to change the iteration time.
SLOW_START_AT_RISK = 0.5
TCP_IP_HEADER_BYTES = 40
# Reasons a point is refined, as written in `refine_reason` (comma-separated when several hold).
SAMPLE, TOP = "sample", "top"
RISKS = {  # at-risk reason -> what it means (the report's legend)
    "link_load": f"a link loaded to {UTILISATION_AT_RISK:.0%} of its capacity or more over the run",
    "port_fan_in": "more messages at once into a switch port than its buffer holds initial windows of",
    "incast": "a collective phase whose opening windows, less what a switch port drains meanwhile, overflow "
              "its buffer (incast_phases; on a hybrid screen, only where its packet-level replay dropped nothing)",
    "slow_start": f"{SLOW_START_AT_RISK:.0%} or more of the messages shorter than TCP's slow start to them",
    "pfc_pause": "RoCE: a collective phase whose messages queue past PFC's XOFF threshold at a switch port "
                 "(pfc_pause_phases): pauses, whose head-of-line blocking the fluid leaves out",
    "screen_failed": "the screening run did not finish (error or timeout)",
}


@dataclass(frozen=True)
class RefinePolicy:
    """How a two-fidelity sweep chooses the points it refines (see the module docstring)."""

    screen_backend: str
    budget_runs: int
    top: int = 10
    top_per: tuple[str, ...] = ()
    sample: int = 0
    seed: int = 0

    def check(self) -> None:
        """Raise `engine.ConfigError` naming the `hydra.launcher` key that is out of range."""
        for key, value, valid, allowed in (
            ("screen_backend", self.screen_backend, self.screen_backend in screen_backends(),
             f"one of {', '.join(screen_backends())}, or null for the default ("
             + ", ".join(f"{name} from {npus} NPUs" for npus, name in default_screens()) + ")"),
            ("refine_budget", self.budget_runs, isinstance(self.budget_runs, int) and self.budget_runs >= 1,
             "a number of refined runs >= 1 (required with screen_backend)"),
            ("refine_top", self.top, self.top >= 0, "an integer >= 0"),
            ("refine_sample", self.sample, self.sample >= 0, "an integer >= 0"),
        ):
            if not valid:
                raise engine.ConfigError(f"hydra.launcher.{key}", value, allowed)

    def check_grid(self, runs: Sequence[PlannedRun]) -> None:
        """Raise `engine.ConfigError` if this policy cannot refine the grid `runs`: a grid that
        sweeps or already uses the screening backend (or the backend it extends, where it screens
        the points it refuses), an axis of `top_per` that is no column, or a budget smaller than the
        sample and the top points it must hold."""
        backends = sorted({run.config["engine"]["backend"] for run in runs})
        fallback = extended_backend(self.screen_backend)
        if len(backends) > 1 or self.screen_backend in backends or fallback in backends:
            screens = self.screen_backend + (f" (and {fallback}, where it refuses a point)" if fallback else "")
            raise engine.ConfigError("hydra.launcher.screen_backend", self.screen_backend,
                                     f"a backend other than the grid's, and a grid that does not sweep "
                                     f"engine.backend (it has {', '.join(backends)}; the screen runs on {screens})")
        values: dict[str, set[str]] = {axis: set() for axis in self.top_per}
        for run in runs:
            columns = {**flatten(run.config), **{group: run.presets.get(group) for group in PRESET_COLUMNS}}
            for axis in self.top_per:
                if axis not in columns:
                    raise engine.ConfigError("hydra.launcher.refine_top_per", axis,
                                             "config keys (network.npus) or config groups (workload)")
                values[axis].add(repr(columns[axis]))
        groups = sum(len(found) for found in values.values()) if self.top_per else 1
        needed = self.sample + self.top * groups
        if self.budget_runs < needed:
            raise engine.ConfigError("hydra.launcher.refine_budget", self.budget_runs,
                                     f"at least refine_sample + refine_top x {groups} "
                                     f"(the values of {', '.join(self.top_per) or 'the whole grid'}) = {needed}")


def default_screen_backend(runs: Sequence[PlannedRun]) -> str:
    """The screening backend of a two-fidelity sweep of `runs` that names none: of the backends that
    say from how many NPUs they are the default (`DEFAULT_SCREEN_FROM_NPUS`: `hybrid` from 256, where
    `analytical`'s per-message fluid model takes minutes an iteration, `analytical` below), the one
    with the largest count the grid's largest run reaches. One screen for the whole grid, so that one
    calibration sample measures one screen's error: a hybrid screen's points that hybrid refuses run
    on `phase`, the model hybrid keeps wherever its packet episodes drop nothing (`screen_run`)."""
    largest_npus = max(run.config["network"]["npus"] for run in runs)
    return [name for npus, name in default_screens() if npus <= largest_npus][-1]


def _on_backend(run: PlannedRun, backend: str) -> PlannedRun:
    """`run` with `engine.backend` replaced (validated, with its own run_id and memory estimate), its
    overrides, force flag and presets kept."""
    config = {**run.config, "engine": {**run.config["engine"], "backend": backend}}
    return planned_run(config, run.overrides, run.force, run.presets)


def screen_run(run: PlannedRun, backend: str) -> PlannedRun:
    """`run` on the screening `backend`; where `backend` refuses it and extends another registered
    backend (`engine.backends.extended_backend`: hybrid extends phase), on that one, the same model
    without what it adds. Raise `engine.ConfigError` (the screening backend's) if neither runs it."""
    try:
        return _on_backend(run, backend)
    except engine.ConfigError as refusal:
        fallback = extended_backend(backend)
        if fallback is None:
            raise
        try:
            return _on_backend(run, fallback)
        except engine.ConfigError:
            raise refusal from None


def screen_refusals(runs: Sequence[PlannedRun], screens: Sequence[PlannedRun], backend: str) -> dict[str, int]:
    """Why the screens (`plan_screens(runs, backend)`) of some points are not on `backend`: {its
    refusal (the `engine.ConfigError` message, naming the key): points}; empty when every point
    screens on `backend`."""
    refusals: dict[str, int] = {}
    for run, screen in zip(runs, screens):
        if screen.config["engine"]["backend"] != backend:
            try:
                _on_backend(run, backend)
            except engine.ConfigError as exc:
                refusals[str(exc)] = refusals.get(str(exc), 0) + 1
    return refusals


def format_refusals(refusals: Mapping[str, int], backend: str) -> str:
    """The launcher's lines on the points a `backend` screen runs on the backend it extends, or ''."""
    if not refusals:
        return ""
    points = sum(refusals.values())
    head = (f"screen: {points} point{'s' if points > 1 else ''} on {extended_backend(backend)} (the backend "
            f"{backend} extends), as {backend} refuses {'them' if points > 1 else 'it'}:")
    return "\n".join([head] + [f"  {count} x {reason}" for reason, count in refusals.items()])


def plan_screens(runs: Sequence[PlannedRun], backend: str) -> list[PlannedRun]:
    """`screen_run` of every planned run; raise `GridError` naming the first point the screening
    backend cannot run (a `flows` workload on `analytical`)."""
    screens = []
    for index, run in enumerate(runs):
        try:
            screens.append(screen_run(run, backend))
        except engine.ConfigError as exc:
            raise GridError(index, len(runs), run.overrides, exc) from exc
    return screens


def _mss_bytes(screen: pd.DataFrame) -> pd.Series:
    mss = screen.get("tcp.mss_bytes", pd.Series(np.nan, index=screen.index)).astype("Float64")
    return mss.fillna(screen["network.mtu_bytes"].astype("Float64") - TCP_IP_HEADER_BYTES)


def _text(screen: pd.DataFrame, name: str) -> pd.Series:
    """A text column of `screen`, or an empty one where the screen lacks it."""
    return screen[name] if name in screen else pd.Series("", index=screen.index, dtype=object)


def at_risk(screen: pd.DataFrame) -> pd.Series:
    """Per screening run (a `runs` frame), its at-risk reasons (keys of `RISKS`, comma-separated;
    '' for none), from the signals the fluid backends report (`max_link_utilisation`,
    `max_port_flows`, `slow_start_share`, and on `phase` and `hybrid` `incast_phases`; null on
    `alpha_beta`, which then marks nothing but failures). Port fan-in: the most messages that crossed
    one switch port at once, each opening with `tcp.init_cwnd_pkts` full segments, bring more bytes
    than `network.buffer_kb` holds (the incast condition; a null buffer is unlimited). Where the screen
    counted `incast_phases` (phase, hybrid), that count replaces it: the same condition per phase, less
    what the port drains while the windows arrive (without the drain, every large collective would be
    flagged). A flagged point whose screen replayed those phases at packet level and lost packets
    (`drops` > 0: hybrid's episodes, whose time it then carries) is not at risk of `incast`: its time
    already has TCP's loss in it; one whose episodes dropped nothing (hybrid then gives phase's figure:
    the near-threshold miss of docs/hybrid-backend.md) or that no packet level saw (phase: `drops`
    null) is. With RoCE (`transport.protocol=roce`), which has no initial window, port fan-in does not
    apply; a phase screen's `pfc_pause_phases` flags `pfc_pause` instead."""
    def column(name: str) -> pd.Series:
        values = screen[name] if name in screen else pd.Series(np.nan, index=screen.index)
        return values.astype("Float64")

    initial_burst_bytes = column("max_port_flows") * column("tcp.init_cwnd_pkts") * (
        _mss_bytes(screen) + TCP_IP_HEADER_BYTES)
    flags = {
        "link_load": column("max_link_utilisation") >= UTILISATION_AT_RISK,
        "port_fan_in": ((initial_burst_bytes > column("network.buffer_kb") * 1024) & column("incast_phases").isna()
                        & (_text(screen, "transport.protocol") != "roce")),
        "incast": (column("incast_phases") > 0) & ~(column("drops") > 0).fillna(False),
        "slow_start": column("slow_start_share") >= SLOW_START_AT_RISK,
        "pfc_pause": column("pfc_pause_phases") > 0,
        "screen_failed": pd.Series(screen["status"] != "ok", index=screen.index),
    }
    reasons = pd.Series("", index=screen.index, dtype=object)
    for name, flag in flags.items():
        hit = flag.fillna(False).astype(bool)
        reasons[hit] = [f"{text},{name}" if text else name for text in reasons[hit]]
    return reasons


def _fastest(frame: pd.DataFrame, count: int) -> list[str]:
    """point_ids of the `count` fastest finished screening runs of `frame` (ties by point_id)."""
    ok = frame[(frame["status"] == "ok") & frame["iteration_time_s"].notna()]
    return list(ok.sort_values(["iteration_time_s", "point_id"], kind="stable")["point_id"].head(count))


def select_refinements(screen: pd.DataFrame, policy: RefinePolicy) -> dict[str, str]:
    """The points to refine, {point_id: reasons (comma-separated: `sample`, `top`, at-risk keys of
    `RISKS`)}, from the screening runs `screen` (a `runs` frame, one row per point) within
    `policy.budget_runs`: the calibration sample, then the top points, then the at-risk points,
    fastest first. Deterministic: the same rows (in any order), policy and seed give the same
    choice."""
    screen = screen.sort_values("point_id", kind="stable").reset_index(drop=True)
    risks = at_risk(screen).set_axis(screen["point_id"])
    chosen: dict[str, list[str]] = {}

    def take(point: str, reason: str) -> None:
        if point in chosen or len(chosen) < policy.budget_runs:
            chosen.setdefault(point, []).append(reason)

    finished = screen.loc[(screen["status"] == "ok") & screen["iteration_time_s"].notna(), "point_id"]
    rng = np.random.default_rng(policy.seed)
    for index in sorted(rng.choice(len(finished), size=min(policy.sample, len(finished)), replace=False)):
        take(finished.iloc[index], SAMPLE)
    if policy.top_per:
        for axis in policy.top_per:
            for _, part in screen.groupby(screen[axis].map(repr), sort=True):
                for point in _fastest(part, policy.top):
                    take(point, TOP)
    else:
        for point in _fastest(screen, policy.top):
            take(point, TOP)
    by_speed = screen.assign(_time=screen["iteration_time_s"].astype(float).fillna(math.inf))
    for point in by_speed.sort_values(["_time", "point_id"], kind="stable")["point_id"]:
        if risks[point]:
            take(point, risks[point])
    return {point: ",".join(dict.fromkeys(",".join(reasons).split(","))) for point, reasons in chosen.items()}


def refined_runs(runs: Sequence[PlannedRun], selection: Mapping[str, str]) -> list[PlannedRun]:
    """The planned runs (at the grid's backend) of the selected points, each labelled with its
    reasons, in grid order."""
    return [dataclasses.replace(run, refine_reason=selection[run.point_id]) for run in runs
            if run.point_id in selection]


def screen_frame(screen_runs: Sequence[PlannedRun], load: Any) -> pd.DataFrame:
    """The stored runs rows of `screen_runs` (one per run_id, its newest attempt), read with
    `load(dataset)` (`sweep.load_runs`) from each of their datasets."""
    frames = []
    for dataset in dict.fromkeys(run.dataset for run in screen_runs):
        wanted = {run.run_id for run in screen_runs if run.dataset == dataset}
        rows = load(dataset)
        frames.append(rows[rows["run_id"].isin(wanted)])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass
class TwoFidelityResult:
    """What a two-fidelity sweep did: the tally of each stage (`refine` None when the screen was
    interrupted: nothing was refined) and the points chosen, {point_id: reasons}."""

    screen: SweepSummary
    refine: SweepSummary | None
    selection: dict[str, str]
    points: int

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C or SIGTERM stopped either stage."""
        return self.screen.interrupted or self.refine is None or self.refine.interrupted

    @property
    def failed(self) -> int:
        """Runs of either stage that ended `error` or `timeout`."""
        return self.screen.failed + (self.refine.failed if self.refine is not None else 0)


def run_two_fidelity(runs: Sequence[PlannedRun], screens: Sequence[PlannedRun], policy: RefinePolicy,
                     executor: Executor, flush_rows: int = 10_000, flush_interval_s: float = 10.0,
                     show_progress: bool | None = None) -> TwoFidelityResult:
    """Screen every point (`screens`, from `plan_screens(runs, ...)`), choose from the stored screen
    results (`select_refinements`) and run the chosen points of `runs`. Each stage skips what is
    done already; an interrupted screen refines nothing (the next invocation finishes the screen,
    then chooses)."""
    screen_summary = run_sweep(screens, executor, flush_rows, flush_interval_s, show_progress=show_progress)
    if screen_summary.interrupted:
        return TwoFidelityResult(screen_summary, None, {}, len(runs))
    selection = select_refinements(screen_frame(screens, load_runs), policy)
    refine_summary = run_sweep(refined_runs(runs, selection), executor, flush_rows, flush_interval_s,
                               show_progress=show_progress)
    return TwoFidelityResult(screen_summary, refine_summary, selection, len(runs))


def format_selection(result: TwoFidelityResult, policy: RefinePolicy) -> str:
    """One line: how many points were chosen for refinement, of how many, why, and why any of the
    budget went unused (the sample and the top points are fixed counts; beyond them the budget goes
    to points the screen marks at risk only)."""
    reasons = [reason for text in result.selection.values() for reason in text.split(",")]
    risky = sum(1 for text in result.selection.values() if any(r in RISKS for r in text.split(",")))
    line = (f"refine: {len(result.selection)} of {result.points} points at the grid's backend "
            f"(budget {policy.budget_runs}): calibration sample {reasons.count(SAMPLE)}, "
            f"top {reasons.count(TOP)}, at risk {risky}")
    unused = policy.budget_runs - len(result.selection)
    if unused <= 0:
        return line
    if len(result.selection) == result.points:
        why = "every point of the grid is refined"
    else:
        top = f"{policy.top} per value of {', '.join(policy.top_per)}" if policy.top_per else str(policy.top)
        why = (f"beyond the sample ({policy.sample}) and the top ({top}) it goes only to points the screen marks "
               f"at risk, and all {risky} are refined; hydra.launcher.refine_sample or refine_top spend more")
    return f"{line}; {unused} of the budget unused: {why}"
