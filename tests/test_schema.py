"""One schema per result table: every part of a table has the same columns and types, so pandas,
pyarrow datasets, DuckDB (without `union_by_name`) and Polars read a dataset directory as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sweep_support import compose_config

from sweep.runner import measure, stored_rows
from sweep.schema import DECLARED_COLUMNS, PRESET_COLUMNS
from sweep.store import ResultStore, harmonise, load_runs, part_files

TABLES = ("runs", "flows", "collectives", "layers", "links")

# Small runs of every workload type on every backend that takes it, and a run that fails; the
# `links` table from three backends, and absent where `engine.link_stats` is none (the default).
KINDS = {
    "switch_dlrm_packet": ["network=switch", "network.npus=4", "workload=dlrm_small", "workload.iterations=1",
                           "engine.link_stats=all"],
    "leaf_spine_astra_packet": ["network=leaf_spine", "network.npus=8", "workload=astra_micro_alltoall",
                                "workload.iterations=1", "engine.link_stats=switch_ports"],
    "hierarchical_collective_analytical": ["network=hierarchical", "network.npus=8", "network.npus_per_node=4",
                                           "workload=collective", "engine.backend=analytical",
                                           "engine.link_stats=all"],
    "dumbbell_flows_packet": ["network=dumbbell", "network.npus=4", "workload=incast", "workload.senders=3",
                              "workload.bytes_per_flow=20000"],
    "ring_dlrm_analytical": ["network=ring", "network.npus=4", "workload=dlrm_small", "engine.backend=analytical",
                             "workload.iterations=1"],
    "fat_tree_astra_alpha_beta": ["network=fat_tree", "network.npus=8", "workload=astra_dlrm",
                                  "engine.backend=alpha_beta", "workload.iterations=1", "engine.link_stats=all"],
}


def _rows(kind: str, tmp_path: Path) -> dict[str, list[dict]]:
    config = compose_config([f"results_dir={tmp_path}", "name=mixed", *KINDS[kind]])
    rows = stored_rows(config, measure(config), presets={"network": KINDS[kind][0].split("=")[1]})
    assert rows["runs"][0]["status"] == "ok", rows["runs"][0]["error"]
    return rows


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset of several parts per table, each part holding one kind of run (so a column is
    all null in one part and typed in another), plus a part with an error row."""
    dataset = tmp_path_factory.mktemp("schema") / "mixed"
    for kind in KINDS:
        with ResultStore(dataset) as store:  # one flush, one part per table, per kind
            store.append(_rows(kind, dataset))
    with ResultStore(dataset) as store:
        store.append({"runs": [{"run_id": "broken", "status": "error", "error": "boom"}]})
    return dataset


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_column_the_engine_writes_is_declared(kind: str, tmp_path: Path) -> None:
    """A metric added to the engine must be declared in sweep/schema.py with its type."""
    for table, rows in _rows(kind, tmp_path).items():
        produced = {key for row in rows for key in row}
        assert produced <= DECLARED_COLUMNS[table].keys(), (table, produced - DECLARED_COLUMNS[table].keys())


def test_parts_share_one_schema(mixed_dataset: Path) -> None:
    for table in TABLES:
        schemas = {pq.read_schema(path).remove_metadata() for path in part_files(mixed_dataset, table)}
        assert len(part_files(mixed_dataset, table)) >= 3 and len(schemas) == 1, table
        (schema,) = schemas
        assert schema.names == list(DECLARED_COLUMNS[table])


