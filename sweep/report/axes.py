"""What was swept: the axes of a dataset (config columns that vary together), their values in order,
and every label the report prints for them, in words with units.

A swept parameter is a config column with more than one distinct value among the runs, but for `seed`:
runs that differ only by seed are replicas of one point (`replicate.until_ci_pct`, or a grid of seeds),
shown as their mean and its interval, never as a parameter (`point_runs`). Columns that
another swept column determines (the keys a `workload=dlrm_small,dlrm_large` sweep changes, the keys
only one topology has) join its axis. An axis is named after the column that names its values: the
section's naming column (`network.topology`, `tcp.cc`, `workload.type`) where its values are the
presets the runs were composed from, else the runs' preset column (`network`, `workload`: stored
in every runs row by the sweep), else its column with the most values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from engine.backends import BACKEND_NAMES, backend_class
from engine.backends.base import NetworkBackend
from engine.config import TOPOLOGY_CONFIGS

from ..replicate import mean_interval
from ..runner import CONFIG_GROUPS
from ..schema import PRESET_COLUMNS

# Config columns: `seed` and every leaf of these sections (`name`, `results_dir`, `ray.*` say where
# and how a run executed, not what it simulated).
CONFIG_SECTIONS = ("engine", *CONFIG_GROUPS)
# Config leaves that choose what a run records, not what it simulates: never a swept parameter.
RECORDING_COLUMNS = ("engine.link_stats",)
# A column that names its section's preset labels any axis it belongs to.
NAME_COLUMNS = ("network.topology", "tcp.cc", "workload.type")
# Units of config leaves (DESIGN.md: units are in the key names): whole names, then suffixes.
LEAF_UNITS = {"npus": "NPUs", "bytes": "bytes per NPU", "bytes_per_flow": "bytes", "splits": "chunks",
              "senders": "senders", "hosts_per_leaf": "hosts", "npus_per_node": "NPUs",
              "batch_per_npu": "samples", "dtype_bytes": "bytes"}
SUFFIX_UNITS = (("_gbps", "Gb/s"), ("_tflops", "TFLOP/s"), ("_us", "µs"), ("_ms", "ms"), ("_ns", "ns"),
                ("_s", "s"), ("_kb", "KiB"), ("_bytes", "bytes"), ("_pkts", "segments"))
# Config keys in words, for labels: the unit follows once, in brackets ("minimum RTO (ms)"), unless
# the words name it already ("NPUs"). A key not listed is its leaf without the unit suffix, in words.
KEY_WORDS = {
    "seed": "seed", "engine.backend": "backend", "network": "network", "tcp": "TCP",
    "system": "system", "workload": "workload",
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
# Values shown as their names are written (congestion controls); any other value as stored.
# Presets and values in words, for ticks, legends and titles (what is not here is shown as it is written)
VALUE_WORDS = {"newreno": "NewReno", "dctcp": "DCTCP", "cubic": "CUBIC", "linux": "Linux",
               **{name: cls.IN_WORDS for name, cls in TOPOLOGY_CONFIGS.items()},
               "dlrm": "DLRM", "dlrm_small": "DLRM small", "dlrm_medium": "DLRM medium", "dlrm_large": "DLRM large",
               "dlrm_dcnv2": "DLRM-DCNv2", "astra_dlrm": "DLRM (ASTRA-sim file)",
               "halving_doubling": "halving-doubling", "double_binary_tree": "double binary tree",
               "local_bw_aware": "local-bandwidth aware"}


def backend_rank(name: str) -> int:
    """Where backend `name` goes, from the lower bound to the most detailed: its class's
    `FIDELITY_RANK`; a name no longer registered goes last."""
    return backend_class(name).FIDELITY_RANK if name in BACKEND_NAMES else len(BACKEND_NAMES)


def backend_classes(names: Iterable[str]) -> dict[str, type[NetworkBackend]]:
    """The registered ones of backend `names` (a dataset's `engine.backend` values), with their classes."""
    return {name: backend_class(name) for name in names if name in BACKEND_NAMES}


def is_null(value: Any) -> bool:
    """None, pandas' NA or a float NaN."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any) -> str:
    """A config value as a short label: integral floats without `.0`, nulls as `null`."""
    if is_null(value):
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else f"{value:g}"
    return str(value)


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


def is_config_column(column: str) -> bool:
    """`seed` and the leaves of the engine, network, tcp, system and workload sections, but for
    those that change what is recorded, not what is simulated (`RECORDING_COLUMNS`)."""
    if column in RECORDING_COLUMNS:
        return False
    return column == "seed" or column.split(".", 1)[0] in CONFIG_SECTIONS and "." in column


@dataclass(frozen=True)
class Axis:
    """A swept parameter: config columns that vary together, shown as one axis.

    `key` is the column of the runs frame holding each run's value on this axis (a config column or
    a preset column); `order` lists its values in plotting order.
    """

    key: str
    columns: tuple[str, ...]
    numeric: bool
    unit: str
    order: tuple[Any, ...]

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

    def tick(self, value: Any) -> str:
        """One value as a tick label under the axis label, which names the parameter and unit."""
        return VALUE_WORDS.get(fmt(value), fmt(value))

    def value_words(self, value: Any) -> str:
        """One value in words with its unit, for legends, titles and tables: a preset or topology by
        its name in words (`leaf-spine`, `DCTCP`), a number with the parameter and unit (`minimum RTO 200 ms`,
        `16 NPUs`, `chunks per collective 4`), a switch as on/off (`delayed ACK on`)."""
        if self.key in PRESET_COLUMNS or self.key in NAME_COLUMNS:
            return VALUE_WORDS.get(fmt(value), fmt(value))
        if is_null(value):
            return f"{self.words} none"
        if isinstance(value, (bool, np.bool_)):
            return f"{self.words} {'on' if value else 'off'}"
        if self.unit == self.words:  # "16 NPUs"
            return f"{fmt(value)} {self.unit}"
        if self.unit and self.unit.split()[0] in self.words.split():  # "chunks per collective 4"
            return f"{self.words} {fmt(value)}"
        return " ".join(part for part in (self.words, VALUE_WORDS.get(fmt(value), fmt(value)), self.unit) if part)


def row_keys(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Each row's values in `columns` as one hashable key (nulls alike)."""
    return pd.Series(list(zip(*(frame[c].map(fmt) for c in columns))), index=frame.index)


