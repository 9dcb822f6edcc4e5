"""What a run sends back from where it ran, and how the flows table travels: light enough for a
Ray worker (no pandas; NumPy and pyarrow only where rows are stored).

`RunResult` is one run's outcome: the values of its `runs` row that only running it gives, and the
rows of the other tables. `sweep.runner.stored_rows` (the one place a runs row is built) turns
it, with the run's config, into the rows the store writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import pyarrow as pa

# Rows by table, as the store takes them: `runs` one row; `flows` a `ColumnRows`; the others row dicts.
TableRows = dict[str, Sequence[Mapping[str, Any]]]


class ColumnRows(Sequence[dict[str, Any]]):
    """The rows of one table kept as columns: arrays of one type each (a float column holds NaN
    where the row has None), plus `constants`, columns of one value (run_id). A sequence of row
    dicts for whatever reads rows; `arrow()` for the store, with no dict per row. The engine gives
    the flows table so (`engine.run(config, flow_columns=True)`): a DLRM iteration on 1,024 NPUs
    has 16.8 million flows rows, whose dicts would not fit in memory."""

    def __init__(self, columns: Mapping[str, Sequence[Any]], constants: Mapping[str, Any]) -> None:
        self.columns = dict(columns)
        self.constants = dict(constants)
        self._length = len(next(iter(self.columns.values()))) if self.columns else 0

    def __len__(self) -> int:
        return self._length

    def _row(self, index: int) -> dict[str, Any]:
        row = dict(self.constants)
        for name, column in self.columns.items():
            value = column[index]
            row[name] = None if value != value else value  # NaN != NaN: a missing value
        return row

    def __getitem__(self, index: Any) -> Any:  # an int gives a row, a slice a list of rows
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(self._length))]
        if not -self._length <= index < self._length:
            raise IndexError(index)
        return self._row(index % self._length)

    def arrow(self) -> pa.Table:
        """The rows as an Arrow table: constants first, then the columns (NaN as null)."""
        import numpy as np  # noqa: PLC0415 - where rows are stored, not on the worker that made them
        import pyarrow as pa  # noqa: PLC0415

        arrays = {name: pa.repeat(pa.scalar(value), self._length) for name, value in self.constants.items()}
        for name, column in self.columns.items():
            values = np.asarray(column)  # a typed array's buffer, not copied
            arrays[name] = pa.array(values, from_pandas=values.dtype.kind == "f")  # NaN -> null
        return pa.table(arrays)


@dataclass
class RunResult:
    """The outcome of one run, as it comes back from where it ran.

    `measured`: the values of its runs row that only running it gives: `status`, `error`, the
    engine's metrics, `wall_s`, `started_at`, `engine_version`, `git_commit`, and, where Ray ran
    it, `worker_node`, `worker` and `attempt`. `tables`: the rows of the other tables
    (`collectives`, `layers`, `links`: row dicts; `flows`: a `ColumnRows`), without `run_id`; none
    for a run that failed. What the driver knows already (the config, its run_id, the presets) does
    not travel: `sweep.runner.stored_rows` adds it.
    """

    measured: dict[str, Any]
    tables: dict[str, Sequence[dict[str, Any]]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """`ok`, `error` or `timeout`."""
        return str(self.measured["status"])
