"""The result store: tables of rows appended as Parquet part files, read back as one table.

Layout: `<dataset>/<table>/part-<UTC timestamp>-<uuid>.parquet`, one dataset per `name`
(`results/<name>/`), one directory per table (`runs`, `collectives`, `layers`, `flows`, `links`).
Each part is written to a hidden temporary file in the same directory, synced, then renamed with
`os.replace` (atomic on POSIX): a reader or a crash never sees a torn part, and a finished part is
never lost. Every part of a table has one schema (`sweep.schema`: the declared columns, typed), so
pandas, pyarrow datasets, DuckDB and Polars read a table's directory as it is; parts written by an
earlier version are brought to the current schema (`harmonise`) the first time a store writes the
table. A run stored more than once (rerun, or failed then run again) has rows from each attempt;
`load_runs` and `load_table` return each run once, its newest attempt.

A part that cannot be read (truncated, garbage: a disk or copy fault, never a crash of this code) is
moved to `<dataset>/quarantine/<table>/` with one warning line on stderr the first time a read
meets it, so it never breaks a later read and is never deleted. The parts of one flush share their
file name across tables; a run whose `runs` row sits in a part named like a quarantined part has
lost rows, so `ResultStore.completed_run_ids` does not count it done and a resume runs it again.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .rows import ColumnRows
from .schema import DECLARED_COLUMNS, conform, declared_schema, rows_to_table

PART_GLOB = "part-*.parquet"
QUARANTINE = "quarantine"  # `<dataset>/quarantine/<table>/`: parts that could not be read
_PART = "__part"  # a column `load_table` adds while reading: the index of the row's part

# Integer and boolean columns read as pandas' nullable dtypes, so a null (a column a part lacks, a
# metric an error row has not) does not turn counts into floats.
_NULLABLE_DTYPES = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype(),
}


def _part_name() -> str:
    """A part file name that sorts by creation time and never collides between processes."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"part-{stamp}-{uuid.uuid4().hex}.parquet"


def write_part(table_dir: Path, rows: Sequence[Mapping[str, Any]] | pa.Table,
               name: str | None = None) -> Path:
    """Write `rows` (row dicts, or an Arrow table) as one new Parquet part in `table_dir` (created
    if needed), atomically; return its path (named `name`, or a new unique part name). The part
    has the schema `sweep.schema` gives its table (the directory's name): every declared column,
    typed, then any other column a row has."""
    return write_atomically(table_dir / (name or _part_name()), table_of(table_dir.name, rows))


def table_of(table: str, rows: Sequence[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """Row dicts, or an Arrow table, of `table` as an Arrow table of its schema (`sweep.schema`)."""
    if isinstance(rows, pa.Table):
        return conform(rows, current_schema(table, rows.schema))
    return rows_to_table(table, list(rows))


def with_pandas_metadata(table: pa.Table) -> pa.Table:
    """`table` with pandas' metadata saying that its integer and boolean columns are pandas' nullable
    dtypes (`Int64`, `boolean`): `pd.read_parquet` of the part, or of its whole table directory
    (pyarrow takes a directory's schema from a part), keeps them even where a column holds a null
    (without it they come back as float64). pyarrow, DuckDB and Polars do not read it."""
    return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                          **_pandas_metadata(table.schema.remove_metadata())})


@functools.lru_cache(maxsize=64)
def _pandas_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The pandas metadata of `schema` (without metadata of its own) read as nullable dtypes: it
    depends on the schema alone, and a sweep writes parts of a few schemas many times."""
    empty = schema.empty_table().to_pandas(types_mapper=_NULLABLE_DTYPES.get)
    return pa.Table.from_pandas(empty, schema=schema, preserve_index=False).schema.metadata


def write_atomically(path: Path, table: pa.Table) -> Path:
    """Write `table` (with `with_pandas_metadata`) to a hidden temporary file beside `path`, sync it,
    rename it to `path`."""
    table = with_pandas_metadata(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A leading dot hides the temporary file from pyarrow datasets; the suffix hides it from globs;
    # the uuid keeps two writers of one path (see `harmonise`) off each other's temporary file.
    tmp_path = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp_path, "wb") as file:
            pq.write_table(table, file)
            file.flush()
            os.fsync(file.fileno())  # the data is on disk before the name says the part is complete
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def current_schema(table: str, schema: pa.Schema) -> pa.Schema:
    """What `schema`, of a part of `table` written by any version, becomes in this version: the
    declared columns and types first, then the part's other columns as they are."""
    declared = declared_schema(table)
    return pa.schema([*declared, *(field for field in schema if field.name not in declared.names)])


