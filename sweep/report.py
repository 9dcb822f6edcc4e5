"""`python -m sweep.report results/<name>`: a dataset told in a Markdown summary and PNG plots.

The report reads every table of the dataset with `load_runs` / `load_table` (each run once: its
newest attempt), finds what was swept and writes into `<dataset>/report/`:

- `summary.md`: runs and their status, the swept axes, the fastest and slowest configurations,
  iteration time (training) or flow completion time (`flows`) per value of every swept axis, failed
  runs with the command that reproduces them;
- `iteration_time_vs_<axis>.png` (training) and `flow_completion_vs_<axis>.png` (`flows`), one per
  swept axis, a line per combination of the other axes;
- `time_breakdown.png` (training): compute, exposed all-to-all and exposed all-reduce per iteration;
- `message_time_cdf.png` (training) and `fct_cdf.png` (`flows`): completion-time distributions;
- `retransmits_timeouts.png`: TCP retransmissions and timeouts of packet-backend runs (if any);
- in the summary, the hottest links of the slowest runs, when runs recorded the `links` table.

A swept parameter is a config column with more than one distinct value among the runs. Columns that
another swept column determines (the keys a `workload=dlrm_small,dlrm_large` sweep changes, or the
keys only one topology has) join its axis, named after the column that names the preset
(`network.topology`, `tcp.cc`) or after the preset the values match (`workload`: `dlrm_small`).

Plots are drawn on matplotlib's Agg canvas without pyplot, so building a report never changes the
backend of the process that calls it (a notebook, a Hydra job).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from omegaconf import OmegaConf

from .cli import CONF_DIR
from .fidelity import RISKS, SAMPLE, TOP, at_risk
from .runner import CONFIG_GROUPS, flatten
from .store import QUARANTINE, load_runs, load_table, quarantined_parts, read_table, readable_parts

REPORT_DIR = "report"
SUMMARY_FILE = "summary.md"
MS = 1e3  # s -> ms
# Config columns: `seed` and every leaf of these sections (`name`, `results_dir`, `ray.*` say where
# and how a run executed, not what it simulated).
CONFIG_SECTIONS = ("engine", *CONFIG_GROUPS)
# Config leaves that choose what a run records, not what it simulates: never a swept parameter.
RECORDING_COLUMNS = ("engine.link_stats",)
# A column that names its section's preset labels any axis it belongs to.
NAME_COLUMNS = ("network.topology", "tcp.cc", "workload.type")
# Units of config leaves (DESIGN.md: units are in the key names): whole names, then suffixes.
LEAF_UNITS = {"npus": "NPUs", "bytes": "bytes per NPU", "bytes_per_flow": "bytes", "splits": "chunks",
              "senders": "hosts", "hosts_per_leaf": "hosts", "npus_per_node": "NPUs",
              "batch_per_npu": "samples", "dtype_bytes": "bytes"}
SUFFIX_UNITS = (("_gbps", "Gb/s"), ("_tflops", "TFLOP/s"), ("_us", "µs"), ("_ms", "ms"), ("_ns", "ns"),
                ("_s", "s"), ("_kb", "KiB"), ("_bytes", "bytes"), ("_pkts", "segments"))
# Config keys in words, for axis labels: the unit follows once, in brackets ("minimum RTO (ms)"), unless
# the words name it already ("NPUs"). A key not listed is its leaf without the unit suffix, in words.
KEY_WORDS = {
    "seed": "seed", "engine.backend": "backend", "network": "network preset", "tcp": "TCP preset",
    "system": "system preset", "workload": "workload",
    "network.topology": "topology", "network.npus": "NPUs", "network.link_gbps": "NIC link rate",
    "network.link_latency_us": "link latency", "network.buffer_kb": "switch buffer per port",
    "network.ecn_threshold_kb": "ECN marking threshold", "network.mtu_bytes": "MTU",
    "network.loss_rate": "random loss rate", "network.uplink_gbps": "uplink rate", "network.spines": "spines",
    "network.hosts_per_leaf": "hosts per leaf", "network.npus_per_node": "NPUs per node",
    "network.scaleup_gbps": "scale-up link rate", "network.scaleup_latency_us": "scale-up latency",
    "network.bottleneck_gbps": "bottleneck link rate", "network.fat_tree_k": "fat-tree k",
    "tcp.cc": "congestion control", "tcp.min_rto_ms": "minimum RTO", "tcp.initial_rto_ms": "initial RTO",
    "tcp.max_rto_s": "maximum RTO", "tcp.init_cwnd_pkts": "initial window", "tcp.delayed_ack": "delayed ACK",
    "tcp.sack": "SACK", "tcp.sack_after_rto": "SACK scoreboard after an RTO", "tcp.ecn": "ECN",
    "tcp.timestamps": "TCP timestamps", "tcp.handshake": "handshake before the workload",
    "tcp.rcv_wnd_kb": "receive window", "tcp.mss_bytes": "MSS",
    "tcp.slow_start_after_idle": "slow start after idle", "tcp.rack_tlp": "RACK-TLP",
    "tcp.pto_slack_ms": "probe timeout slack", "tcp.prr": "PRR",
    "tcp.hystart": "HyStart++", "tcp.linux_delayed_ack": "Linux delayed ACK",
    "system.all_reduce": "all-reduce algorithm", "system.all_to_all": "all-to-all algorithm",
    "system.all_gather": "all-gather algorithm", "system.reduce_scatter": "reduce-scatter algorithm",
    "system.splits": "chunks per collective", "system.scheduling": "chunk scheduling",
    "system.hierarchy": "multi-dimensional collectives", "system.endpoint_delay_ns": "endpoint delay per step",
    "system.astra_compat": "ASTRA-sim 1.0 compatibility",
    "workload.type": "workload type", "workload.op": "collective", "workload.bytes": "collective size",
    "workload.senders": "incast senders", "workload.bytes_per_flow": "bytes per flow",
    "workload.batch_per_npu": "batch per NPU", "workload.iterations": "iterations",
    "workload.npu_tflops": "NPU compute rate", "workload.rounds": "rounds",
    "workload.interaction": "DLRM interaction",
}
# Settings named in the summary when every run has the same value.
KEY_SETTINGS = ("engine.backend", "network.topology", "network.npus", "network.link_gbps",
                "network.link_latency_us", "network.buffer_kb", "network.ecn_threshold_kb", "tcp.cc",
                "tcp.min_rto_ms", "tcp.init_cwnd_pkts", "tcp.delayed_ack", "system.all_reduce",
                "system.all_to_all", "system.splits", "workload.type", "workload.iterations")
MAX_BARS = 40     # bars in one breakdown or counter plot; beyond, means per value of the first axes
MAX_SERIES = 8    # lines in one panel; beyond, panels per value of one axis, then medians
MAX_PANELS = 6
LINKS_COLUMNS = ["link", "kind", "gbps", "bytes", "utilisation", "drops", "ecn_marks", "max_queue_kb"]
HOT_RUNS, HOT_LINKS = 3, 5  # the hottest links of the slowest runs with a links table
MAX_LISTED = 40   # runs listed one by one in the summary; beyond, the fastest and slowest few
MAX_FLOW_ROWS = 5_000_000  # a larger flows table is not read (gigabytes): its CDFs are left out
EXTREMES = 5
BREAKDOWN = (  # (runs column, legend, colour) of the stacked time breakdown
    ("compute_s", "compute", "#4c72b0"),
    ("exposed_all_to_all_s", "exposed all-to-all", "#dd8452"),
    ("exposed_all_reduce_s", "exposed all-reduce", "#55a868"),
    ("exposed_other_s", "other exposed comm", "#8172b3"),
    ("unaccounted_s", "not accounted for", "#bbbbbb"),
)
BREAKDOWN_DEFINITION = (
    "Time per iteration is split with the `layers` table (ASTRA-sim's EndToEnd breakdown), summed over "
    "the finished iterations and divided by their number: **compute** = `compute_s` (every pass of "
    "every layer); **exposed all-to-all** = the embedding layer's `fwd_exposed_comm_s` + "
    "`ig_exposed_comm_s` (the forward all-to-all waited for at the interaction, the backward one "
    "waited for at the embedding); **exposed all-reduce** = every layer's `wg_exposed_comm_s` (the "
    "weight-gradient all-reduces waited for by the next iteration's forward pass, or at the end); "
    "**other exposed comm** = any other layer's forward or input-gradient wait (collectives that block "
    "where they are issued, as in a `collective` microbenchmark). Compute + exposed communication = "
    "iteration time. `all_to_all_s` and `all_reduce_s` of the runs table are different numbers: the "
    "time such collectives were in flight, hidden behind compute or not.")


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


class ReportError(Exception):
    """A dataset that cannot be reported on: missing, or without any run."""


@dataclass(frozen=True)
class Axis:
    """A swept parameter: config columns that vary together, shown as one axis.

    `key` is the column of the runs frame holding each run's value on this axis (a config column, or
    an added column of preset names); `order` lists its values in plotting order.
    """

    key: str
    columns: tuple[str, ...]
    numeric: bool
    unit: str
    order: tuple[Any, ...]

    @property
    def short(self) -> str:
        """The name without its section (`link_gbps`), for legends and bar labels."""
        return self.key.rsplit(".", 1)[-1]

    @property
    def words(self) -> str:
        """The parameter in words (`minimum RTO`), without its unit."""
        return key_words(self.key)

    @property
    def label(self) -> str:
        """The axis label: the parameter in words, with its unit once (`minimum RTO (ms)`)."""
        unit_named = not self.unit or self.unit.split()[0] in self.words.split()
        return self.words if unit_named else f"{self.words} ({self.unit})"

    @property
    def slug(self) -> str:
        """The name as part of a file name."""
        return "".join(c if c.isalnum() else "_" for c in self.key)


# -- reading ---------------------------------------------------------------------------------------


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
        return self.path.resolve().name


def read_dataset(path: str | os.PathLike[str]) -> Dataset:
    """All tables of the dataset at `path` (each run once), with the exposed-communication breakdown
    (`exposed_all_to_all_s`, `exposed_all_reduce_s`, `exposed_other_s`, `unaccounted_s`) and
    `last_flow_end_s` (when the last flow of a run finished) added to the runs."""
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
    runs["unaccounted_s"] = runs["iteration_time_s"] - runs[[c for c, _, _ in BREAKDOWN[:4]]].sum(axis=1)
    flow_rows = sum(pq.ParquetFile(part).metadata.num_rows for part in readable_parts(path, "flows"))
    flow_columns = ["end_s", "fct_s", "timeouts"]
    if flow_rows <= MAX_FLOW_ROWS:
        flows = load_table(path, "flows", flow_columns)
        last_end = flows.groupby("run_id")["end_s"].max()
    else:  # a flows workload's simulation ends with its last flow
        flows = pd.DataFrame(columns=["run_id", *flow_columns])
        last_end = runs.loc[runs["flows_completed"].eq(runs["flows"]).fillna(False).astype(bool)].set_index(
            "run_id")["sim_time_s"]
    flows = flows.astype({column: float for column in flow_columns})  # an empty table has no types
    runs = runs.join(last_end.rename("last_flow_end_s"), on="run_id")
    return Dataset(path, runs, load_table(path, "collectives", ["iteration", "op", "exposed_s"]), layers, flows,
                   load_table(path, "links", LINKS_COLUMNS), rows_read=len(read_table(path, "runs", ["run_id"])),
                   flows_unread=flow_rows if flow_rows > MAX_FLOW_ROWS else 0)


def exposed_breakdown(runs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Per run_id, exposed communication per finished iteration split by what was waited for (see
    `BREAKDOWN_DEFINITION`): `exposed_all_to_all_s`, `exposed_all_reduce_s`, `exposed_other_s`."""
    columns = ["exposed_all_to_all_s", "exposed_all_reduce_s", "exposed_other_s"]
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


