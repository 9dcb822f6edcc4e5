"""The result store: atomic part files, buffered appends, schema unification, resume ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest
from sweep_support import small_config

from sweep import store as store_module
from sweep.compact import compact
from sweep.runner import execute
from sweep.schema import DECLARED_COLUMNS
from sweep.store import ColumnRows, ResultStore, load_table, part_files, read_table, write_part


def _files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_write_part_is_atomic_and_readable(tmp_path: Path) -> None:
    path = write_part(tmp_path / "t", [{"run_id": "a", "status": "ok", "x": 1.5}])
    assert _files(tmp_path / "t") == [path.name]  # no temporary file left behind
    assert path.name.startswith("part-") and path.suffix == ".parquet"
    assert pq.read_table(path).to_pylist() == [{"run_id": "a", "status": "ok", "x": 1.5}]


def test_write_part_keeps_columns_the_first_row_lacks(tmp_path: Path) -> None:
    """A batch mixes kinds of runs (a flows run has no training columns, a failed run no metrics):
    every column of every row is kept, null where a row has none; a declared table has all its
    declared columns, typed, in their order, then the others."""
    rows = [{"run_id": "a", "status": "error"}, {"run_id": "b", "status": "ok", "iteration_time_s": 0.5},
            {"run_id": "c", "status": "ok", "flows": 3, "extra": "x"}]
    table = pq.read_table(write_part(tmp_path / "runs", rows))
    assert table.schema.names == [*DECLARED_COLUMNS["runs"], "extra"]
    assert table.select(["run_id", "status", "iteration_time_s", "flows", "extra"]).to_pylist() == [
        {"run_id": "a", "status": "error", "iteration_time_s": None, "flows": None, "extra": None},
        {"run_id": "b", "status": "ok", "iteration_time_s": 0.5, "flows": None, "extra": None},
        {"run_id": "c", "status": "ok", "iteration_time_s": None, "flows": 3, "extra": "x"}]
    assert (str(table.schema.field("flows").type) == "int64"
            and str(table.schema.field("tcp.min_rto_ms").type) == "double")


def test_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store_module.pq, "write_table", crash)
    with pytest.raises(OSError):
        write_part(tmp_path / "runs", [{"run_id": "a"}])
    assert _files(tmp_path / "runs") == []  # neither a torn part nor a temporary file


def test_part_names_do_not_collide(tmp_path: Path) -> None:
    paths = {write_part(tmp_path / "t", [{"i": i}]) for i in range(20)}
    assert len(paths) == 20
    assert read_table(tmp_path, "t")["i"].tolist() == list(range(20))  # parts sort oldest first


def test_store_buffers_until_flush(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, flush_rows=100, flush_interval_s=3600)
    store.append({"runs": [{"run_id": "a", "status": "ok"}], "flows": [{"run_id": "a", "flow_id": 0}]})
    assert part_files(tmp_path, "runs") == []
    written = store.flush()
    assert set(written) == {"runs", "flows", "collectives", "layers", "links"}  # the last three empty, once
    assert [len(part_files(tmp_path, table)) for table in written] == [1] * 5
    assert pq.read_metadata(written["links"]).num_rows == 0
    assert store.flush() == {}  # nothing buffered: no empty parts
    store.append({"runs": [{"run_id": "b", "status": "ok"}]})
    assert set(store.flush()) == {"runs"}  # every table has a part: no more empty ones


def test_store_flushes_by_row_count_and_age(tmp_path: Path) -> None:
    by_rows = ResultStore(tmp_path / "rows", flush_rows=3, flush_interval_s=3600)
    by_rows.append({"runs": [{"run_id": "a"}, {"run_id": "b"}]})
    assert part_files(tmp_path / "rows", "runs") == []
    by_rows.append({"runs": [{"run_id": "c"}]})
    assert len(part_files(tmp_path / "rows", "runs")) == 1

    by_age = ResultStore(tmp_path / "age", flush_rows=1000, flush_interval_s=0.0)
    by_age.append({"runs": [{"run_id": "a"}]})
    assert len(part_files(tmp_path / "age", "runs")) == 1


def test_store_context_manager_flushes(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        store.append({"runs": [{"run_id": "a", "status": "ok"}]})
    assert read_table(tmp_path, "runs")["run_id"].tolist() == ["a"]


def _write_mismatched_parts(dataset: Path) -> None:
    """Three parts of `runs`: a column added later, an all-null column, int meeting double."""
    write_part(dataset / "runs", [{"run_id": "a", "status": "ok", "error": None, "drops": 3, "fct_s": None}])
    write_part(dataset / "runs", [{"run_id": "b", "status": "error", "error": "boom", "fct_s": None}])
    write_part(dataset / "runs", [{"run_id": "c", "status": "ok", "error": None, "drops": 0, "fct_s": 0.5,
                                   "new_metric": 2.5, "drop_rate": 1}])
    write_part(dataset / "runs", [{"run_id": "d", "status": "ok", "drop_rate": 0.25}])


def test_read_table_unifies_schemas(tmp_path: Path) -> None:
    _write_mismatched_parts(tmp_path)
    runs = read_table(tmp_path, "runs")
    assert runs["run_id"].tolist() == ["a", "b", "c", "d"]
    assert runs["error"].isna().tolist() == [True, False, True, True]
    assert runs["drops"].dtype == "Int64"  # counts stay integers next to a missing value
    assert runs["drops"].tolist()[:1] == [3] and pd.isna(runs["drops"][1])
    assert runs["fct_s"].tolist()[2] == 0.5 and runs["fct_s"].isna().tolist() == [True, True, False, True]
    assert runs["new_metric"].isna().tolist() == [True, True, False, True]
    assert runs["drop_rate"].tolist()[2:] == [1.0, 0.25]  # int64 and double meet as double


def test_read_table_selected_columns_and_empty(tmp_path: Path) -> None:
    _write_mismatched_parts(tmp_path)
    subset = read_table(tmp_path, "runs", columns=["run_id", "new_metric"])
    assert list(subset.columns) == ["run_id", "new_metric"]
    assert len(subset) == 4
    assert read_table(tmp_path, "flows").empty
    assert list(read_table(tmp_path, "flows", columns=["run_id"]).columns) == ["run_id"]


def test_duckdb_reads_mismatched_parts(tmp_path: Path) -> None:
    _write_mismatched_parts(tmp_path)
    # pyarrow hides the temporary names from datasets; DuckDB's glob must not pick them up either
    (tmp_path / "runs" / ".part-x.parquet.tmp").write_bytes(b"torn")
    pattern = str(tmp_path / "runs" / "*.parquet")
    rows = duckdb.sql(
        f"select run_id, error, drops, fct_s, new_metric, drop_rate "
        f"from read_parquet('{pattern}', union_by_name=true) order by run_id").fetchall()
    assert rows == [("a", None, 3, None, None, None), ("b", "boom", None, None, None, None),
                    ("c", None, 0, 0.5, 2.5, 1.0), ("d", None, None, None, None, 0.25)]


def test_completed_run_ids_counts_only_ok_runs(tmp_path: Path) -> None:
    _write_mismatched_parts(tmp_path)
    store = ResultStore(tmp_path, flush_interval_s=3600)
    assert store.completed_run_ids() == {"a", "c", "d"}
    store.append({"runs": [{"run_id": "e", "status": "ok"}, {"run_id": "f", "status": "timeout"}]})
    assert store.completed_run_ids() == {"a", "c", "d", "e"}  # buffered rows count too
    assert ResultStore(tmp_path / "empty").completed_run_ids() == set()


def test_column_rows_read_and_store_as_the_rows_they_hold(tmp_path: Path) -> None:
    """`ColumnRows` (how `execute` gives the flows table: typed arrays, NaN for a missing float, a
    run_id of one value) reads as row dicts and is written as the same part those rows would
    make; a flush with row dicts of the same table in it stores both."""
    from array import array

    columns = {"flow_id": array("q", [0, 1, 2]), "end_s": array("d", [0.5, float("nan"), 1.25]),
               "bytes": array("q", [10, 20, 30])}
    table = ColumnRows(columns, {"run_id": "a"})
    rows = [{"run_id": "a", "flow_id": 0, "end_s": 0.5, "bytes": 10},
            {"run_id": "a", "flow_id": 1, "end_s": None, "bytes": 20},
            {"run_id": "a", "flow_id": 2, "end_s": 1.25, "bytes": 30}]
    assert len(table) == 3 and list(table) == rows and table[-1] == rows[2] and table[1:] == rows[1:]
    as_rows = pq.read_table(write_part(tmp_path / "as_rows" / "flows", rows))
    store = ResultStore(tmp_path / "dataset", flush_rows=100, flush_interval_s=3600)
    store.append({"flows": table})
    store.append({"flows": [{"run_id": "b", "flow_id": 0, "end_s": None, "bytes": 5}]})
    stored = pq.read_table(store.flush()["flows"])
    assert stored.schema == as_rows.schema  # the flows table's (sweep.schema)
    columns = ("run_id", "flow_id", "end_s", "bytes")
    assert [{name: row[name] for name in columns} for row in stored.to_pylist()] == [
        {"run_id": "b", "flow_id": 0, "end_s": None, "bytes": 5}, *rows]


def test_the_links_table_resumes_and_compacts_like_the_others(tmp_path: Path) -> None:
    """Runs with and without `engine.link_stats`, one stored twice: a run without links writes an
    empty links part (the table reads, with its schema); each run with links has them once (its
    newest attempt) before and after compaction; both runs count as done; a links part lost to
    corruption makes its run run again."""
    with_links = small_config(tmp_path, ["engine.link_stats=all"])
    without = small_config(tmp_path, ["seed=1"])
    dataset = tmp_path / "results" / "test"
    with ResultStore(dataset) as store:
        store.append(execute(without))
    assert [pq.read_metadata(path).num_rows for path in part_files(dataset, "links")] == [0]
    for _ in range(2):  # stored twice, as `+force=true` would
        with ResultStore(dataset) as store:
            store.append(execute(with_links))
    links_run = execute(with_links)["runs"][0]["run_id"]
    before = load_table(dataset, "links")
    assert len(part_files(dataset, "links")) == 1 + 2 and len(before) == 16 + 16  # the newest attempt's NICs and ports
    assert set(before["run_id"]) == {links_run} and before["link"].is_unique
    assert len(ResultStore(dataset).completed_run_ids()) == 2
    damaged = tmp_path / "damaged"
    shutil.copytree(dataset, damaged)
    part_files(damaged, "links")[-1].write_bytes(b"not parquet")  # the newest attempt's links are lost
    assert ResultStore(damaged).completed_run_ids() == {execute(without)["runs"][0]["run_id"]}
    compact(dataset)
    assert len(part_files(dataset, "links")) == 1
    pd.testing.assert_frame_equal(load_table(dataset, "links"), before)