def harmonise(dataset: str | os.PathLike[str], table: str) -> int:
    """Rewrite, each atomically under its own name, the parts of `table` whose schema is not the
    table's (`sweep.schema`): parts written by an earlier version (a column declared since, a
    type declared since, no pandas metadata), so every reader sees one schema. Returns how many
    were rewritten."""
    rewritten = 0
    for path in readable_parts(dataset, table):
        try:
            current = pq.read_schema(path)
        except FileNotFoundError:  # quarantined or compacted meanwhile
            continue
        target = current_schema(table, current)
        if current.remove_metadata().equals(target) and b"pandas" in (current.metadata or {}):
            continue
        try:
            part = conform(pq.read_table(path), target)
        except FileNotFoundError:
            continue
        write_atomically(path, part)
        rewritten += 1
    return rewritten


def part_files(dataset: str | os.PathLike[str], table: str) -> list[Path]:
    """The finished part files of `table` in `dataset`, oldest first."""
    return sorted((Path(dataset) / table).glob(PART_GLOB))


def _corrupt(exc: BaseException) -> bool:
    """Whether an error reading a part says the part itself is bad (pyarrow's: no errno), not the
    system (a permission, too many open files: an OSError with an errno, raised on)."""
    return isinstance(exc, pa.ArrowException) or (isinstance(exc, OSError) and exc.errno is None)


def quarantine(path: Path, reason: BaseException | str) -> None:
    """Move the unreadable part `path` (`<dataset>/<table>/part-*.parquet`) to
    `<dataset>/quarantine/<table>/`, keeping its name, and say so in one line on stderr. Another
    reader may have moved it first: then nothing is done. Where the dataset cannot be written (a
    read-only copy), the part stays and the warning says it was skipped; every read warns again."""
    target_dir = path.parent.parent / QUARANTINE / path.parent.name
    first_line = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        os.replace(path, target_dir / path.name)
    except FileNotFoundError:  # quarantined by a concurrent reader
        return
    except OSError as exc:  # a read-only dataset: leave the part, skip it in this read
        print(f"warning: {path} is not a readable Parquet part ({first_line}); skipped (cannot move it "
              f"to {target_dir}/: {exc.strerror})", file=sys.stderr)
        return
    print(f"warning: {path} is not a readable Parquet part ({first_line}); moved to {target_dir}/",
          file=sys.stderr)


def quarantined_parts(dataset: str | os.PathLike[str]) -> list[Path]:
    """Every part moved aside by `quarantine`, over all tables."""
    return sorted((Path(dataset) / QUARANTINE).glob(f"*/{PART_GLOB}"))


def readable_parts(dataset: str | os.PathLike[str], table: str) -> list[Path]:
    """`part_files` whose Parquet footer reads; the others are quarantined (see `quarantine`)."""
    parts = []
    for path in part_files(dataset, table):
        try:
            pq.read_metadata(path)
        except FileNotFoundError:  # quarantined by a concurrent reader meanwhile
            continue
        except (OSError, pa.ArrowException) as exc:
            if not _corrupt(exc):
                raise
            quarantine(path, exc)
            continue
        parts.append(path)
    return parts


def read_table(dataset: str | os.PathLike[str], table: str,
               columns: Iterable[str] | None = None) -> pd.DataFrame:
    """All parts of `table` in `dataset` as one DataFrame (empty if there are none).

    Schemas are unified by column name: a column missing from a part is null there, a null-typed
    column takes the type of the other parts, and int64 and double meet as double. Integer and
    boolean columns use pandas' nullable dtypes (`Int64`, `boolean`). `columns` restricts the read
    to those columns (those a part lacks are null).
    """
    wanted = list(columns) if columns is not None else None
    tables = _read_parts(dataset, table, wanted)
    if not tables:
        return pd.DataFrame(columns=wanted or [])
    return _to_pandas(tables)


def _read_parts(dataset: str | os.PathLike[str], table: str, wanted: list[str] | None) -> list[pa.Table]:
    """Each part of `table`, oldest first, restricted to `wanted` columns (null where a part lacks one)."""
    tables = []
    for path in part_files(dataset, table):
        try:
            with pq.ParquetFile(path) as file:
                if wanted is None:
                    tables.append(file.read())
                    continue
                present = set(file.schema_arrow.names)
                part = file.read(columns=[name for name in wanted if name in present])
                rows = file.metadata.num_rows
        except FileNotFoundError:  # quarantined by a concurrent reader meanwhile
            continue
        except (OSError, pa.ArrowException) as exc:  # truncated or garbage: never fail the read
            if not _corrupt(exc):
                raise
            quarantine(path, exc)
            continue
        tables.append(pa.table({name: part[name] if name in present else pa.nulls(rows) for name in wanted}))
    return tables


