"""Layer descriptions of a training workload: read from ASTRA-sim 1.0 text files, or derived
from a DLRM model description with a roofline compute model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from ..config import AstraWorkload, CollectiveWorkload, ConfigError, DlrmWorkload, SimConfig
from ..units import ns_to_ps

COMM_TYPES = {"NONE": None, "ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather",
              "REDUCESCATTER": "reduce_scatter", "ALLTOALL": "all_to_all"}
PARALLELISM = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
               "MICRO")
# The parallelisms whose line 1 may carry the index of the last bottom-MLP layer (ASTRA-sim 1.0 reads it
# there: `HYBRID_DLRM 4`); without it, the last layer whose name says "bottom".
DLRM_PARALLELISM = ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED")
# ASTRA-sim 1.0's involved dimensions of each pass's collective (Workload::decode_involved_dimensions)
# for the model-parallel families: "all" the whole network, "first" its first (local) dimension only,
# "rest" every other dimension (none at all on a one-dimensional network: no collective is issued).
MODEL_PARALLEL_DIMENSIONS: dict[str, dict[str, str | None]] = {
    "MODEL": {"fwd": "all", "ig": "all", "wg": None},
    "HYBRID_DATA_MODEL": {"fwd": "first", "ig": "first", "wg": "rest"},
    "HYBRID_MODEL_DATA": {"fwd": "rest", "ig": "rest", "wg": "first"},
}
# `workload.path: bundled:astra-sim-1.0/DLRM_HybridParallel.txt` names a workload file shipped inside
# the installed package (engine/workloads/): the same value on every machine, so run_id does not
# depend on where netsweep is installed.
BUNDLED_PREFIX = "bundled:"
BUNDLED_DIR = "workloads"


def bundled_workloads() -> list[str]:
    """The `bundled:` names of the ASTRA-sim text workloads shipped with the engine (licences and
    Chakra traces, `*.et`, left out)."""
    root = files("engine") / BUNDLED_DIR
    return sorted(f"{BUNDLED_PREFIX}{folder.name}/{item.name}" for folder in root.iterdir() if folder.is_dir()
                  for item in folder.iterdir()
                  if item.is_file() and item.name != "LICENSE" and not item.name.endswith(".et"))


def system_bytes(op: str, astra_bytes: int, group_npus: int) -> int:
    """The system layer's size of a collective `op` that ASTRA-sim sizes as `astra_bytes` (a text
    workload's bytes, a Chakra node's `comm_size`), run by groups of `group_npus` NPUs.

    ASTRA-sim's size is the `data_size` its collective constructors take (1.0: Ring.cc,
    HalvingDoubling.cc, AllToAll.cc; 2: the same in astraccl): each NPU's buffer for all-reduce and
    all-to-all, each NPU's input for reduce-scatter (keeping 1/n of it) and for all-gather (ending
    with n times it). The system layer sizes a collective by each NPU's full vector (docs/workloads.md):
    the same for the first three, the gathered result for all-gather."""
    return astra_bytes * group_npus if op == "all_gather" else astra_bytes


def workload_file(path: str) -> Path:
    """The file `workload.path` names: `bundled:<folder>/<file>` (a file shipped with the engine, see
    `bundled_workloads`), or a path of the user's (relative to the working directory). Raises
    ConfigError if there is no such file."""
    if path.startswith(BUNDLED_PREFIX):
        name = path.removeprefix(BUNDLED_PREFIX)
        if path in bundled_workloads():
            return Path(str(files("engine") / BUNDLED_DIR / name))
        raise ConfigError("workload.path", path, f"one of the bundled workloads: {', '.join(bundled_workloads())}")
    file = Path(path)
    if not file.is_file():
        raise ConfigError("workload.path", path, "an existing ASTRA-sim 1.0 workload file, or one of the bundled "
                          f"workloads: {', '.join(bundled_workloads())}")
    return file


@dataclass(frozen=True)
class Comm:
    """A collective a pass issues: `op` (None = none) and its size in the system layer's convention
    (bytes of each NPU's full vector: all-reduce and all-to-all buffer, reduce-scatter input,
    all-gather result; docs/workloads.md)."""

    op: str | None = None
    size_bytes: int = 0


@dataclass(frozen=True)
class Layer:
    """One layer: compute time of each pass (ps) and the collective each pass issues."""

    name: str
    fwd_compute_ps: int
    fwd_comm: Comm
    ig_compute_ps: int
    ig_comm: Comm
    wg_compute_ps: int
    wg_comm: Comm
    update_ps: int = 0  # read from the file but not simulated: ASTRA-sim's compute total excludes it


@dataclass(frozen=True)
class WorkloadSpec:
    """A parallelism strategy and its layers, in execution order."""

    parallelism: str
    layers: tuple[Layer, ...]
    last_bottom_index: int | None = None  # HYBRID_DLRM: as line 1 of the file gives it
    # HYBRID_DLRM: the sparse indices' all-to-all to their tables' NPUs, one batch ahead (see training.py)
    input_comm: Comm = Comm()

    @property
    def last_bottom_layer(self) -> int:
        """HYBRID_DLRM: index of the last bottom-MLP layer (the interaction follows it): the file's
        own (line 1), else the last layer whose name says "bottom"."""
        if self.last_bottom_index is not None:
            return self.last_bottom_index
        bottoms = [i for i, layer in enumerate(self.layers) if "bottom" in layer.name.lower()]
        return bottoms[-1] if bottoms else 0


def _pass_group_npus(parallelism: str, dimension_sizes: tuple[int, ...]) -> dict[str, int]:
    """NPUs in one group of each pass's collective: the whole network, or for the model-parallel
    families the dimensions `MODEL_PARALLEL_DIMENSIONS` gives the pass (1 where it has none)."""
    involved = MODEL_PARALLEL_DIMENSIONS.get(parallelism, {"fwd": "all", "ig": "all", "wg": "all"})
    spans = {"all": dimension_sizes, "first": dimension_sizes[:1], "rest": dimension_sizes[1:], None: ()}
    return {pass_name: math.prod(spans[which]) for pass_name, which in involved.items()}


def parse_astra(path: str, cycle_ps: int, dimension_sizes: tuple[int, ...]) -> WorkloadSpec:
    """Read an ASTRA-sim 1.0 text workload: line 1 the parallelism (for HYBRID_DLRM and
    HYBRID_DLRM_ENHANCED optionally followed by the index of the last bottom-MLP layer), line 2 the
    layer count, then a
    line per layer: name, -1, fwd cycles, fwd type, fwd bytes, ig cycles, type, bytes, wg cycles,
    type, bytes, update delay. `path` as `workload_file` takes it. Sizes are converted from
    ASTRA-sim's convention to the system layer's (`system_bytes`) for groups spanning the network's
    `dimension_sizes` (NPUs per group of each dimension) that each pass uses. Errors name the file,
    the line and what was expected."""
    file = workload_file(path)
    lines = [line.split() for line in file.read_text(errors="replace").splitlines()]
    numbered = [(n + 1, fields) for n, fields in enumerate(lines) if fields]
    if not numbered:
        raise ConfigError("workload.path", path, "a workload file with a parallelism line, a layer count "
                          "and one line per layer (this one is empty)")
    header_line, header = numbered[0]
    parallelism = header[0]
    if parallelism not in PARALLELISM:  # said first: a file that is no workload at all fails here
        raise ConfigError("workload.path", path, f"line {header_line}: parallelism {parallelism!r} is not one of "
                          f"{', '.join(PARALLELISM)} (an ASTRA-sim 1.0 workload file starts with it)")
    if len(numbered) < 2:
        raise ConfigError("workload.path", path, "a workload file with a parallelism line, a layer count "
                          "and one line per layer (this one ends after its parallelism line)")
    count_line, count_fields = numbered[1]
    if not count_fields[0].isdigit() or int(count_fields[0]) < 1:
        raise ConfigError("workload.path", path, f"line {count_line}: a positive layer count, got {count_fields[0]!r}")
    count = int(count_fields[0])
    body = numbered[2:]
    if len(body) != count:
        raise ConfigError("workload.path", path, f"{count} layer lines after line {count_line}, found {len(body)}")
    group_npus = _pass_group_npus(parallelism, dimension_sizes)
    last_bottom_index = None
    if parallelism in DLRM_PARALLELISM and len(header) > 1:
        if not header[1].isdigit() or int(header[1]) >= count:
            raise ConfigError("workload.path", path, f"line 1: the last bottom-MLP layer after {parallelism} must be "
                              f"a layer index in 0..{count - 1}, got {header[1]!r}")
        last_bottom_index = int(header[1])
    layers = tuple(_layer_line(path, line_number, fields, cycle_ps, group_npus) for line_number, fields in body)
    return WorkloadSpec(parallelism, layers, last_bottom_index)


def _layer_line(path: str, line_number: int, fields: list[str], cycle_ps: int,
                group_npus: dict[str, int]) -> Layer:
    """One layer line of an ASTRA-sim 1.0 workload file: name, -1, three compute/comm type/comm bytes
    triples (forward, input gradient, weight gradient) and an update delay."""
    if len(fields) != 12:
        raise ConfigError("workload.path", path, f"line {line_number}: 12 fields (name, -1, then three "
                          f"compute/type/bytes triples and an update delay), found {len(fields)}")

    def number(index: int, what: str) -> int:
        text = fields[index]
        if not text.lstrip("-").isdigit() or int(text) < 0:
            raise ConfigError("workload.path", path, f"line {line_number}: {what} must be a non-negative "
                              f"integer, got {text!r}")
        return int(text)

    def comm(index: int, pass_name: str) -> Comm:
        kind = fields[index]
        if kind not in COMM_TYPES:
            raise ConfigError("workload.path", path, f"line {line_number}: comm type {kind!r} is not one "
                              f"of {', '.join(COMM_TYPES)}")
        size, op = number(index + 1, "comm bytes"), COMM_TYPES[kind]
        return Comm(op, system_bytes(op, size, group_npus[pass_name])) if op and size else Comm()

    return Layer(
        name=fields[0],
        fwd_compute_ps=number(2, "forward compute cycles") * cycle_ps, fwd_comm=comm(3, "fwd"),
        ig_compute_ps=number(5, "input-grad compute cycles") * cycle_ps, ig_comm=comm(6, "ig"),
        wg_compute_ps=number(8, "weight-grad compute cycles") * cycle_ps, wg_comm=comm(9, "wg"),
        update_ps=number(11, "update delay") * cycle_ps,
    )


def _roofline_ps(flops: float, memory_bytes: float, tflops: float, hbm_gbps: float) -> int:
    """Compute time of a kernel: the slower of its arithmetic and its memory traffic."""
    compute_s = flops / (tflops * 1e12)  # TFLOP/s -> FLOP/s
    memory_s = memory_bytes / (hbm_gbps * 1e9 / 8)  # Gb/s -> bytes/s
    return round(max(compute_s, memory_s) * 1e12)  # s -> ps


def table_wise_lookups(multi_hot: list[int], npus: int) -> int:
    """Lookups per sample on the busiest NPU when whole tables are placed on NPUs (table-wise
    sharding), greedily: the table with the most lookups per sample first, each onto the least
    loaded NPU (ties: the lowest index). With one lookup per table this is ceil(tables / npus)."""
    loads = [0] * npus
    for hot in sorted(multi_hot, reverse=True):
        loads[loads.index(min(loads))] += hot
    return max(loads)


def dlrm_layers(num_tables: int, emb_dim: int, dense_features: int, bottom_mlp: list[int],
                top_mlp: list[int], batch_per_npu: int, dtype_bytes: int, npus: int,
                npu_tflops: float, hbm_gbps: float, interaction: str = "dot", dcn_layers: int = 3,
                dcn_low_rank: int = 512, multi_hot: list[int] | None = None, index_bytes: int = 0) -> WorkloadSpec:
    """A hybrid-parallel DLRM (Naumov et al. 2019; DLRM-DCNv2 of MLPerf Training): embedding tables
    placed whole on NPUs (model parallel, all-to-all of looked-up vectors), bottom MLP, interaction
    and top MLP replicated (data parallel, weight-gradient all-reduce).

    Per NPU: table t is looked up `multi_hot[t]` times per sample (one if None) and the looked-up
    rows are summed into one vector (pooling); the embedding layer reads, for the whole global
    batch, the rows of the tables of the busiest NPU (`table_wise_lookups`); the embedding all-to-all
    moves batch_per_npu x num_tables x emb_dim x dtype bytes (pooled vectors, forward and backward);
    with `index_bytes` > 0 the sparse indices, batch_per_npu x sum(multi_hot) x index_bytes, first
    go to their tables' NPUs in an input all-to-all (`WorkloadSpec.input_comm`). An MLP layer of
    `fan_in` -> `fan_out` does 2 x batch x fan_in x fan_out FLOPs per pass and all-reduces
    (fan_in x fan_out + fan_out) x dtype bytes of gradient. The bottom MLP ends at emb_dim.

    Interaction `dot`: no layer of its own (its compute is not modelled); the top MLP's input is
    emb_dim + (T+1) T / 2 features. `dcn` (Wang et al. 2021, DCN-V2, low-rank): the bottom MLP's
    output and the T pooled vectors are concatenated into x0 of d = (T+1) emb_dim features, then
    `dcn_layers` cross layers x_{l+1} = x0 * (U_l (V_l^T x_l) + b_l) + x_l with U_l, V_l of d x r
    (r = `dcn_low_rank`): 2 d r + d weights each, 4 d r + 3 d FLOPs per sample per pass (two
    matrix-vector products, the bias, the element-wise product and the residual sum), each a layer
    with its own weight-gradient all-reduce; the top MLP's input is d.
    """
    layers = []
    batch = batch_per_npu
    hot = list(multi_hot) if multi_hot is not None else [1] * num_tables
    # the global batch's rows of the busiest NPU's tables
    lookup_bytes = npus * batch * table_wise_lookups(hot, npus) * emb_dim * dtype_bytes
    emb_ps = _roofline_ps(0, lookup_bytes, npu_tflops, hbm_gbps)
    a2a_bytes = batch * num_tables * emb_dim * dtype_bytes
    layers.append(Layer("embedding", emb_ps, Comm("all_to_all", a2a_bytes), emb_ps,
                        Comm("all_to_all", a2a_bytes), emb_ps, Comm()))
    input_comm = Comm("all_to_all", batch * sum(hot) * index_bytes) if index_bytes else Comm()

    def layer(name: str, flops_per_sample: float, weights: int, width_per_sample: int) -> Layer:
        """A data-parallel layer: the same roofline time for each pass; `weights` values, read per
        pass and all-reduced; `width_per_sample` activation values read or written per sample."""
        weight_bytes = weights * dtype_bytes
        memory_bytes = weight_bytes + batch * width_per_sample * dtype_bytes
        ps = _roofline_ps(batch * flops_per_sample, memory_bytes, npu_tflops, hbm_gbps)
        return Layer(name, ps, Comm(), ps, Comm(), ps, Comm("all_reduce", weight_bytes))

    def mlp(name: str, widths: list[int]) -> None:
        for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
            layers.append(layer(f"{name}_{i}", 2.0 * fan_in * fan_out, fan_in * fan_out + fan_out, fan_in + fan_out))

    mlp("mlp_bottom", [dense_features] + list(bottom_mlp))
    if interaction == "dcn":
        d, r = (num_tables + 1) * emb_dim, dcn_low_rank
        for i in range(dcn_layers):
            # activations: x0 and x_l read, V^T x_l (r values) written and read, x_{l+1} written
            layers.append(layer(f"dcn_cross_{i}", 4.0 * d * r + 3 * d, 2 * d * r + d, 3 * d + r))
        top_input = d
    else:
        top_input = emb_dim + (num_tables + 1) * num_tables // 2
    mlp("mlp_top", [top_input] + list(top_mlp))
    return WorkloadSpec("HYBRID_DLRM", tuple(layers), input_comm=input_comm)


def workload_spec(config: SimConfig, dimension_sizes: tuple[int, ...]) -> WorkloadSpec:
    """The layers of the configured `dlrm`, `astra` or `collective` workload on a network whose
    collective dimensions have groups of `dimension_sizes` NPUs (`Topology.dimensions`)."""
    wl = config.workload
    if isinstance(wl, DlrmWorkload):
        return dlrm_layers(wl.num_tables, wl.emb_dim, wl.dense_features, list(wl.bottom_mlp), list(wl.top_mlp),
                           wl.batch_per_npu, wl.dtype_bytes, config.network.npus, wl.npu_tflops, wl.hbm_gbps,
                           wl.interaction, wl.dcn_layers, wl.dcn_low_rank,
                           None if wl.multi_hot is None else list(wl.multi_hot), wl.index_bytes)
    if isinstance(wl, AstraWorkload):
        assert wl.path is not None
        return parse_astra(wl.path, ns_to_ps(wl.cycle_ns), dimension_sizes)
    if isinstance(wl, CollectiveWorkload):
        return WorkloadSpec("MICRO", (Layer("collective", 0, Comm(wl.op, wl.bytes), 0, Comm(), 0, Comm()),))
    raise ValueError(f"workload type {wl.type!r} has no layers")
