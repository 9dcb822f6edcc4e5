"""netsweep side by side with ASTRA-sim 1.0 (its analytical network backend), settings mapped one to one.

Every case is an ASTRA-sim 1.0 text workload that both simulators read: a MICRO file of one collective
(ALLREDUCE, ALLTOALL, ALLGATHER, REDUCESCATTER of 1 to 64 MiB as ASTRA-sim sizes them, on 8 and 16 NPUs,
one switch or a ring; and ALLTOALL with ASTRA-sim's ring algorithm, 1 and 4 MiB) and the DLRM_HybridParallel
workload (16 and 64 NPUs, one switch), plus the cases where netsweep deliberately differs (direct all-to-all,
double binary tree, one queue, ring all-to-all; see docs/validation-astra-sim.md). netsweep runs each on its
`packet`, `analytical` and `alpha_beta` backends, and on `alpha_beta` with `system.astra_compat=true`
(column `alpha_beta_compat`); ASTRA-sim's binary (`AnalyticalAstra` of branch ASTRA-sim-1.0 of
astra-sim/astra-sim, with its analytical network backend; not part of netsweep) runs it when its path is
given. Writes benchmarks/compare_astra_sim.{csv,md} and prints the table.

    python benchmarks/compare_astra_sim.py --astra-sim /path/to/AnalyticalAstra
    python benchmarks/compare_astra_sim.py             # netsweep's side only (the ASTRA-sim column empty)
    python benchmarks/compare_astra_sim.py --quick ... # 1 and 16 MiB only (ring all-to-all: 1 MiB), no 64-NPU DLRM

It runs on ASTRA-sim's default build (CMake's empty build type: assertions on) as on a Release build: the
MICRO lines carry the update delay of ASTRA-sim's own examples (inputs/workload/microAllReduce.txt: 5 cycles),
not 0, which would schedule an event at the current time and trip the assertion of the analytical backend's
src/event-queue/EventQueue.cc:20.

The mapping (docs/validation-astra-sim.md): ASTRA-sim's `link-bandwidth` is in GiB/s (its main.cc
multiplies by 2^30 / 10^9 to get bytes per ns), so 100 Gb/s is 12.5e9 / 2^30 = 11.64 GiB/s; its Ring
dimension multiplies the bandwidth by its links count (HierarchicalTopology.cc) and refuses one link, so
a ring of single 100 Gb/s links each way is 2 links of 5.82 GiB/s; `link-latency` is per hop in ns (a
switch path is 2 hops, as netsweep's 2 host links); NIC, router and HBM latencies are 0 (HBM scale 0);
`endpoint-delay` (cycles of 1 ns) is `system.endpoint_delay_ns`; `preferred-dataset-splits` is
`system.splits`; one queue per dimension; LIFO. Switch buffers are unlimited on netsweep's side
(ASTRA-sim models none).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import engine
from engine.workload.layers import workload_file

HERE = Path(__file__).resolve().parent
LINK_GBPS = 100.0
LINK_LATENCY_US = 1.0
ENDPOINT_DELAY_NS = 10.0
# the table's netsweep columns: (engine.backend, system.astra_compat); `alpha_beta_compat` takes ASTRA-sim 1.0's
# choices where netsweep differs on purpose and, on alpha_beta only, its network's cost (docs/astra-compat.md)
BACKENDS = {"packet": ("packet", False), "analytical": ("analytical", False), "alpha_beta": ("alpha_beta", False),
            "alpha_beta_compat": ("alpha_beta", True)}
# ASTRA-sim's comm type -> netsweep's op (the DLRM's column shows its all-reduce algorithm)
OPS = {"ALLREDUCE": "all_reduce", "ALLTOALL": "all_to_all", "ALLGATHER": "all_gather",
       "REDUCESCATTER": "reduce_scatter"}
# netsweep's algorithm key -> ASTRA-sim's implementation name
ASTRA_ALGORITHMS = {"ring": "ring", "direct": "direct", "halving_doubling": "halvingDoubling",
                    "double_binary_tree": "doubleBinaryTree"}
DEFAULT_ALGORITHMS = {"all_reduce": "ring", "all_to_all": "direct", "all_gather": "ring", "reduce_scatter": "ring"}
DLRM = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"
FINISHED = re.compile(r"all passes finished at time: (\d+)")
COLUMNS = ("case", "workload", "topology", "npus", "mib", "algorithm", "splits", "astra_sim_us",
           *(f"{backend}_us" for backend in BACKENDS), *(f"{backend}_vs_astra_pct" for backend in BACKENDS))


def gib_per_s(gbps: float) -> float:
    """ASTRA-sim's `link-bandwidth` (GiB/s) of a link of `gbps` Gb/s."""
    return gbps * 1e9 / 8 / 2**30  # Gb/s -> bytes/s -> GiB/s


