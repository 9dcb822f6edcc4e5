"""Two-fidelity sweeps (`sweep.fidelity`): which points are refined, from hand-built screen results
with known best and at-risk points; point_id; resume across both phases after an interrupt; the
report of a two-fidelity dataset. In process, without Ray (the launcher's path with Ray:
`test_sweep_ray.py`'s fixtures run the same `run_two_fidelity`)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import pytest
from sweep_support import compose_config

import engine
import sweep
from sweep.fidelity import (
    RefinePolicy,
    TwoFidelityResult,
    at_risk,
    default_screen_backend,
    format_refusals,
    format_selection,
    plan_screens,
    run_two_fidelity,
    screen_refusals,
    select_refinements,
)
from sweep.plan import PlannedRun, plan
from sweep.progress import SweepSummary
from sweep.report import POINTS_FILE, SUMMARY_FILE, build_report
from sweep.runner import measure, point_id, run_id
from sweep.store import read_table

KIB = 1024


def _screen(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """A screen's runs frame: every point ok, 64 KiB buffers, 10-segment initial windows of 1,460
    bytes (1,500 on the wire), no risk unless a row says otherwise."""
    defaults = {"status": "ok", "max_link_utilisation": 0.5, "max_port_flows": 1, "slow_start_share": 0.0,
                "tcp.init_cwnd_pkts": 10, "tcp.mss_bytes": None, "network.mtu_bytes": 1500,
                "network.buffer_kb": 64.0, "workload": "A"}
    return pd.DataFrame([{**defaults, **row} for row in rows])


# p0..p9, 1 to 10 ms; p5 slow start, p7 a link at 95 %, p8 eight senders into a 64 KiB port
# (8 x 10 x 1,500 = 120,000 bytes > 65,536), p9 a failed screen.
POINTS = _screen([{"point_id": f"p{i}", "iteration_time_s": (i + 1) * 1e-3} for i in range(9)]
                 + [{"point_id": "p9", "iteration_time_s": None, "status": "timeout"}])
POINTS.loc[5, "slow_start_share"] = 0.6
POINTS.loc[7, "max_link_utilisation"] = 0.95
POINTS.loc[8, "max_port_flows"] = 8


def test_at_risk_reasons_by_hand() -> None:
    reasons = at_risk(POINTS).set_axis(POINTS["point_id"])
    assert dict(reasons[reasons != ""]) == {"p5": "slow_start", "p7": "link_load", "p8": "port_fan_in",
                                            "p9": "screen_failed"}
    # four senders bring 4 x 10 x 1,500 = 60,000 bytes: they fit 64 KiB; a null buffer is unlimited
    edge = _screen([{"point_id": "a", "iteration_time_s": 1e-3, "max_port_flows": 4},
                    {"point_id": "b", "iteration_time_s": 1e-3, "max_port_flows": 5},
                    {"point_id": "c", "iteration_time_s": 1e-3, "max_port_flows": 500, "network.buffer_kb": None}])
    assert list(at_risk(edge)) == ["", "port_fan_in", ""]  # 5 x 15,000 = 75,000 > 65,536
    # alpha_beta reports no signals: only failures count
    blind = POINTS.assign(max_link_utilisation=None, max_port_flows=None, slow_start_share=None)
    assert list(at_risk(blind)[at_risk(blind) != ""]) == ["screen_failed"]


def test_a_phase_screen_flags_incast_by_its_count_not_by_port_fan_in() -> None:
    """The issue's 256-NPU leaf-spine (512 KiB buffers, docs/phase-backend.md): at 2:1 `phase` counts 536
    messages at once into a port and no incast phase, at 8:1 1,990 and 2. Both fan-ins bring far more
    than the buffer (536 x 10 x 1,500 = 8,040,000 bytes > 524,288), so only the incast count separates
    them; a row without the count (analytical) keeps the fan-in rule."""
    screen = _screen([{"point_id": "2:1", "iteration_time_s": 8.5693e-3, "max_port_flows": 536, "incast_phases": 0},
                      {"point_id": "8:1", "iteration_time_s": 8.6710e-3, "max_port_flows": 1990, "incast_phases": 2},
                      {"point_id": "analytical 8:1", "iteration_time_s": 8.6703e-3, "max_port_flows": 1990,
                       "incast_phases": None}]).assign(**{"network.buffer_kb": 512.0})
    assert list(at_risk(screen)) == ["", "incast", "port_fan_in"]


def test_a_roce_screen_flags_pfc_pauses_and_no_port_fan_in() -> None:
    """RoCE has no initial window: 1,990 messages into a port are no fan-in risk; phase's count of the
    phases where PFC would pause is (pauses block whole ports, which the fluid leaves out)."""
    screen = _screen([{"point_id": "paused", "iteration_time_s": 1e-4, "max_port_flows": 1990, "pfc_pause_phases": 1},
                      {"point_id": "calm", "iteration_time_s": 1e-4, "max_port_flows": 1990, "pfc_pause_phases": 0},
                      {"point_id": "analytical", "iteration_time_s": 1e-4, "max_port_flows": 1990}])
    screen = screen.assign(**{"network.buffer_kb": 512.0, "transport.protocol": "roce"})
    assert list(at_risk(screen)) == ["pfc_pause", "", ""]


def test_a_hybrid_screen_flags_incast_only_where_its_packet_episodes_lost_nothing() -> None:
    """On a hybrid screen the flagged phases were replayed at packet level: where that dropped packets
    the point's time is the packet engine's (RTO chains), not at risk of `incast`; where it dropped
    nothing (hybrid then gives phase's figure: the near-threshold miss) it is, as on phase (drops null)."""
    screen = _screen([{"point_id": "lossy", "iteration_time_s": 1.4, "incast_phases": 1, "drops": 5262},
                      {"point_id": "miss", "iteration_time_s": 2.57e-3, "incast_phases": 3, "drops": 0},
                      {"point_id": "phase", "iteration_time_s": 5.9e-5, "incast_phases": 1, "drops": None},
                      {"point_id": "calm", "iteration_time_s": 2.5e-3, "incast_phases": 0, "drops": 0}])
    assert list(at_risk(screen)) == ["", "incast", "incast", ""]


def test_top_points_then_at_risk_fastest_first_within_the_budget() -> None:
    """Budget 6, top 3, no sample: p0-p2, then the at-risk ones by screen time: p5, p7, p8; the
    failed p9 (no time: last) does not fit."""
    chosen = select_refinements(POINTS, RefinePolicy("analytical", budget_runs=6, top=3))
    assert chosen == {"p0": "top", "p1": "top", "p2": "top", "p5": "slow_start", "p7": "link_load",
                      "p8": "port_fan_in"}
    bigger = select_refinements(POINTS, RefinePolicy("analytical", budget_runs=20, top=3))
    assert set(bigger) == {"p0", "p1", "p2", "p5", "p7", "p8", "p9"}  # nothing else is at risk


def test_a_top_point_at_risk_says_both() -> None:
    chosen = select_refinements(POINTS, RefinePolicy("analytical", budget_runs=10, top=6))
    assert chosen["p5"] == "top,slow_start" and chosen["p0"] == "top"


def test_top_per_value_of_a_named_axis() -> None:
    """Two workloads: the 2 fastest of each, not the 4 fastest overall."""
    frame = POINTS.assign(workload=["A"] * 5 + ["B"] * 5)
    chosen = select_refinements(frame, RefinePolicy("analytical", budget_runs=4, top=2, top_per=("workload",)))
    assert set(chosen) == {"p0", "p1", "p5", "p6"}


def test_the_calibration_sample_is_seeded_uniform_and_comes_first() -> None:
    """The sample is drawn from the finished points whatever their rank, fits the budget before the
    top points, and depends only on the rows (not their order) and the seed."""
    policy = RefinePolicy("analytical", budget_runs=5, top=2, sample=3, seed=7)
    chosen = select_refinements(POINTS, policy)
    sampled = {point for point, reasons in chosen.items() if "sample" in reasons.split(",")}
    assert len(sampled) == 3 and "p9" not in sampled
    assert {"p0", "p1"} <= set(chosen) and len(chosen) == 5
    shuffled = POINTS.sample(frac=1.0, random_state=3)
    assert select_refinements(shuffled, policy) == chosen
    draws = {frozenset(p for p, r in select_refinements(POINTS, RefinePolicy("analytical", 5, 0, (), 3, seed)).items()
                       if "sample" in r) for seed in range(20)}
    assert len(draws) > 5  # another seed, another sample
    finished = [f"p{i}" for i in range(9)]
    expected = [finished[i] for i in sorted(np.random.default_rng(7).choice(9, size=3, replace=False))]
    assert sampled == set(expected)


# -- a real two-fidelity sweep, in process --------------------------------------------------------

def _grid(tmp_path: Path, name: str) -> list[PlannedRun]:
    """6 points of a collective on 4 NPUs at packet level, a few ms each: all-reduce algorithm x size."""
    points = [["workload=collective", "network.npus=4", f"system.all_reduce={algorithm}", f"workload.bytes={size}",
               f"results_dir={tmp_path}", f"name={name}"]
              for algorithm in ("ring", "direct", "halving_doubling") for size in (65536, 1048576)]
    return plan(points, compose_config)


POLICY = RefinePolicy("analytical", budget_runs=3, top=1, sample=2, seed=1)


class _Executor:
    """Runs each run here, in order; raises KeyboardInterrupt (as Ctrl-C would) before the
    `stop_after`-th result of runs on backend `stop_backend`."""

    def __init__(self, stop_backend: str | None = None, stop_after: int = 0) -> None:
        self.stop_backend, self.stop_after = stop_backend, stop_after
        self.ran: list[tuple[str, str]] = []  # (backend, point_id)

    def __enter__(self) -> _Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def results(self, runs: Sequence[PlannedRun]) -> Iterator[Any]:
        for count, run in enumerate(runs):
            backend = run.config["engine"]["backend"]
            if backend == self.stop_backend and count == self.stop_after:
                raise KeyboardInterrupt
            self.ran.append((backend, point_id(run.config)))
            yield run, measure(run.sim_config)


def _two_fidelity(runs: list[PlannedRun], executor: _Executor) -> Any:
    return run_two_fidelity(runs, plan_screens(runs, POLICY.screen_backend), POLICY, executor, show_progress=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """An uninterrupted two-fidelity sweep: its dataset and result."""
    tmp_path = tmp_path_factory.mktemp("two_fidelity")
    result = _two_fidelity(_grid(tmp_path, "reference"), _Executor())
    return tmp_path / "reference", result


def test_both_rows_of_a_refined_point_share_its_point_id(reference: tuple[Path, Any]) -> None:
    path, result = reference
    runs = sweep.load_runs(path)
    assert result.screen.ran == 6 and result.refine.ran == len(result.selection) == 3
    assert sorted(runs["engine.backend"].value_counts().items()) == [("analytical", 6), ("packet", 3)]
    for point, reasons in result.selection.items():
        pair = runs[runs["point_id"] == point].set_index("engine.backend")
        assert set(pair.index) == {"analytical", "packet"} and pair.loc["analytical", "run_id"] != pair.loc[
            "packet", "run_id"]
        assert pair.loc["packet", "refine_reason"] == reasons and pd.isna(pair.loc["analytical", "refine_reason"])
    config = compose_config(["workload=collective", "network.npus=4"])
    other = {**config, "engine": {**config["engine"], "backend": "alpha_beta"}}
    assert point_id(config) == point_id(other) and run_id(config) != run_id(other)
    # the fastest screened point is refined as `top`
    screen = runs[runs["engine.backend"] == "analytical"].sort_values("iteration_time_s")
    assert "top" in result.selection[screen["point_id"].iloc[0]].split(",")


@pytest.mark.parametrize("phase, after", [("analytical", 2), ("packet", 1)])
def test_an_interrupted_two_fidelity_sweep_resumes_where_it_stopped(tmp_path: Path, reference: tuple[Path, Any],
                                                                    phase: str, after: int) -> None:
    """Ctrl-C in the screen (after 2 of 6 runs) or in the refinement (after 1 of 3): what finished
    is kept; the same sweep again runs only the rest, refines exactly the points an uninterrupted
    sweep refines, and stores each run once."""
    runs = _grid(tmp_path, "resumed")
    first = _two_fidelity(runs, _Executor(stop_backend=phase, stop_after=after))
    assert first.interrupted
    if phase == "analytical":
        assert first.refine is None and first.screen.ran == 2
    again = _Executor()
    second = _two_fidelity(runs, again)
    assert not second.interrupted
    assert second.selection == reference[1].selection
    ran_before = {"analytical": 6 if phase == "packet" else 2, "packet": after if phase == "packet" else 0}
    assert sum(1 for backend, _ in again.ran if backend == "analytical") == 6 - ran_before["analytical"]
    assert sum(1 for backend, _ in again.ran if backend == "packet") == 3 - ran_before["packet"]
    stored = read_table(tmp_path / "resumed", "runs")
    assert len(stored) == stored["run_id"].nunique() == 6 + 3


def test_the_budget_must_hold_the_sample_and_the_top_points(tmp_path: Path) -> None:
    runs = _grid(tmp_path, "budget")
    RefinePolicy("analytical", 7, top=2, top_per=("system.all_reduce",), sample=1).check_grid(runs)
    with pytest.raises(engine.ConfigError, match=r"hydra.launcher.refine_budget=6 .*= 7"):
        RefinePolicy("analytical", 6, top=2, top_per=("system.all_reduce",), sample=1).check_grid(runs)
    with pytest.raises(engine.ConfigError, match="hydra.launcher.refine_top_per"):
        RefinePolicy("analytical", 6, top=1, top_per=("system.all_reduse",)).check_grid(runs)
    with pytest.raises(engine.ConfigError, match="hydra.launcher.screen_backend='packet'"):
        RefinePolicy("packet", 6).check()
    with pytest.raises(engine.ConfigError, match="hydra.launcher.refine_budget=null"):
        RefinePolicy("analytical", None).check()  # type: ignore[arg-type]


def _npus_grid(tmp_path: Path, npus: Sequence[int], backend: str = "packet") -> list[PlannedRun]:
    """One small all-reduce per size, on one switch, at `backend`."""
    return plan([["workload=collective", f"network.npus={count}", "workload.bytes=65536", f"engine.backend={backend}",
                  f"results_dir={tmp_path}", "name=sizes"] for count in npus], compose_config)


def test_the_default_screen_is_hybrid_from_256_npus(tmp_path: Path) -> None:
    """No `screen_backend`: a grid with a run of 256 NPUs or more screens on `hybrid`, the whole grid
    (one screen, one calibration band); below, on `analytical`."""
    assert default_screen_backend(_npus_grid(tmp_path, [16, 128])) == "analytical"
    assert default_screen_backend(_npus_grid(tmp_path, [256])) == "hybrid"
    assert default_screen_backend(_npus_grid(tmp_path, [16, 1024])) == "hybrid"


def test_a_sweep_of_256_npus_screens_every_point_on_hybrid(tmp_path: Path) -> None:
    """The default screen in a real two-fidelity sweep: every screening row is a `hybrid` run, the
    refined one runs at the grid's backend (`alpha_beta` here only to keep the refinement cheap)."""
    runs = _npus_grid(tmp_path, [256, 512], backend="alpha_beta")
    policy = RefinePolicy(default_screen_backend(runs), budget_runs=1, top=1)
    screens = plan_screens(runs, policy.screen_backend)
    assert screen_refusals(runs, screens, policy.screen_backend) == {}
    result = run_two_fidelity(runs, screens, policy, _Executor(), show_progress=False)
    stored = sweep.load_runs(tmp_path / "sizes")
    assert sorted(stored["engine.backend"]) == ["alpha_beta", "hybrid", "hybrid"]
    assert ((stored["status"] == "ok").all()
            and stored.loc[stored["engine.backend"] == "hybrid", "incast_phases"].notna().all())
    assert result.selection == {point_id(runs[0].config): "top"}  # 256 NPUs: the faster iteration


def test_a_hybrid_screen_runs_the_points_hybrid_refuses_on_phase(tmp_path: Path) -> None:
    """`screen_backend=hybrid` on a grid of a lossy 64-NPU leaf-spine all-to-all (16 a leaf, 2 spines,
    64 KiB), and 128 NPUs on a fat tree of k = 10 (8:1 above the edge) with halving-doubling all-reduces, which
    hybrid refuses (its exchanges would split the pods of 25 it folds whole): the first point
    screens on hybrid (its all-to-all a chain of RTOs, its packets dropped: not at risk), the second
    on phase, with the refusal said; the phase point's incast flag (drops null) makes it the one at-risk refinement,
    though phase screens it faster. The report counts both as the screen."""
    common = ["workload=collective", "workload.op=all_to_all", "workload.bytes=98304", "network.npus=64",
              "network.buffer_kb=64", "engine.backend=alpha_beta", f"results_dir={tmp_path}", "name=mixed"]
    leaf_spine = [*common, "network=leaf_spine", "network.hosts_per_leaf=16", "network.spines=2"]
    fat_tree = [*common, "network=fat_tree", "network.npus=128", "network.fat_tree_k=10",
                "network.uplink_gbps=12.5", "system.all_reduce=halving_doubling"]
    runs = plan([leaf_spine, fat_tree], compose_config)
    policy = RefinePolicy("hybrid", budget_runs=1, top=0)
    policy.check()
    policy.check_grid(runs)
    screens = plan_screens(runs, policy.screen_backend)
    assert [screen.config["engine"]["backend"] for screen in screens] == ["hybrid", "phase"]
    refusals = screen_refusals(runs, screens, "hybrid")
    assert list(refusals.values()) == [1] and "system.all_reduce='halving_doubling'" in next(iter(refusals))
    assert format_refusals(refusals, "hybrid").startswith("screen: 1 point on phase (the backend hybrid extends)")
    result = run_two_fidelity(runs, screens, policy, _Executor(), show_progress=False)
    stored = sweep.load_runs(tmp_path / "mixed").set_index("engine.backend")
    assert stored.loc["hybrid", "iteration_time_s"] >= 0.2 and stored.loc["hybrid", "drops"] > 0  # >= one RTO
    assert stored.loc["phase", "iteration_time_s"] < 1e-3 and stored.loc["phase", "incast_phases"] > 0
    assert (list(result.selection) == [point_id(runs[1].config)]
            and "incast" in result.selection[point_id(runs[1].config)])
    summary = (build_report(tmp_path / "mixed") / SUMMARY_FILE).read_text()
    assert "**2 points** screened on `hybrid` (1 of them on `phase`" in summary
    with pytest.raises(engine.ConfigError, match="hydra.launcher.screen_backend='hybrid'.*phase"):
        RefinePolicy("hybrid", 1).check_grid(_npus_grid(tmp_path, [16], backend="phase"))


def test_the_report_of_a_two_fidelity_dataset(reference: tuple[Path, Any]) -> None:
    """The section's numbers from the rows: the calibration sample's errors (packet / analytical - 1),
    the fastest refined configuration, and for every point not refined the band its screen time
    gets."""
    path, result = reference
    out = build_report(path)
    summary = (out / SUMMARY_FILE).read_text()
    runs = sweep.load_runs(path)
    times = runs.pivot_table(index="point_id", columns="engine.backend", values="iteration_time_s")
    errors = times["packet"] / times["analytical"] - 1
    sampled = [p for p, reasons in result.selection.items() if "sample" in reasons.split(",")]
    low, high = errors[sampled].min(), errors[sampled].max()
    assert "## Two fidelities: `analytical` screen, `packet` refinement" in summary
    assert "**6 points** screened on `analytical`; **3 refined** on `packet` (50.0% of the points)" in summary
    assert f"median {errors[sampled].median():+.2%} and ranges from {low:+.2%} to {high:+.2%}" in summary
    fastest = times["packet"].dropna().idxmin()
    top_table = summary.split("fastest configurations at `packet` level", 1)[1]
    assert f"| 1 | {times.loc[fastest, 'packet'] * 1e3:.4g} |" in top_table and fastest in top_table.split("\n| 2 |")[0]
    with open(out / POINTS_FILE) as file:
        points = {row["point_id"]: row for row in csv.DictReader(file)}
    assert len(points) == 6
    for point, row in points.items():
        if point in result.selection:
            assert row["fidelity"] == "packet" and float(row["fine_s"]) == pytest.approx(times.loc[point, "packet"])
        else:
            screen_s = times.loc[point, "analytical"]
            assert row["fidelity"].startswith(f"screen only: packet expected {screen_s * (1 + low) * 1e3:.4g}-"
                                              f"{screen_s * (1 + high) * 1e3:.4g} ms")
    for plot in ("two_fidelity_scatter.png", "calibration_error.png"):
        assert (out / plot).read_bytes().startswith(b"\x89PNG") and f"`{plot}`" in summary
    assert "The sections below describe the screening runs (`analytical`)" in summary


def _result(selected: int, points: int) -> TwoFidelityResult:
    """A two-fidelity result with `selected` top points refined of `points`."""
    summary = SweepSummary(grid_points=points, datasets=[])
    return TwoFidelityResult(summary, summary, {f"p{index}": "top" for index in range(selected)}, points)


def test_the_selection_line_says_why_budget_went_unused() -> None:
    """Beyond the sample and the top points the budget goes to at-risk points only: a budget of 50 on a
    screen that marks none refines the top 10 and says why the other 40 went unused."""
    policy = RefinePolicy("alpha_beta", budget_runs=50, top=10)
    assert format_selection(_result(10, 32), policy) == (
        "refine: 10 of 32 points at the grid's backend (budget 50): calibration sample 0, top 10, at risk 0; "
        "40 of the budget unused: beyond the sample (0) and the top (10) it goes only to points the screen marks "
        "at risk, and all 0 are refined; hydra.launcher.refine_sample or refine_top spend more")
    assert format_selection(_result(8, 8), policy).endswith("; 42 of the budget unused: every point of the grid is "
                                                             "refined")
    assert "unused" not in format_selection(_result(50, 80), policy)


@pytest.mark.slow
def test_a_two_fidelity_command_starts_ray_once_and_says_how_its_budget_went(tmp_path: Path) -> None:
    """The command line: both stages on one local Ray (one `ray:` line), and the selection line (an
    `alpha_beta` screen marks no point at risk: the top one is refined, and the line says why no more)."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-m", "sweep", "-m", "workload=collective", "network.npus=4",
                           "workload.bytes=65536,1048576", "hydra.launcher.screen_backend=alpha_beta",
                           "hydra.launcher.refine_budget=5", "hydra.launcher.refine_top=1", "ray.num_cpus=1",
                           f"results_dir={tmp_path}", "name=two"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("ray: a local Ray") == 1, done.stderr
    assert ("refine: 1 of 2 points at the grid's backend (budget 5): calibration sample 0, top 1, at risk 0; "
            "4 of the budget unused: beyond the sample (0) and the top (1)") in done.stdout, done.stdout
