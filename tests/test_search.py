"""`hydra/sweeper=optuna` (sweep/search.py): the search space from Hydra's grammar, the objective a runs
column, failed runs failed trials, repeats and stored runs never run again; and one search on Ray as
a user types it, against the full grid of its space."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import optuna
import pytest
from sweep_support import compose_config

import engine
from sweep.plan import plan
from sweep.runner import measure
from sweep.search import CORNERS_MAX, Search, check_objectives, corner_points, search_space
from sweep.store import load_runs

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_space_is_read_as_hydra_reads_a_grid() -> None:
    space = search_space(["network=leaf_spine", "network.spines=1,2,4", "system.splits=range(1,9,2)",
                          "network.buffer_kb=tag(log,interval(64,1024))", "tcp=choice(newreno,dctcp)"])
    assert space.fixed == ("network=leaf_spine",)
    spines, splits, buffer_kb, tcp = space.distributions.values()
    assert spines.choices == (1, 2, 4) and tcp.choices == ("newreno", "dctcp")
    assert (splits.low, splits.high, splits.step) == (1, 7, 2)  # range's end is exclusive, as in a grid
    assert (buffer_kb.low, buffer_kb.high, buffer_kb.log) == (64.0, 1024.0, True)
    assert space.size() == float("inf")
    assert search_space(["a=1,2", "b=range(3)"]).size() == 2 * 3
    assert space.overrides({"network.spines": 2, "system.splits": 3, "network.buffer_kb": 100.5, "tcp": "dctcp"}) == [
        "network=leaf_spine", "network.spines=2", "system.splits=3", "network.buffer_kb=100.5", "tcp=dctcp"]
    with pytest.raises(engine.ConfigError, match="a range of integers"):
        search_space(["network.link_gbps=range(1,2,0.5)"])


def test_a_stored_row_is_a_point_of_the_space_only_with_every_value_in_it() -> None:
    space = search_space(["network.spines=1,2,4", "tcp=newreno,dctcp", "system.splits=range(1,9,2)",
                          "network.buffer_kb=interval(64,1024)", "network.ecn_threshold_kb=null,20"])
    row = {"network.spines": 2, "tcp": "dctcp", "system.splits": 5.0, "network.buffer_kb": 100.0,
           "network.ecn_threshold_kb": float("nan")}  # a null read back from Parquet as NaN
    assert space.params_of(row) == {"network.spines": 2, "tcp": "dctcp", "system.splits": 5,
                                    "network.buffer_kb": 100.0, "network.ecn_threshold_kb": "null"}
    for key, outside in (("network.spines", 3), ("tcp", "cubic"), ("system.splits", 4), ("network.buffer_kb", 2048.0),
                         ("network.ecn_threshold_kb", 10.0)):
        assert space.params_of({**row, key: outside}) is None, key


def test_the_corners_of_a_space_are_its_choices_and_its_ends() -> None:
    """What is checked before a search starts: every choice and both ends of each range and interval,
    in all combinations; past `CORNERS_MAX` of them, one parameter at a time."""
    space = search_space(["tcp=newreno,cubic", "network.spines=range(1,9)", "network.link_gbps=interval(10,100)",
                          "seed=3"])
    corners = corner_points(space)
    assert len(corners) == 2 * 2 * 2
    assert ["seed=3", "tcp=cubic", "network.spines=8", "network.link_gbps=10.0"] in corners
    wide = search_space([f"x{index}=1,2,3,4" for index in range(5)])  # 4**5 = 1,024 combinations
    assert 4 ** 5 > CORNERS_MAX and len(corner_points(wide)) == 5 * 4


def test_objectives_are_numeric_runs_columns_with_a_direction_each() -> None:
    assert check_objectives(["iteration_time_s", "timeouts"], ["minimize", "maximize"]) == (
        ["iteration_time_s", "timeouts"], ["minimize", "maximize"])
    assert check_objectives("comm_s", "maximize") == (["comm_s"], ["maximize"])
    for objectives, directions, message in ((["iteration_time"], ["minimize"], "hydra.sweeper.objective"),
                                            (["status"], ["minimize"], "numeric column"),
                                            (None, "minimize", "objective=null .* a non-empty list"),
                                            ([], [], "objective=\\[\\] .* a non-empty list"),
                                            (["comm_s"], ["lower"], "minimize or maximize"),
                                            (["comm_s"], None, "one direction per objective"),
                                            (["comm_s"], ["minimize", "minimize"], "one direction per objective")):
        with pytest.raises(engine.ConfigError, match=message):
            check_objectives(objectives, directions)


class FakeLauncher:
    """Runs a point by a formula of its overrides: `run_points` records what it was asked to run;
    `stored` rows are the dataset's, each with the run_id `run_ids` gives its point."""

    def __init__(self, value: Any, stored: Sequence[dict[str, Any]] = ()) -> None:
        self.value = value  # overrides dict -> runs row fields
        self.stored = list(stored)
        self.ran: list[tuple[str, ...]] = []

    @staticmethod
    def _run_id(overrides: Sequence[str]) -> str:
        return "|".join(overrides)

    def stored_rows(self, overrides: Sequence[str]) -> list[dict[str, Any]]:
        return self.stored

    def run_ids(self, points: Sequence[Sequence[str]]) -> list[str | None]:
        return [self._run_id(point) for point in points]

    def run_points(self, points: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        rows = []
        for point in points:
            assert tuple(point) not in self.ran, "a point ran twice"
            self.ran.append(tuple(point))
            settings = dict(line.split("=", 1) for line in point)
            rows.append({"run_id": self._run_id(point), **self.value(settings)})
        return rows


def _search(launcher: FakeLauncher, lines: Sequence[str], n_trials: int, objectives: Sequence[str] = ("comm_s",),
            directions: Sequence[str] = ("minimize",), n_jobs: int = 2) -> tuple[Search, str]:
    out = io.StringIO()
    study = optuna.create_study(directions=list(directions), sampler=optuna.samplers.TPESampler(seed=1))
    search = Search(study, search_space(lines), list(objectives), launcher, n_trials, n_jobs, out)
    search.run()
    return search, out.getvalue()


def test_the_objective_is_the_named_column_and_failed_runs_are_failed_trials_not_zeros() -> None:
    def outcome(settings: dict[str, str]) -> dict[str, Any]:
        x = int(settings["x"])
        if x == 0:  # the fastest point by comm_s, had it finished
            return {"status": "timeout", "error": "simulated time limit reached", "comm_s": 0.0, "wall_s": 1.0}
        if x == 1:
            return {"status": "error", "error": "Traceback ...\nRuntimeError: boom", "comm_s": None}
        if x == 2:  # ok, but the objective column empty (a workload without it)
            return {"status": "ok", "comm_s": None, "wall_s": 1.0}
        return {"status": "ok", "comm_s": float(x), "wall_s": 100.0 - x}

    launcher = FakeLauncher(outcome)
    search, out = _search(launcher, ["x=range(8)"], n_trials=8)
    assert len(launcher.ran) == 8  # the whole (finite) space, each point once
    trials = {trial.params["x"]: trial for trial in search.study.trials if trial.number < 100}
    states = {x: trial.state for x, trial in trials.items()}
    assert {x for x, state in states.items() if state == optuna.trial.TrialState.FAIL} == {0, 1, 2}
    assert search.study.best_trial.params == {"x": 3} and search.study.best_value == 3.0
    assert "failed (timeout: simulated time limit reached)" in out and "failed (error: RuntimeError: boom)" in out
    assert "failed (empty comm_s)" in out
    assert "search: 8 trials (0 stored before, 8 run now, 3 failed)" in out

    # another column is another objective: wall_s, maximised
    maximised, _ = _search(FakeLauncher(outcome), ["x=range(8)"], n_trials=8, objectives=["wall_s"],
                           directions=["maximize"])
    assert maximised.study.best_trial.params == {"x": 3} and maximised.study.best_value == 97.0


def test_repeated_proposals_run_nothing_and_n_trials_counts_distinct_runs() -> None:
    launcher = FakeLauncher(lambda s: {"status": "ok", "comm_s": (int(s["x"]) - 3) ** 2 + int(s["y"])})
    search, out = _search(launcher, ["x=range(7)", "y=0,1,2"], n_trials=12, n_jobs=3)
    assert len(launcher.ran) == len(set(launcher.ran)) == 12
    assert len(search.study.trials) >= 12  # the sampler's repeats are trials told the stored value
    assert "trial 12/12:" in out and "trial 13" not in out


def test_stored_runs_of_the_space_are_given_to_the_study_and_never_run_again() -> None:
    def value(settings: dict[str, str]) -> dict[str, Any]:
        return {"status": "ok", "comm_s": float(settings["x"]), "started_at": settings["x"]}

    first = FakeLauncher(value)
    _search(first, ["fixed=1", "x=range(10)"], n_trials=5)
    stored = [{"run_id": FakeLauncher._run_id(point), "x": int(dict(line.split("=") for line in point)["x"]),
               **value(dict(line.split("=") for line in point))} for point in first.ran]
    stored.append({"run_id": "fixed=2|x=9", "x": 9, "status": "ok", "comm_s": -1.0})  # another search's run
    stored.append({"run_id": "fixed=1|x=99", "x": 99, "status": "ok", "comm_s": -1.0})  # outside this space

    again = FakeLauncher(value, stored)
    search, out = _search(again, ["fixed=1", "x=range(10)"], n_trials=5)
    assert again.ran == []  # the same command: nothing runs
    assert "search: 5 runs of this space already stored, given to the study" in out
    assert search.study.best_value == min(float(dict(line.split("=") for line in p)["x"]) for p in first.ran)

    more = FakeLauncher(value, stored)
    _search(more, ["fixed=1", "x=range(10)"], n_trials=7)
    assert len(more.ran) == 2 and not set(more.ran) & set(first.ran)


def test_several_objectives_give_the_pareto_front() -> None:
    launcher = FakeLauncher(lambda s: {"status": "ok", "comm_s": float(s["x"]), "timeouts": 9 - int(s["x"])})
    search, out = _search(launcher, ["x=range(10)"], n_trials=10, objectives=["comm_s", "timeouts"],
                          directions=["minimize", "minimize"])
    assert {trial.params["x"] for trial in search.study.best_trials} == set(range(10))  # each trades one for the other
    front = out.split("search: Pareto front (10 trials):\n")[1].splitlines()
    assert len(front) == 10 and front[0] == "  comm_s=0, timeouts=9   x=0"


SPACE = ["network.spines=1,2,4,8,16", "system.all_reduce=ring,halving_doubling,double_binary_tree,direct"]
FIXED = ["network=leaf_spine", "network.npus=64", "network.hosts_per_leaf=8", "network.buffer_kb=128",
         "engine.backend=phase", "workload=astra_dlrm", "workload.iterations=1"]


@pytest.mark.slow
def test_a_search_of_12_trials_over_20_points_finds_the_grids_best_within_10_percent(tmp_path: Path) -> None:
    grid = [[*FIXED, f"network.spines={spines}", f"system.all_reduce={algorithm}"]
            for spines in (1, 2, 4, 8, 16)
            for algorithm in ("ring", "halving_doubling", "double_binary_tree", "direct")]
    grid_best_s = min(measure(run.sim_config).measured["iteration_time_s"] for run in plan(grid, compose_config))

    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "sweep", "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=12",
               "hydra.sweeper.n_jobs=4", "ray.num_cpus=2", "name=search", *FIXED, *SPACE]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = load_runs(tmp_path / "results" / "search")
    assert len(runs) == 12 and set(runs["status"]) == {"ok"}
    assert runs["iteration_time_s"].min() <= 1.10 * grid_best_s
    assert "search: 12 trials (0 stored before, 12 run now, 0 failed)" in done.stdout

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "search: 12 runs of this space already stored, given to the study" in again.stdout
    assert "ray:" not in again.stderr  # nothing to run: Ray is not even started
    assert len(load_runs(tmp_path / "results" / "search")) == 12
