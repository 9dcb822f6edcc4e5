"""Scale benchmark (run on demand, never in the test suite): wall time, events and peak resident
memory of one iteration of ASTRA-sim's DLRM_HybridParallel.txt as the number of NPUs grows.

Each measurement runs `engine.run` in a child process of its own, so its peak resident memory is
that run's alone; the wall time is the fastest of --repeat runs (the engine's own `wall_s`: the
simulation and its result rows, not Python's start-up), shown with that run's CPU time (which
other processes on a shared machine disturb less). A run still going after --timeout seconds
is stopped and shown as such, and larger sizes of that backend and topology are skipped.

Backends and topologies are tables below: a new one is one entry (its config keys), and
`--backends`/`--topologies` pick among them.

Usage: python benchmarks/bench_scale.py [--npus 16 32 64 128 256 1024] [--backends analytical]
       [--topologies leaf_spine] [--repeat 3] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parents[2] / "shared" / "astra-sim-1.0-workloads" / "DLRM_HybridParallel.txt"
REPO = Path(__file__).resolve().parents[1]

# Config of each backend: the `engine` section.
BACKENDS = {
    "analytical": {"backend": "analytical"},
}
# Config of each topology: the `network` section without `npus`.
TOPOLOGIES = {
    "leaf_spine": {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4, "link_gbps": 100,
                   "uplink_gbps": 100, "link_latency_us": 1},
}
DEFAULT_NPUS = (16, 32, 64, 128, 256, 1024)


def config(backend: str, topology: str, npus: int) -> dict:
    """One DLRM iteration on `npus` NPUs (the astra_dlrm preset's workload)."""
    return {
        "engine": BACKENDS[backend],
        "network": {**TOPOLOGIES[topology], "npus": npus},
        "workload": {"type": "astra", "path": str(WORKLOAD), "iterations": 1, "cycle_ns": 1.0},
    }


def child(config_json: str) -> None:
    """Run one config in this process and print its measurements as JSON (the child's side)."""
    import resource

    import engine

    start, cpu_start = time.perf_counter(), time.process_time()
    rows = engine.run(json.loads(config_json))
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    run = rows["runs"][0]
    print(json.dumps({
        "status": run["status"], "wall_s": wall_s, "cpu_s": cpu_s, "events": run["events"], "messages": run["flows"],
        "iteration_ms": run["iteration_time_s"] * 1e3 if run.get("iteration_time_s") else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        "kernel": engine.KERNEL, "engine_dir": str(Path(engine.__file__).parent),
    }))


def measure(cfg: dict, timeout_s: float) -> dict | None:
    """One run in a child process; None if it did not finish within `timeout_s`."""
    # this checkout's engine first, not an installed one elsewhere
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout_s, check=True)
    except subprocess.TimeoutExpired:
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["engine_dir"]) == REPO / "engine", f"measured the engine in {result['engine_dir']}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npus", type=int, nargs="+", default=list(DEFAULT_NPUS))
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), choices=list(TOPOLOGIES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print(f"one DLRM_HybridParallel iteration; wall = fastest of {args.repeat} runs, timeout {args.timeout:g} s")
    print(f"{'backend':11} {'topology':11} {'npus':>5} {'messages':>11} {'events':>11} {'wall s':>9} {'cpu s':>9} "
          f"{'peak MiB':>9} {'iteration ms':>13} kernel")
    for backend in args.backends:
        for topology in args.topologies:
            for npus in args.npus:
                results = [measure(config(backend, topology, npus), args.timeout) for _ in range(args.repeat)]
                finished = [result for result in results if result is not None]
                if not finished:
                    print(f"{backend:11} {topology:11} {npus:5d}   did not finish in {args.timeout:g} s; "
                          f"larger sizes skipped")
                    break
                best = min(finished, key=lambda result: result["wall_s"])
                print(f"{backend:11} {topology:11} {npus:5d} {best['messages']:11,d} {best['events']:11,d} "
                      f"{best['wall_s']:9.3f} {best['cpu_s']:9.3f} {best['peak_rss_mib']:9.0f} {best['iteration_ms']:13.4f} "
                      f"{best['kernel']}", flush=True)


if __name__ == "__main__":
    main()
