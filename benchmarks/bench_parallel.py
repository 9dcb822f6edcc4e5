"""Parallel efficiency of a sweep of one-second runs (run on demand).

The same configuration (a ring all-reduce of --bytes on 16 NPUs, packet backend; about 1 s of
engine time with the compiled kernel at the default 20 MiB) is run:
  alone   with the single-run command, --alone times: its `wall_s` (the engine's time in process);
  swept   as `python -m sweep -m seed=range(N)` on a local Ray of --num-cpus CPUs.

Efficiency = N x (median wall_s alone) / (CPUs x span), where the span runs from the first run's
start to the last run's end (`started_at` + `wall_s` in the runs table): the share of the CPUs' time
that did useful work at the speed of a run alone. Also printed: how busy the workers were
(sum of the swept runs' wall_s over CPUs x span) and the whole command's wall time, Ray's start
included.

Usage: python benchmarks/bench_parallel.py [--runs 40] [--bytes 20971520] [--num-cpus 2] [--alone 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweep import load_runs


def sweep_command(overrides: list[str], multirun: bool) -> list[str]:
    return [sys.executable, "-m", "sweep", *(["-m"] if multirun else []), *overrides]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--bytes", type=int, default=20 * 1024 * 1024)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--alone", type=int, default=3, help="single runs measured for the reference time")
    args = parser.parse_args()
    workload = ["workload=collective", "workload.op=all_reduce", f"workload.bytes={args.bytes}"]
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results"
        for seed in range(args.alone):
            subprocess.run(sweep_command([*workload, f"seed={seed}", f"results_dir={results}", "name=alone"], False),
                           cwd=scratch, check=True, capture_output=True)
        alone_s = statistics.median(load_runs(results / "alone")["wall_s"])

        start = time.perf_counter()
        subprocess.run(sweep_command([*workload, f"seed=range({args.runs})", f"results_dir={results}",
                                      "name=swept", f"ray.num_cpus={args.num_cpus}"], True),
                       cwd=scratch, check=True, capture_output=True)
        command_s = time.perf_counter() - start
        runs = load_runs(results / "swept")

    started = runs["started_at"].map(lambda stamp: stamp.timestamp())
    span_s = (started + runs["wall_s"]).max() - started.min()
    capacity_s = args.num_cpus * span_s
    print(f"{len(runs)} runs of a {args.bytes:,}-byte all-reduce on {args.num_cpus} CPUs")
    print(f"  one run alone (median of {args.alone}):  {alone_s:.3f} s")
    print(f"  swept runs, mean wall_s:         {runs['wall_s'].mean():.3f} s")
    print(f"  span, first start to last end:   {span_s:.2f} s   "
          f"(whole command {command_s:.1f} s, Ray's start included)")
    print(f"  workers busy:                    {runs['wall_s'].sum() / capacity_s:.0%}")
    print(f"  parallel efficiency:             {len(runs) * alone_s / capacity_s:.0%}")


if __name__ == "__main__":
    main()