def _to_pandas(tables: list[pa.Table]) -> pd.DataFrame:
    """Parts unified by column name (see `read_table`) as one DataFrame with nullable int/bool dtypes."""
    unified = pa.concat_tables(tables, promote_options="permissive")
    return unified.to_pandas(types_mapper=_NULLABLE_DTYPES.get)


def arrow_dataset(dataset: str | os.PathLike[str], table: str) -> ds.Dataset:
    """`table` of `dataset` as one lazy `pyarrow.dataset.Dataset` (filters and column projections
    read only what they need), with the unified schema of all its parts: pyarrow's own discovery
    takes the first part's schema, which lacks columns added later and types an all-null column as
    null. Unified as `read_table` does (int64 and double meet as double)."""
    parts = readable_parts(dataset, table)  # footers only: a part corrupt inside fails the scan
    schemas = [pq.read_schema(path) for path in parts]
    schema = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
    return ds.dataset([str(path) for path in parts], schema=schema, format="parquet")


_PANDAS_DTYPES = {pa.int64(): "Int64", pa.float64(): "float64", pa.bool_(): "boolean"}


def load_runs(dataset: str | os.PathLike[str]) -> pd.DataFrame:
    """The `runs` table of `dataset` with one row per `run_id` (see `load_table`), for notebooks.

    Columns have their declared types (`sweep.schema`) even where a part written by an earlier
    version, or the whole dataset, holds only nulls: integers as nullable `Int64`, reals `float64`,
    flags `boolean`, `started_at` a UTC `datetime64`; text stays text and list-valued config leaves
    stay JSON strings.
    """
    runs = load_table(dataset, "runs")
    for column, kind in DECLARED_COLUMNS["runs"].items():
        dtype = _PANDAS_DTYPES.get(kind)
        if dtype is not None and column in runs.columns and runs[column].dtype != dtype:
            runs[column] = runs[column].astype(dtype)
    return runs


def load_table(dataset: str | os.PathLike[str], table: str,
               columns: Iterable[str] | None = None) -> pd.DataFrame:
    """`table` of `dataset` with every run once: a run stored more than once (rerun with
    `+force=true`, failed and then run again, or two sweeps writing one dataset at once) keeps only
    its newest attempt: the one written last, in the newest part holding its `run_id`.

    Parts sort by the time they were written, and the parts of one flush share their name across
    tables, so every table agrees on which attempt is newest: `runs` keeps a run's row from its
    newest part (its last row there); other tables keep a run's rows from the newest part holding
    that run_id, which is where its newest attempt wrote them, and none at all if the newest `runs`
    row of that run_id is an error (a failed attempt writes no rows there, so older rows are not
    its rows). `started_at` of `runs` is a UTC `datetime64`. `columns` restricts the columns
    returned (`run_id` is always read).
    """
    wanted = None if columns is None else list(dict.fromkeys(["run_id", *columns]))
    parts = _read_parts(dataset, table, wanted)
    if not parts:
        return pd.DataFrame(columns=wanted or ["run_id"])
    # the position of each row's part, oldest first, tells the attempts of one run apart
    frame = _to_pandas([part.append_column(_PART, pa.array([index] * part.num_rows, pa.int64()))
                        for index, part in enumerate(parts)])
    if table == "runs":
        frame = frame.drop_duplicates("run_id", keep="last")  # rows are in part order, oldest first
        if "started_at" in frame.columns:
            frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True, format="ISO8601")
    else:
        newest_part = frame.groupby("run_id")[_PART].transform("max")
        frame = frame[frame[_PART] == newest_part]
        runs = load_table(dataset, "runs", ["status"])
        frame = frame[~frame["run_id"].isin(runs.loc[runs["status"] == "error", "run_id"])]
    frame = frame.drop(columns=_PART).reset_index(drop=True)
    return frame if wanted is None else frame[wanted]


