"""`sweep.compact`: many small parts merged into one per table, what `load_runs` / `load_table`
return unchanged, and a crash between writing the merged part and removing its inputs harmless."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import sweep.compact as compact_module
from sweep.compact import compact, main
from sweep.store import load_runs, load_table, part_files, write_part


def _attempt(dataset: Path, run_id: str, started_at: str, status: str, flows: int, value: float) -> None:
    """One stored attempt of a run, as the store writes it: other tables first, `runs` last."""
    if status == "ok":
        write_part(dataset / "flows", [{"run_id": run_id, "flow_id": i, "fct_s": value} for i in range(flows)])
    write_part(dataset / "runs", [{"run_id": run_id, "status": status, "error": None if status == "ok" else "boom",
                                   "seed": int(run_id[1:]), "iteration_time_s": value if status == "ok" else None,
                                   "started_at": started_at}])


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    """12 parts per table: 6 runs, r1 rerun (newer attempt wins), r2 ok then failed (its flows hidden)."""
    path = tmp_path / "d"
    for seed in range(6):
        _attempt(path, f"r{seed}", f"2026-01-01T00:00:0{seed}+00:00", "ok", 2, float(seed))
    _attempt(path, "r1", "2026-01-01T00:01:00+00:00", "ok", 3, 10.0)
    _attempt(path, "r2", "2026-01-01T00:02:00+00:00", "error", 0, 0.0)
    return path


def _views(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = load_runs(path).sort_values("run_id").reset_index(drop=True)
    flows = load_table(path, "flows").sort_values(["run_id", "flow_id"]).reset_index(drop=True)
    return runs, flows


def test_compaction_merges_parts_and_keeps_what_loads(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, flows = _views(dataset)
    assert len(part_files(dataset, "runs")) == 8 and len(part_files(dataset, "flows")) == 7
    assert main([str(dataset)]) == 0
    assert "runs: 8 parts -> 1 (6 rows)" in capsys.readouterr().out
    assert len(part_files(dataset, "runs")) == 1 and len(part_files(dataset, "flows")) == 1
    after_runs, after_flows = _views(dataset)
    pd.testing.assert_frame_equal(after_runs, runs)
    pd.testing.assert_frame_equal(after_flows, flows)
    assert after_runs.set_index("run_id").loc["r1", "iteration_time_s"] == 10.0
    assert sorted(set(after_flows["run_id"])) == ["r0", "r1", "r3", "r4", "r5"]  # r2 failed last
    assert (after_flows["run_id"] == "r1").sum() == 3
    assert compact(dataset) == {"flows": (1, -1), "runs": (1, -1)}  # once is enough
    assert not list(dataset.rglob(".*.tmp"))


def test_a_crash_before_the_inputs_are_removed_leaves_duplicates_that_load_once(
        dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs, flows = _views(dataset)

    def crash(self: Path, missing_ok: bool = False) -> None:
        raise KeyboardInterrupt("crash after the merged part is written")

    monkeypatch.setattr(Path, "unlink", crash)
    with pytest.raises(KeyboardInterrupt):
        compact(dataset)
    monkeypatch.undo()
    assert len(part_files(dataset, "flows")) == 8  # the merged part beside its 7 inputs
    after_runs, after_flows = _views(dataset)
    pd.testing.assert_frame_equal(after_runs, runs)
    pd.testing.assert_frame_equal(after_flows, flows)
    compact(dataset)  # and compacting again cleans up
    assert len(part_files(dataset, "flows")) == 1 and len(part_files(dataset, "runs")) == 1
    pd.testing.assert_frame_equal(_views(dataset)[0], runs)


def test_a_part_that_cannot_be_read_leaves_its_table_alone(dataset: Path) -> None:
    bad = dataset / "flows" / "part-20990101T000000000000Z-bad.parquet"
    bad.write_bytes(b"not parquet")
    result = compact_module.compact(dataset)
    assert "flows" not in result and result["runs"] == (8, 6)
    assert bad.exists() and len(part_files(dataset, "flows")) == 8


@pytest.mark.slow
def test_soak_2000_runs_flat_memory_and_compaction(tmp_path: Path) -> None:
    """2,000 analytical runs on a local Ray (about 15 s on 2 cores): the driver's peak RSS barely
    moves from 1,000 to 2,000 runs; compaction leaves one part per table and the same `load_runs`."""
    import os
    import re
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, "NETSWEEP_RSS_EVERY": "1000"}
    done = subprocess.run([sys.executable, "-m", "sweep", "-m", "seed=range(2000)", "engine.backend=analytical",
                           "workload=collective", "workload.bytes=1024", "network.npus=4", "name=soak",
                           f"results_dir={tmp_path}", "ray.num_cpus=2", "hydra.launcher.flush_rows=200"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    peaks = {int(runs): float(peak) for runs, peak in re.findall(r"rss: (\d+) runs, [\d.]+ MiB now, peak ([\d.]+) MiB",
                                                                    done.stderr)}
    assert set(peaks) == {1000, 2000} and peaks[2000] - peaks[1000] < 20, peaks
    dataset = tmp_path / "soak"
    before = load_runs(dataset)
    assert len(part_files(dataset, "runs")) > 5
    compact(dataset)
    assert all(len(part_files(dataset, table)) == 1 for table in ("runs", "collectives"))
    after = load_runs(dataset)
    assert len(after) == 2000 and after["run_id"].is_unique
    pd.testing.assert_frame_equal(after.sort_values("run_id").reset_index(drop=True),
                                  before.sort_values("run_id").reset_index(drop=True))