# -- what was swept --------------------------------------------------------------------------------


def is_config_column(column: str) -> bool:
    """`seed` and the leaves of the engine, network, tcp, system and workload sections, but for
    those that change what is recorded, not what is simulated (`RECORDING_COLUMNS`)."""
    if column in RECORDING_COLUMNS:
        return False
    return column == "seed" or column.split(".", 1)[0] in CONFIG_SECTIONS and "." in column


def key_words(key: str) -> str:
    """A config key in words (`tcp.min_rto_ms` -> `minimum RTO`): `KEY_WORDS`, else its leaf
    without the unit suffix, underscores as spaces."""
    if key in KEY_WORDS:
        return KEY_WORDS[key]
    leaf = key.rsplit(".", 1)[-1]
    suffix = next((suffix for suffix, _ in SUFFIX_UNITS if leaf.endswith(suffix)), "")
    return leaf[:len(leaf) - len(suffix)].replace("_", " ") if suffix else leaf.replace("_", " ")


def unit_of(column: str) -> str:
    """The unit a config leaf's name states (`network.link_gbps` -> Gb/s), or ''."""
    leaf = column.rsplit(".", 1)[-1]
    if leaf in LEAF_UNITS:
        return LEAF_UNITS[leaf]
    return next((unit for suffix, unit in SUFFIX_UNITS if leaf.endswith(suffix)), "")


def _is_null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any) -> str:
    """A config value as a short label: integral floats without `.0`, nulls as `null`."""
    if _is_null(value):
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else f"{value:g}"
    return str(value)


@functools.lru_cache(maxsize=None)
def presets(section: str) -> dict[str, dict[str, Any]]:
    """The presets of a config group as flattened columns: {name: {"workload.emb_dim": 64, ...}}."""
    found = {}
    for path in sorted((Path(CONF_DIR) / section).glob("*.yaml")):
        content = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if isinstance(content, dict):
            found[path.stem] = flatten({section: content})
    return found


def _same(stored: Any, preset: Any) -> bool:
    """Equality of a stored value and a preset value: nulls alike, numbers by value."""
    if _is_null(stored) or preset is None:
        return _is_null(stored) and preset is None
    if isinstance(preset, (int, float)) and not isinstance(preset, bool) and isinstance(stored, (int, float, np.number)):
        return float(stored) == float(preset)
    return bool(stored == preset)


