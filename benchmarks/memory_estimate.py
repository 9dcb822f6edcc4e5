"""A run's memory estimate against its measured peak, for every backend (run on demand).

Each case runs the single-run command as a user would, in a child process (in an empty folder, with the
netsweep this Python has installed), with no memory declared:

    python -m sweep <overrides> results_dir=<tmp> name=mem

and reads back, from its runs row, `reserved_memory_mb` (the estimate: `engine.estimate_run_bytes`) and
`peak_memory_mb` (the run's peak resident memory, measured where it ran: `sweep.memory`), and from the child
its whole peak (all its processes, the ns3 helper's included; Hydra and the Parquet write too) and wall
time. It prints a Markdown table (case, backend, NPUs, status, simulated and wall time, the run's peak, the
command's peak, the estimate, estimate / the larger peak) and writes it with `--out`. The estimate should
be at or above every peak and at most twice it (docs/running.md, "Memory").

Usage: python benchmarks/memory_estimate.py [--cases NAME ...] [--out benchmarks/memory_estimate.md]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

DLRM = ("workload=astra_dlrm", "workload.iterations=1")
# 16 a leaf, 2 spines (8:1), 128 KiB, NewReno: the hybrid's validation fabric (docs/hybrid-backend.md)
SAMPLE_S = 0.05  # between two looks at the command's processes
HYBRID_FABRIC = ("network=leaf_spine", "network.hosts_per_leaf=16", "network.spines=2", "network.buffer_kb=128")
CASES: dict[str, tuple[str, ...]] = {
    "packet-switch-64": ("engine.backend=packet", "network.npus=64", *DLRM),
    "packet-leaf-spine-64": ("engine.backend=packet", *HYBRID_FABRIC, "network.npus=64", *DLRM),
    "packet-leaf-spine-256": ("engine.backend=packet", *HYBRID_FABRIC, "network.npus=256", *DLRM),
    "packet-leaf-spine-1024": ("engine.backend=packet", "network=leaf_spine", "network.npus=1024",
                               "network.hosts_per_leaf=32", "network.spines=8", *DLRM),
    "packet-fat-tree-64": ("engine.backend=packet", "network=fat_tree", "network.npus=64", *DLRM),
    "packet-fat-tree-250": ("engine.backend=packet", "network=fat_tree", "network.npus=250", *DLRM),
    "packet-fat-tree-1024": ("engine.backend=packet", "network=fat_tree", "network.npus=1024", *DLRM),
    "analytical-leaf-spine-256": ("engine.backend=analytical", *HYBRID_FABRIC, "network.npus=256", *DLRM),
    "phase-leaf-spine-1024": ("engine.backend=phase", *HYBRID_FABRIC, "network.npus=1024", *DLRM),
    "phase-leaf-spine-9216": ("engine.backend=phase", *HYBRID_FABRIC, "network.npus=9216", *DLRM),
    "hybrid-leaf-spine-1024": ("engine.backend=hybrid", *HYBRID_FABRIC, "network.npus=1024", *DLRM,
                               "engine.max_sim_time_s=100000"),
    "hybrid-leaf-spine-9216": ("engine.backend=hybrid", *HYBRID_FABRIC, "network.npus=9216", *DLRM,
                               "engine.max_sim_time_s=100000"),
    "alpha-beta-leaf-spine-9216": ("engine.backend=alpha_beta", *HYBRID_FABRIC, "network.npus=9216", *DLRM),
    "ns3-leaf-spine-64": ("engine.backend=ns3", *HYBRID_FABRIC, "network.npus=64", *DLRM),
    "ns3-leaf-spine-128": ("engine.backend=ns3", *HYBRID_FABRIC, "network.npus=128", *DLRM),
}


def tree_resident_bytes(pid: int) -> int:
    """Resident memory of process `pid` and all its descendants now (Linux /proc), in bytes."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status", encoding="ascii") as status:
                total += next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as children:
                    todo.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):  # it ended meanwhile
            continue
    return total


@dataclass(frozen=True)
class Measured:
    """A finished command: its exit code, wall time from start to exit, the peak of its whole process tree
    and the end of its stderr."""

    returncode: int
    wall_s: float
    peak_mib: float
    stderr: str


def run_measured(argv: list[str], cwd: str) -> Measured:
    """Run `argv` in `cwd` as a user waits for it. Its peak: the largest sum of its processes' resident
    memory (children included: Ray's workers, the ns3 helper), sampled every `SAMPLE_S`, or the largest
    single process's (`ru_maxrss`), whichever is larger."""
    with tempfile.TemporaryFile("w+") as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        tree_peak = 0
        while (done := os.wait4(child.pid, os.WNOHANG))[0] == 0:
            tree_peak = max(tree_peak, tree_resident_bytes(child.pid))
            time.sleep(SAMPLE_S)
        _, status, usage = done  # this child's resource use: the peak of its largest process
        child.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.perf_counter() - start
        stderr.seek(0)
        return Measured(child.returncode, wall_s, max(usage.ru_maxrss / 1024, tree_peak / 2**20),  # KiB, bytes -> MiB
                        stderr.read()[-2000:])


def measure_case(name: str, overrides: tuple[str, ...]) -> dict:
    """Run one case in a child process (`run_measured`); its runs row's memory columns and the command's
    own peak."""
    with tempfile.TemporaryDirectory() as results_dir:
        measured = run_measured([sys.executable, "-m", "sweep", *overrides, f"results_dir={results_dir}",
                                 "name=mem"], results_dir)
        runs_dir = Path(results_dir) / "mem" / "runs"
        if not runs_dir.exists():
            raise SystemExit(f"{name}: no runs row (exit {measured.returncode}):\n{measured.stderr}")
        row = pd.read_parquet(runs_dir).iloc[-1]
    command_peak_mib, wall_s = measured.peak_mib, measured.wall_s
    peak_mib = max(row["peak_memory_mb"], command_peak_mib)
    return {"case": name, "backend": row["engine.backend"], "npus": int(row["network.npus"]),
            "status": row["status"], "sim_time_s": f"{row['sim_time_s']:.4g}", "wall_s": f"{wall_s:.1f}",
            "run_peak_mib": round(row["peak_memory_mb"]), "command_peak_mib": round(command_peak_mib),
            "estimate_mib": round(row["reserved_memory_mb"]),
            "estimate_per_peak": f"{row['reserved_memory_mb'] / peak_mib:.2f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--out", type=Path, help="write the table (Markdown) here too")
    args = parser.parse_args()
    rows = []
    for name in args.cases:
        rows.append(measure_case(name, CASES[name]))
        print(rows[-1], file=sys.stderr, flush=True)
    table = "\n".join(["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
                      + ["| " + " | ".join(str(value) for value in row.values()) + " |" for row in rows])
    load = os.getloadavg()
    text = (f"{table}\n\n`python benchmarks/memory_estimate.py --cases {' '.join(args.cases)}`; load average at the "
            f"end {load[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
