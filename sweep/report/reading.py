"""Reading a dataset for the report: every table, each run once, with the per-run columns the report
derives (the exposed-communication breakdown and when the last flow finished)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ..store import load_runs, load_table, read_table, readable_parts

MAX_FLOW_ROWS = 5_000_000  # a larger flows table is not read (gigabytes): its distributions are left out
# Exposed communication per iteration by what was waited for (see `text.BREAKDOWN_DEFINITION`).
EXPOSED_COLUMNS = ("exposed_all_to_all_s", "exposed_all_reduce_s", "exposed_other_s")
# Columns of the tables (DESIGN.md) the report reads; a dataset may lack some (a `flows` dataset has
# no training columns, a dataset of failed runs no measurements): they read as null.
RUNS_COLUMNS = {
    **{column: "float64" for column in (
        "iteration_time_s", "compute_s", "comm_s", "exposed_comm_s", "all_to_all_s", "all_reduce_s",
        "sim_time_s", "mean_fct_s", "max_fct_s", "max_queue_kb", "wall_s")},
    **{column: "Int64" for column in (
        "iterations_done", "flows", "flows_completed", "retransmits", "timeouts", "drops", "ecn_marks")},
    "error": "object", "repro": "object",
}
LAYERS_COLUMNS = ["iteration", "layer", "fwd_compute_s", "ig_compute_s", "wg_compute_s", "fwd_exposed_comm_s",
                  "wg_exposed_comm_s", "ig_exposed_comm_s"]
LINKS_COLUMNS = ["link", "kind", "gbps", "bytes", "utilisation", "drops", "ecn_marks", "max_queue_kb"]
FLOW_COLUMNS = ["end_s", "fct_s", "timeouts"]


class ReportError(Exception):
    """A dataset that cannot be reported on: missing, or without any run."""


@dataclass
class Dataset:
    """One dataset's tables, each run once, with per-run columns the report derives."""

    path: Path
    runs: pd.DataFrame
    collectives: pd.DataFrame
    layers: pd.DataFrame
    flows: pd.DataFrame
    links: pd.DataFrame  # the `links` table (`engine.link_stats`); empty when no run asked for it
    rows_read: int  # runs rows on disk, older attempts of a run included
    flows_unread: int  # rows of the flows table left unread (more than MAX_FLOW_ROWS), or 0

    @property
    def name(self) -> str:
        """The dataset's folder name (`quickstart`)."""
        return self.path.resolve().name


def read_dataset(path: str | os.PathLike[str]) -> Dataset:
    """All tables of the dataset at `path` (each run once), with the exposed-communication breakdown
    (`EXPOSED_COLUMNS` and `unaccounted_s`) and `last_flow_end_s` (when the last flow of a run
    finished) added to the runs; a message's `timeouts` is null where its run counted none (the fluid
    backends). Raises `ReportError` if there is no dataset or no run."""
    path = Path(path)
    if not (path / "runs").is_dir():
        raise ReportError(f"{path} is not a dataset: there is no {path / 'runs'}/ (run a sweep first)")
    runs = load_runs(path)
    if runs.empty:
        raise ReportError(f"{path / 'runs'}/ holds no runs")
    for column, dtype in RUNS_COLUMNS.items():  # a flows-only dataset has no training columns, ...
        if column not in runs:
            runs[column] = pd.Series(pd.NA if dtype == "Int64" else np.nan, index=runs.index, dtype=dtype)
    layers = load_table(path, "layers", LAYERS_COLUMNS)
    runs = runs.join(exposed_breakdown(runs, layers), on="run_id")
    runs["unaccounted_s"] = runs["iteration_time_s"] - runs[["compute_s", *EXPOSED_COLUMNS]].sum(axis=1)
    flow_rows = sum(pq.ParquetFile(part).metadata.num_rows for part in readable_parts(path, "flows"))
    if flow_rows <= MAX_FLOW_ROWS:
        flows = load_table(path, "flows", FLOW_COLUMNS)
        last_end = flows.groupby("run_id")["end_s"].max()
    else:  # a flows workload's simulation ends with its last flow
        flows = pd.DataFrame(columns=["run_id", *FLOW_COLUMNS])
        last_end = runs.loc[runs["flows_completed"].eq(runs["flows"]).fillna(False).astype(bool)].set_index(
            "run_id")["sim_time_s"]
    flows = flows.astype({column: float for column in FLOW_COLUMNS})  # an empty table has no types
    # the fluid backends store 0 timeouts per message, but count none (their runs row has null)
    flows.loc[flows["run_id"].isin(runs.loc[runs["timeouts"].isna(), "run_id"]), "timeouts"] = np.nan
    runs = runs.join(last_end.rename("last_flow_end_s"), on="run_id")
    return Dataset(path, runs, load_table(path, "collectives", ["iteration", "op", "exposed_s"]), layers, flows,
                   load_table(path, "links", LINKS_COLUMNS), rows_read=len(read_table(path, "runs", ["run_id"])),
                   flows_unread=flow_rows if flow_rows > MAX_FLOW_ROWS else 0)


def exposed_breakdown(runs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Per run_id, exposed communication per finished iteration (s) split by what was waited for:
    the `EXPOSED_COLUMNS`."""
    columns = list(EXPOSED_COLUMNS)
    done = runs.set_index("run_id")["iterations_done"].astype("Float64")
    if layers.empty:
        return pd.DataFrame(columns=columns, index=pd.Index([], name="run_id"), dtype=float)
    # iterations are numbered from 0 and finish in order: the finished ones are those below the count
    finished = layers[(layers["iteration"] < layers["run_id"].map(done)).fillna(False).astype(bool)]
    embedding = finished["layer"].str.lower() == "embedding"
    forward_waits = finished["fwd_exposed_comm_s"] + finished["ig_exposed_comm_s"]
    parts = pd.DataFrame({
        "run_id": finished["run_id"],
        "exposed_all_to_all_s": forward_waits.where(embedding, 0.0),
        "exposed_all_reduce_s": finished["wg_exposed_comm_s"],
        "exposed_other_s": forward_waits.where(~embedding, 0.0),
    })
    sums = parts.groupby("run_id")[columns].sum()
    return sums.div(done.reindex(sums.index).replace(0, np.nan), axis=0).astype(float)


def exposed_from_collectives(dataset: Dataset) -> pd.DataFrame:
    """The same split from the `collectives` table (each collective's `exposed_s`, by `op`), for the
    runs that finished every iteration; columns `all_to_all`, `all_reduce` (s per iteration)."""
    runs = dataset.runs[(dataset.runs["status"] == "ok") & dataset.runs["iterations_done"].notna()]
    coll = dataset.collectives[dataset.collectives["run_id"].isin(runs["run_id"])]
    sums = coll.pivot_table(index="run_id", columns="op", values="exposed_s", aggfunc="sum", fill_value=0.0)
    sums = sums.reindex(columns=["all_to_all", "all_reduce"], fill_value=0.0)
    return sums.div(runs.set_index("run_id")["iterations_done"].astype(float).reindex(sums.index), axis=0)