def _row_keys(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Each row's values in `columns` as one hashable key (nulls alike)."""
    return pd.Series(list(zip(*(frame[c].map(fmt) for c in columns))), index=frame.index)


def _preset_labels(runs: pd.DataFrame, section: str, columns: Sequence[str]) -> pd.Series | None:
    """Each run's preset of `section`: of the presets that agree with the run on every column of
    the axis, the one that agrees on most of the section (ties: the longest name, so `dlrm_medium`
    rather than its alias `dlrm`). None unless values and presets correspond one to one."""
    section_columns = [c for c in runs.columns if c.startswith(f"{section}.")]

    def best(row: pd.Series) -> str | None:
        scored = [(sum(_same(row[c], values.get(c)) for c in section_columns), len(name), name)
                  for name, values in presets(section).items() if all(_same(row[c], values.get(c)) for c in columns)]
        return max(scored)[2] if scored else None

    section_key = _row_keys(runs, section_columns)
    first_rows = runs.index[~section_key.duplicated()]
    labels = section_key.map({section_key[i]: best(runs.loc[i]) for i in first_rows})
    if labels.isna().any():
        return None
    pairs = pd.DataFrame({"value": _row_keys(runs, columns), "label": labels}).drop_duplicates()
    if pairs["value"].duplicated().any() or pairs["label"].duplicated().any():
        return None
    return labels


def swept_axes(runs: pd.DataFrame) -> tuple[list[Axis], pd.DataFrame]:
    """The axes swept among `runs`, and the runs with a column added for each preset-named axis.

    A swept column is one with more than one distinct value. Columns that another swept column
    determines (each of its values goes with one value of theirs) join that column's axis: the keys
    a `workload=dlrm_small,dlrm_large` sweep changes, the keys only one topology has. An axis is named
    by its preset-naming column (`network.topology`, `tcp.cc`), else by the preset of its section its
    values match (`workload` = `dlrm_small`, ...), else by its column with the most values.
    """
    runs = runs.copy()
    codes = {}
    for column in (c for c in runs.columns if is_config_column(c)):
        column_codes, uniques = pd.factorize(runs[column], use_na_sentinel=False)
        if len(uniques) > 1:
            codes[column] = column_codes

    def determines(leader: str, other: str) -> bool:
        return len(set(zip(codes[leader], codes[other]))) == len(set(codes[leader]))

    position = {column: i for i, column in enumerate(codes)}
    # the columns with the most values lead: they determine the others of their axis
    leaders = sorted(codes, key=lambda c: (-len(set(codes[c])), c not in NAME_COLUMNS, position[c]))
    assigned: set[str] = set()
    axes = []
    for leader in leaders:
        if leader in assigned:
            continue
        columns = [leader, *(c for c in codes if c not in assigned and c != leader and determines(leader, c))]
        assigned.update(columns)
        sections = {c.split(".", 1)[0] for c in columns}
        names = [c for c in columns if c in NAME_COLUMNS and determines(c, leader)]
        key = names[0] if names else leader
        if not names and len(columns) > 1 and len(sections) == 1 and sections <= set(CONFIG_GROUPS):
            labels = _preset_labels(runs, next(iter(sections)), columns)
            if labels is not None:
                key = next(iter(sections))
                runs[key] = labels
        axes.append(_axis(runs, key, tuple(columns)))
    axes.sort(key=lambda axis: min(position[c] for c in axis.columns))  # in config order: network, tcp, ...
    return axes, runs


def _axis(runs: pd.DataFrame, key: str, columns: tuple[str, ...]) -> Axis:
    values = runs[key]
    numeric = (pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
               and values.notna().all())
    distinct = list(pd.unique(values))
    if numeric:
        order = sorted(distinct)
    elif all(v is None or v is pd.NA or isinstance(v, (int, float, np.number)) for v in distinct):
        order = sorted(distinct, key=lambda v: (not pd.isna(v), 0 if pd.isna(v) else v))  # null first
    elif key == "workload" and runs["compute_s"].notna().any():
        # workload presets by model size: the compute of an iteration grows with it
        compute = runs.groupby(key)["compute_s"].median()
        order = sorted(distinct, key=lambda v: (compute.get(v, np.inf), str(v)))
    else:  # the order the sweep ran them in
        first = runs.sort_values("started_at", kind="stable").drop_duplicates(key)[key]
        order = list(first)
    return Axis(key, columns, numeric, unit_of(key) if key in runs.columns and "." in key else "", tuple(order))


def describe(row: pd.Series, axes: Sequence[Axis]) -> str:
    """A run's place on the swept axes: `topology=switch, cc=newreno`."""
    return ", ".join(f"{axis.short}={fmt(row[axis.key])}" for axis in axes) or str(row["run_id"])


# -- plots -----------------------------------------------------------------------------------------


def _grouping(frame: pd.DataFrame, axes: Sequence[Axis]) -> tuple[Axis | None, list[Axis], bool]:
    """How to show the combinations of `axes` among `frame`'s rows: (an axis to split into panels or
    None, the axes whose combinations are the lines, whether the remaining axes are summarised)."""
    def combos(subset: Sequence[Axis], data: pd.DataFrame = frame) -> int:
        return len(data.drop_duplicates([a.key for a in subset])) if subset else 1

    if combos(axes) <= MAX_SERIES:
        return None, list(axes), False
    candidates = [a for a in axes if combos([a]) <= MAX_PANELS]
    facet = min(candidates, key=lambda a: combos([a]), default=None)
    rest = [a for a in axes if a is not facet]
    worst = max((combos(rest, part) for _, part in frame.groupby(facet.key, dropna=False)), default=1) \
        if facet else combos(rest)
    if worst <= MAX_SERIES:
        return facet, rest, False
    kept: list[Axis] = []
    for axis in rest:  # the first axes whose combinations fit; the others are summarised
        if combos([*kept, axis]) <= MAX_SERIES:
            kept.append(axis)
    return facet, kept, True


def _at(frame: pd.DataFrame, axis: Axis, value: Any) -> pd.DataFrame:
    """The rows of `frame` at `value` on `axis` (null matching null)."""
    column = frame[axis.key]
    return frame[column.isna() if _is_null(value) else column.eq(value).fillna(False).astype(bool)]


def _panels(frame: pd.DataFrame, facet: Axis | None) -> list[tuple[str | None, pd.DataFrame]]:
    """(title, rows) of each panel: one per value of `facet`, or one with every row."""
    if facet is None:
        return [(None, frame)]
    parts = [(f"{facet.short}={fmt(value)}", _at(frame, facet, value)) for value in facet.order]
    return [(title, part) for title, part in parts if not part.empty]


def _series(frame: pd.DataFrame, axes: Sequence[Axis]) -> list[tuple[str, pd.DataFrame]]:
    """(legend label, rows) of each combination of the axes' values, in the axes' order."""
    if not axes:
        return [("", frame)]
    groups = _sorted(frame, axes).groupby([a.key for a in axes], dropna=False, sort=False)
    return [(describe(part.iloc[0], axes), part) for _, part in groups]


def _sorted(frame: pd.DataFrame, axes: Sequence[Axis]) -> pd.DataFrame:
    """Rows in the order of the axes' values."""
    if not axes:
        return frame
    keys = {a.key: frame[a.key].map({v: i for i, v in enumerate(a.order)}) for a in axes}
    position = pd.DataFrame(keys, index=frame.index).fillna(-1)
    return frame.loc[position.sort_values(list(keys), kind="stable").index]


def _figure(panels: int, width: float = 6.4, height: float = 4.2) -> tuple[Figure, list[Any]]:
    columns = min(panels, 3)
    rows = math.ceil(panels / columns)
    fig = Figure(figsize=(width * columns if panels > 1 else width + 2.6, height * rows + 1.6),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.set_visible(False)
    return fig, axes[:panels]


def _log_if_wide(ax: Any, values: Iterable[float], which: str = "y", ratio: float = 30.0) -> bool:
    """Use a log scale on `which` axis if the positive values span `ratio` or more; say if it did."""
    finite = [v for v in values if v is not None and np.isfinite(v) and v > 0]
    wide = bool(finite) and max(finite) / min(finite) >= ratio
    if wide:
        (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    return wide


# Line styles of successive series: markers shrink and dashes change so that series with equal
# values (a TCP setting that changes nothing) stay visible on top of one another.
# A series keeps its style in every panel (the legend is shared), whichever series a panel lacks.
STYLES = [dict(color=f"C{index}", marker=marker, markersize=size, linestyle=line, linewidth=width)
          for index, (marker, size, line, width) in enumerate(zip(
              "osD^vPX*", (10, 8.5, 7, 6, 5, 4.5, 4, 3.5), ("-", "--", "-.", ":") * 2,
              (3.2, 2.8, 2.4, 2.0, 1.7, 1.4, 1.2, 1.0)))]


def _styles(frame: pd.DataFrame, axes: Sequence[Axis]) -> dict[str, dict[str, Any]]:
    """The style of each series (combination of the axes' values) of the whole figure."""
    return {label: STYLES[index % len(STYLES)] for index, (label, _) in enumerate(_series(frame, axes))}


def _legend(fig: Figure, axs: Sequence[Any], title: str) -> None:
    """One legend for the figure, below the panels (labels are long: the values of several axes),
    with every series of any panel, in the order they were drawn."""
    entries: dict[str, Any] = {}
    for ax in axs:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), title=title, loc="outside lower center",
                   fontsize="small", title_fontsize="small", ncols=2 if max(map(len, entries)) <= 60 else 1)


def _plain_log_ticks(ax: Any, which: str) -> None:
    """Label the log-scaled `which` axis at major ticks only, as plain numbers (0.01, 0.1, 1, 10),
    adding 2 and 5 times each power of ten where the axis spans less than two decades."""
    axis, (low, high) = (ax.xaxis, ax.get_xlim()) if which == "x" else (ax.yaxis, ax.get_ylim())
    if high / low < 100:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_vs_axis(frame: pd.DataFrame, axis: Axis, others: Sequence[Axis], metric: str, ylabel: str,
                 title: str, path: Path) -> Path:
    """`metric` (seconds, shown in ms) against `axis`, a line per combination of `others`."""
    facet, series_axes, summarised = _grouping(frame, others)
    panels = _panels(frame, facet)
    fig, axs = _figure(len(panels))
    positions = {v: (float(v) if axis.numeric else i) for i, v in enumerate(axis.order)}
    styles = _styles(frame, series_axes)
    order = list(styles)
    for ax, (panel_title, panel) in zip(axs, panels):
        for label, part in _series(panel, series_axes):
            index = order.index(label)
            x = part[axis.key].map(positions).astype(float)
            if not axis.numeric:  # spread the markers of a category a little so none hides another
                x = x + (index - (len(order) - 1) / 2) * min(0.06, 0.3 / max(len(order) - 1, 1))
            y = part[metric].astype(float) * MS
            points = pd.DataFrame({"x": x, "y": y}).groupby("x")["y"]
            style = styles[label]
            if not axis.numeric:  # categories: points side by side, no line suggesting an order between them
                style = {**style, "linestyle": "none"}
            if summarised:
                stats = points.agg(["median", "min", "max"])
                line = ax.plot(stats.index, stats["median"], label=label or "median", **style)[0]
                ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2, color=line.get_color())
            else:
                means = points.mean()
                ax.plot(means.index, means.values, label=label or None, **style)
        ax.set_xlabel(axis.label)
        ax.set_ylabel(ylabel)
        if axis.numeric:
            _log_if_wide(ax, axis.order, "x", ratio=10.0)
            ax.set_xticks([positions[v] for v in axis.order], [fmt(v) for v in axis.order])
            ax.minorticks_off()
        else:
            ax.set_xticks(range(len(axis.order)), [fmt(v) for v in axis.order],
                          rotation=30 if sum(len(fmt(v)) for v in axis.order) > 40 else 0)
        if _log_if_wide(ax, panel[metric].astype(float) * MS):
            _plain_log_ticks(ax, "y")
        ax.grid(True, which="major", alpha=0.3)
        if panel_title:
            ax.set_title(panel_title, fontsize="medium")
    legend_title = ", ".join(a.words for a in series_axes)
    if summarised:
        pooled = [a.words for a in others if a is not facet and a not in series_axes]
        legend_title += f"\n(median; band: min-max over {', '.join(pooled)})"
    _legend(fig, axs, legend_title)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return path