def _one_to_one(runs: pd.DataFrame, columns: Sequence[str], names: pd.Series) -> bool:
    """Whether `names` (one per run) and the runs' values in `columns` correspond one to one."""
    pairs = pd.DataFrame({"value": row_keys(runs, columns), "name": names.map(fmt)}).drop_duplicates()
    return not (pairs["value"].duplicated().any() or pairs["name"].duplicated().any())


def _axis_key(runs: pd.DataFrame, leader: str, columns: Sequence[str], determines: Any) -> str:
    """The column naming an axis (see the module docstring)."""
    names = [c for c in columns if c in NAME_COLUMNS and determines(c, leader)]
    sections = {c.split(".", 1)[0] for c in columns}
    preset = next(iter(sections)) if len(sections) == 1 else None
    stored = preset in PRESET_COLUMNS and preset in runs and runs[preset].notna().all()
    if stored and _one_to_one(runs, columns, runs[preset]):
        if names and runs[names[0]].map(fmt).eq(runs[preset]).all():
            return names[0]  # the presets are named after their topology (cc, type): the config says it
        return str(preset)
    return names[0] if names else leader


def swept_axes(runs: pd.DataFrame) -> list[Axis]:
    """The axes swept among `runs`, in config order (network, tcp, system, workload), `seed` never
    among them (see the module docstring). An axis's `key` is a column of `runs`: a config column or a
    preset column."""
    codes = {}
    for column in (c for c in runs.columns if is_config_column(c) and c != "seed"):
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
        axes.append(_axis(runs, _axis_key(runs, leader, columns, determines), tuple(columns)))
    axes.sort(key=lambda axis: min(position[c] for c in axis.columns))  # in config order: network, tcp, ...
    return axes


