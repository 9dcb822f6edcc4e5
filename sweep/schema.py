"""One Arrow schema per result table, so every Parquet part of a table has the same columns, in the
same order, with the same types: `pd.read_parquet(dir)`, `pyarrow.dataset`, DuckDB (which binds the
files of a glob by position unless told `union_by_name`) and Polars read a dataset directory as it is.

Config leaves take the type the engine declares for them (`engine.config`'s dataclasses: a `float |
None` leaf is float64 even in a part where every value is null or was written `200`); list-valued
leaves are JSON text. The engine's metrics take the types `engine.metrics.RunMetrics` declares; the
sweep's provenance columns are listed here; a test runs every workload type on every backend and
checks each column it produces is declared. A column nobody declared (a test's, a later version's)
is kept after the declared ones, with the type its values give it.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any, Mapping, Sequence

import pyarrow as pa

from engine.config import SECTIONS, section_classes
from engine.metrics import COLUMN_TYPES

from .runner import PRESET_COLUMNS

_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
_INT, _FLOAT, _TEXT = pa.int64(), pa.float64(), pa.string()

# The sweep's own keys, which are no part of the engine's config but are in every run's config.
_SWEEP_LEAVES = {"name": _TEXT, "results_dir": _TEXT, "ray.address": _TEXT, "ray.num_cpus": _INT,
                 "replicate.until_ci_pct": _FLOAT, "replicate.metric": _TEXT, "replicate.min_seeds": _INT,
                 "replicate.max_seeds": _INT}

# What the engine measures for a run: the fields of `engine.metrics.RunMetrics`, typed as declared there.
_RUN_METRICS = {column: _ARROW_TYPES[kind] for column, kind in COLUMN_TYPES.items()}
# A two-fidelity sweep (`sweep.fidelity`): the grid point a run belongs to (its config but
# `engine.backend`: shared by the screening and the refined run) and why a point was refined.
_FIDELITY = {"point_id": _TEXT, "refine_reason": _TEXT}
# Where and from what a row came (sweep.runner, sweep.cluster).
_PROVENANCE = {"repro": _TEXT, "engine_version": _TEXT, "git_commit": _TEXT, "started_at": _TEXT,
               "worker_node": _TEXT, "worker": _TEXT, "attempt": _INT}
# What a run held and reserved where it ran (sweep.memory; null on a row made where no run ran).
_MEMORY = {"peak_memory_mb": _FLOAT, "reserved_memory_mb": _FLOAT}


def config_leaf_types() -> dict[str, pa.DataType]:
    """Every config leaf of a run as flattened in the `runs` table, with its Arrow type, in the
    engine's declaration order (seed, engine.*, network.*, tcp.*, system.*, workload.*; a section's
    variants in the order of their registry), then the sweep's own keys."""
    leaves: dict[str, pa.DataType] = {"seed": _INT}
    for section in SECTIONS:
        for cls in section_classes(section):  # a key of several variants has one type in all of them
            for leaf in fields(cls):
                kind = str(leaf.type).replace(" | None", "")  # annotations are strings ("float | None")
                leaves.setdefault(f"{section}.{leaf.name}", _ARROW_TYPES.get(kind, _TEXT))  # lists: JSON text
    return {**leaves, **_SWEEP_LEAVES}


def _declared() -> dict[str, dict[str, pa.DataType]]:
    runs = {"run_id": _TEXT, **_FIDELITY, "status": _TEXT, "error": _TEXT, **dict.fromkeys(PRESET_COLUMNS, _TEXT),
            **config_leaf_types(), **_RUN_METRICS, **_PROVENANCE, **_MEMORY}
    flows = {"run_id": _TEXT, "flow_id": _INT, "src": _INT, "dst": _INT, "bytes": _INT, "start_s": _FLOAT,
             "end_s": _FLOAT, "fct_s": _FLOAT, "goodput_gbps": _FLOAT, "retransmits": _INT, "timeouts": _INT,
             "ecn_marks": _INT}
    collectives = {"run_id": _TEXT, "iteration": _INT, "layer": _TEXT, "op": _TEXT, "bytes": _INT,
                   "start_s": _FLOAT, "end_s": _FLOAT, "duration_s": _FLOAT, "exposed_s": _FLOAT}
    layers = {"run_id": _TEXT, "iteration": _INT, "layer": _TEXT, **dict.fromkeys(
        ("fwd_compute_s", "ig_compute_s", "wg_compute_s", "fwd_exposed_comm_s", "wg_exposed_comm_s",
         "ig_exposed_comm_s"), _FLOAT)}
    links = {"run_id": _TEXT, "link": _TEXT, "kind": _TEXT, "src": _TEXT, "dst": _TEXT, "gbps": _FLOAT,
             "bytes": _INT, "packets": _INT, "drops": _INT, "ecn_marks": _INT, "max_queue_kb": _FLOAT,
             "utilisation": _FLOAT, "pause_frames": _INT, "paused_s": _FLOAT}
    return {"runs": runs, "flows": flows, "collectives": collectives, "layers": layers, "links": links}


DECLARED_COLUMNS: dict[str, dict[str, pa.DataType]] = _declared()


def numeric_runs_columns() -> list[str]:
    """The `runs` columns that hold numbers: what a search or a replicated sweep can measure a run by."""
    return [column for column, kind in DECLARED_COLUMNS["runs"].items()
            if pa.types.is_integer(kind) or pa.types.is_floating(kind)]


def declared_schema(table: str) -> pa.Schema:
    """The declared columns of `table`, in order (empty for a table nobody declared)."""
    return pa.schema(list(DECLARED_COLUMNS.get(table, {}).items()))


def rows_to_table(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """`rows` of `table` as an Arrow table of its schema: the declared columns (all of them,
    whether the rows have them or not), then any other column the rows have, in sorted order,
    typed by its values."""
    declared = declared_schema(table)
    extra = sorted({key for row in rows for key in row} - set(declared.names))
    columns = [*declared.names, *extra]
    inferred = pa.Table.from_pylist([{column: row.get(column) for column in columns} for row in rows])
    return conform(inferred, pa.schema([*declared, *(inferred.schema.field(name) for name in extra)]))


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `schema`, in its order and types (a column it lacks is
    all null). A column whose values do not fit their declared type (0.5 in an integer column:
    a metric declared wrongly) keeps its own type, with a warning on stderr: a row is never lost
    to its schema."""
    fields, columns = [], []
    for field in schema:
        if field.name not in table.column_names:
            fields.append(field)
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table[field.name]
        try:
            column = column.cast(field.type)  # a safe cast: raises rather than truncate
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            print(f"warning: column {field.name} holds values that are not {field.type} ({str(exc).splitlines()[0]}); "
                  f"kept as {column.type}", file=sys.stderr)
            field = field.with_type(column.type)
        fields.append(field)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
