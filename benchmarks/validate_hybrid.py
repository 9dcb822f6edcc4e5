"""Validate `engine.backend=hybrid` against full packet runs (issue 28): the iteration time on lossy
and lossless cases, the rank of fabrics within each (kind, topology, NPUs) group, and "loses packets".

The grid (`grid()`, published in docs/hybrid-backend.md), every case 100 Gb/s NICs, 1 us links, a
60 s simulated-time limit:
- `fabric`: astra_dlrm (2 iterations), NewReno, leaf-spine with 16 hosts a leaf: at 64 and 128 NPUs
  1, 2, 4, 8 or 16 spines x 64 KiB, 128 KiB, 256 KiB, 1 MiB or 4 MiB buffers; at 256 and 512 NPUs
  2, 4 or 16 spines x 128 KiB or 1 MiB; at 1,024 NPUs (1 iteration) 2 or 16 spines x 128 KiB or 1 MiB;
- `threshold`: the same around the buffer that separates loss from none: 64 NPUs with 2 spines (500-612 KiB)
  and 4 spines (240-296 KiB), 128 NPUs with 4 spines (200-328 KiB) and 8 spines (96-152 KiB), 256 NPUs with
  4 spines (304-368 KiB) and 8 spines (96-136 KiB);
- `tcp`: 128 NPUs, (2 spines, 128 KiB), (4, 256 KiB) and (8, 256 KiB), with CUBIC, DCTCP (marking at
  half the buffer), `tcp=linux`, and NewReno and `tcp=linux` with a 1 ms minimum RTO;
- `dlrm`: the `dlrm` preset at 64 and 128 NPUs on (2, 128 KiB), (4, 256 KiB) and (16, 1 MiB);
- `all_to_all`: one all-to-all of 1 MiB an NPU alone, 64-256 NPUs, (2, 128 KiB), (16, 128 KiB), (4, 1 MiB);
- `fat_tree`: astra_dlrm on fat trees (k = 8: pods of 16) of 64 and 128 NPUs, every switch link at 1/2,
  1/4 or 1/8 of the NIC rate, 32 KiB, 64 KiB, 128 KiB or 1 MiB buffers; and 1,024 NPUs (k = 16, 1 iteration)
  at 1/8 with 64 KiB or 1 MiB; hybrid reduces them to pod pairs (`engine.hybrid_fat_tree_group=pod`);
- `fat_tree_edge`: the same, hybrid reducing them to edge-switch pairs (`edge`), against the same packet runs;
- `hierarchical`: astra_dlrm on nodes of 8 GPUs whose NICs are on a leaf-spine of 16 NICs (two nodes) a leaf,
  128, 256 and 512 GPUs, 2, 4 or 16 spines x 128 KiB or 1 MiB (hybrid: groups of whole nodes);
- `rails`: astra_dlrm on rail-optimized nodes of 8 GPUs, 2 nodes a rail leaf, 1 spine (2:1) or 2 (1:1) at
  100 Gb/s, 64 KiB or 1 MiB, PXN, 128, 256 and 512 GPUs (hybrid: groups of nodes, every rail replayed: at
  these sizes they fit its connections' limit), and all-to-alls of 256 KiB and 1 MiB an NPU (2 iterations)
  on 2, 4 and 8 nodes a rail leaf at 2:1 and 1:1, 128-512 GPUs, 64 KiB;
- `rails_one`: the same, hybrid replaying one rail (`engine.hybrid_rails=one`), against the same packet runs.

    python benchmarks/validate_hybrid.py                    # every case not in the CSV yet, on packet, hybrid, phase
    python benchmarks/validate_hybrid.py --backends hybrid --rerun   # hybrid again (after a change), packet kept
    python benchmarks/validate_hybrid.py --match tcp --jobs 2
    python benchmarks/validate_hybrid.py --summarise        # the .md of the CSV, nothing run
    python benchmarks/validate_hybrid.py --match "fat_tree 64" --seed 1   # those cases with seed 1, printed only

Each run is a child process (a 1,024-NPU packet run holds 3.8 GiB); rows are appended to
benchmarks/validate_hybrid.csv as they finish, so an interrupted validation keeps what it ran and the
next invocation runs the rest. The summary (benchmarks/validate_hybrid.md) gives, over the cases both
backends finished (phase's runs only for hybrid's distance from it where nothing is lost): median and
worst |error| of the iteration time on lossy cases (packet timeouts > 0) and on lossless ones,
Spearman's rank correlation within each (kind, topology, NPUs) group (the fabrics and TCP settings a
sweep would rank, for one workload), and recall and
precision of "loses packets" (drops > 0, or past the time limit). A case that ends past the limit on
one backend only is a miss whose error is at least the limit's ratio.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from validate_phase import spearman

import engine
from engine.workload.chakra_schema import COLLECTIVE_COMM_TYPES, NODE_TYPES, AttributeProto, GlobalMetadata, Node
from sweep.cli import compose_config

HERE = Path(__file__).resolve().parent
CSV = HERE / "validate_hybrid.csv"
MIB = 2**20
LIMIT_S = 60.0
ASTRA_DLRM = {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 2}
FIELDS = ["label", "kind", "topology", "npus", "spines", "buffer_kb", "backend", "status", "iteration_time_s",
          "timeouts", "retransmits", "drops", "incast_phases", "hybrid_packet_sims", "wall_s", "peak_rss_mib", "note"]


def preset(group: str, name: str) -> dict[str, Any]:
    """A preset of the sweep's config group (`group=name`) as Hydra composes it, every key its variant has."""
    section = compose_config([f"{group}={name}"])[group]
    assert isinstance(section, dict)
    return section


