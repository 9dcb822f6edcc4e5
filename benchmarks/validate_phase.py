"""Validate the phase backend (engine.backend=phase) against the exact fluid model (`analytical`) and
the packet engine, and its incast flag against packet runs with shallow buffers.

Three grids, each a list of configurations run on two backends:
- `analytical`: leaf_spine (16 hosts a leaf, 16/8/4/2 spines: 1:1 to 8:1) and fat_tree (uplinks at
  1/1 to 1/8 of the NIC rate), ring / halving-doubling all-reduce and direct all-to-all of 1 to 64 MiB
  per NPU, and one astra_dlrm iteration; phase vs analytical on the iteration time: median and worst
  |error|, and Spearman's rank correlation of the configurations' times (within each topology, size
  and collective: the question a sweep asks is which fabric is faster);
- `packet_deep`: the same kind of configurations on the packet engine with unlimited buffers (no
  loss), fewer and smaller (32 or 64 NPUs, 1:1 and 4:1, 1 and 16 MiB);
- `incast`: astra_dlrm on leaf_spine with 512 KiB (quick: and 128 KiB) buffers at 1:1 to 16:1, packet vs
  phase: runs with TCP timeouts against runs flagged (`incast_phases` > 0): recall and precision; and
  how close `engine.incast_rto=true` comes to the packet time where timeouts happened.

    python benchmarks/validate_phase.py --grid quick         # minutes: 32-128 NPUs
    python benchmarks/validate_phase.py --grid full          # the issue's grid
    python benchmarks/validate_phase.py --grid quick --only analytical --seeds 4
    python benchmarks/validate_phase.py --grid full --only analytical --match halving_doubling --seeds 4
    NETSWEEP_PURE_PYTHON=1 python benchmarks/validate_phase.py --grid full --only analytical \
        --match halving_doubling --same-draws   # the same ECMP collisions on both: the model's own error
    python benchmarks/validate_phase.py --grid topologies    # astra_dlrm on every topology, 3 algorithm sets

Writes benchmarks/validate_phase_<grid>[_<only>][_<match>][_<n>seeds][_same_draws].csv (one row per
configuration, seed and backend) and prints a Markdown summary (also written beside it, .md).
`--seeds`: each configuration with several seeds, compared on the mean: ECMP hashes the packet
engine's (and phase's) connection ids but every message on `analytical`, so one seed compares two
different draws of collisions; `--same-draws` gives `analytical` phase's draws instead.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import engine
from engine.kernel import PURE_PYTHON_ENV
from engine.links import Link
from engine.run import prepare
from engine.topology import Topology

HERE = Path(__file__).resolve().parent
MIB = 2**20
DLRM = {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 1}
COLLECTIVES = [("all_reduce", "ring"), ("all_reduce", "halving_doubling"), ("all_to_all", "direct")]


def fabric(topology: str, npus: int, ratio: int) -> dict[str, Any]:
    """A network of `npus` 100 Gb/s NPUs oversubscribed `ratio`:1 at the first tier."""
    if topology == "leaf_spine":
        return {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": 16 // ratio,
                "uplink_gbps": 100.0}
    return {"topology": "fat_tree", "npus": npus, "uplink_gbps": 100.0 / ratio}


SMALL_NETWORKS = [  # every topology, a few dozen NPUs: for `--grid topologies`
    {"topology": "switch", "npus": 16},
    {"topology": "ring", "npus": 8},
    {"topology": "dumbbell", "npus": 8, "bottleneck_gbps": 10.0, "bottleneck_latency_us": 1.0},
    {"topology": "hierarchical", "npus": 16, "npus_per_node": 4, "scaleup_gbps": 400.0, "scaleup_latency_us": 0.5},
    {"topology": "leaf_spine", "npus": 32, "hosts_per_leaf": 8, "spines": 2, "uplink_gbps": 50.0},
    {"topology": "fat_tree", "npus": 32, "uplink_gbps": 50.0},
]
SMALL_SYSTEMS = [{}, {"all_reduce": "double_binary_tree"}, {"all_reduce": "halving_doubling", "all_to_all": "ring"}]


def grid(name: str) -> Iterator[dict[str, Any]]:
    """The configurations of one grid (see the module docstring)."""
    if name == "topologies":
        for network in SMALL_NETWORKS:
            for system in SMALL_SYSTEMS:
                label = "astra_dlrm " + (",".join(f"{key}={value}" for key, value in system.items()) or "defaults")
                yield {"grid": "analytical", "ratio": 1, "network": network, "system": system, "workload": DLRM,
                       "label": label}
        return
    if name in ("quick", "full"):
        sizes_npus = (64,) if name == "quick" else (64, 128, 256)
        sizes_mib = (1, 16) if name == "quick" else (1, 8, 64)
        for topology in ("leaf_spine", "fat_tree"):
            for npus in sizes_npus:
                for ratio in (1, 2, 4, 8):
                    network = fabric(topology, npus, ratio)
                    for op, algorithm in COLLECTIVES:
                        for mib in sizes_mib:
                            yield {"grid": "analytical", "ratio": ratio, "network": network,
                                   "system": {op: algorithm},
                                   "workload": {"type": "collective", "op": op, "bytes": mib * MIB},
                                   "label": f"{op}/{algorithm}/{mib}MiB"}
                    yield {"grid": "analytical", "ratio": ratio, "network": network, "system": {},
                           "workload": DLRM, "label": "astra_dlrm"}
        for topology in ("leaf_spine", "fat_tree"):
            for ratio in (1, 4):
                network = {**fabric(topology, 64 if name == "full" else 32, ratio), "buffer_kb": None}
                for op, algorithm in COLLECTIVES:
                    for mib in (1, 16):
                        yield {"grid": "packet_deep", "ratio": ratio, "network": network, "system": {op: algorithm},
                               "workload": {"type": "collective", "op": op, "bytes": mib * MIB},
                               "label": f"{op}/{algorithm}/{mib}MiB"}
        for npus in ((64, 128) if name == "quick" else (64, 128, 256)):
            for buffer_kb in ((128.0, 512.0) if name == "quick" else (512.0,)):
                for spines in (16, 8, 4, 2, 1):
                    network = {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": spines,
                               "uplink_gbps": 100.0, "buffer_kb": buffer_kb}
                    yield {"grid": "incast", "ratio": 16 // spines, "network": network, "system": {},
                           "workload": DLRM, "label": "astra_dlrm"}


def run(case: dict[str, Any], backend: str, seed: int, incast_rto: bool = False,
        same_draws: bool = False) -> dict[str, Any]:
    """One run of a configuration: its iteration time, wall time and TCP signals. `same_draws`:
    `analytical` routes each message on its pair's connection id as the phase backend numbers it
    (`analytical_with_phase_draws`)."""
    config = {"seed": seed, "engine": {"backend": backend, "incast_rto": incast_rto, "max_sim_time_s": 60.0},
              "network": {"link_gbps": 100.0, "link_latency_us": 1.0, **case["network"]},
              "system": case["system"], "workload": case["workload"]}
    start = time.perf_counter()
    if same_draws and backend == "analytical":
        row = analytical_with_phase_draws(config)
    else:
        row = engine.run(config, flow_columns=True)["runs"][0]
    return {"backend": backend + ("+rto" if incast_rto else ""), "status": row["status"],
            "iteration_time_s": row.get("iteration_time_s"), "wall_s": time.perf_counter() - start,
            "timeouts": row.get("timeouts"), "drops": row.get("drops"), "incast_phases": row.get("incast_phases"),
            "max_port_flows": row.get("max_port_flows"), "max_link_utilisation": row.get("max_link_utilisation")}


def analytical_with_phase_draws(config: dict[str, Any]) -> dict[str, Any]:
    """The runs row of `analytical` with each message routed on the connection id the phase backend
    gives its pair (`PairFlowIds`, filled by a phase run of the same config), where `analytical` hashes
    each message's own id: the same ECMP collisions on both, so what differs is the phase model's
    error. Replaces the topology class's `path` for the run: the pure-Python kernel only."""
    if not os.environ.get(PURE_PYTHON_ENV):
        raise SystemExit(f"--same-draws replaces Topology.path: run with {PURE_PYTHON_ENV}=1")
    phase = prepare({**config, "engine": {**config["engine"], "backend": "phase"}})
    phase.start()
    phase.simulate()
    assert phase.fluid is not None
    flow_ids = phase.fluid.flow_ids
    prepared = prepare(config)
    topology_class = type(prepared.sim.topology)
    path = topology_class.path

    def phase_draw(self: Topology, src: int, dst: int, _flow_id: int) -> tuple[Link, ...]:
        return path(self, src, dst, int(flow_ids.ids(np.array([src]), np.array([dst]), distinct=True)[0]))

    topology_class.path = phase_draw
    try:
        prepared.start()
        prepared.simulate()
        return prepared.rows(0.0, True)["runs"][0]
    finally:
        topology_class.path = path


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2
            i = j + 1
        return result
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else 1.0


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of a grid's rows."""
    lines: list[str] = []
    by_case: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault((row["case"], row["seed"]), {})[row["backend"]] = row
    # seeds of one configuration: the mean iteration time (ECMP draws differ from seed to seed)
    means: dict[int, dict[str, dict[str, Any]]] = {}
    for (case, _), runs in by_case.items():
        for backend, row in runs.items():
            entry = means.setdefault(case, {}).setdefault(backend, {**row, "times": []})
            if row["status"] == "ok":
                entry["times"].append(row["iteration_time_s"])
            else:
                entry["status"] = row["status"]
    for runs in means.values():
        for entry in runs.values():
            entry["iteration_time_s"] = statistics.fmean(entry["times"]) if entry["times"] else None
    seeds = len({row["seed"] for row in rows})
    for reference, grid_name in (("analytical", "analytical"), ("packet", "packet_deep")):
        errors, pairs = [], []
        groups: dict[tuple, list[tuple[float, float]]] = {}
        for runs in means.values():
            phase, other = runs.get("phase"), runs.get(reference)
            if not phase or not other or phase["grid"] != grid_name or other["iteration_time_s"] is None:
                continue
            error = phase["iteration_time_s"] / other["iteration_time_s"] - 1
            errors.append((abs(error), error, phase))
            pairs.append((phase["iteration_time_s"], other["iteration_time_s"]))
            key = (phase["topology"], phase["npus"], phase["label"])
            groups.setdefault(key, []).append((phase["iteration_time_s"], other["iteration_time_s"]))
        if not errors:
            continue
        errors.sort(key=lambda item: item[0])
        worst = errors[-1]
        correlations = [spearman([a for a, _ in g], [b for _, b in g]) for g in groups.values()
                        if len(g) > 1 and len({b for _, b in g}) > 1]
        lines += [f"### phase vs {reference} ({grid_name} grid, {len(errors)} configurations, mean of {seeds} "
                  f"seed{'s' if seeds > 1 else ''} each)", "",
                  f"- median |error| {100 * statistics.median(e for e, _, _ in errors):.2f} %, "
                  f"worst {100 * worst[0]:.2f} % ({worst[2]['topology']} {worst[2]['npus']} NPUs "
                  f"{worst[2]['ratio']}:1 {worst[2]['label']}: {100 * worst[1]:+.2f} %)",
                  f"- Spearman rank correlation over all configurations: {spearman(*map(list, zip(*pairs))):.4f}; "
                  f"within each (topology, NPUs, collective) over oversubscription: min "
                  f"{min(correlations, default=float('nan')):.4f} over {len(correlations)} groups", ""]
    incast = [runs for runs in by_case.values() if runs.get("packet") and runs["packet"]["grid"] == "incast"]
    if incast:
        # a packet run still going at engine.max_sim_time_s (60 s) is in its timeouts too
        lossy = [runs for runs in incast if (runs["packet"]["timeouts"] or 0) > 0 or runs["packet"]["status"] != "ok"]
        flagged = [runs for runs in incast if (runs["phase"]["incast_phases"] or 0) > 0]
        both = [runs for runs in lossy if (runs["phase"]["incast_phases"] or 0) > 0]
        lines += [f"### incast flag vs packet timeouts ({len(incast)} runs)", "",
                  f"- runs with timeouts: {len(lossy)}; flagged: {len(flagged)}; both: {len(both)} "
                  f"(recall {len(both)}/{len(lossy)}, precision {len(both)}/{len(flagged)})", "",
                  "| NPUs | spines | buffer KiB | packet ms | timeouts | phase ms | incast_phases | phase+rto ms |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for runs in incast:
            packet, phase, charged = runs["packet"], runs["phase"], runs.get("phase+rto", {})
            packet_ms = "> 60,000" if packet["iteration_time_s"] is None else f"{1e3 * packet['iteration_time_s']:.3f}"
            lines.append(f"| {packet['npus']} | {packet['spines']} | {packet['buffer_kb']:.0f} | {packet_ms} | "
                         f"{packet['timeouts']} | {1e3 * phase['iteration_time_s']:.3f} | {phase['incast_phases']} | "
                         f"{1e3 * charged.get('iteration_time_s', float('nan')):.3f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=("quick", "full", "topologies"), default="quick")
    parser.add_argument("--only", choices=("analytical", "packet_deep", "incast"), default=None,
                        help="run one of the three grids only")
    parser.add_argument("--match", default=None, help="run only the configurations whose label contains this "
                        "(e.g. halving_doubling)")
    parser.add_argument("--same-draws", action="store_true", help="route analytical's messages on phase's "
                        "connection ids (same ECMP collisions; needs NETSWEEP_PURE_PYTHON=1)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per configuration (ECMP draws): compared on "
                        "their mean iteration time")
    args = parser.parse_args(argv)
    suffix = (f"_{args.only}" if args.only else "") + (f"_{args.match}" if args.match else "") + (
        f"_{args.seeds}seeds" if args.seeds > 1 else "") + ("_same_draws" if args.same_draws else "")
    out = HERE / f"validate_phase_{args.grid}{suffix}.csv"
    rows: list[dict[str, Any]] = []
    for index, case in enumerate(grid(args.grid)):
        if (args.only and case["grid"] != args.only) or (args.match and args.match not in case["label"]):
            continue
        reference = "analytical" if case["grid"] == "analytical" else "packet"
        for seed in range(args.seeds):
            runs = [run(case, "phase", seed), run(case, reference, seed, same_draws=args.same_draws)]
            if case["grid"] == "incast":
                runs.append(run(case, "phase", seed, incast_rto=True))
            for result in runs:
                net = case["network"]
                rows.append({"case": index, "seed": seed, "grid": case["grid"], "topology": net["topology"],
                             "npus": net["npus"], "spines": net.get("spines"), "uplink_gbps": net.get("uplink_gbps"),
                             "buffer_kb": net.get("buffer_kb", 512.0), "ratio": case["ratio"], "label": case["label"],
                             **result})
            print(f"{index}/{seed}: {case['grid']} {case['network']['topology']} {case['network']['npus']} "
                  f"{case['ratio']}:1 {case['label']}: " + ", ".join(
                      f"{r['backend']} {r['iteration_time_s']} ({r['wall_s']:.1f} s)" for r in runs), file=sys.stderr)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = summary(rows)
    out.with_suffix(".md").write_text(f"`python benchmarks/validate_phase.py {' '.join(sys.argv[1:])}`\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