class ResultStore:
    """Buffered, append-only writer of one dataset (`results/<name>/`).

    `append` buffers rows by table (lists of row dicts, or `ColumnRows`, buffered as Arrow tables)
    and writes them out (one part per table) once `flush_rows` rows are buffered or
    `flush_interval_s` seconds have passed since the last write (`flush_if_due` checks the same
    between appends); `flush` (also called on leaving a `with` block) writes whatever is buffered.
    `runs` is written last: a run counts as done (`completed_run_ids`) only once its other rows are
    on disk, so a crash in the middle of a flush never hides missing rows.
    """

    def __init__(self, path: str | os.PathLike[str], flush_rows: int = 10_000,
                 flush_interval_s: float = 30.0) -> None:
        self.path = Path(path)
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self._buffer: dict[str, list[dict[str, Any]]] = {}
        self._column_buffer: dict[str, list[pa.Table]] = {}  # tables appended as `ColumnRows`
        self._buffered_rows = 0
        self._last_flush_s = time.monotonic()
        self._harmonised: set[str] = set()  # tables whose existing parts `harmonise` has checked

    def append(self, rows_by_table: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Buffer rows (`{"runs": [...], "flows": [...]}`), flushing if the buffer is full or old."""
        for table, rows in rows_by_table.items():
            if isinstance(rows, ColumnRows):
                self._column_buffer.setdefault(table, []).append(rows.arrow())
            else:
                self._buffer.setdefault(table, []).extend(dict(row) for row in rows)
            self._buffered_rows += len(rows)
        self.flush_if_due()

    def flush_if_due(self) -> None:
        """Flush if `flush_rows` rows are buffered or the last write is `flush_interval_s` old."""
        if self._buffered_rows and (self._buffered_rows >= self.flush_rows
                                    or time.monotonic() - self._last_flush_s >= self.flush_interval_s):
            self.flush()

    def flush(self) -> dict[str, Path]:
        """Write every buffered table as one part, `runs` last; return the new part of each table.
        A table leaves the buffer as soon as its part is written, so a flush interrupted half-way
        (Ctrl-C) and called again writes each row once."""
        written = {}
        name = _part_name()  # one name for the parts of this flush: see `completed_run_ids`
        tables = self._buffer.keys() | self._column_buffer.keys()
        if self._buffered_rows:  # a table of the results contract nothing has filled yet: an empty part
            tables |= {table for table in DECLARED_COLUMNS if not (self.path / table).is_dir()}
        for table in sorted(tables, key=lambda name: (name == "runs", name)):  # runs last (False sorts first)
            rows = self._buffer.get(table, [])
            column_parts = self._column_buffer.get(table, [])
            batch: Sequence[Mapping[str, Any]] | pa.Table = rows
            if column_parts:  # one table of them all, then one conversion to the schema
                parts = ([rows_to_table(table, rows)] if rows else []) + column_parts
                batch = table_of(table, pa.concat_tables(parts, promote_options="permissive"))
            if len(batch) or not (self.path / table).is_dir():
                if table not in self._harmonised:  # an earlier version's parts: to this schema, once
                    harmonise(self.path, table)
                    self._harmonised.add(table)
                written[table] = write_part(self.path / table, batch, name)
                self._buffered_rows -= len(batch)
            self._buffer.pop(table, None)
            self._column_buffer.pop(table, None)
        self._last_flush_s = time.monotonic()
        return written

    def completed_run_ids(self) -> set[str]:
        """run_ids with status `ok`, on disk or still buffered: the runs a resume skips. Every
        table's parts are checked first (unreadable ones are quarantined); a run whose newest
        `runs` row was written by a flush that lost a part of another table is not done: it has
        lost rows (all runs of that flush count as such: a part's run_ids cannot be read back)."""
        tables = [entry.name for entry in self.path.iterdir()
                  if entry.is_dir() and entry.name not in (QUARANTINE, "runs", "report")] \
            if self.path.is_dir() else []
        for table in tables:
            readable_parts(self.path, table)
        lost = {path.name for path in quarantined_parts(self.path) if path.parent.name != "runs"}
        runs = read_table(self.path, "runs", columns=["run_id", "status"])
        if lost:
            runs = runs[~runs["run_id"].isin(self._runs_newest_in(lost))]
        done = set(runs.loc[runs["status"] == "ok", "run_id"])
        done.update(row["run_id"] for row in self._buffer.get("runs", []) if row.get("status") == "ok")
        return done

    def _runs_newest_in(self, part_names: set[str]) -> set[str]:
        """run_ids whose newest `runs` row (the one in the newest part holding the run, as in
        `load_table`) is in a `runs` part with one of these file names."""
        newest_part: dict[str, str] = {}
        for path in part_files(self.path, "runs"):  # oldest first: a later part overwrites
            try:
                run_ids = pq.read_table(path, columns=["run_id"])["run_id"].to_pylist()
            except (OSError, pa.ArrowException):  # quarantined by the next read
                continue
            newest_part.update(dict.fromkeys(run_ids, path.name))
        return {run_id for run_id, name in newest_part.items() if name in part_names}

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.flush()