def test_pandas_pyarrow_duckdb_and_polars_read_a_mixed_dataset_as_it_is(mixed_dataset: Path) -> None:
    for table in TABLES:
        directory, glob = mixed_dataset / table, str(mixed_dataset / table / "*.parquet")
        rows = sum(pq.read_metadata(path).num_rows for path in part_files(mixed_dataset, table))
        assert len(pd.read_parquet(directory)) == rows
        assert ds.dataset(directory).to_table().num_rows == rows
        assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(rows,)]
        assert pl.read_parquet(glob).height == rows
    runs = pd.read_parquet(mixed_dataset / "runs")
    assert set(runs["network"].dropna()) == {"switch", "leaf_spine", "hierarchical", "dumbbell", "ring", "fat_tree"}
    spines = runs.set_index("network")["network.spines"]
    assert spines["leaf_spine"] == 4 and pd.isna(spines["switch"])


def test_integer_columns_read_as_int64_by_pandas_from_a_directory(mixed_dataset: Path) -> None:
    """`pd.read_parquet(dir)` (no options): every declared integer column is pandas' nullable `Int64`,
    flags `boolean`, even where a part holds nulls (the error row, a column one backend leaves null),
    because every part carries pandas' metadata; the other readers keep their own integer types."""
    nullable = {pa.int64(): "Int64", pa.bool_(): "boolean"}
    for table in TABLES:
        frame = pd.read_parquet(mixed_dataset / table)
        for column, kind in DECLARED_COLUMNS[table].items():
            if kind in nullable:
                assert str(frame[column].dtype) == nullable[kind], (table, column, frame[column].dtype)
        glob = str(mixed_dataset / table / "*.parquet")
        assert pl.read_parquet(glob).schema["run_id"] == pl.String
    runs = pd.read_parquet(mixed_dataset / "runs").set_index("run_id")
    assert runs.loc["broken", "retransmits"] is pd.NA and runs["network.npus"].notna().sum() == len(KINDS)
    assert ds.dataset(mixed_dataset / "runs").schema.field("retransmits").type == pa.int64()
    assert (str(duckdb.sql(f"select retransmits from read_parquet('{mixed_dataset}/runs/*.parquet')").types[0])
            == "BIGINT")


def test_every_table_reads_as_a_directory_when_nothing_filled_it(tmp_path: Path) -> None:
    """A run of raw flows with `engine.link_stats=none` (no collectives, layers or links rows): every
    table of the results contract still reads as a directory, empty where nothing was collected,
    with its declared columns, in all four readers."""
    config = compose_config([f"results_dir={tmp_path}", "name=few", "workload=incast", "workload.senders=2",
                             "workload.bytes_per_flow=20000"])
    with ResultStore(tmp_path / "few") as store:
        store.append(stored_rows(config, measure(config)))
    collected = {"runs": True, "collectives": False, "flows": True, "layers": False, "links": False}
    for table in TABLES:
        directory, glob = tmp_path / "few" / table, str(tmp_path / "few" / table / "*.parquet")
        frame = pd.read_parquet(directory)
        assert list(frame.columns) == list(DECLARED_COLUMNS[table]), table
        rows = len(frame)
        assert ds.dataset(directory).to_table().num_rows == rows
        assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(rows,)]
        assert pl.read_parquet(glob).height == rows
        assert (rows > 0) == collected[table], table
    assert str(pd.read_parquet(tmp_path / "few" / "links")["packets"].dtype) == "Int64"


def test_pandas_and_duckdb_agree_on_every_column_type(mixed_dataset: Path) -> None:
    """The same physical type, whoever reads it (an int64 config leaf written as `200` in one part
    and `1.5` in another was int64 to DuckDB and float64 to pandas)."""
    glob = str(mixed_dataset / "runs" / "*.parquet")
    relation = duckdb.sql(f"select * from read_parquet('{glob}')")
    duck_types = dict(zip(relation.columns, map(str, relation.types)))
    expected = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}
    assert duck_types == {name: expected[kind] for name, kind in DECLARED_COLUMNS["runs"].items()}
    frame = pd.read_parquet(mixed_dataset / "runs", dtype_backend="numpy_nullable")  # ints with nulls stay ints
    assert str(frame["tcp.min_rto_ms"].dtype) == "Float64" and duck_types["tcp.min_rto_ms"] == "DOUBLE"
    assert str(frame["network.npus"].dtype) == "Int64" and duck_types["network.npus"] == "BIGINT"


