"""One astra_dlrm iteration on the phase backend across oversubscription, at 1,024 and 9,216 NPUs:
iteration time (is it monotone in oversubscription?), wall and CPU time and peak resident memory, each
run in a fresh process (its own peak RSS).

    python benchmarks/phase_oversubscription.py                 # 1,024 and 9,216 NPUs
    python benchmarks/phase_oversubscription.py --npus 1024     # one size
    python benchmarks/phase_oversubscription.py --issue-table   # issue 22's table: 256 NPUs, 8 and 2 spines
    python benchmarks/phase_oversubscription.py --issue-table --npus 1024 9216 --backends alpha_beta phase
    python benchmarks/phase_oversubscription.py --backends hybrid --buffer-kb 128 1024 --csv benchmarks/hybrid_scale.csv

leaf_spine: 16 hosts a leaf, 16/8/4/2/1 spines (1:1 to 16:1); fat_tree: uplinks at 100, 50, 25 and
12.5 Gb/s (1:1 to 8:1 at the edge). `--issue-table`: leaf_spine with 8 and 2 spines only, on every
backend of `--backends` (default alpha_beta, analytical, packet, phase and phase with
engine.incast_rto). Writes benchmarks/phase_oversubscription.csv (issue table:
phase_oversubscription_issue_table_<sizes>.csv) and prints a Markdown
table with the machine's load (`os.getloadavg`) before each run.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = """
import json, resource, sys, time
import engine
config = json.loads(sys.argv[1])
start, cpu_start = time.perf_counter(), time.process_time()
try:
    row = engine.run(config, flow_columns=True)["runs"][0]
except engine.ConfigError as refusal:  # a backend that refuses this network (hybrid: a fat tree's pod pairs)
    print(json.dumps({"status": "refused", "refusal": str(refusal), "iteration_time_s": None, "wall_s": 0.0,
                      "cpu_s": 0.0, "timeouts": None, "rss_mib": 0.0, "max_port_flows": None, "incast_phases": None,
                      "max_link_utilisation": None, "kernel": engine.KERNEL}))
    sys.exit(0)
wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
print(json.dumps({"iteration_time_s": row["iteration_time_s"], "wall_s": wall_s, "cpu_s": cpu_s,
                  "status": row["status"], "timeouts": row.get("timeouts"),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "max_port_flows": row.get("max_port_flows"), "incast_phases": row.get("incast_phases"),
                  "max_link_utilisation": row.get("max_link_utilisation"), "kernel": engine.KERNEL}))
"""


def networks(npus: int) -> list[tuple[str, int, dict]]:
    """(topology, oversubscription, network keys) of one size."""
    leaf_spine = [("leaf_spine", 16 // spines, {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16,
                                                "spines": spines, "uplink_gbps": 100.0}) for spines in (16, 8, 4, 2, 1)]
    fat_tree = [("fat_tree", ratio, {"topology": "fat_tree", "npus": npus, "uplink_gbps": 100.0 / ratio})
                for ratio in (1, 2, 4, 8)]
    return leaf_spine + fat_tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npus", type=int, nargs="*", default=None, help="default 1,024 and 9,216 (issue table: 256)")
    parser.add_argument("--issue-table", action="store_true", help="leaf_spine 8 and 2 spines on several backends")
    parser.add_argument("--backends", nargs="*", default=None,
                        help="default phase (issue table: alpha_beta analytical packet phase phase+rto)")
    parser.add_argument("--buffer-kb", type=float, nargs="*", default=[None],
                        help="switch buffers to run each network with, KiB (default: network.buffer_kb's default)")
    parser.add_argument("--csv", type=Path, default=None,
                        help="CSV to write (default benchmarks/phase_oversubscription.csv; issue table: "
                             "benchmarks/phase_oversubscription_issue_table_<sizes>.csv)")
    args = parser.parse_args(argv)
    sizes = args.npus or ([256] if args.issue_table else [1024, 9216])
    backends = args.backends or (["alpha_beta", "analytical", "packet", "phase", "phase+rto"] if args.issue_table
                                 else ["phase"])
    rows = []
    for npus in sizes:
        for (topology, ratio, network), buffer_kb in itertools.product(networks(npus), args.buffer_kb):
            if args.issue_table and not (topology == "leaf_spine" and network["spines"] in (8, 2)):
                continue
            if buffer_kb is not None:
                network = {**network, "buffer_kb": buffer_kb}
            for backend in backends:
                config = {"engine": {"backend": backend.removesuffix("+rto"), "incast_rto": backend.endswith("+rto"),
                                     "max_sim_time_s": 60.0},
                          "network": network,
                          "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt",
                                       "iterations": 1}}
                load = os.getloadavg()[0]
                done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], capture_output=True,
                                      text=True, check=True)
                result = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append({"backend": backend, "topology": topology, "npus": npus, "oversubscription": ratio,
                             "buffer_kb": network.get("buffer_kb"), "load_1min": load, **result})
                print(rows[-1], file=sys.stderr)
    out = args.csv or HERE / (f"phase_oversubscription_issue_table_{'_'.join(map(str, sizes))}.csv" if args.issue_table
                  else "phase_oversubscription.csv")
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
        writer.writeheader()
        writer.writerows(rows)
    print("| backend | topology | NPUs | oversubscription | buffer KiB | iteration ms | wall s | CPU s | "
          "peak RSS MiB | max_port_flows | incast_phases | timeouts | load (1 min) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    def count(row: dict, key: str) -> str:
        return "" if row[key] is None else f"{row[key]:,}"

    for row in rows:
        iteration_ms = "n/a" if row["iteration_time_s"] is None else f"{1e3 * row['iteration_time_s']:.4f}"
        buffer = "default" if row["buffer_kb"] is None else f"{row['buffer_kb']:g}"
        print(f"| {row['backend']} | {row['topology']} | {row['npus']:,} | {row['oversubscription']}:1 | {buffer} | "
              f"{iteration_ms} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | {row['rss_mib']:.0f} | "
              f"{count(row, 'max_port_flows')} | {count(row, 'incast_phases')} | {count(row, 'timeouts')} | "
              f"{row['load_1min']:.1f} |")


if __name__ == "__main__":
    main()
