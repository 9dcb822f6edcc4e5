"""The command line: `python -m sweep` runs, summarises, stores, resumes and refuses bad configs."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from sweep_support import small_config

import engine
from sweep.cli import EXIT_BAD_CONFIG, EXIT_OK, EXIT_RUN_FAILED, run_one
from sweep.runner import run_id
from sweep.store import read_table

_REAL_ENGINE_RUN = engine.run


def _count_engine_runs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Wrap `engine.run` so the test sees every call."""
    calls: list[Any] = []

    def counting_run(config: Any, **options: Any) -> dict:
        calls.append(config)
        return _REAL_ENGINE_RUN(config, **options)

    monkeypatch.setattr(engine, "run", counting_run)
    return calls


def test_run_one_stores_rows_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_engine_runs(monkeypatch)
    config = small_config(tmp_path)
    dataset = tmp_path / "results" / "test"

    first = io.StringIO()
    assert run_one(config, out=first) == EXIT_OK
    assert len(calls) == 1
    assert f"run {run_id(config)}  status ok" in first.getvalue()

    second = io.StringIO()
    assert run_one(config, out=second) == EXIT_OK
    assert len(calls) == 1  # already done: not run again
    assert "already done" in second.getvalue()
    assert len(read_table(dataset, "runs")) == 1

    assert run_one(config, force=True, out=io.StringIO()) == EXIT_OK
    assert len(calls) == 2
    assert len(read_table(dataset, "runs")) == 2


def test_the_summary_names_the_presets_the_run_was_composed_from(tmp_path: Path) -> None:
    """Presets of one's own (README: `network=big_switch`, a `switch` with more NPUs) are named as
    such, not by the topology or the flow pattern they use (`switch`, `incast`)."""
    out = io.StringIO()
    presets = {"network": "big_switch", "tcp": "newreno", "system": "default", "workload": "incast_2to1"}
    assert run_one(small_config(tmp_path), out=out, presets=presets) == EXIT_OK
    assert "network=big_switch npus=" in out.getvalue() and "tcp=newreno, workload=incast_2to1)" in out.getvalue()


def test_failed_run_is_stored_and_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_engine(config: Any, **options: Any) -> dict:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine, "run", broken_engine)
    config = small_config(tmp_path)
    out = io.StringIO()
    assert run_one(config, out=out) == EXIT_RUN_FAILED
    assert "RuntimeError: engine bug" in out.getvalue()
    assert "reproduce with: python -m sweep" in out.getvalue()

    calls = _count_engine_runs(monkeypatch)
    assert run_one(config, out=io.StringIO()) == EXIT_OK  # an error row does not count as done
    assert len(calls) == 1
    runs = read_table(tmp_path / "results" / "test", "runs")
    assert runs["status"].tolist() == ["error", "ok"]
    assert runs["repro"].str.startswith("python -m sweep ").all()


