"""The metrics record of a `runs` row (`engine.metrics.RunMetrics`): filled field by field, a name
that is no column refused, the row holding what was filled, and the Parquet schema taking its
columns and types from the record's fields."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from engine.backends.base import BACKEND_COLUMNS
from engine.metrics import COLUMNS, RunMetrics
from sweep.schema import DECLARED_COLUMNS


def test_fill_refuses_a_name_that_is_no_column() -> None:
    metrics = RunMetrics()
    with pytest.raises(KeyError, match="'retransmissions' is no runs column"):
        metrics.fill({"retransmissions": 3})


def test_the_row_holds_what_was_filled_null_included() -> None:
    metrics = RunMetrics()
    metrics.fill({"timeouts": 2, "sim_time_s": 0.5})
    metrics.fill({"timeouts": None})  # a backend that does not model it: null, not absent
    assert metrics.row() == {"sim_time_s": 0.5, "timeouts": None}
    assert list(metrics.row()) == ["sim_time_s", "timeouts"]  # in the record's order


def test_the_runs_schema_declares_every_metric_with_its_fields_type() -> None:
    runs = DECLARED_COLUMNS["runs"]
    arrow = {"int | None": pa.int64(), "float | None": pa.float64()}
    for item in dataclasses.fields(RunMetrics):
        if item.name in COLUMNS:
            assert runs[item.name] == arrow[str(item.type)], item.name
    assert set(BACKEND_COLUMNS) <= set(COLUMNS)
    declared = list(runs)
    assert [column for column in declared if column in COLUMNS] == list(COLUMNS)  # one order
