"""Fast-forward against the exact packet engine (issue 44, second part): iteration time, events and
CPU time of each case with `engine.fast_forward` off and on, interleaved in one process.

Every case runs without transmit jitter (`host.tx_jitter_ns=0`, which fast-forward needs) and with the
engine's defaults otherwise (TCP NewReno + SACK, timestamps, TCP Small Queues, 100 Gb/s, 1 us links), on
both sides alike. Per case the table gives the largest message (bytes), the exact run's iteration time
(the `collective` and `astra` workloads' mean) and the fast-forwarded one's relative error, the events
each ran and their ratio, events per CPU second, the CPU-time speed-up (exact / fast), the jumps made and the share of
the simulated time they skipped. CPU time (`time.process_time`) of `PreparedRun.simulate` only, the
least of `--repeat` runs of each (on a shared machine the least disturbed one), with Python's cyclic
garbage collector paused as `engine.run` pauses it; run with `nice -n 5`.

Cases (`--cases`, default all but the 1,024-NPU one):
  flow2MB, flow8MB, flow32MB  one flow of that size between the two hosts of a switch (its "iteration"
                    is its completion: the run's simulated time)
  ring8_320MB       ring all-reduce of 320 MB per NPU, 8 NPUs on one switch (40 MB steps)
  ring16_64MB       ring all-reduce of 64 MB per NPU, 16 NPUs on one switch (4 MB steps)
  a2a16_64MB        direct all-to-all of 64 MB per NPU, 16 NPUs on one switch
  ring32_ls_320MB   ring all-reduce of 320 MB per NPU, 32 NPUs on a leaf-spine (16 a leaf, 2 spines; 10 MB steps)
  dlrm16            astra_dlrm (DLRM_HybridParallel.txt, the 2020 study's), 1 iteration, 16 NPUs, one switch
  dlrm64_ls         astra_dlrm, 1 iteration, 64 NPUs, leaf-spine (16 a leaf, 2 spines)
  dlrm256_ls        astra_dlrm, 1 iteration, 256 NPUs, leaf-spine (16 a leaf, 2 spines)
  dlrm1024_ls       astra_dlrm, 1 iteration, 1,024 NPUs, leaf-spine (32 a leaf, 8 spines): minutes

Usage: nice -n 5 python benchmarks/bench_fast_forward.py [--cases ring8_320MB dlrm16 ...] [--repeat 1]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import engine
from engine.run import cyclic_collector_paused

LEAF_SPINE = {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 2}


def _collective(op: str, nbytes: int, npus: int, network: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"network": {"npus": npus, **(network or {})},
            "workload": {"type": "collective", "op": op, "bytes": nbytes, "iterations": 1}}


def _dlrm(npus: int, network: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"network": {"npus": npus, **(network or {})},
            "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 1}}


def _flow(nbytes: int) -> dict[str, Any]:
    return {"network": {"npus": 2}, "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": nbytes}]}}


CASES: dict[str, dict[str, Any]] = {
    "flow2MB": _flow(2_000_000),
    "flow8MB": _flow(8_000_000),
    "flow32MB": _flow(32_000_000),
    "ring8_320MB": _collective("all_reduce", 320_000_000, 8),
    "ring16_64MB": _collective("all_reduce", 64_000_000, 16),
    "a2a16_64MB": _collective("all_to_all", 64_000_000, 16),
    "ring32_ls_320MB": _collective("all_reduce", 320_000_000, 32, LEAF_SPINE),
    "dlrm16": _dlrm(16),
    "dlrm64_ls": _dlrm(64, LEAF_SPINE),
    "dlrm256_ls": _dlrm(256, LEAF_SPINE),
    "dlrm1024_ls": _dlrm(1024, {"topology": "leaf_spine", "hosts_per_leaf": 32, "spines": 8}),
}
DEFAULT_CASES = [name for name in CASES if name != "dlrm1024_ls"]


def measure(case: dict[str, Any], fast_forward: bool) -> dict[str, Any]:
    """One run of `case`: its iteration time, events, CPU seconds and fast-forward's jumps."""
    config = {**case, "engine": {"fast_forward": fast_forward, "max_sim_time_s": 100.0},
              "host": {"tx_jitter_ns": 0}}
    with cyclic_collector_paused():  # as engine.run simulates
        prepared = engine.prepare(config)
        prepared.start()
        started = time.process_time()
        prepared.simulate()
        cpu_s = time.process_time() - started
        rows = prepared.rows(cpu_s, flow_columns=True)
    run = rows["runs"][0]
    fast = prepared.sim.fast_forward
    iteration_s = run["iteration_time_s"] if run.get("iteration_time_s") is not None else run["sim_time_s"]
    return {"iteration_s": iteration_s, "events": run["events"], "cpu_s": cpu_s,
            "drops": run["drops"], "sim_s": run["sim_time_s"], "largest_message": int(max(rows["flows"]["bytes"])),
            "jumps": fast.jumps if fast else 0, "skipped_s": fast.skipped_ps / 1e12 if fast else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=DEFAULT_CASES)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print("| case | largest message | exact iteration | fast-forward error | drops | events exact | events fast "
          "| ratio | events/CPU s exact | events/CPU s fast | CPU speed-up | jumps | simulated time skipped |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.cases:
        exact_runs, fast_runs = [], []
        for turn in range(args.repeat):  # interleaved, the order alternating: the load falls on both alike
            for fast_forward in ((False, True) if turn % 2 == 0 else (True, False)):
                (fast_runs if fast_forward else exact_runs).append(measure(CASES[name], fast_forward))
        exact = min(exact_runs, key=lambda run: run["cpu_s"])
        fast = min(fast_runs, key=lambda run: run["cpu_s"])
        error = fast["iteration_s"] / exact["iteration_s"] - 1
        print(f"| {name} | {exact['largest_message']:,} B | {exact['iteration_s'] * 1e3:.4f} ms "
              f"| {error * 100:+.4f} % | {exact['drops']:,} "
              f"| {exact['events']:,} | {fast['events']:,} | {exact['events'] / fast['events']:.2f} "
              f"| {exact['events'] / exact['cpu_s']:,.0f} | {fast['events'] / fast['cpu_s']:,.0f} "
              f"| {exact['cpu_s'] / fast['cpu_s']:.2f} | {fast['jumps']} "
              f"| {fast['skipped_s'] / fast['sim_s'] * 100:.1f} % |", flush=True)


if __name__ == "__main__":
    main()
