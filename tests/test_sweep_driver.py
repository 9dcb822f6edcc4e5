"""The sweep loop without Ray: resume, rows stored as runs finish, interrupts, wall-time budgets,
the single run as a sweep of one, the store's flush order and pyarrow view, the progress bar and the
summary table. (With Ray: test_sweep_ray.py.) Tests synchronise on events (a signal raised where
they choose, a clock they advance), never on the time a machine takes."""

from __future__ import annotations

import io
import signal
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import pytest
from sweep_support import compose_config

import engine
from sweep import store as store_module
from sweep.cli import EXIT_OK, EXIT_RUN_FAILED, run_one
from sweep.driver import run_sweep
from sweep.plan import PlannedRun, plan
from sweep.progress import ProgressBar, SweepSummary, format_summary
from sweep.rows import RunResult
from sweep.runner import OUT_OF_MEMORY, execute, failed_result, flatten, measure, run_id, stored_rows
from sweep.store import ResultStore, arrow_dataset, part_files, read_table, write_part

_REAL_ENGINE_RUN = engine.run


def _grid(tmp_path: Path, *extra: str) -> list[PlannedRun]:
    """A 3 x 2 grid of 2-to-1 incasts of a few milliseconds each."""
    points = [[f"network.link_gbps={gbps}", f"tcp={cc}", "workload=incast", "workload.senders=2",
               "workload.bytes_per_flow=20000", f"results_dir={tmp_path}", "name=grid", *extra]
              for gbps in (25, 100, 400) for cc in ("newreno", "cubic")]
    return plan(points, compose_config)


class _Executor:
    """An executor (the contract of `RayExecutor`) whose results come from `results(runs)`."""

    def __init__(self, results: Callable[[Sequence[PlannedRun]], Iterator[Any]]) -> None:
        self.results = results
        self.entered = 0

    def __enter__(self) -> _Executor:
        self.entered += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def _in_process(run_fn: Callable[[engine.SimConfig], RunResult] = measure,
                calls: list[str] | None = None) -> _Executor:
    """An executor that runs each run here, in order."""
    def results(runs: Sequence[PlannedRun]) -> Iterator[Any]:
        for run in runs:
            if calls is not None:
                calls.append(run.run_id)
            yield run, run_fn(run.sim_config)
    return _Executor(results)


def _fail_seed(seed: int) -> Callable[[engine.SimConfig], RunResult]:
    """`measure`, with an engine that raises for one seed."""
    def run_fn(config: engine.SimConfig) -> RunResult:
        if config.seed != seed:
            return measure(config)
        def broken(cfg: Any, **options: Any) -> dict:
            raise RuntimeError("injected engine failure")
        engine.run = broken
        try:
            return measure(config)
        finally:
            engine.run = _REAL_ENGINE_RUN
    return run_fn


def test_sweep_stores_every_run_and_a_second_sweep_runs_nothing(tmp_path: Path) -> None:
    runs = _grid(tmp_path)
    calls: list[str] = []
    summary = run_sweep(runs, _in_process(calls=calls), show_progress=False)
    assert (summary.grid_points, summary.ran, summary.statuses["ok"], summary.failed) == (6, 6, 6, 0)
    stored = read_table(tmp_path / "grid", "runs")
    assert sorted(stored["run_id"]) == sorted(run.run_id for run in runs)
    assert set(stored["network.link_gbps"]) == {25.0, 100.0, 400.0} and set(stored["tcp.cc"]) == {"newreno", "cubic"}
    assert len(read_table(tmp_path / "grid", "flows")) == 6 * 2

    idle = _in_process(calls=calls)
    again = run_sweep(runs, idle, show_progress=False)
    assert (again.ran, again.skipped, idle.entered, len(calls)) == (0, 6, 0, 6)  # not even started
    assert len(read_table(tmp_path / "grid", "runs")) == 6


