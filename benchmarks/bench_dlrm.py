"""DLRM training-iteration benchmark (run on demand): wall time per simulated iteration of
ASTRA-sim's DLRM_HybridParallel.txt on 16 NPUs behind one switch at 100 Gb/s over TCP, on the
packet backend and on the analytical one, and the peak resident memory of a 64-NPU run.

Each wall time is the fastest of --repeat runs, with the kernel this process has (engine/kernel.py;
`NETSWEEP_PURE_PYTHON=1` in the environment selects the pure-Python one).

Usage: python benchmarks/bench_dlrm.py [--iterations 3] [--npus 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import time

import engine
from engine import run

# the copy shipped inside the engine package (engine/workloads/), as the astra_dlrm preset names it;
# the engine resolves the name with engine.workload.layers.workload_file
WORKLOAD = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"


def measure(backend: str, npus: int, iterations: int) -> dict:
    """One run; wall time per simulated iteration and the engine's own counters."""
    start = time.perf_counter()
    row = run({
        "engine": {"backend": backend, "max_sim_time_s": 100},
        "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1},
        "workload": {"type": "astra", "path": WORKLOAD, "iterations": iterations, "cycle_ns": 1.0},
    })["runs"][0]
    wall_s = time.perf_counter() - start
    return {"backend": backend, "npus": npus, "iteration_ms": row["iteration_time_s"] * 1e3,
            "exposed_ms": row["exposed_comm_s"] * 1e3, "wall_per_iteration_s": wall_s / iterations,
            "events": row["events"], "packets": row["packets_sent"] or 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--npus", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = [min((measure(backend, args.npus, args.iterations) for _ in range(args.repeat)),
                   key=lambda result: result["wall_per_iteration_s"]) for backend in ("packet", "analytical")]
    kernel = "compiled kernel" if engine.KERNEL == "compiled" else "pure-Python kernel"
    print(f"{kernel}, fastest of {args.repeat} runs each")
    print(f"{'backend':11} {'npus':>4} {'iteration ms':>13} {'exposed ms':>11} {'wall s / iter':>14} "
          f"{'events':>9} {'packets':>9}")
    for r in results:
        print(f"{r['backend']:11} {r['npus']:4d} {r['iteration_ms']:13.4f} {r['exposed_ms']:11.4f} "
              f"{r['wall_per_iteration_s']:14.4f} {r['events']:9d} {r['packets']:9d}")
    packet, analytical = results
    print(f"analytical is {packet['wall_per_iteration_s'] / analytical['wall_per_iteration_s']:.0f}x faster; "
          f"iteration times differ by {abs(packet['iteration_ms'] / analytical['iteration_ms'] - 1) * 100:.1f} %")
    measure("packet", 64, 1)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # ru_maxrss is KiB on Linux
    print(f"peak resident memory after a 64-NPU packet run: {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