def _axis(runs: pd.DataFrame, key: str, columns: tuple[str, ...]) -> Axis:
    values = runs[key]
    numeric = (pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
               and values.notna().all())
    distinct = list(pd.unique(values))
    if numeric:
        order = sorted(distinct)
    elif all(v is None or v is pd.NA or isinstance(v, (int, float, np.number)) for v in distinct):
        order = sorted(distinct, key=lambda v: (not pd.isna(v), 0 if pd.isna(v) else v))  # null first
    elif key == "engine.backend":  # from the lower bound to the most detailed
        order = sorted(distinct, key=lambda v: (backend_rank(v), v))
    elif key == "workload" and runs["compute_s"].notna().any():
        # workload presets by model size: the compute of an iteration grows with it
        compute = runs.groupby(key)["compute_s"].median()
        order = sorted(distinct, key=lambda v: (compute.get(v, np.inf), str(v)))
    else:  # the order the sweep ran them in
        first = runs.sort_values("started_at", kind="stable").drop_duplicates(key)[key]
        order = list(first)
    return Axis(key, columns, numeric, unit_of(key) if "." in key else "", tuple(order))


def describe(row: pd.Series, axes: Sequence[Axis]) -> str:
    """A run's place on the swept axes in words (`leaf_spine, DCTCP, minimum RTO 200 ms`); with no
    axis, the presets it was composed from (`network big_switch, TCP newreno, ...`), else its run_id."""
    if axes:
        return ", ".join(axis.value_words(row[axis.key]) for axis in axes)
    presets = [f"{key_words(group)} {row[group]}" for group in PRESET_COLUMNS
               if group in row.index and not is_null(row[group])]
    return ", ".join(presets) or str(row["run_id"])


def point_runs(frame: pd.DataFrame, axes: Sequence[Axis]) -> list[pd.DataFrame]:
    """The runs of each point (a combination of the axes' values: the runs of one point differ only by
    seed), in the axes' order; with no axis, every run is of one point."""
    if not axes:
        return [frame] if not frame.empty else []
    groups = in_axis_order(frame, axes).groupby([a.key for a in axes], dropna=False, sort=False)
    return [part for _, part in groups]


def replicated(frame: pd.DataFrame, axes: Sequence[Axis]) -> bool:
    """Whether some point of `frame` has more than one run (seeds replicate it)."""
    return any(len(part) > 1 for part in point_runs(frame, axes))


def point_means(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, columns: Sequence[str]) -> pd.DataFrame:
    """One row per point of `frame`, in the axes' order: the row of its first seed, with `metric` and
    `columns` the means over its runs, `seeds` its number of runs and `half_width_s` the half-width of
    the 95 % Student-t interval of `metric`'s mean (NaN below two values, 0 for values all equal)."""
    rows = []
    for part in point_runs(frame, axes):
        row = part.sort_values("seed", kind="stable").iloc[0].copy() if "seed" in part else part.iloc[0].copy()
        for column in dict.fromkeys([metric, *columns]):
            row[column] = part[column].astype(float).mean()
        values = [float(value) for value in part[metric].dropna()]
        row["seeds"] = len(part)
        row["half_width_s"] = mean_interval(values)[1] if len(values) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows).infer_objects()


def fixed_words(frame: pd.DataFrame, axes: Sequence[Axis], columns: Sequence[str]) -> str:
    """Those of `columns` that every row of `frame` shares and no axis sweeps, in words (`one switch,
    16 NPUs, minimum RTO 200 ms`): what a plot holds fixed."""
    swept = {c for axis in axes for c in axis.columns} | {axis.key for axis in axes}
    words = []
    for column in columns:
        if column in frame and column not in swept and len(frame) and frame[column].nunique(dropna=False) == 1:
            value = frame[column].iloc[0]
            if column in PRESET_COLUMNS and is_null(value):  # a run given key by key: no preset to name
                continue
            fixed = Axis(column, (column,), False, unit_of(column) if "." in column else "", (value,))
            words.append(fixed.value_words(value))
    return ", ".join(words)


def at(frame: pd.DataFrame, axis: Axis | None, value: Any) -> pd.DataFrame:
    """The rows of `frame` at `value` on `axis` (null matching null; every row without an axis)."""
    if axis is None:
        return frame
    column = frame[axis.key]
    return frame[column.isna() if is_null(value) else column.eq(value).fillna(False).astype(bool)]


def in_axis_order(frame: pd.DataFrame, axes: Sequence[Axis]) -> pd.DataFrame:
    """Rows in the order of the axes' values."""
    if not axes:
        return frame
    keys = {a.key: frame[a.key].map({v: i for i, v in enumerate(a.order)}) for a in axes}
    position = pd.DataFrame(keys, index=frame.index).fillna(-1)
    return frame.loc[position.sort_values(list(keys), kind="stable").index]
