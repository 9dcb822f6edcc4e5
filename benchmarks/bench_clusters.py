"""The clusters of issue 42 timed as a user waits for them (run on demand, never in the test suite).

Each case is one whole command, run in a child process in a fresh temporary folder with its own
`results_dir`, exactly as a user types it:

    python -m sweep <overrides> results_dir=<tmp> name=bench

timed from start to exit (wall clock), with the peak resident memory of its whole process tree sampled
while it runs (`memory_estimate.run_measured`: the same sampler as the memory-estimate benchmark). The
iteration time comes from the run's `runs` row; a command refused before it runs (exit 2) is reported
with its refusal line as the result.

The cases ("What it must show"): 9,216 GPUs = 1,152 nodes of 8 on `network=rail_optimized`, 32 nodes a
rail leaf, 8 spines of 200 Gb/s over 100 Gb/s NICs (2:1 at the rail leaves), 128 KiB buffers, NewReno,
one astra_dlrm iteration, on phase (target <= 30 s, <= 4 GiB) and hybrid (<= 60 s, <= 4 GiB); the same
design at 1,024 GPUs (128 nodes) on packet (<= 10 minutes, <= 8 GiB).

Usage: python benchmarks/bench_clusters.py [--cases NAME ...]   (the other cases' rows are kept)
           [--out benchmarks/bench_clusters.md] [--csv benchmarks/bench_clusters.csv]
Run it with nothing else of yours running: the wall times depend on the machine's load, which the
table gives (`uptime`'s load averages) before and after each case.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from memory_estimate import run_measured

HERE = Path(__file__).resolve().parent
MIB_PER_GIB = 1024
# Issue 42's cluster: nodes of 8 GPUs, NIC i of each node on rail i, 32 nodes a rail leaf, 8 spines of
# 200 Gb/s: 32 x 100 / (8 x 200) = 2:1 at the rail leaves; 128 KiB buffers, NewReno (the default tcp)
RAILS_2_TO_1 = ("network=rail_optimized", "network.npus_per_node=8", "network.hosts_per_leaf=32",
                "network.spines=8", "network.link_gbps=100", "network.uplink_gbps=200", "network.buffer_kb=128")
DLRM = ("workload=astra_dlrm", "workload.iterations=1")
# No simulated-time cap short of the run: an iteration slowed by timeouts is a result, not a stop
NO_CAP = ("engine.max_sim_time_s=100000",)


@dataclass(frozen=True)
class Case:
    """One command to time and its targets."""

    name: str
    backend: str
    npus: int
    target_s: float
    target_mib: float

    def overrides(self) -> tuple[str, ...]:
        """The command line's overrides (without results_dir and name)."""
        return (f"engine.backend={self.backend}", *RAILS_2_TO_1, f"network.npus={self.npus}", *DLRM, *NO_CAP)


CASES = {case.name: case for case in (
    Case("rails-9216-phase", "phase", 9216, 30.0, 4 * MIB_PER_GIB),
    Case("rails-9216-hybrid", "hybrid", 9216, 60.0, 4 * MIB_PER_GIB),
    Case("rails-1024-packet", "packet", 1024, 600.0, 8 * MIB_PER_GIB),
)}


def uptime_load() -> str:
    """`uptime`'s three load averages, as it prints them."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout
    return uptime.split("load average:")[1].strip()


def measure(case: Case) -> dict[str, object]:
    """Run `case`'s command in a fresh temporary folder; its wall time, peak, exit status and result."""
    load_before = uptime_load()
    with tempfile.TemporaryDirectory(prefix="bench_clusters_") as folder:
        measured = run_measured([sys.executable, "-m", "sweep", *case.overrides(), f"results_dir={folder}",
                                 "name=bench"], folder)
        runs_dir = Path(folder) / "bench" / "runs"
        row = pd.read_parquet(runs_dir).iloc[-1] if runs_dir.exists() else None
    load_after = uptime_load()
    if row is not None and row["status"] == "ok":
        result = f"{row['iteration_time_s'] * 1e3:.4g} ms"
    elif row is not None:
        result = f"status {row['status']}"
    else:  # refused before running: the one-line error is the result
        lines = [line for line in measured.stderr.splitlines() if line.strip()]
        result = lines[-1] if lines else "no runs row and no error line"
    met = row is not None and row["status"] == "ok" and measured.wall_s <= case.target_s \
        and measured.peak_mib <= case.target_mib
    return {"case": case.name, "backend": case.backend, "npus": case.npus, "wall_s": round(measured.wall_s, 1),
            "peak_mib": round(measured.peak_mib),
            "target": f"<= {case.target_s:g} s, <= {case.target_mib / MIB_PER_GIB:g} GiB",
            "met": "yes" if met else ("no" if row is not None else "no (refused)"),
            "exit_status": measured.returncode, "iteration_time": result, "load_before": load_before,
            "load_after": load_after, "finished_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "command": " ".join(["python -m sweep", *case.overrides(), "results_dir=<tmp> name=bench"])}


def markdown(rows: list[dict[str, object]]) -> str:
    """The table of `rows` and the commands behind it."""
    header = ("| case | backend | NPUs | wall s | peak MiB | target | met? | exit status | iteration time | "
              "load before (uptime) | load after | finished (UTC) |")
    lines = [header, "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['case']} | {row['backend']} | {int(row['npus']):,} | {row['wall_s']} | "
                     f"{int(row['peak_mib']):,} | {row['target']} | {row['met']} | {row['exit_status']} | "
                     f"{row['iteration_time']} | {row['load_before']} | {row['load_after']} | {row['finished_utc']} |")
    commands = [f"- {row['case']}: `{row['command']}`" for row in rows]
    return "\n".join([*lines, "", "Commands (each in a fresh temporary folder):", "", *commands])


def main() -> None:
    """Time the chosen cases one after the other; print and write the table and the CSV."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--out", type=Path, default=HERE / "bench_clusters.md", help="the Markdown table")
    parser.add_argument("--csv", type=Path, default=HERE / "bench_clusters.csv")
    args = parser.parse_args()
    # the cases not run this time keep their last row
    kept: dict[str, dict[str, object]] = {}
    if args.csv.exists():
        with args.csv.open(newline="") as handle:
            kept = {row["case"]: row for row in csv.DictReader(handle)}
    for name in args.cases:
        kept[name] = measure(CASES[name])
        print(kept[name], file=sys.stderr, flush=True)
    rows = [kept[name] for name in CASES if name in kept]
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[-1]))
        writer.writeheader()
        writer.writerows(rows)
    text = (f"# Issue 42's clusters, timed as a user waits for them\n\n{markdown(rows)}\n\n"
            "`python benchmarks/bench_clusters.py --cases CASE ...` (a row per case, kept until the case is run "
            "again); wall clock from start to exit of the whole command, peak = the largest resident memory of "
            "its process tree (sampled every 50 ms) or of its largest process; the machine has 2 cores shared "
            "with other developers.\n")
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
