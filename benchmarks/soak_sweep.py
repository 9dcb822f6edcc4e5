"""Soak test of the sweep (run on demand, not a test): many trivial runs, the driver's memory, and
how fast the dataset reads before and after compaction.

`python -m sweep -m seed=range(N)` of a 1 KiB all-reduce on 4 NPUs (analytical backend) on a local
Ray, with `NETSWEEP_RSS_EVERY` set so the driver logs its current and peak RSS every `--every` runs;
then the part count of each table, the time of `sweep.load_runs` (best of 3), `python -m
sweep.compact`, the part count and read time again, and a check that compaction changed nothing
that `load_runs` returns.

Usage: python benchmarks/soak_sweep.py [--runs 10000] [--num-cpus 2] [--every 1000] [--flush-rows N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["engine.backend=analytical", "workload=collective", "workload.bytes=1024", "network.npus=4"]


def _read_time(dataset: Path) -> float:
    import sweep

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        sweep.load_runs(dataset)
        best = min(best, time.perf_counter() - start)
    return best


def _parts(dataset: Path) -> dict[str, int]:
    from sweep.store import part_files

    return {table.name: len(part_files(dataset, table.name)) for table in sorted(dataset.iterdir()) if table.is_dir()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--flush-rows", type=int, default=None,
                        help="hydra.launcher.flush_rows (default: the launcher's)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        workdir = Path(tmp)
        extra = [f"hydra.launcher.flush_rows={args.flush_rows}"] if args.flush_rows else []
        command = [sys.executable, "-m", "sweep", "-m", f"seed=range({args.runs})", *GRID, "name=soak",
                   f"results_dir={workdir}", f"ray.num_cpus={args.num_cpus}", *extra]
        env = {**os.environ, "NETSWEEP_RSS_EVERY": str(args.every)}
        start = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
        wall_s = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"sweep failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        assert f"  {'ok':<10}{args.runs:>8}" in done.stdout, done.stdout
        print(f"{args.runs} runs in {wall_s:.1f} s (command start to end), flush_rows={args.flush_rows or 'default'}")
        for match in re.finditer(r"rss: (\d+) runs, ([\d.]+) MiB now, peak ([\d.]+) MiB", done.stderr):
            print(f"  driver after {int(match[1]):>6} runs: "
                  f"RSS {float(match[2]):7.1f} MiB, peak {float(match[3]):7.1f} MiB")

        import sweep
        from sweep.compact import compact

        dataset = workdir / "soak"
        before = sweep.load_runs(dataset)
        print(f"parts before compaction: {_parts(dataset)}; load_runs {_read_time(dataset) * 1000:.0f} ms")
        start = time.perf_counter()
        compact(dataset)
        print(f"compaction {time.perf_counter() - start:.2f} s")
        after = sweep.load_runs(dataset)
        print(f"parts after compaction:  {_parts(dataset)}; load_runs {_read_time(dataset) * 1000:.0f} ms")
        key = ["run_id"]
        assert len(after) == len(before) == args.runs and after["run_id"].is_unique
        assert after.sort_values(key).reset_index(drop=True).equals(before.sort_values(key).reset_index(drop=True))
        print("load_runs identical before and after compaction")


if __name__ == "__main__":
    main()
