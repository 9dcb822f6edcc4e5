"""The result store: tables of rows appended as Parquet part files, read back as one table.

Layout: `<dataset>/<table>/part-<UTC timestamp>-<uuid>.parquet`, one dataset per `name`
(`results/<name>/`), one directory per table (`runs`, `collectives`, `layers`, `flows`).
Each part is written to a hidden temporary file in the same directory, synced, then renamed with
`os.replace` (atomic on POSIX): a reader or a crash never sees a torn part, and a finished part is
never lost. Parts may differ in columns (a later engine adds metrics, a column is all-null in one
batch); `read_table` unifies them, and DuckDB reads them with `union_by_name=true`.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

PART_GLOB = "part-*.parquet"

# Integer and boolean columns read as pandas' nullable dtypes, so a null (a column a part lacks, a
# metric an error row has not) does not turn counts into floats.
_NULLABLE_DTYPES = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype(),
}


def _part_name() -> str:
    """A part file name that sorts by creation time and never collides between processes."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"part-{stamp}-{uuid.uuid4().hex}.parquet"


def write_part(table_dir: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write `rows` as one new Parquet part in `table_dir` (created if needed), atomically; return
    its path. Column types are inferred from the values; a column that is all None gets the null
    type, which `read_table` promotes to the type other parts give it."""
    table_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([dict(row) for row in rows])
    final_path = table_dir / _part_name()
    # A leading dot hides the temporary file from pyarrow datasets; the suffix hides it from globs.
    tmp_path = table_dir / f".{final_path.name}.tmp"
    try:
        with open(tmp_path, "wb") as file:
            pq.write_table(table, file)
            file.flush()
            os.fsync(file.fileno())  # the data is on disk before the name says the part is complete
        os.replace(tmp_path, final_path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return final_path


def part_files(dataset: str | os.PathLike[str], table: str) -> list[Path]:
    """The finished part files of `table` in `dataset`, oldest first."""
    return sorted((Path(dataset) / table).glob(PART_GLOB))


def read_table(dataset: str | os.PathLike[str], table: str,
               columns: Iterable[str] | None = None) -> pd.DataFrame:
    """All parts of `table` in `dataset` as one DataFrame (empty if there are none).

    Schemas are unified by column name: a column missing from a part is null there, a null-typed
    column takes the type of the other parts, and int64 and double meet as double. Integer and
    boolean columns use pandas' nullable dtypes (`Int64`, `boolean`). `columns` restricts the read
    to those columns (those a part lacks are null).
    """
    wanted = list(columns) if columns is not None else None
    tables = []
    for path in part_files(dataset, table):
        with pq.ParquetFile(path) as file:
            if wanted is None:
                tables.append(file.read())
                continue
            present = set(file.schema_arrow.names)
            part = file.read(columns=[name for name in wanted if name in present])
            rows = file.metadata.num_rows
        tables.append(pa.table({name: part[name] if name in present else pa.nulls(rows) for name in wanted}))
    if not tables:
        return pd.DataFrame(columns=wanted or [])
    unified = pa.concat_tables(tables, promote_options="permissive")
    return unified.to_pandas(types_mapper=_NULLABLE_DTYPES.get)


class ResultStore:
    """Buffered, append-only writer of one dataset (`results/<name>/`).

    `append` buffers rows by table and writes them out (one part per table) once `flush_rows` rows
    are buffered or `flush_interval_s` seconds have passed since the last write; `flush` (also
    called on leaving a `with` block) writes whatever is buffered.
    """

    def __init__(self, path: str | os.PathLike[str], flush_rows: int = 10_000,
                 flush_interval_s: float = 30.0) -> None:
        self.path = Path(path)
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self._buffer: dict[str, list[dict[str, Any]]] = {}
        self._buffered_rows = 0
        self._last_flush_s = time.monotonic()

    def append(self, rows_by_table: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Buffer rows (`{"runs": [...], "flows": [...]}`), flushing if the buffer is full or old."""
        for table, rows in rows_by_table.items():
            self._buffer.setdefault(table, []).extend(dict(row) for row in rows)
            self._buffered_rows += len(rows)
        if (self._buffered_rows >= self.flush_rows
                or time.monotonic() - self._last_flush_s >= self.flush_interval_s):
            self.flush()

    def flush(self) -> dict[str, Path]:
        """Write every buffered table as one part; return the new part path of each table."""
        written = {table: write_part(self.path / table, rows) for table, rows in self._buffer.items() if rows}
        self._buffer.clear()
        self._buffered_rows = 0
        self._last_flush_s = time.monotonic()
        return written

    def completed_run_ids(self) -> set[str]:
        """run_ids with status `ok`, on disk or still buffered: the runs a resume skips."""
        runs = read_table(self.path, "runs", columns=["run_id", "status"])
        done = set(runs.loc[runs["status"] == "ok", "run_id"])
        done.update(row["run_id"] for row in self._buffer.get("runs", []) if row.get("status") == "ok")
        return done

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.flush()