def test_failed_runs_are_recorded_and_run_again(tmp_path: Path) -> None:
    runs = plan([[f"seed={seed}", "engine.backend=analytical", "workload=collective", "network.npus=4",
                  f"results_dir={tmp_path}", "name=fail"] for seed in range(3)], compose_config)
    summary = run_sweep(runs, _in_process(_fail_seed(1)), show_progress=False)
    assert (summary.statuses["ok"], summary.statuses["error"], summary.failed) == (2, 1, 1)
    (failure,) = summary.failures
    assert failure["run_id"] == runs[1].run_id
    assert failure["error"].splitlines()[-1] == "RuntimeError: injected engine failure"
    assert failure["repro"].startswith("python -m sweep ") and "++seed=1" in failure["repro"]
    report = format_summary(summary)
    assert "error            1" in report and failure["repro"] in report and runs[1].run_id in report

    calls: list[str] = []
    rerun = run_sweep(runs, _in_process(calls=calls), show_progress=False)
    assert calls == [runs[1].run_id] and (rerun.skipped, rerun.statuses["ok"]) == (2, 1)
    stored = read_table(tmp_path / "fail", "runs")
    assert sorted(stored["status"]) == ["error", "ok", "ok", "ok"]


def test_repeated_points_run_once_and_force_runs_again(tmp_path: Path) -> None:
    points = [["network.link_gbps=100", f"results_dir={tmp_path}", "workload=incast", "workload.senders=1"],
              ["network.link_gbps=100.0", f"results_dir={tmp_path}", "workload=incast", "workload.senders=1"]]
    summary = run_sweep(plan(points, compose_config), _in_process(), show_progress=False)
    assert (summary.ran, summary.skipped) == (1, 1)
    forced = plan([[*point, "+force=true"] for point in points], compose_config)
    assert (run_sweep(forced, _in_process(), show_progress=False).ran) == 1
    assert len(read_table(tmp_path / "default", "runs")) == 2


@pytest.mark.usefixtures("default_signals")  # SIGTERM is left alone where it was inherited ignored
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_sweep_keeps_what_finished(tmp_path: Path, how: str) -> None:
    runs = _grid(tmp_path)
    closed = []

    def interrupted_after_two(todo: Sequence[PlannedRun]) -> Iterator[Any]:
        try:
            for index, run in enumerate(todo):
                if index == 2:
                    if how == "ctrl-c":
                        raise KeyboardInterrupt
                    signal.raise_signal(signal.SIGTERM)  # its handler runs before this call returns
                    raise AssertionError("SIGTERM did not interrupt the sweep")
                yield run, measure(run.sim_config)
        finally:
            closed.append(True)

    previous = signal.getsignal(signal.SIGTERM)
    summary = run_sweep(runs, _Executor(interrupted_after_two), flush_rows=10**6, flush_interval_s=3600,
                        show_progress=False)
    assert summary.interrupted and summary.ran == 2 and closed == [True]
    assert signal.getsignal(signal.SIGTERM) is previous
    assert sorted(read_table(tmp_path / "grid", "runs")["run_id"]) == sorted(run.run_id for run in runs[:2])
    assert "interrupted" in format_summary(summary)

    resumed = run_sweep(runs, _in_process(), show_progress=False)
    assert (resumed.skipped, resumed.ran) == (2, 4)


