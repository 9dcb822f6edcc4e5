"""Scale benchmark (run on demand): wall time, events and peak resident memory of training
iterations of ASTRA-sim's DLRM_HybridParallel.txt as the NPU count grows, per backend and topology.

Each configuration runs in a child process of its own (so that its peak memory is its own) through
`engine.run`, with the kernel this process has (engine/kernel.py); the wall time covers building the
network and running the workload, not Python's start-up. A configuration still running after
--timeout seconds is stopped and reported as such.

Topologies: `fat_tree` (k chosen from the NPUs), `leaf_spine` (16 hosts per leaf, 4 spines, 100 Gb/s
uplinks), `switch`; links of 100 Gb/s and 1 us.

Usage: python benchmarks/bench_scale.py [--backends alpha_beta] [--topologies fat_tree leaf_spine]
           [--npus 16 64 256 1024 4096 9216] [--iterations 1] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import engine

WORKLOAD = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"
TOPOLOGIES = {
    "fat_tree": {"topology": "fat_tree"},
    "leaf_spine": {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4, "uplink_gbps": 100},
    "switch": {"topology": "switch"},
}


def measure(backend: str, topology: str, npus: int, iterations: int) -> dict:
    """One run in this process: wall time, the engine's counters and this process's peak memory."""
    network = {**TOPOLOGIES[topology], "npus": npus, "link_gbps": 100, "link_latency_us": 1}
    start = time.perf_counter()
    row = engine.run({
        "engine": {"backend": backend, "max_sim_time_s": 100},
        "network": network,
        "workload": {"type": "astra", "path": WORKLOAD, "iterations": iterations},
    })["runs"][0]
    wall_s = time.perf_counter() - start
    return {"npus": npus, "backend": backend, "topology": topology, "status": row["status"], "wall_s": wall_s,
            "iteration_ms": row["iteration_time_s"] * 1e3, "events": row["events"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # ru_maxrss: KiB on Linux


def measure_in_child(backend: str, topology: str, npus: int, iterations: int, timeout_s: float) -> dict:
    """`measure` in a fresh process (importing the engine this one imported); a run past
    `timeout_s` is stopped."""
    command = [sys.executable, __file__, "--child", backend, topology, str(npus), str(iterations)]
    engine_root = str(Path(engine.__file__).resolve().parents[1])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=True,
                              env={**os.environ, "PYTHONPATH": engine_root})
    except subprocess.TimeoutExpired:
        return {"npus": npus, "backend": backend, "topology": topology, "status": f"stopped after {timeout_s:.0f} s"}
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["alpha_beta"], choices=engine.config.BACKENDS)
    parser.add_argument("--topologies", nargs="+", default=["fat_tree", "leaf_spine"], choices=sorted(TOPOLOGIES))
    parser.add_argument("--npus", nargs="+", type=int, default=[16, 64, 256, 1024, 4096, 9216])
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--child", nargs=4, metavar=("BACKEND", "TOPOLOGY", "NPUS", "ITERATIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        backend, topology, npus, iterations = args.child
        print(json.dumps(measure(backend, topology, int(npus), int(iterations))))
        return
    kernel = "compiled kernel" if engine.KERNEL == "compiled" else "pure-Python kernel"
    print(f"{kernel}; DLRM_HybridParallel.txt, {args.iterations} iteration(s) per run, one process per run")
    print(f"{'npus':>6} {'backend':11} {'topology':10} {'wall s':>8} {'iteration ms':>13} {'events':>9} "
          f"{'peak RSS MiB':>13}")
    for backend in args.backends:
        for topology in args.topologies:
            for npus in args.npus:
                result = measure_in_child(backend, topology, npus, args.iterations, args.timeout)
                if result["status"] != "ok":
                    print(f"{npus:6d} {backend:11} {topology:10} {result['status']}")
                    continue
                print(f"{npus:6d} {backend:11} {topology:10} {result['wall_s']:8.3f} {result['iteration_ms']:13.4f} "
                      f"{result['events']:9d} {result['peak_rss_mib']:13.0f}", flush=True)


if __name__ == "__main__":
    main()