def leaf_spine(npus: int, spines: int, buffer_kb: float) -> dict[str, Any]:
    """A 100 Gb/s leaf-spine of 16 hosts a leaf."""
    return {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": spines, "uplink_gbps": 100.0,
            "buffer_kb": buffer_kb}


def chakra_trace(npus: int) -> str:
    """A Chakra trace of `npus` NPUs (written once, in the temporary directory; its path prefix): each NPU
    computes 50 us, runs a 256 KiB all-to-all over every NPU, then a 1 MiB all-reduce over its half of the NPUs
    (a process group of npus / 2, spanning leaves), then computes 50 us (no point-to-point send: the hybrid
    refuses them)."""
    folder = Path(tempfile.gettempdir()) / "netsweep_validate_hybrid" / f"process_groups_v2_{npus}"
    prefix = folder / "trace"
    if (folder / f"trace.{npus - 1}.et").exists():
        return str(prefix)
    folder.mkdir(parents=True, exist_ok=True)
    node_type = {name: number for number, name in NODE_TYPES.items()}
    comm_type = {name: number for number, name in COLLECTIVE_COMM_TYPES.items()}

    def node(node_id: int, kind: str, deps: list[int], duration_us: int = 0, **attributes: Any) -> Node:
        built = Node(id=node_id, name=f"n{node_id}", type=node_type[kind], duration_micros=duration_us,
                     data_deps=deps)
        for key, value in attributes.items():
            built.attr.append(AttributeProto(name=key, string_val=value) if isinstance(value, str)
                              else AttributeProto(name=key, int64_val=value))
        return built

    half = npus // 2
    for rank in range(npus):
        nodes = [node(1, "COMP_NODE", [], 50),
                 node(2, "COMM_COLL_NODE", [1], comm_type=comm_type["ALL_TO_ALL"], comm_size=MIB // 4),
                 node(3, "COMM_COLL_NODE", [2], comm_type=comm_type["ALL_REDUCE"], comm_size=MIB,
                      pg_name=f"half{rank // half}"),
                 node(4, "COMP_NODE", [3], 50)]
        written = folder / f"trace.{rank}.et.part"
        with written.open("wb") as handle:
            for message in [GlobalMetadata(version="0.0.4"), *nodes]:
                data = message.SerializeToString()
                length, varint = len(data), bytearray()
                while length >= 0x80:  # the length as a base-128 varint, as Chakra's tools write it
                    varint.append(length & 0x7F | 0x80)
                    length >>= 7
                varint.append(length)
                handle.write(bytes(varint) + data)
        written.replace(folder / f"trace.{rank}.et")  # whole files only, whichever process writes them
    return str(prefix)


def case(kind: str, label: str, network: dict[str, Any], workload: dict[str, Any],
         tcp: dict[str, Any] | None = None, hybrid: dict[str, Any] | None = None,
         reference: str | None = None, system: dict[str, Any] | None = None) -> dict[str, Any]:
    """One configuration of the grid; `hybrid`: engine keys of the hybrid run only, and `reference` the
    case whose packet and phase runs it shares (those backends ignore them); `system`: its system keys."""
    return {"kind": kind, "label": label, "network": network, "workload": workload, "tcp": tcp or {},
            "hybrid": hybrid or {}, "reference": reference, "system": system or {}}


def grid() -> Iterator[dict[str, Any]]:
    """Every case of the published grid (module docstring)."""
    for npus in (64, 128):
        for spines in (1, 2, 4, 8, 16):
            for buffer_kb in (64.0, 128.0, 256.0, 1024.0, 4096.0):
                yield case("fabric", f"fabric {npus} s{spines} b{buffer_kb:.0f}", leaf_spine(npus, spines, buffer_kb),
                           ASTRA_DLRM)
    for npus in (256, 512):
        for spines in (2, 4, 16):
            for buffer_kb in (128.0, 1024.0):
                yield case("fabric", f"fabric {npus} s{spines} b{buffer_kb:.0f}", leaf_spine(npus, spines, buffer_kb),
                           ASTRA_DLRM)
    for spines in (2, 16):
        for buffer_kb in (128.0, 1024.0):
            yield case("fabric", f"fabric 1024 s{spines} b{buffer_kb:.0f}", leaf_spine(1024, spines, buffer_kb),
                       {**ASTRA_DLRM, "iterations": 1})
    for npus, spines, buffers_kb in ((64, 2, range(500, 620, 16)), (64, 4, range(240, 300, 8)),
                                     (128, 4, range(200, 330, 16)), (128, 8, range(96, 160, 8)),
                                     (256, 4, range(304, 376, 8)), (256, 8, range(96, 144, 8))):
        for buffer_kb in buffers_kb:  # around the buffer that separates loss from none
            yield case("threshold", f"threshold {npus} s{spines} b{buffer_kb}",
                       leaf_spine(npus, spines, float(buffer_kb)), ASTRA_DLRM)
    variants = {"cubic": preset("tcp", "cubic"), "dctcp": preset("tcp", "dctcp"), "linux": preset("tcp", "linux"),
                "newreno rto1ms": {**preset("tcp", "newreno"), "min_rto_ms": 1.0},
                "linux rto1ms": {**preset("tcp", "linux"), "min_rto_ms": 1.0}}
    for spines, buffer_kb in ((2, 128.0), (4, 256.0), (8, 256.0)):
        for name, tcp in variants.items():
            network = leaf_spine(128, spines, buffer_kb)
            if tcp["cc"] == "dctcp":
                network["ecn_threshold_kb"] = buffer_kb / 2
            yield case("tcp", f"tcp {name} 128 s{spines} b{buffer_kb:.0f}", network, ASTRA_DLRM, tcp)
    for npus in (64, 128):
        for spines, buffer_kb in ((2, 128.0), (4, 256.0), (16, 1024.0)):
            yield case("dlrm", f"dlrm {npus} s{spines} b{buffer_kb:.0f}", leaf_spine(npus, spines, buffer_kb),
                       preset("workload", "dlrm"))
    for npus in (64, 128, 256):
        for spines, buffer_kb in ((2, 128.0), (16, 128.0), (4, 1024.0)):
            yield case("all_to_all", f"all_to_all {npus} s{spines} b{buffer_kb:.0f}",
                       leaf_spine(npus, spines, buffer_kb),
                       {"type": "collective", "op": "all_to_all", "bytes": MIB, "iterations": 1})
    fat_trees = [(npus, ratio, buffer_kb, ASTRA_DLRM) for npus in (64, 128) for ratio in (2, 4, 8)
                 for buffer_kb in (32.0, 64.0, 128.0, 1024.0)]
    fat_trees += [(1024, 8, buffer_kb, {**ASTRA_DLRM, "iterations": 1}) for buffer_kb in (64.0, 1024.0)]
    for npus, ratio, buffer_kb, workload in fat_trees:  # reduced to pod pairs, then to edge-switch pairs
        network = {"topology": "fat_tree", "npus": npus, "uplink_gbps": 100.0 / ratio, "buffer_kb": buffer_kb}
        label = f"fat_tree {npus} {ratio}:1 b{buffer_kb:.0f}"
        yield case("fat_tree", label, network, workload, hybrid={"hybrid_fat_tree_group": "pod"})
        yield case("fat_tree_edge", label.replace("fat_tree", "fat_tree edge"), network, workload,
                   hybrid={"hybrid_fat_tree_group": "edge"}, reference=label)
    halving_doubling = preset("system", "halving_doubling")
    # double binary trees where hybrid simulates the whole network (it refuses them where it folds groups)
    for name, system, sizes in (("halving_doubling", halving_doubling, (64, 128, 256)),
                                ("double_binary_tree", {"all_reduce": "double_binary_tree"}, (64,))):
        for npus in sizes:
            for spines, buffer_kb in ((2, 128.0), (4, 256.0), (16, 1024.0)):
                yield case("algorithm", f"{name} {npus} s{spines} b{buffer_kb:.0f}",
                           leaf_spine(npus, spines, buffer_kb), ASTRA_DLRM, system=system)
            for buffer_kb in (64.0, 1024.0) if npus < 256 else ():  # k = 8 (pods of 16): 128 NPUs on pod pairs
                network = {"topology": "fat_tree", "npus": npus, "uplink_gbps": 25.0, "buffer_kb": buffer_kb}
                yield case("algorithm", f"{name} fat_tree {npus} 4:1 b{buffer_kb:.0f}", network, ASTRA_DLRM,
                           hybrid={"hybrid_fat_tree_group": "pod"}, system=system)
    for npus in (64, 128):  # a Chakra trace's process groups and point-to-point sends (`chakra_trace`)
        for name, system in (("ring", {}), ("halving_doubling", halving_doubling)):
            for spines, buffer_kb in ((2, 128.0), (16, 1024.0)):
                yield case("algorithm", f"chakra {name} {npus} s{spines} b{buffer_kb:.0f}",
                           leaf_spine(npus, spines, buffer_kb),
                           {"type": "chakra", "path": chakra_trace(npus), "duration_unit": "us", "iterations": 2},
                           system=system)
    yield from nodes_grid()


def nodes_grid() -> Iterator[dict[str, Any]]:
    """The multi-GPU node cases: `hierarchical` and `rails` (module docstring)."""
    for npus in (128, 256, 512):
        for spines in (2, 4, 16):
            for buffer_kb in (128.0, 1024.0):
                network = {"topology": "hierarchical", "npus": npus, "npus_per_node": 8, "scaleout": "leaf_spine",
                           "hosts_per_leaf": 16, "spines": spines, "uplink_gbps": 100.0, "buffer_kb": buffer_kb}
                yield case("hierarchical", f"hierarchical {npus} s{spines} b{buffer_kb:.0f}", network, ASTRA_DLRM)
        for spines in (1, 2):
            for buffer_kb in (64.0, 1024.0):
                network = {"topology": "rail_optimized", "npus": npus, "npus_per_node": 8, "hosts_per_leaf": 2,
                           "spines": spines, "uplink_gbps": 100.0, "buffer_kb": buffer_kb}
                yield from rails_cases(f"rails {npus} s{spines} b{buffer_kb:.0f}", network, ASTRA_DLRM)
    # all-to-alls alone, on 2, 4 and 8 nodes a rail leaf, 2:1 and 1:1 (`rails_cases`)
    for npus, nodes_per_leaf, spines, kib in ((128, 2, 1, 256), (256, 2, 1, 256), (256, 4, 2, 1024),
                                              (512, 8, 4, 1024), (512, 8, 8, 1024)):
        network = {"topology": "rail_optimized", "npus": npus, "npus_per_node": 8, "hosts_per_leaf": nodes_per_leaf,
                   "spines": spines, "uplink_gbps": 100.0, "buffer_kb": 64.0}
        yield from rails_cases(f"rails a2a {kib} KiB {npus} n{nodes_per_leaf} s{spines} b64", network,
                               {"type": "collective", "op": "all_to_all", "bytes": kib * 1024, "iterations": 2})


def rails_cases(label: str, network: dict[str, Any], workload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A rail-optimized case (`rails`: hybrid replays every rail) and its `rails_one` twin (one rail replayed,
    `engine.hybrid_rails=one`; against the same packet and phase runs)."""
    yield case("rails", label, network, workload)
    yield case("rails_one", label.replace("rails", "rails one"), network, workload, hybrid={"hybrid_rails": "one"},
               reference=label)


def run(item: tuple[dict[str, Any], str]) -> dict[str, Any]:
    """One case on one backend, in a child process: its runs row's figures, wall time and peak RSS."""
    spec, backend = item
    hybrid = spec["hybrid"] if backend == "hybrid" else {}
    config = {"seed": spec.get("seed", 0), "engine": {"backend": backend, "max_sim_time_s": LIMIT_S, **hybrid},
              "network": {"link_gbps": 100.0, "link_latency_us": 1.0, **spec["network"]},
              "tcp": spec["tcp"], "system": spec["system"], "workload": spec["workload"]}
    start = time.perf_counter()
    net = spec["network"]
    result = {"label": spec["label"], "kind": spec["kind"], "topology": net["topology"], "npus": net["npus"],
              "spines": net.get("spines"), "buffer_kb": net["buffer_kb"], "backend": backend, "note": ""}
    try:
        row = engine.run(config)["runs"][0]
    except engine.ConfigError as exc:  # a case the backend refuses (said in the summary)
        return {**result, "status": "refused", "note": str(exc), "wall_s": time.perf_counter() - start}
    return {**result, **{key: row.get(key) for key in FIELDS if key in row and key not in result},
            "wall_s": round(time.perf_counter() - start, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def read_rows() -> list[dict[str, Any]]:
    """The CSV's rows, numbers parsed."""
    if not CSV.exists():
        return []
    rows = []
    with CSV.open() as handle:
        for row in csv.DictReader(handle):
            parsed: dict[str, Any] = {}
            for key, value in row.items():
                try:
                    parsed[key] = float(value) if value not in ("", None) else None
                except ValueError:
                    parsed[key] = value
            rows.append(parsed)
    return rows


def append_row(row: dict[str, Any]) -> None:
    """Add one finished run to the CSV (the header first if it is new)."""
    new = not CSV.exists()
    with CSV.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({key: row.get(key) for key in FIELDS})


def loses(row: dict[str, Any]) -> bool:
    """Whether a run lost packets: drops, or still going at the time limit (an RTO chain)."""
    return row["status"] == "timeout" or (row["drops"] or 0) > 0


# a non-default reduction, or other algorithms: on their own
ALTERNATIVE_KINDS = ("fat_tree_edge", "rails_one", "algorithm")


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of the CSV's rows (module docstring): the grid's default reductions, then
    each of `ALTERNATIVE_KINDS` on its own."""
    references = {spec["label"]: spec["reference"] for spec in grid() if spec["reference"]}
    text = kind_summary(rows, references, None)
    for alternative in ALTERNATIVE_KINDS:
        text += f"\n## `{alternative}`\n\n" + kind_summary(rows, references, alternative)
    return text


def kind_summary(rows: list[dict[str, Any]], references: dict[str, str], alternative: str | None) -> str:
    """The summary of the cases of kind `alternative`, or with None of every kind but `ALTERNATIVE_KINDS`;
    `references`: the case whose packet and phase runs a case shares, by label."""
    by_label: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_label.setdefault(row["label"], {})[row["backend"]] = row
    lines = ["| case | packet ms | timeouts | hybrid ms | timeouts (scaled) | error | packet sims | "
             "wall packet / hybrid s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    # per class: |error|, the case, and the factor between the two times (>= 1)
    errors: dict[str, list[tuple[float, str, float]]] = {"lossy": [], "lossless": []}
    misses, refused, both_past = [], [], []
    groups: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    outcomes: Counter[tuple[bool, bool]] = Counter()  # (packet loses packets, hybrid does)
    from_phase: list[float] = []  # |hybrid / phase - 1| on the lossless cases both ran
    for label, runs in by_label.items():
        shared = by_label.get(references.get(label, label), {})  # the packet and phase runs it shares
        packet, hybrid, phase = shared.get("packet"), runs.get("hybrid"), shared.get("phase")
        if packet is None or hybrid is None or (
                hybrid["kind"] != alternative if alternative else hybrid["kind"] in ALTERNATIVE_KINDS):
            continue
        if phase is not None and hybrid["status"] == phase["status"] == "ok" and not loses(packet):
            from_phase.append(abs(hybrid["iteration_time_s"] / phase["iteration_time_s"] - 1))
        if hybrid["status"] == "refused":
            refused.append(f"{label}: {hybrid['note']}")
            continue
        packet_loses, hybrid_loses = loses(packet), loses(hybrid)
        outcomes[(packet_loses, hybrid_loses)] += 1
        lossy = (packet["timeouts"] or 0) > 0 or packet["status"] == "timeout"

        def ms(row: dict[str, Any]) -> str:
            return f"> {LIMIT_S * 1e3:,.0f}" if row["status"] == "timeout" else f"{row['iteration_time_s'] * 1e3:,.3f}"

        error_text = ""
        if packet["status"] == "ok" and hybrid["status"] == "ok":
            error = hybrid["iteration_time_s"] / packet["iteration_time_s"] - 1
            errors["lossy" if lossy else "lossless"].append((abs(error), label, max(1 + error, 1 / (1 + error))))
            groups.setdefault((hybrid["kind"], packet["topology"], int(packet["npus"])), []).append(
                (hybrid["iteration_time_s"], packet["iteration_time_s"]))
            error_text = f"{100 * error:+.1f} %"
        elif packet["status"] == "timeout" and hybrid["status"] == "timeout":
            both_past.append(label)
            error_text = "both past the limit"
        else:
            misses.append(label)
            error_text = "past the limit on one only"
        lines.append(f"| {label} | {ms(packet)} | {int(packet['timeouts'] or 0):,} | {ms(hybrid)} | "
                     f"{int(hybrid['timeouts'] or 0):,} | {error_text} | {int(hybrid['hybrid_packet_sims'] or 0)} | "
                     f"{packet['wall_s']:.1f} / {hybrid['wall_s']:.1f} |")
    head = []
    for name, values in errors.items():
        if values:
            values.sort()
            within_factor = sum(1 for _, _, factor in values if factor <= 1.5)
            head.append(f"- {name}: {len(values)} cases, "
                        f"median |error| {100 * statistics.median(e for e, _, _ in values):.2f} %, "
                        f"worst {100 * values[-1][0]:.1f} % ({values[-1][1]}, a factor {values[-1][2]:.2f}); "
                        f"within a factor 1.5: {within_factor}")
    if from_phase:
        head.append(f"- lossless, hybrid against phase: {len(from_phase)} cases, "
                    f"worst |error| {100 * max(from_phase):.4f} %")
    correlations = {key: spearman([a for a, _ in pairs], [b for _, b in pairs]) for key, pairs in groups.items()
                    if len(pairs) > 2 and len({b for _, b in pairs}) > 1}
    if correlations:
        head.append("- Spearman rank correlation of the iteration times within each (kind, topology, NPUs) group of 3 "
                    "or more cases both finished: " + ", ".join(
                        f"{kind} {topology} {npus}: {value:.3f}" for (kind, topology, npus), value
                        in sorted(correlations.items())))
    tp, fn, fp = outcomes[(True, True)], outcomes[(True, False)], outcomes[(False, True)]
    head.append(f"- loses packets: recall {tp}/{tp + fn}, precision {tp}/{tp + fp}")
    if both_past:
        head.append(f"- past the {LIMIT_S:.0f} s limit on both: {len(both_past)} ({', '.join(both_past)})")
    if misses:
        head.append(f"- past the limit on one backend only: {', '.join(misses)}")
    if refused:
        head.append(f"- refused by hybrid: {len(refused)} ({refused[0]})")
    return "\n".join(head + [""] + lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["packet", "hybrid", "phase"],
                        choices=("packet", "hybrid", "phase"))
    parser.add_argument("--match", default=None, help="only the cases whose label contains this")
    parser.add_argument("--rerun", action="store_true",
                        help="run the chosen backends' cases again (their old rows dropped)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process")
    parser.add_argument("--summarise", action="store_true", help="write the .md of the CSV, run nothing")
    parser.add_argument("--seed", type=int, default=None,
                        help="run the matched cases with this seed instead of 0 and print their times, storing nothing "
                             "(how much a case's figure owes to luck)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        for spec in grid():
            if not args.match or args.match in spec["label"]:
                for backend in args.backends:
                    row = run(({**spec, "seed": args.seed}, backend))
                    print(f"{row['label']} {backend} seed {args.seed}: {row['status']} "
                          f"{row.get('iteration_time_s')} s, {row.get('timeouts')} timeouts")
        return
    if not args.summarise:
        cases = [spec for spec in grid() if not args.match or args.match in spec["label"]]
        rows = read_rows()
        if args.rerun:
            labels = {spec["label"] for spec in cases}
            kept = [row for row in rows if not (row["backend"] in args.backends and row["label"] in labels)]
            CSV.unlink(missing_ok=True)
            for row in kept:
                append_row(row)
            rows = kept
        done = {(row["label"], row["backend"]) for row in rows}
        todo = [(spec, backend) for backend in args.backends for spec in cases
                if (spec["label"], backend) not in done and (backend == "hybrid" or not spec["reference"])]
        print(f"{len(todo)} runs to do", file=sys.stderr)
        with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
            for row in pool.imap_unordered(run, todo):
                append_row(row)
                print(f"{row['label']} {row['backend']}: {row['status']} {row.get('iteration_time_s')} s, "
                      f"{row.get('timeouts')} timeouts ({row['wall_s']:.1f} s)", file=sys.stderr)
    text = summary(read_rows())
    CSV.with_suffix(".md").write_text("`python benchmarks/validate_hybrid.py`\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