def test_rows_are_written_by_rows_or_seconds_while_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's clock is this test's: it moves only when the test says so."""
    runs = _grid(tmp_path)[:2]
    now_s = [0.0]
    monkeypatch.setattr(store_module, "time", SimpleNamespace(monotonic=lambda: now_s[0]))
    parts_seen = []

    def slow_results(todo: Sequence[PlannedRun]) -> Iterator[Any]:
        yield todo[0], measure(todo[0].sim_config)
        yield None  # nothing finished for a while, but the last write is not 10 s old: nothing written
        parts_seen.append(len(part_files(tmp_path / "grid", "runs")))
        now_s[0] += 10.0
        yield None  # now it is: the driver writes what waits
        parts_seen.append(len(part_files(tmp_path / "grid", "runs")))
        yield todo[1], measure(todo[1].sim_config)

    run_sweep(runs, _Executor(slow_results), flush_rows=10**6, flush_interval_s=10.0, show_progress=False)
    assert parts_seen == [0, 1]
    assert len(part_files(tmp_path / "grid", "runs")) == 2  # and the second run's at the end


def _stuck_engine(config: Any, **options: Any) -> dict:
    """An engine that waits for an event nobody sets; a wall-time alarm interrupts the wait (if none
    comes within a minute, it returns nothing, and the run is an error, not a timeout)."""
    threading.Event().wait(60)
    return {}


def test_execute_stops_a_run_past_its_wall_time_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "run", _stuck_engine)
    config = compose_config([f"results_dir={tmp_path}"])
    previous = signal.getsignal(signal.SIGALRM)
    (row,) = execute(config, max_wall_time_s=0.1)["runs"]
    assert row["status"] == "timeout" and row["error"] == "wall-time budget of 0.1 s exceeded"
    assert row["run_id"] == run_id(config) and row["repro"].startswith("python -m sweep ")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is previous

    monkeypatch.setattr(engine, "run", _REAL_ENGINE_RUN)
    assert execute(small := compose_config(["workload=incast", "workload.senders=1"]),
                   max_wall_time_s=60)["runs"][0]["status"] == "ok"
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and run_id(small)


def test_a_single_run_is_a_sweep_of_one_held_to_the_same_limits(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m sweep` (run_one): the sweep's wall-time budget holds it, its rows are the sweep's
    rows (presets named), and the same run again is skipped as a sweep would skip it."""
    config = compose_config([f"results_dir={tmp_path}", "name=one", "workload=incast", "workload.senders=1"])
    presets = {"network": "switch", "tcp": "newreno", "system": "default", "workload": "incast"}
    monkeypatch.setattr(engine, "run", _stuck_engine)
    out = io.StringIO()
    # a timeout exits 1, as in a sweep; the summary says which limit stopped it, and no measurement
    assert run_one(config, out=out, err=out, presets=presets, max_wall_time_s=0.1) == EXIT_RUN_FAILED
    assert "stopped          wall-time budget of 0.1 s exceeded (hydra.launcher.max_wall_time_s)" in out.getvalue()
    assert "n/a" not in out.getvalue()
    (row,) = read_table(tmp_path / "one", "runs").to_dict("records")
    assert (row["status"], row["error"]) == ("timeout", "wall-time budget of 0.1 s exceeded")
    assert {group: row[group] for group in presets} == presets and row["run_id"] == run_id(config)

    monkeypatch.setattr(engine, "run", _REAL_ENGINE_RUN)
    assert run_one(config, out=out, err=out, presets=presets, max_wall_time_s=60) == EXIT_OK
    assert run_one(config, out=(again := io.StringIO()), err=again, presets=presets) == EXIT_OK
    assert again.getvalue().startswith(f"run {run_id(config)} is already done (status ok)")
    stored = read_table(tmp_path / "one", "runs")
    assert list(stored["status"]) == ["timeout", "ok"] and len(read_table(tmp_path / "one", "flows")) == 1

    # the memory declaration holds it too (a GiB-sized run, as in test_memory.py, held to 1 MiB more)
    big = compose_config([f"results_dir={tmp_path}", "name=one", "workload=astra_dlrm", "workload.iterations=1",
                          "network.npus=512"])
    assert run_one(big, out=(held := io.StringIO()), err=held, run_memory_mb=1) == EXIT_RUN_FAILED
    assert f"{OUT_OF_MEMORY}: 1 MiB (its declaration: hydra.launcher.run_memory_mb), peak " in held.getvalue()

    monkeypatch.setattr(engine, "run", lambda cfg, **options: 1 / 0)
    failing = {**config, "seed": 1}
    assert run_one(failing, out=(failed := io.StringIO()), err=failed) == EXIT_RUN_FAILED
    assert ("ZeroDivisionError: division by zero" in failed.getvalue()
            and "reproduce with: python -m sweep" in failed.getvalue())


def test_failed_rows_look_like_an_error_row_of_execute(tmp_path: Path) -> None:
    config = compose_config([f"results_dir={tmp_path}", "seed=4"])
    rows = stored_rows(config, failed_result("WorkerCrashedError: the worker died"))
    assert list(rows) == ["runs"]
    (row,) = rows["runs"]
    assert (row["run_id"], row["status"], row["error"]) == (run_id(config), "error",
                                                            "WorkerCrashedError: the worker died")
    assert all(row[key] == value for key, value in flatten(config).items())
    assert row["repro"].startswith("python -m sweep ") and row["engine_version"] == engine.ENGINE_VERSION
    assert row["started_at"].endswith("+00:00")