def test_an_earlier_versions_parts_are_brought_to_the_schema(tmp_path: Path) -> None:
    """Parts typed by their values (as before this version): a switch-only part has `network.spines`
    all null, another int64; `tcp.min_rto_ms` written as an integer. The next write harmonises them."""
    dataset = tmp_path / "old"
    (dataset / "runs").mkdir(parents=True)
    old_rows = [[{"run_id": "a", "status": "ok", "network.spines": None, "tcp.min_rto_ms": 200, "legacy": 1}],
                [{"run_id": "b", "status": "ok", "network.spines": 4, "tcp.min_rto_ms": 1.5}]]
    for index, rows in enumerate(old_rows):
        pq.write_table(pa.Table.from_pylist(rows),
                       dataset / "runs" / f"part-2026010{index}T000000000000Z-{index}.parquet")
    with pytest.raises(pa.ArrowException):  # what users met: pandas cannot read the directory
        pd.read_parquet(dataset / "runs")
    with ResultStore(dataset) as store:
        store.append({"runs": [{"run_id": "c", "status": "ok"}]})
    runs = pd.read_parquet(dataset / "runs")
    assert runs["run_id"].tolist() == ["a", "b", "c"]
    assert runs["tcp.min_rto_ms"].tolist()[:2] == [200.0, 1.5] and runs["legacy"].tolist()[0] == 1
    assert harmonise(dataset, "runs") == 0  # nothing left to do


def test_a_single_run_names_its_presets(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "sweep", "network=leaf_spine", "network.npus=8", "tcp=dctcp",
                           "workload=dlrm_small", "workload.iterations=1", "engine.backend=analytical",
                           f"results_dir={tmp_path}", "name=presets"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    runs = load_runs(tmp_path / "presets")
    assert runs.loc[0, list(PRESET_COLUMNS)].tolist() == ["leaf_spine", "dctcp", "default", "dlrm_small"]


def test_links_are_written_where_asked_and_read_alike_by_pandas_and_duckdb(mixed_dataset: Path) -> None:
    """Four kinds of run ask for the `links` table (packet, analytical, alpha_beta): one part each;
    the others (`engine.link_stats` none) and the failed run write no links part at all. DuckDB
    and pandas see the declared columns with the declared types."""
    assert len(part_files(mixed_dataset, "links")) == 4
    glob = str(mixed_dataset / "links" / "*.parquet")
    relation = duckdb.sql(f"select * from read_parquet('{glob}')")
    expected = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR"}
    assert dict(zip(relation.columns, map(str, relation.types))) == {
        name: expected[kind] for name, kind in DECLARED_COLUMNS["links"].items()}
    links = pd.read_parquet(mixed_dataset / "links")
    runs = pd.read_parquet(mixed_dataset / "runs").set_index("run_id")
    assert set(runs.loc[links["run_id"].unique(), "network"]) == {"switch", "leaf_spine", "hierarchical", "fat_tree"}
    # switch_ports on the leaf-spine (8 NPUs, 2 leaves, 4 spines): 8 ports to hosts + 2 x 4 x 2 uplink ports
    leaf_spine = runs.index[runs["network"] == "leaf_spine"][0]
    assert sorted(links.loc[links["run_id"] == leaf_spine, "kind"].value_counts().items()) == [
        ("leaf_uplink", 8), ("spine_downlink", 8), ("switch_port", 8)]
    by_backend = links.join(runs["engine.backend"], on="run_id").groupby("engine.backend")
    assert by_backend["packets"].count().to_dict() == {"alpha_beta": 0, "analytical": 0, "packet": 8 + 24}
    ((busiest,),) = duckdb.sql(f"select max(utilisation) from read_parquet('{glob}')").fetchall()
    assert 0 < busiest <= 1