def _bar_rows(frame: pd.DataFrame, axes: Sequence[Axis], columns: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """One row per run to draw as a bar (sorted along the axes), or, for more than `MAX_BARS` runs,
    the mean per combination of the first axes that fit; and a note saying which was done."""
    frame = _sorted(frame, axes)
    if len(frame) <= MAX_BARS:
        labels = [describe(row, axes) for _, row in frame.iterrows()]
        return frame[list(columns)].set_axis(labels), ""
    kept: list[Axis] = []
    for axis in axes:
        if len(frame.drop_duplicates([a.key for a in [*kept, axis]])) <= MAX_BARS:
            kept.append(axis)
    kept = kept or list(axes[:1])  # an axis of more than MAX_BARS values: a bar per value
    means = frame.groupby([a.key for a in kept], sort=False, dropna=False)[list(columns)].mean()
    labels = [", ".join(f"{a.short}={fmt(v)}" for a, v in zip(kept, key if isinstance(key, tuple) else (key,)))
              for key in means.index]
    pooled = [a.short for a in axes if a not in kept]
    return means.set_axis(labels), f" (mean over {', '.join(pooled)})"


def _bar_figure(bars: int) -> tuple[Figure, Any, Any]:
    """A figure of two panels of horizontal bars side by side, tall enough for `bars` labels."""
    fig = Figure(figsize=(13, max(3.0, 0.32 * bars + 1.6)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    return fig, left, right


def plot_breakdown(frame: pd.DataFrame, axes: Sequence[Axis], path: Path) -> Path:
    """Per run: the iteration time (ms; log scale when the runs span 30x or more, so that no bar is
    invisible) and its split into compute / exposed all-to-all / exposed all-reduce as shares of
    the iteration (every bar the same length, whatever the run's time)."""
    parts = [(c, label, colour) for c, label, colour in BREAKDOWN
             if c in ("compute_s", "exposed_all_to_all_s", "exposed_all_reduce_s")
             or (frame[c].abs() > 1e-3 * frame["iteration_time_s"]).any()]
    bars, note = _bar_rows(frame, axes, [c for c, _, _ in parts] + ["iteration_time_s"])
    fig, absolute, share = _bar_figure(len(bars))
    y = np.arange(len(bars))
    total_ms = bars["iteration_time_s"].astype(float).to_numpy() * MS
    absolute.barh(y, total_ms, color="#555555")
    for i, total in enumerate(total_ms):
        absolute.annotate(f"{total:.3g} ms", (total, y[i]), xytext=(3, 0), textcoords="offset points",
                          va="center", fontsize="x-small")
    if _log_if_wide(absolute, total_ms, "x"):
        absolute.set_xlim(np.nanmin(total_ms) / 2, np.nanmax(total_ms) * 4)
        _plain_log_ticks(absolute, "x")
    else:
        absolute.set_xlim(0, np.nanmax(total_ms) * 1.2 if np.nanmax(total_ms) > 0 else 1)
    left_pct = np.zeros(len(bars))
    for column, label, colour in parts:
        values = bars[column].astype(float).clip(lower=0).fillna(0).to_numpy()
        pct = 100 * values / bars["iteration_time_s"].astype(float).to_numpy()
        share.barh(y, pct, left=left_pct, color=colour, label=label)
        left_pct += pct
    absolute.set_yticks(y, bars.index, fontsize="small")
    absolute.invert_yaxis()
    absolute.set_xlabel("iteration time (ms)")
    share.set_xlabel("share of the iteration time (%)")
    share.set_xlim(0, 100)
    for ax in (absolute, share):
        ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=len(parts), fontsize="small")
    fig.suptitle("Where an iteration goes: its length (left) and its shares of compute and exposed "
                 "communication (right)" + note)
    fig.savefig(path, dpi=100)
    return path


def _waited_for_rto(flows: pd.DataFrame) -> str:
    """' (x % waited for an RTO)': the share of completed flows with a retransmission timeout, or ''
    where no flow reports its timeouts (the fluid backends)."""
    counted = flows["timeouts"].dropna() if "timeouts" in flows else pd.Series(dtype=float)
    return f" ({(counted > 0).mean():.1%} waited for an RTO)" if len(counted) else ""


def plot_cdf(frame: pd.DataFrame, flows: pd.DataFrame, axes: Sequence[Axis], title: str, xlabel: str,
             ylabel: str, path: Path) -> Path:
    """Empirical CDF of `fct_s` (ms, log scale) of the flows of `frame`'s runs, a panel per
    workload when the workload was swept, a line per combination of the other axes (flows pooled
    where there are too many), each labelled with the share of its flows that waited for a
    retransmission timeout."""
    workload = next((a for a in axes if a.key in ("workload", "workload.type")), None)
    if workload is not None and len(workload.order) <= MAX_PANELS:
        facet: Axis | None = workload
        _, series_axes, summarised = _grouping(frame, [a for a in axes if a is not workload])
    else:
        facet, series_axes, summarised = _grouping(frame, axes)
    panels = _panels(frame, facet)
    fig, axs = _figure(len(panels))
    completed = flows[flows["fct_s"].notna()]
    styles = _styles(frame, series_axes)
    for ax, (panel_title, panel) in zip(axs, panels):
        for label, part in _series(panel, series_axes):
            series_flows = completed[completed["run_id"].isin(part["run_id"])]
            fct_ms = np.sort(series_flows["fct_s"].astype(float)) * MS
            if len(fct_ms):
                style = styles[label]
                ax.step(fct_ms, np.arange(1, len(fct_ms) + 1) / len(fct_ms), where="post",
                        label=(label or "all runs") + _waited_for_rto(series_flows),
                        color=style["color"], linestyle=style["linestyle"], linewidth=style["linewidth"])
        ax.set_xscale("log")
        _plain_log_ticks(ax, "x")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="major", alpha=0.3)
        if panel_title:
            ax.set_title(panel_title, fontsize="medium")
    legend_title = ", ".join(a.words for a in series_axes)
    if summarised:
        legend_title += f"\n(pooled over {', '.join(a.words for a in axes if a is not facet and a not in series_axes)})"
    _legend(fig, axs, legend_title)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return path


def plot_counters(frame: pd.DataFrame, axes: Sequence[Axis], path: Path) -> Path:
    """Retransmitted segments and retransmission timeouts per run (packet backend)."""
    bars, note = _bar_rows(frame, axes, ["retransmits", "timeouts"])
    fig, left, right = _bar_figure(len(bars))
    y = np.arange(len(bars))
    for ax, column, label, colour in ((left, "retransmits", "retransmitted segments", "#c44e52"),
                                      (right, "timeouts", "retransmission timeouts (RTOs)", "#937860")):
        values = bars[column].astype(float).fillna(0)
        ax.barh(y, values, color=colour)
        for i, value in enumerate(values):
            ax.annotate(f"{value:.4g}", (value, y[i]), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize="x-small")
        ax.set_xlabel(f"{label} per run")
        ax.set_xlim(0, max(values.max() * 1.15, 1))
        ax.grid(True, axis="x", alpha=0.3)
    left.set_yticks(y, bars.index, fontsize="small")
    left.invert_yaxis()
    fig.suptitle("TCP loss recovery (packet backend): retransmissions and timeouts" + note)
    fig.savefig(path, dpi=100)
    return path


# -- the summary -----------------------------------------------------------------------------------


def _ms(value: Any, digits: int = 4) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{float(value) * MS:.{digits}g}"


def _count(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{int(value):,}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _per_axis_tables(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, what: str,
                     extra: Sequence[tuple[str, str]]) -> list[str]:
    lines: list[str] = []
    for axis in axes:
        lines += ["", f"**{axis.label}** (`{axis.key}`)", ""]
        rows = []
        for value in axis.order:
            part = _at(frame, axis, value)
            if part.empty:
                continue
            y = part[metric].astype(float)
            rows.append([fmt(value), len(part), _ms(y.mean()), _ms(y.min()), _ms(y.max()),
                         *(_ms(part[c].astype(float).mean()) for c, _ in extra)])
        lines += _table([axis.key, "runs", f"mean {what} (ms)", "min (ms)", "max (ms)",
                         *(f"mean {label} (ms)" for _, label in extra)], rows)
    return lines


def _ranking(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, columns: Sequence[tuple[str, str, str]]
             ) -> list[str]:
    """The runs by `metric`, fastest first: all of them, or the fastest and slowest few."""
    ranked = frame.sort_values(metric, kind="stable")
    if len(ranked) > MAX_LISTED:
        shown = pd.concat([ranked.head(EXTREMES), ranked.tail(EXTREMES)])
        title = f"The {EXTREMES} fastest and {EXTREMES} slowest of {len(ranked)} runs"
    else:
        shown, title = ranked, "All runs, fastest first"
    rank = {run: i + 1 for i, run in enumerate(ranked["run_id"])}
    rows = [[rank[row["run_id"]], *(_ms(row[c]) if kind == "ms" else _count(row[c]) for c, _, kind in columns),
             describe(row, axes), f"`{row['run_id']}`"] for _, row in shown.iterrows()]
    return ["", f"{title}:", "", *_table(["#", *(label for _, label, _ in columns), "configuration", "run_id"], rows)]


def _extremes(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, what: str) -> list[str]:
    ranked = frame.sort_values(metric, kind="stable")
    fastest, slowest = ranked.iloc[0], ranked.iloc[-1]
    return [f"- Fastest: **{_ms(fastest[metric])} ms** {what} — {describe(fastest, axes)} (run `{fastest['run_id']}`)",
            f"- Slowest: **{_ms(slowest[metric])} ms** {what} — {describe(slowest, axes)} (run `{slowest['run_id']}`)"]


def _setting_lines(runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    swept = {c for axis in axes for c in axis.columns}
    fixed = [f"`{c}`={fmt(runs[c].iloc[0])}" for c in KEY_SETTINGS
             if c in runs and c not in swept and runs[c].nunique(dropna=False) == 1]
    return [f"Settings every run shares: {', '.join(fixed)}."] if fixed else []


def _axes_lines(axes: Sequence[Axis]) -> list[str]:
    if not axes:
        return ["Nothing was swept: every run has the same configuration."]
    rows = [[f"`{a.key}`", a.unit or "", ", ".join(fmt(v) for v in a.order),
             ", ".join(f"`{c}`" for c in a.columns)] for a in axes]
    return _table(["axis", "unit", "values", "config columns"], rows)


def _training_section(dataset: Dataset, training: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """Summary of the training runs (`training`: their rows with the axis columns)."""
    ok = training[(training["status"] != "error") & training["iteration_time_s"].notna()]
    lines = ["", "## Training runs: iteration time", ""]
    if ok.empty:
        return lines + ["No training run finished an iteration."]
    lines += _extremes(ok, axes, "iteration_time_s", "per iteration")
    breakdown = [("compute_s", "compute"), ("exposed_all_to_all_s", "exposed all-to-all"),
                 ("exposed_all_reduce_s", "exposed all-reduce")]
    if ok["exposed_other_s"].fillna(0).gt(0).any():
        breakdown.append(("exposed_other_s", "other exposed"))
    if axes:
        lines += ["", "Iteration time per swept parameter (each row: the runs with that value, whatever "
                  "the other parameters):"]
        lines += _per_axis_tables(ok, axes, "iteration_time_s", "iteration", breakdown)
    columns = [("iteration_time_s", "iteration (ms)", "ms"), *((c, f"{label} (ms)", "ms") for c, label in breakdown),
               ("retransmits", "retransmits", "n"), ("timeouts", "timeouts", "n")]
    lines += _ranking(ok, axes, "iteration_time_s", columns)
    lines += ["", BREAKDOWN_DEFINITION]
    check = exposed_from_collectives(dataset)
    joined = ok.set_index("run_id")[["exposed_all_to_all_s", "exposed_all_reduce_s"]].join(check, how="inner")
    if not joined.empty:
        gap = pd.concat([(joined["exposed_all_to_all_s"] - joined["all_to_all"]).abs(),
                         (joined["exposed_all_reduce_s"] - joined["all_reduce"]).abs()], axis=1).max(axis=1)
        tolerance = 1e-9 + 1e-6 * ok.set_index("run_id")["iteration_time_s"].reindex(gap.index)
        differ = gap[gap > tolerance]
        if differ.empty:
            lines += ["", f"Check: for all {len(joined)} finished runs this split equals the `collectives` "
                      f"table's `exposed_s` summed by `op` (largest difference {gap.max() * 1e9:.3g} ns)."]
        else:
            lines += ["", f"Check: for {len(differ)} of {len(joined)} finished runs this split differs from the "
                      "`collectives` table's `exposed_s` by `op` (their collectives are not the DLRM's: an "
                      "embedding all-to-all and weight-gradient all-reduces), e.g. "
                      + ", ".join(f"`{run}` by {_ms(value)} ms" for run, value in differ.head(3).items()) + "."]
    return lines


def _flows_section(dataset: Dataset, flow_runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """Summary of the `flows` runs (`flow_runs`: their rows with the axis columns)."""
    flow_runs = flow_runs[flow_runs["status"] != "error"]
    lines = ["", "## Flows runs: flow completion time", ""]
    finished = flow_runs[flow_runs["last_flow_end_s"].notna()]
    if finished.empty:
        return lines + ["No flow completed."]
    lines += _extremes(finished, axes, "last_flow_end_s", "until the last flow finished")
    if axes:
        lines += ["", "Time until the last flow finished, per swept parameter:"]
        lines += _per_axis_tables(finished, axes, "last_flow_end_s", "completion", [("mean_fct_s", "FCT")])
    fct = dataset.flows[dataset.flows["fct_s"].notna()].groupby("run_id")["fct_s"]
    stats = pd.DataFrame({"p50_s": fct.median(), "p99_s": fct.quantile(0.99)})
    table = finished.join(stats, on="run_id")
    columns = [("last_flow_end_s", "last flow done (ms)", "ms"), ("p50_s", "FCT p50 (ms)", "ms"),
               ("p99_s", "FCT p99 (ms)", "ms"), ("max_fct_s", "FCT max (ms)", "ms"),
               ("flows_completed", "flows done", "n"), ("retransmits", "retransmits", "n"),
               ("timeouts", "timeouts", "n"), ("drops", "drops", "n"), ("ecn_marks", "ECN marks", "n")]
    return lines + _ranking(table, axes, "last_flow_end_s", columns)


def _hot_link_lines(dataset: Dataset) -> list[str]:
    """The busiest links (by utilisation over the run) of the slowest runs that recorded links:
    where the time of a slow configuration went."""
    links = dataset.links[dataset.links["utilisation"].notna()] if "utilisation" in dataset.links else dataset.links
    if links.empty:
        return []
    axes, runs = swept_axes(dataset.runs)  # the runs with a column per axis, for `describe`
    runs = runs[runs["run_id"].isin(links["run_id"]) & (runs["status"] != "error")]
    # training runs by iteration time, flows runs by the end of their last flow: each run's own length
    length = runs["iteration_time_s"].fillna(runs["last_flow_end_s"]).fillna(runs["sim_time_s"])
    slowest = runs.assign(length_s=length).sort_values("length_s", ascending=False, kind="stable").head(HOT_RUNS)
    lines = ["", "## Hottest links of the slowest runs", "",
             f"The {HOT_LINKS} links with the highest utilisation (bytes x 8 / (rate x run length)) of each of "
             f"the {len(slowest)} slowest runs that recorded links (`engine.link_stats`); n/a where the backend "
             "does not know a column (the fluid backends count bytes only; alpha_beta only on host links).", ""]
    rows = []
    for _, run in slowest.iterrows():
        hottest = links[links["run_id"] == run["run_id"]].sort_values(
            ["utilisation", "bytes"], ascending=False, kind="stable").head(HOT_LINKS)
        for _, link in hottest.iterrows():
            rows.append([f"`{run['run_id']}` ({describe(run, axes)}, {_ms(run['length_s'])} ms)", f"`{link['link']}`",
                         link["kind"], fmt(link["gbps"]), _count(link["bytes"]), f"{link['utilisation'] * 100:.3g} %",
                         _count(link["drops"]), _count(link["ecn_marks"]),
                         "n/a" if pd.isna(link["max_queue_kb"]) else f"{link['max_queue_kb']:.1f}"])
    return lines + _table(["run", "link", "kind", "Gb/s", "bytes", "utilisation", "drops", "ECN marks",
                           "max queue (KiB)"], rows)


def _contention_lines(runs: pd.DataFrame) -> list[str]:
    """Where one configuration ran on `alpha_beta` and on a backend that shares links: how much
    longer an iteration took there. `alpha_beta` leaves all contention out (each message costs what
    it would alone on its path), so that gap is the cost of contention."""
    if "iteration_time_s" not in runs.columns:
        return []
    ok = runs[(runs["status"] == "ok") & runs["iteration_time_s"].notna()]
    backends = set(ok["engine.backend"])
    if "alpha_beta" not in backends or len(backends) < 2:
        return []
    others = [column for column in ok.columns if is_config_column(column) and column != "engine.backend"]
    keyed = ok.assign(_key=_row_keys(ok, others))
    lower = keyed[keyed["engine.backend"] == "alpha_beta"]
    bound = dict(zip(lower["_key"], lower["iteration_time_s"]))  # config (backend aside) -> its lower bound
    lines: list[str] = []
    for backend in sorted(backends - {"alpha_beta"}):
        matched = keyed[(keyed["engine.backend"] == backend) & keyed["_key"].isin(bound.keys())]
        if matched.empty:
            continue
        gap = pd.Series([time_s / bound[key] - 1 for time_s, key in zip(matched["iteration_time_s"], matched["_key"])],
                        index=matched.index)
        worst = matched.loc[gap.idxmax()]
        lines.append(f"- `{backend}`: {len(matched)} configurations; iteration time above `alpha_beta`'s by "
                     f"{gap.median():.1%} (median), at most {gap.max():.1%} (`{worst['run_id']}`: "
                     f"{_ms(worst['iteration_time_s'])} ms against {_ms(bound[worst['_key']])} ms)")
    if not lines:
        return []
    return ["", "## Contention", "",
            "`alpha_beta` costs every message as if it were alone on its path (no link shared between NPUs or "
            "collectives): a lower bound. Where the same configuration also ran on a backend that shares links "
            "(`analytical`: max-min fair shares; `packet`: TCP with queues and losses), the gap is the cost of "
            "contention (at packet level, and of TCP's dynamics):", "", *lines]


def _problem_lines(runs: pd.DataFrame) -> list[str]:
    lines: list[str] = []
    failed = runs[runs["status"] == "error"]
    if not failed.empty:
        lines += ["", "## Failed runs", "", f"{len(failed)} runs failed (status `error`); by message:"]
        last_line = failed["error"].fillna("").map(lambda text: (text.strip().splitlines() or [""])[-1])
        for message, part in failed.groupby(last_line, sort=False):
            lines += ["", f"- {len(part)} x `{message}`; to reproduce one:", "",
                      f"      {part['repro'].iloc[0]}"]
    timed_out = runs[runs["status"] == "timeout"]
    if not timed_out.empty:
        lines += ["", "## Runs that timed out", "",
                  f"{len(timed_out)} runs reached `engine.max_sim_time_s` before their work was done "
                  "(their means cover the iterations or flows that finished): "
                  + ", ".join(f"`{run}`" for run in timed_out["run_id"].head(10))
                  + (" ..." if len(timed_out) > 10 else "")]
    return lines


# What each kind of run is measured by: (runs column, file prefix, axis label).
METRICS = {"training": ("iteration_time_s", "iteration_time", "iteration time (ms)"),
           "flows": ("last_flow_end_s", "flow_completion", "time until the last flow finished (ms)")}


def _kind_plots(dataset: Dataset, kind: str, usable: pd.DataFrame, axes: Sequence[Axis], out: Path
                ) -> tuple[list[tuple[str, str]], list[str]]:
    """Draw the plots of the training or `flows` runs (`usable`: those with a measurement); return
    (file name, what it shows) per plot and any line the summary should add."""
    metric, prefix, ylabel = METRICS[kind]
    what = ylabel.split(" (")[0]
    plots, lines = [], []
    for axis in axes:
        others = [a for a in axes if a is not axis]
        name = f"{prefix}_vs_{axis.slug}.png"
        plot_vs_axis(usable, axis, others, metric, ylabel, f"{what[0].upper()}{what[1:]} against {axis.words}",
                     out / name)
        plots.append((name, f"{what} against `{axis.key}`"
                      + (f", a line per {', '.join(a.key for a in others)}" if others else "")))
    if kind == "training":
        plot_breakdown(usable, axes, out / "time_breakdown.png")
        plots.append(("time_breakdown.png", "compute, exposed all-to-all and exposed all-reduce per iteration, "
                      "per run: in ms (left) and as a share of the iteration (right)"))
    flows = dataset.flows[dataset.flows["run_id"].isin(usable["run_id"])]
    if flows["fct_s"].notna().any():
        name, unit, times = (("message_time_cdf.png", "messages", "completion time of the point-to-point messages "
                              "of the collectives") if kind == "training" else
                             ("fct_cdf.png", "flows", "flow completion time"))
        plot_cdf(usable, flows, axes, f"CDF of the {times}", f"{times.split(' of the')[0]} (ms)",
                 f"fraction of completed {unit}", out / name)
        plots.append((name, f"CDF of the {times}, a panel per workload; each line says the share of its "
                      f"{unit} that waited for a retransmission timeout"))
        lines += _rto_lines(usable, flows, unit)
    packet = usable[usable["engine.backend"] == "packet"]
    if packet["retransmits"].fillna(0).sum() + packet["timeouts"].fillna(0).sum() > 0:
        name = "retransmits_timeouts.png" if kind == "training" else "flows_retransmits_timeouts.png"
        plot_counters(packet, axes, out / name)
        plots.append((name, f"retransmitted segments and RTO timeouts per {kind} run (packet backend)"))
    elif not packet.empty:
        lines += ["", f"No {kind} run on the packet backend retransmitted a segment or timed out."]
    return plots, lines


# -- two fidelities ----------------------------------------------------------------------------------

POINTS_FILE = "points.csv"
TOP_LISTED = 10  # configurations listed in the two-fidelity section's tables


@dataclass
class TwoFidelity:
    """A two-fidelity dataset (`sweep.fidelity`) point by point: `points` holds one row per
    point_id, the screening run's columns plus `screen_s` and `fine_s` (iteration times on the
    screening and the refining backend; `fine_s` null for a point not refined), `refined`,
    `reasons` (why it was refined), `at_risk` (the screen's at-risk reasons) and `error`
    (fine / screen - 1)."""

    screen_backend: str
    fine_backend: str
    points: pd.DataFrame

    @property
    def sample_errors(self) -> pd.Series:
        """The screen's error over the calibration sample (refined points chosen at random)."""
        in_sample = self.points["reasons"].fillna("").str.split(",").map(lambda reasons: SAMPLE in reasons)
        return self.points.loc[in_sample & self.points["error"].notna(), "error"]

    @property
    def band(self) -> tuple[float, float] | None:
        """The calibrated error band: the range of the sample's errors (None without a sample)."""
        errors = self.sample_errors
        return (float(errors.min()), float(errors.max())) if len(errors) else None


def two_fidelity(runs: pd.DataFrame) -> TwoFidelity | None:
    """The points of a two-fidelity dataset, or None if `runs` holds no refined run (a row with
    `refine_reason`) with a screening run of its point on another backend."""
    if "refine_reason" not in runs or runs["refine_reason"].isna().all():
        return None
    chosen = runs[runs["refine_reason"].notna()]
    fine_backend = chosen["engine.backend"].mode().iloc[0]
    paired = runs[(runs["engine.backend"] != fine_backend) & runs["point_id"].isin(chosen["point_id"])]
    if paired.empty:
        return None
    screen_backend = paired["engine.backend"].mode().iloc[0]
    screen = runs[runs["engine.backend"] == screen_backend].drop_duplicates("point_id", keep="last")
    fine = runs[(runs["engine.backend"] == fine_backend) & runs["status"].eq("ok")].drop_duplicates(
        "point_id", keep="last").set_index("point_id")
    points = screen.set_index("point_id", drop=False).copy()
    points["screen_s"] = points["iteration_time_s"].astype(float)
    points["fine_s"] = fine["iteration_time_s"].astype(float).reindex(points.index)
    points["refined"] = points["fine_s"].notna()
    points["reasons"] = fine["refine_reason"].reindex(points.index)
    points["at_risk"] = at_risk(points.reset_index(drop=True)).to_numpy()
    points["error"] = points["fine_s"] / points["screen_s"] - 1
    return TwoFidelity(screen_backend, fine_backend, points.reset_index(drop=True))


def _estimate(points: pd.DataFrame, band: tuple[float, float] | None, fine_backend: str) -> pd.DataFrame:
    """Each point's best estimate of its iteration time (`estimate_s`: the refined time, else the
    screen's) and how much it can be trusted, in words (`fidelity`)."""
    estimate = points["fine_s"].fillna(points["screen_s"])
    def label(row: pd.Series) -> str:
        if row["refined"]:
            return fine_backend
        if band is None:
            return "screen only (no calibration sample)"
        low, high = row["screen_s"] * (1 + band[0]), row["screen_s"] * (1 + band[1])
        return f"screen only: {fine_backend} expected {_ms(low)}-{_ms(high)} ms" + (
            " (at risk: may fall outside)" if row["at_risk"] else "")
    return points.assign(estimate_s=estimate, fidelity=points.apply(label, axis=1))


def _two_fidelity_section(two: TwoFidelity, axes: Sequence[Axis], out: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The summary's two-fidelity section, `points.csv` and the two plots; (lines, plots)."""
    points, screen, fine = two.points, two.screen_backend, two.fine_backend
    refined = points[points["refined"]]
    reasons = [reason for text in refined["reasons"].dropna() for reason in text.split(",")]
    risk_counts = pd.Series([r for text in points["at_risk"] for r in text.split(",") if r]).value_counts()
    lines = ["", f"## Two fidelities: `{screen}` screen, `{fine}` refinement", "",
             f"**{len(points)} points** screened on `{screen}`; **{len(refined)} refined** on `{fine}` "
             f"({len(refined) / len(points):.1%} of the points): calibration sample {reasons.count(SAMPLE)}, "
             f"top {reasons.count(TOP)}, at risk {sum(1 for text in refined['reasons'].dropna() if set(text.split(',')) & set(RISKS))}"
             " (a point can be chosen for several reasons). Both runs of a point share its `point_id`.",
             "", f"The screen marks {int((points['at_risk'] != '').sum())} points at risk"
             + (": " + "; ".join(f"{RISKS[name]}: {count}" for name, count in risk_counts.items()) if len(risk_counts)
                else ("" if screen == "analytical" else f" (`{screen}` reports no contention signals: only failed "
                      "screens count)")) + "."]
    band = two.band
    errors = two.sample_errors
    if band is None:
        lines += ["", "No calibration sample (`hydra.launcher.refine_sample=0`): the screen's error on the points "
                  "not refined is unknown."]
    else:
        lines += ["", f"Calibration: over the random sample of {len(errors)} points, the screen's error "
                  f"({fine} / {screen} - 1) has median {errors.median():+.2%} and ranges from {band[0]:+.2%} to "
                  f"{band[1]:+.2%}. A point not refined is given that band: its `{fine}` time is expected within "
                  f"[screen x (1 {band[0]:+.2%}), screen x (1 {band[1]:+.2%})], as measured on {len(errors)} points, "
                  "not guaranteed (at-risk points are where it is least likely to hold)."]
    others = refined["error"].dropna()
    if len(others):
        worst = refined.loc[others.abs().idxmax()]
        lines += ["", f"Over all {len(others)} refined points (top and at-risk ones included, so not a random sample): "
                  f"median error {others.median():+.2%}, worst {worst['error']:+.2%} (`{worst['point_id']}`: "
                  f"{_ms(worst['fine_s'])} ms against {_ms(worst['screen_s'])} ms"
                  + (f"; at risk: {worst['at_risk']}" if worst["at_risk"] else "") + ")."]
    top = refined.sort_values(["fine_s", "point_id"], kind="stable").head(TOP_LISTED)
    lines += ["", f"### The {len(top)} fastest configurations at `{fine}` level", "",
              *_table(["#", f"{fine} (ms)", f"{screen} (ms)", "screen error", "refined as", "configuration", "point_id"],
                      [[i + 1, _ms(row["fine_s"]), _ms(row["screen_s"]), f"{row['error']:+.2%}", row["reasons"] or "",
                        describe(row, axes), f"`{row['point_id']}`"] for i, (_, row) in enumerate(top.iterrows())])]
    estimated = _estimate(points, band, fine).sort_values(["estimate_s", "point_id"], kind="stable")
    columns = ["point_id", *(a.key for a in axes), "screen_s", "fine_s", "refined", "reasons", "at_risk", "fidelity"]
    estimated[[c for c in dict.fromkeys(columns) if c in estimated]].to_csv(out / POINTS_FILE, index=False)
    lines += ["", f"### Every point by its best estimate ({len(estimated)}; the first {min(len(estimated), 2 * TOP_LISTED)} "
              f"here, all in `{POINTS_FILE}`)", "",
              "The estimate is the refined time where there is one, else the screen's, labelled with the band the "
              "calibration gives it:", "",
              *_table(["#", "estimate (ms)", "fidelity", "at risk", "configuration", "point_id"],
                      [[i + 1, _ms(row["estimate_s"]), row["fidelity"], row["at_risk"] or "", describe(row, axes),
                        f"`{row['point_id']}`"] for i, (_, row) in enumerate(estimated.head(2 * TOP_LISTED).iterrows())])]
    plots = []
    if len(others):
        plot_screen_vs_fine(two, out / "two_fidelity_scatter.png")
        plots.append(("two_fidelity_scatter.png", f"iteration time on `{fine}` against `{screen}` for every refined "
                      "point (log-log, the line y = x), calibration sample and at-risk points marked"))
        plot_calibration(two, out / "calibration_error.png")
        plots.append(("calibration_error.png", f"the screen's error ({fine} / {screen} - 1) over the calibration "
                      "sample and over all refined points"))
    return lines, plots


def plot_screen_vs_fine(two: TwoFidelity, path: Path) -> Path:
    """Refined points: `fine_s` against `screen_s` (ms, log-log) with the line y = x; the
    calibration sample, the top points and the at-risk points marked."""
    refined = two.points[two.points["refined"]]
    fig, (ax,) = _figure(1, width=6.4, height=5.2)
    x, y = refined["screen_s"] * MS, refined["fine_s"] * MS
    low, high = min(x.min(), y.min()) / 1.5, max(x.max(), y.max()) * 1.5
    ax.plot([low, high], [low, high], color="#888888", linestyle="--", linewidth=1, label="y = x (no error)")
    roles = refined["reasons"].fillna("").str.split(",")
    for mask, style in (
            (roles.map(lambda r: TOP in r), dict(marker="o", s=70, facecolors="none", edgecolors="#55a868",
                                                  linewidths=1.5, label="top by the screen")),
            (roles.map(lambda r: SAMPLE in r), dict(marker="s", s=28, color="#4c72b0", label="calibration sample")),
            (refined["at_risk"] != "", dict(marker="x", s=45, color="#c44e52", linewidths=1.5,
                                           label="at risk (screen)"))):
        mask = mask.astype(bool)
        if mask.any():
            ax.scatter(x[mask], y[mask], **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    _plain_log_ticks(ax, "x")
    _plain_log_ticks(ax, "y")
    ax.set_xlabel(f"iteration time, {two.screen_backend} screen (ms)")
    ax.set_ylabel(f"iteration time, {two.fine_backend} (ms)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.suptitle(f"Screen against refinement: {len(refined)} refined points of {len(two.points)}")
    fig.savefig(path, dpi=100)
    return path


def plot_calibration(two: TwoFidelity, path: Path) -> Path:
    """The screen's error (%) over the calibration sample and over all refined points, as dots per
    group with the calibrated band shaded (a symmetric log scale when errors span decades)."""
    fig, (ax,) = _figure(1, width=6.4, height=3.6)
    groups = [("calibration sample", two.sample_errors * 100, "#4c72b0"),
              ("all refined points", two.points["error"].dropna() * 100, "#888888")]
    for row, (label, values, colour) in enumerate(groups):
        jitter = np.random.default_rng(row).uniform(-0.15, 0.15, len(values))  # fixed: same plot every time
        ax.scatter(values, np.full(len(values), row) + jitter, s=18, color=colour, alpha=0.8)
    band = two.band
    if band is not None:
        ax.axvspan(band[0] * 100, band[1] * 100, color="#4c72b0", alpha=0.15, label="calibrated band")
        ax.legend(fontsize="small", loc="lower right")
    ax.axvline(0, color="#444444", linewidth=1)
    everything = groups[1][1]
    if len(everything) and everything.abs().max() > 100:
        ax.set_xscale("symlog", linthresh=10)
    ax.set_yticks(range(len(groups)), [f"{label} ({len(values)})" for label, values, _ in groups])
    ax.set_ylim(-0.6, len(groups) - 0.4)
    ax.set_xlabel(f"screen error: {two.fine_backend} / {two.screen_backend} - 1 (%)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("How far the screen is from the refinement")
    fig.savefig(path, dpi=100)
    return path


def _rto_lines(runs: pd.DataFrame, flows: pd.DataFrame, unit: str) -> list[str]:
    """How many completed messages (flows) waited for a retransmission timeout, per workload, on
    the backends that count timeouts (packet)."""
    counted = flows[flows["fct_s"].notna() & flows["timeouts"].notna()]
    if counted.empty:
        return []
    workload = runs.set_index("run_id")["workload"] if "workload" in runs else None
    key = counted["run_id"].map(workload) if workload is not None and workload.notna().all() else None
    groups = counted.groupby(key.fillna("all")) if key is not None else [("all runs", counted)]
    parts = [f"{name}: {int((part['timeouts'] > 0).sum()):,} of {len(part):,} ({(part['timeouts'] > 0).mean():.2%})"
             for name, part in groups]
    return ["", f"Completed {unit} that waited for a retransmission timeout (packet backend): " + "; ".join(parts) + "."]


def _quarantine_lines(path: Path) -> list[str]:
    """A line on the parts moved to `quarantine/` (unreadable: their rows are not in this report)."""
    parts = quarantined_parts(path)
    if not parts:
        return []
    tables = pd.Series([part.parent.name for part in parts]).value_counts()
    return ["", f"**{len(parts)} unreadable parts were moved to `{path / QUARANTINE}/`** ("
            + ", ".join(f"{table} {count}" for table, count in tables.items())
            + "): their rows are not in this report; a resumed sweep runs again the runs that lost rows."]


def build_report(path: str | os.PathLike[str]) -> Path:
    """Write `summary.md` and the plots of the dataset at `path` into `<path>/report/` (replacing an
    earlier report) and return that directory. Raises `ReportError` if there is no run to report."""
    dataset = read_dataset(path)
    out = dataset.path / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.png"), out / SUMMARY_FILE]:
        old.unlink(missing_ok=True)

    runs = dataset.runs
    status = runs["status"].value_counts()
    all_axes, _ = swept_axes(runs)
    lines = [f"# netsweep report: {dataset.name}", "",
             f"Dataset `{dataset.path}`: **{len(runs)} runs** ({dataset.rows_read} rows read; a run stored more "
             "than once counts once, its newest attempt: the one written last).", "",
             f"Status: ok {status.get('ok', 0)}, error {status.get('error', 0)}, timeout {status.get('timeout', 0)}.",
             "", "Workloads: " + ", ".join(f"{kind} {count}" for kind, count in
                                           runs["workload.type"].value_counts().items())
             + "; backends: " + ", ".join(f"{kind} {count}" for kind, count in
                                          runs["engine.backend"].value_counts().items()) + ".", "",
             *_setting_lines(runs, all_axes), *_quarantine_lines(dataset.path), "", "## Swept parameters", "",
             *_axes_lines(all_axes)]
    if dataset.flows_unread:
        lines += ["", f"The `flows` table ({dataset.flows_unread:,} rows) was not read, being larger than "
                  f"{MAX_FLOW_ROWS:,} rows: no completion-time distributions, and a `flows` run's completion "
                  "is its `sim_time_s` (the last ACK, a round trip after the last byte). Query it with DuckDB."]

    plots: list[tuple[str, str]] = []
    two = two_fidelity(runs)
    general = runs
    if two is not None:
        general = runs[runs["engine.backend"] == two.screen_backend]
        screen_axes, labelled = swept_axes(general)
        for axis in screen_axes:  # columns of preset names the axes may have added
            two.points[axis.key] = two.points["point_id"].map(labelled.set_index("point_id")[axis.key])
        two_lines, two_plots = _two_fidelity_section(two, screen_axes, out)
        lines += [*two_lines, "", f"The sections below describe the screening runs (`{two.screen_backend}`), which "
                  "cover every point; the refined ones are above."]
        plots += two_plots
    for kind in METRICS:
        frame = general[(general["workload.type"] == "flows") == (kind == "flows")]
        if frame.empty:
            continue
        axes, frame = swept_axes(frame)
        lines += (_training_section if kind == "training" else _flows_section)(dataset, frame, axes)
        usable = frame[(frame["status"] != "error") & frame[METRICS[kind][0]].notna()]
        if not usable.empty:
            kind_plots, kind_lines = _kind_plots(dataset, kind, usable, axes, out)
            plots += kind_plots
            lines += kind_lines

    lines += _hot_link_lines(dataset)
    lines += _contention_lines(runs)
    lines += _problem_lines(runs)
    if plots:
        lines += ["", "## Plots", "", *(f"- `{name}`: {what}" for name, what in plots)]
    (out / SUMMARY_FILE).write_text("\n".join(lines) + "\n")
    return out


def print_report(path: str | os.PathLike[str], file: TextIO | None = None) -> Path:
    """`build_report`, then print the summary and the path of every plot; return the report directory."""
    file = file or sys.stdout
    out = build_report(path)
    print((out / SUMMARY_FILE).read_text(), file=file)
    print(f"report written to {out}/ ({SUMMARY_FILE} and the plots):", file=file)
    for plot in sorted(out.glob("*.png")):
        print(f"  {plot}", file=file)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m sweep.report results/<name>`; exit code 2 if there is nothing to report."""
    parser = argparse.ArgumentParser(prog="python -m sweep.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a dataset directory, e.g. results/quickstart")
    args = parser.parse_args(argv)
    try:
        print_report(args.dataset)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
