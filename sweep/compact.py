"""Compaction: merge the many small Parquet parts of a dataset into one part per table.

`python -m sweep.compact results/<name> [--min-parts N]` rewrites each table of the dataset that has
at least `--min-parts` parts (default 2) as one part holding what `sweep.load_table` returns: every
run once, its newest attempt (older attempts of a rerun run, and rows a newer failed attempt hides,
are dropped). Reading a dataset costs about one Parquet open per part, so a sweep that wrote
thousands of parts (`hydra.launcher.flush_rows=1`, many resumed sweeps) reads much faster after.

Crash safety, per table: the merged part is written to a hidden temporary file, synced and renamed
(atomic, as every part), named with the creation stamp of the newest part it merges, so it sorts
after its inputs and before any part a sweep writes meanwhile; only then are the inputs removed.
A crash in between leaves the inputs and the merged part side by side: every row twice, identical,
which `load_runs` and `load_table` read once (the newest attempt of a run is the same rows in
both). Tables other than `runs` are compacted first, `runs` last, as a sweep writes them. Parts
written while compaction runs are left alone. A part that cannot be read stops the compaction of
its table and leaves that table as it was.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .schema import conform
from .store import current_schema, load_table, part_files, write_atomically

TABLES_LAST = "runs"


def _merged_name(newest_input: Path) -> str:
    """`part-<stamp of the newest input>-<new uuid>.parquet`: sorts with its inputs' stamps."""
    stamp = newest_input.name.split("-")[1]
    return f"part-{stamp}-{uuid.uuid4().hex}.parquet"


def _newest_attempts(table: str, parts: list[pa.Table], error_run_ids: set[str]) -> pa.Table:
    """The rows `sweep.load_table` keeps, from `parts` (oldest first), in their stored order."""
    index = pa.array([i for i, part in enumerate(parts) for _ in range(part.num_rows)], pa.int64())
    merged = pa.concat_tables(parts, promote_options="permissive")
    keys = pd.DataFrame({"run_id": merged["run_id"].to_pandas(), "part": index.to_pandas()})
    if table == "runs":  # rows are in part order, oldest first: the last row of a run is its newest
        keep = keys.index[~keys.duplicated("run_id", keep="last")]
    else:
        newest = keys.groupby("run_id")["part"].transform("max")
        mask = (keys["part"] == newest) & ~keys["run_id"].isin(error_run_ids)
        keep = keys.index[mask]
    return merged.take(pa.array(keep.to_numpy(), pa.int64()))


def compact_table(dataset: str | os.PathLike[str], table: str, error_run_ids: set[str],
                  min_parts: int = 2) -> tuple[int, int]:
    """Merge the parts of one table (if it has at least `min_parts`); return (parts before, rows
    kept), or (parts, -1) if it was left alone."""
    inputs = part_files(dataset, table)
    if len(inputs) < max(min_parts, 1):
        return len(inputs), -1
    parts = [pq.read_table(path) for path in inputs]
    merged = _newest_attempts(table, parts, error_run_ids)
    merged = conform(merged, current_schema(table, merged.schema))
    write_atomically(inputs[-1].with_name(_merged_name(inputs[-1])), merged)
    for path in inputs:  # the merged part is on disk: its inputs are now duplicates
        path.unlink(missing_ok=True)
    return len(inputs), merged.num_rows


def compact(dataset: str | os.PathLike[str], min_parts: int = 2) -> dict[str, tuple[int, int]]:
    """Compact every table of `dataset` (see the module docstring); {table: (parts before, rows kept)}."""
    root = Path(dataset)
    tables = sorted((path.name for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")),
                    key=lambda name: (name == TABLES_LAST, name))
    # runs whose newest attempt failed: their older rows in other tables are not theirs (load_table)
    runs = load_table(root, "runs", ["status"]) if TABLES_LAST in tables else pd.DataFrame(columns=["run_id", "status"])
    errors = set(runs.loc[runs["status"] == "error", "run_id"])
    result = {}
    for table in tables:
        try:
            result[table] = compact_table(root, table, errors, min_parts)
        except (OSError, pa.ArrowException) as exc:  # a part that cannot be read: leave the table be
            print(f"compact: {root / table}: left as it was: {exc}", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.compact", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", help="results/<name> directories")
    parser.add_argument("--min-parts", type=int, default=2, help="compact a table with at least this many parts")
    args = parser.parse_args(argv)
    status = 0
    for dataset in args.datasets:
        if not Path(dataset).is_dir():
            print(f"error: {dataset} is not a dataset directory", file=sys.stderr)
            status = 2
            continue
        start = time.perf_counter()
        for table, (before, kept) in compact(dataset, args.min_parts).items():
            what = f"{before} parts -> 1 ({kept} rows)" if kept >= 0 else f"{before} parts, left as they are"
            print(f"{Path(dataset) / table}: {what}")
        print(f"compacted {dataset} in {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