def test_run_one_refuses_an_invalid_config_before_running(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_engine_runs(monkeypatch)
    err = io.StringIO()
    assert run_one(small_config(tmp_path, ["tcp.cc=vegas"]), err=err) == EXIT_BAD_CONFIG
    assert err.getvalue().startswith("error: tcp.cc='vegas' is not valid")
    assert run_one(small_config(tmp_path, ["name=../escape"]), err=io.StringIO()) == EXIT_BAD_CONFIG
    assert calls == []
    assert not (tmp_path / "results").exists()


def _sweep(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`python -m sweep overrides...` in `cwd`, as a user would type it."""
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "sweep", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_runs_summarises_and_leaves_no_litter(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    results = tmp_path / "results"
    done = _sweep(cwd, "name=cli", f"results_dir={results}", "workload=incast")
    assert done.returncode == 0, done.stderr
    assert "status ok" in done.stdout and "FCT mean / max" in done.stdout
    assert f"rows appended to {results / 'cli'}/: runs +1, flows +8" in done.stdout
    assert list(cwd.iterdir()) == []  # no outputs/, .hydra/ or log files
    runs = duckdb.sql(f"select run_id, status, \"network.topology\" from "
                      f"read_parquet('{results}/cli/runs/*.parquet', union_by_name=true)").fetchall()
    assert [(status, topology) for _, status, topology in runs] == [("ok", "switch")]
    assert len(read_table(results / "cli", "flows")) == 8

    again = _sweep(cwd, "name=cli", f"results_dir={results}", "workload=incast")
    assert again.returncode == 0 and "already done" in again.stdout


def test_cli_runs_a_training_workload(tmp_path: Path) -> None:
    """dlrm_small writes all four tables and prints the per-iteration breakdown."""
    results = tmp_path / "results"
    done = _sweep(tmp_path, "workload=dlrm_small", "name=dlrm", f"results_dir={results}")
    assert done.returncode == 0, done.stderr
    for text in ("status ok", "workload=dlrm", "iteration time", "exposed comm", "all-to-all", "all-reduce",
                 "mean of 2/2 iterations", "retransmits"):
        assert text in done.stdout, text
    dataset = results / "dlrm"
    (run,) = read_table(dataset, "runs").to_dict("records")
    assert run["status"] == "ok" and run["iterations_done"] == 2
    assert run["iteration_time_s"] > 0 and run["exposed_comm_s"] <= run["iteration_time_s"]
    assert json.loads(run["workload.bottom_mlp"]) == [128, 64]  # lists as JSON strings
    assert run["system.all_reduce"] == "ring" and run["system.splits"] == 1
    collectives, layers, flows = (read_table(dataset, table) for table in ("collectives", "layers", "flows"))
    assert set(collectives["op"]) == {"all_to_all", "all_reduce"}
    assert (collectives["run_id"] == run["run_id"]).all() and collectives["end_s"].notna().all()
    assert len(layers) == 2 * 5  # 2 iterations x (embedding + 2 bottom + 2 top layers)
    assert len(flows) > 0 and flows["end_s"].notna().all()


def test_a_run_stopped_by_its_simulated_time_exits_1_and_claims_no_means(tmp_path: Path) -> None:
    """`engine.max_sim_time_s` reached before the first iteration ends: status timeout and exit 1 (the
    sweep's rule, docs/running.md), and the summary says where it stopped and shows no per-iteration
    means (of no iteration: not `compute 0 ms`)."""
    results = tmp_path / "results"
    done = _sweep(tmp_path, "workload=dlrm", "network.npus=4", "engine.max_sim_time_s=1e-5", "name=short",
                  f"results_dir={results}")
    assert done.returncode == EXIT_RUN_FAILED, done.stderr
    for text in ("status timeout", "stopped          at engine.max_sim_time_s = 1e-05 s of simulated time",
                 "iteration time   n/a (0/2 iterations finished; sim_time_s 1e-05)", "messages         0/12"):
        assert text in done.stdout, (text, done.stdout)
    assert "compute" not in done.stdout
    (run,) = read_table(results / "short", "runs").to_dict("records")
    assert (run["status"], run["iterations_done"]) == ("timeout", 0)


def test_cli_refuses_an_unknown_algorithm_in_one_line(tmp_path: Path) -> None:
    refused = _sweep(tmp_path, "workload=dlrm_small", "name=bad", f"results_dir={tmp_path / 'results'}",
                     "system.all_reduce=foo")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: system.all_reduce='foo' is not valid: one of ring,")
    assert len(refused.stderr.strip().splitlines()) == 1 and refused.stdout == ""
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("override", "key"), [("network.link_gbps=-5", "network.link_gbps"),
                                               ("tcp.mss_bytes=9000", "tcp.mss_bytes")])
def test_cli_refuses_invalid_value_in_one_line(tmp_path: Path, override: str, key: str) -> None:
    refused = _sweep(tmp_path, "name=bad", f"results_dir={tmp_path / 'results'}", override)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {key}=") and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stdout == ""
    assert not (tmp_path / "results").exists()


def test_cli_refuses_unknown_preset_without_traceback(tmp_path: Path) -> None:
    refused = _sweep(tmp_path, "name=bad", f"results_dir={tmp_path / 'results'}", "network=nonexistent")
    assert refused.returncode == EXIT_BAD_CONFIG
    assert refused.stderr.startswith("error: network='nonexistent' is not valid: a preset in conf/network/")
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "results").exists()