def cases(quick: bool) -> list[dict]:
    """The comparison's cases: each a workload (a MICRO line, or the DLRM file) and its settings."""
    sizes = (1, 16) if quick else (1, 4, 16, 64)
    out = [dict(case="micro", op=op, mib=mib, npus=npus, topology=topology, algorithms=DEFAULT_ALGORITHMS,
                splits=1)
           for topology in ("switch", "ring") for npus in (8, 16) for op in OPS for mib in sizes]
    # the study's workload; splits 4 as ASTRA-sim's sample system files (`preferred-dataset-splits: 4`)
    out += [dict(case="dlrm", op="DLRM", mib=0, npus=npus, topology="switch", algorithms=DEFAULT_ALGORITHMS,
                 splits=4) for npus in ((16,) if quick else (16, 64))]
    # the deliberate difference of the tree: ASTRA-sim 1.0's one unpipelined tree vs NCCL's two
    out += [dict(case="dbt", op="ALLREDUCE", mib=16, npus=16, topology="switch",
                 algorithms={**DEFAULT_ALGORITHMS, "all_reduce": "double_binary_tree"}, splits=1)]
    # the ring all-to-all: ASTRA-sim 1.0's p(p-1)/2 messages of one block vs netsweep's p-1 steps
    out += [dict(case="ring_a2a", op="ALLTOALL", mib=mib, npus=npus, topology=topology,
                 algorithms={**DEFAULT_ALGORITHMS, "all_to_all": "ring"}, splits=1)
            for topology in ("switch", "ring") for npus in (8, 16) for mib in ((1,) if quick else (1, 4))]
    return out


MICRO_UPDATE_DELAY = 5  # cycles after the collective: ASTRA-sim's inputs/workload/microAllReduce.txt's


def workload_text(case: dict) -> str | None:
    """The MICRO file of a collective case (the collective in the weight-gradient pass, no compute, as
    ASTRA-sim's microAllReduce.txt, and its update delay of 5 cycles: ASTRA-sim adds it to its time, 5 ns
    here; netsweep reads it and does not simulate it); None for the bundled DLRM."""
    if case["case"] == "dlrm":
        return None
    return f"MICRO\n1\nc -1 0 NONE 0 0 NONE 0 0 {case['op']} {case['mib'] << 20} {MICRO_UPDATE_DELAY}\n"


def astra_network(case: dict) -> dict:
    """ASTRA-sim 1.0's analytical network file for the case (one dimension)."""
    ring = case["topology"] == "ring"
    return {"topology-name": "Hierarchical", "dimensions-count": 1,
            "topologies-per-dim": ["Ring" if ring else "Switch"], "dimension-type": ["N"],
            "units-count": [case["npus"]], "links-count": [2 if ring else 1],
            "link-latency": [LINK_LATENCY_US * 1000],  # us -> ns, per hop
            # its Ring multiplies the bandwidth by its 2 links (one each way, as netsweep's ring has)
            "link-bandwidth": [gib_per_s(LINK_GBPS) / (2 if ring else 1)],
            "nic-latency": [0], "router-latency": [0], "hbm-latency": [0], "hbm-bandwidth": [1e6], "hbm-scale": [0]}


def astra_system(case: dict) -> str:
    """ASTRA-sim 1.0's system file for the case."""
    algorithms = case["algorithms"]
    return (f"scheduling-policy: LIFO\nendpoint-delay: {ENDPOINT_DELAY_NS:g}\nactive-chunks-per-dimension: 1\n"
            f"preferred-dataset-splits: {case['splits']}\nboost-mode: 0\n"
            f"all-reduce-implementation: {ASTRA_ALGORITHMS[algorithms['all_reduce']]}\n"
            f"all-gather-implementation: {ASTRA_ALGORITHMS[algorithms['all_gather']]}\n"
            f"reduce-scatter-implementation: {ASTRA_ALGORITHMS[algorithms['reduce_scatter']]}\n"
            f"all-to-all-implementation: {ASTRA_ALGORITHMS[algorithms['all_to_all']]}\n"
            "collective-optimization: baseline\n")


def run_astra(binary: Path, case: dict, workload: Path, folder: Path) -> float:
    """ASTRA-sim's time for the case's one pass, us (it counts cycles of 1 ns)."""
    network, system = folder / "network.json", folder / "system.txt"
    network.write_text(json.dumps(astra_network(case)))
    system.write_text(astra_system(case))
    (folder / "out").mkdir(exist_ok=True)
    result = subprocess.run([str(binary), f"--network-configuration={network}",
                             f"--system-configuration={system}", f"--workload-configuration={workload}",
                             f"--path={folder / 'out'}/", "--units-count", str(case["npus"]), "--num-passes", "1",
                             "--num-queues-per-dim", "1", "--comm-scale", "1", "--compute-scale", "1",
                             "--injection-scale", "1", "--rendezvous-protocol", "false", "--total-stat-rows", "1",
                             "--stat-row", "0", "--run-name", case["case"]],
                            capture_output=True, text=True, cwd=folder, timeout=3600)
    finished = FINISHED.findall(result.stdout)
    if result.returncode != 0 or not finished:
        raise RuntimeError(f"ASTRA-sim failed on {case}: exit {result.returncode}\n{result.stdout[-2000:]}"
                           f"{result.stderr[-2000:]}")
    return max(int(cycles) for cycles in finished) / 1000  # ns -> us