def test_flush_writes_runs_last_and_every_row_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If writing `runs` fails (or is interrupted), the other tables are already out, the run does
    not count as done, and the next flush writes only what is left."""
    real_write_part = store_module.write_part
    written: list[str] = []

    def failing_on_runs(table_dir: Path, rows: Any, name: str | None = None) -> Path:
        if table_dir.name == "runs" and not written.count("runs-failed"):
            written.append("runs-failed")
            raise OSError("disk full")
        written.append(table_dir.name)
        return real_write_part(table_dir, rows, name)

    monkeypatch.setattr(store_module, "write_part", failing_on_runs)
    store = ResultStore(tmp_path, flush_interval_s=3600)
    store.append({"runs": [{"run_id": "a", "status": "ok"}], "flows": [{"run_id": "a", "flow_id": 0}],
                  "layers": []})
    with pytest.raises(OSError):
        store.flush()
    # the tables of the results contract that got no rows are written too, empty, once
    assert written == ["collectives", "flows", "layers", "links", "runs-failed"]
    assert ResultStore(tmp_path).completed_run_ids() == set()  # not done until its runs row is stored
    store.flush()
    assert written == ["collectives", "flows", "layers", "links", "runs-failed", "runs"]
    assert len(read_table(tmp_path, "flows")) == 1 and store.completed_run_ids() == {"a"}


def test_arrow_dataset_reads_parts_whose_columns_differ(tmp_path: Path) -> None:
    """A first batch without errors (`error` all null), a later one with a new metric and a
    failure: pyarrow's own discovery would take the first part's schema; `arrow_dataset` unifies."""
    write_part(tmp_path / "t", [{"run_id": "a", "status": "ok", "error": None, "drops": 3}])
    write_part(tmp_path / "t", [{"run_id": "b", "status": "error", "error": "boom", "drops": 0.5, "new_s": 1.5}])
    table = arrow_dataset(tmp_path, "t").to_table()
    assert table.to_pydict() == {"run_id": ["a", "b"], "status": ["ok", "error"], "error": [None, "boom"],
                                 "drops": [3.0, 0.5], "new_s": [None, 1.5]}
    assert arrow_dataset(tmp_path, "flows").count_rows() == 0


def test_progress_bar_shows_done_failed_rate_and_eta() -> None:
    out = io.StringIO()
    with ProgressBar(4, file=out, enabled=True) as bar:
        for status in ("ok", "error", "ok"):
            bar.update(status)
    text = out.getvalue()
    assert "3/4" in text and "failed=1" in text and "run/s" in text and "<" in text  # elapsed<remaining
    assert ProgressBar(3, file=(silent := io.StringIO()), enabled=False) and silent.getvalue() == ""


def test_summary_table_counts_statuses() -> None:
    summary = SweepSummary(grid_points=5, datasets=[Path("results/x")], skipped=1, wall_s=2.0)
    for row in ({"run_id": "a", "status": "ok"}, {"run_id": "b", "status": "ok"},
                {"run_id": "c", "status": "timeout", "error": "wall-time budget of 1 s exceeded",
                 "repro": "python -m sweep ++seed=2"},
                {"run_id": "d", "status": "error", "error": "Traceback ...\nValueError: bad",
                 "repro": "python -m sweep ++seed=3"}):
        summary.record(row)
    assert (summary.ran, summary.failed) == (4, 2)
    lines = format_summary(summary).splitlines()
    assert lines[0] == "sweep of 5 grid points -> results/x/"
    assert lines[1:6] == ["  status        runs", "  ok               2", "  error            1",
                          "  timeout          1", "  skipped          1   already done with status ok"]
    assert "  ran 4 in 2.0 s (2.0 runs/s)" in lines
    assert "  d  error    ValueError: bad" in lines and "    python -m sweep ++seed=3" in lines