def run_netsweep(case: dict, workload: str, column: str) -> float:
    """netsweep's time for the case's one iteration in the table's `column` (a key of BACKENDS), us."""
    backend, astra_compat = BACKENDS[column]
    config = {
        "engine": {"backend": backend},
        "network": {"topology": case["topology"], "npus": case["npus"], "link_gbps": LINK_GBPS,
                    "link_latency_us": LINK_LATENCY_US, "buffer_kb": None},
        "system": {**case["algorithms"], "splits": case["splits"], "scheduling": "lifo",
                   "endpoint_delay_ns": ENDPOINT_DELAY_NS, "astra_compat": astra_compat},
        "workload": {"type": "astra", "path": workload, "iterations": 1, "cycle_ns": 1.0},
    }
    row = engine.run(config)["runs"][0]
    if row["status"] != "ok":
        raise RuntimeError(f"netsweep {column} ended {row['status']} on {case}: {row.get('error')}")
    return row["iteration_time_s"] * 1e6  # s -> us


def case_name(case: dict) -> str:
    """A folder name for the case's files: `micro-ALLGATHER-switch-16-4mib`, `dlrm-DLRM-switch-64-0mib`, ..."""
    return f"{case['case']}-{case['op']}-{case['topology']}-{case['npus']}-{case['mib']}mib"


def measure(case: dict, binary: Path | None, backends: tuple[str, ...], folder: Path) -> dict:
    """One row of the table: ASTRA-sim's time (None without its binary) and each backend's; the case's
    workload, network and system files and ASTRA-sim's outputs go to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    text = workload_text(case)
    workload = folder / "workload.txt"
    workload.write_text(workload_file(DLRM).read_text() if text is None else text)
    astra_us = run_astra(binary, case, workload, folder) if binary is not None else None
    row = {"case": case["case"], "workload": case["op"], "topology": case["topology"], "npus": case["npus"],
           "mib": case["mib"], "algorithm": case["algorithms"][OPS.get(case["op"], "all_reduce")],
           "splits": case["splits"], "astra_sim_us": astra_us}
    for backend in backends:
        ours = run_netsweep(case, str(workload), backend)
        row[f"{backend}_us"] = ours
        row[f"{backend}_vs_astra_pct"] = (ours / astra_us - 1) * 100 if astra_us else None
    return row


def markdown(rows: list[dict], backends: tuple[str, ...]) -> str:
    """The table as Markdown: times in us, netsweep's differences from ASTRA-sim in %."""
    head = ("| case | workload | topology | NPUs | MiB | algorithm | ASTRA-sim 1.0 us | "
            + " | ".join(f"{b} us (vs ASTRA-sim)" for b in backends) + " |")
    lines = [head, "|" + " --- |" * (7 + len(backends))]
    for row in rows:
        astra = f"{row['astra_sim_us']:,.1f}" if row["astra_sim_us"] is not None else "-"
        ours = []
        for backend in backends:
            pct = row[f"{backend}_vs_astra_pct"]
            ours.append(f"{row[f'{backend}_us']:,.1f}" + (f" ({pct:+.1f} %)" if pct is not None else ""))
        lines.append(f"| {row['case']} | {row['workload']} | {row['topology']} | {row['npus']} | {row['mib'] or '-'} | "
                     f"{row['algorithm']} | {astra} | " + " | ".join(ours) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--astra-sim", type=Path, default=None,
                        help="path of ASTRA-sim 1.0's AnalyticalAstra binary (omit: netsweep's side only)")
    parser.add_argument("--quick", action="store_true",
                        help="1 and 16 MiB only (ring all-to-all: 1 MiB), DLRM on 16 NPUs only")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"netsweep's columns, comma-separated, of: {', '.join(BACKENDS)}")
    parser.add_argument("--out", type=Path, default=HERE / "compare_astra_sim", help="prefix of the .csv and .md")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep each case's input files and ASTRA-sim's outputs (EndToEnd.csv, ...) in DIR/<case>")
    args = parser.parse_args()
    binary = args.astra_sim
    if binary is None or not binary.is_file():
        print(f"ASTRA-sim binary {'not given' if binary is None else f'{binary} not found'}: measuring netsweep's "
              "side only (the ASTRA-sim column stays empty). Pass --astra-sim PATH of the AnalyticalAstra binary of "
              "ASTRA-sim 1.0 (branch ASTRA-sim-1.0 of astra-sim/astra-sim, with its analytical network backend).",
              file=sys.stderr)
        binary = None
    backends = tuple(b for b in args.backends.split(",") if b)
    if unknown := [b for b in backends if b not in BACKENDS]:
        parser.error(f"--backends: {', '.join(unknown)} not among {', '.join(BACKENDS)}")
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases(args.quick):
            rows.append(measure(case, binary, backends, (args.keep or Path(scratch)) / case_name(case)))
            print(markdown(rows[-1:], backends).splitlines()[-1], flush=True)
    with open(args.out.with_suffix(".csv"), "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    table = markdown(rows, backends)
    args.out.with_suffix(".md").write_text(table)
    print(f"\n{table}\nwall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
