"""Two-fidelity sweep benchmark (run on demand): does screening with a fast backend and refining a
few points at packet level find the configurations an all-packet sweep finds, for how much less?

For one experiment (and optional extra grid overrides, to take a documented subset of its grid):

1. the all-packet sweep, `python -m sweep -m experiment=E` as it is, timed from the command's start
   to its end (the reference: every point at packet level, run once);
2. the two-fidelity sweep of the same grid, `hydra.launcher.screen_backend=<screen>
   hydra.launcher.refine_budget=B ...` with B = `--budget-fraction` of the points, timed the same way;
3. the comparison: the best `--best` configurations of the two-fidelity sweep (its refined points,
   ranked by their packet-level iteration time) against the best of the all-packet sweep (by
   point_id); the packet runs each used; the calibration error (packet / screen - 1 over the
   calibration sample) and, since the all-packet sweep knows every point, the error over the whole
   grid and how many unrefined points lie inside the band the sample calibrated.

Writes `<results-dir>/bench_two_fidelity_<experiment>_<screen>.json`, builds the two-fidelity
dataset's report and, with `--figures DIR`, copies its two-fidelity plots there as
`two_fidelity_<experiment>_<screen>_*.png`. The all-packet sweep resumes like any sweep: a second
invocation with the same `--results-dir` (another screen) reuses its runs, and then its wall time is
that of the rest only; the engine time summed over its runs (`wall_s`) is the comparison that does
not depend on it, nor on what else shares the machine.

Usage: nice -n 10 python benchmarks/bench_two_fidelity.py --experiment collectives_quick
       [--grid 'workload=dlrm_medium' ...] [--screen analytical] [--budget-fraction 0.15]
       [--top 10] [--sample 10] [--best 10] [--num-cpus 2] [--results-dir DIR] [--figures docs]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def timed_sweep(args: Sequence[str], log: Path) -> tuple[float, int]:
    """Run `python -m sweep -m ARGS`, its output to `log`; its wall time in seconds and the grid
    points it planned."""
    start = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-m", "sweep", "-m", *args], stdout=out, stderr=subprocess.STDOUT, check=True)
    wall_s = time.perf_counter() - start
    planned = re.search(r"planned (\d+) runs", log.read_text())
    assert planned is not None, log
    return wall_s, int(planned.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--grid", nargs="*", default=[], help="extra overrides (a subset of the grid)")
    parser.add_argument("--screen", default="analytical", choices=["analytical", "alpha_beta"])
    parser.add_argument("--budget-fraction", type=float, default=0.15)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--top-per", default="", help="refine_top_per axes, comma-separated")
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--best", type=int, default=10)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--results-dir", type=Path, default=Path("results/bench_two_fidelity"))
    parser.add_argument("--figures", type=Path, default=None)
    args = parser.parse_args(argv)

    import sweep
    from sweep.report import build_report

    results_dir = args.results_dir.resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    common = [f"experiment={args.experiment}", *args.grid, f"results_dir={results_dir}",
              f"ray.num_cpus={args.num_cpus}"]
    packet_name, two_name = f"{args.experiment}_packet", f"{args.experiment}_two_fidelity_{args.screen}"

    # the all-packet sweep (resumed if a dataset is there already: then its wall time is only the rest's)
    packet_s, points = timed_sweep([*common, f"name={packet_name}"], results_dir / f"{packet_name}.log")
    budget = max(1, math.floor(args.budget_fraction * points))
    fidelity_args = [f"hydra.launcher.screen_backend={args.screen}", f"hydra.launcher.refine_budget={budget}",
                     f"hydra.launcher.refine_top={args.top}", f"hydra.launcher.refine_sample={args.sample}"]
    if args.top_per:
        fidelity_args.append(f"hydra.launcher.refine_top_per=[{args.top_per}]")
    two_s, _ = timed_sweep([*common, f"name={two_name}", *fidelity_args], results_dir / f"{two_name}.log")

    two = sweep.load_runs(results_dir / two_name)
    screen = two[two["engine.backend"] == args.screen].set_index("point_id")
    refined = two[two["engine.backend"] != args.screen].set_index("point_id")
    packet = sweep.load_runs(results_dir / packet_name)
    packet = packet[packet["point_id"].isin(screen.index)]  # the grid's points (the dataset may hold others)
    assert len(packet) == len(screen) == points, (len(packet), len(screen), points)
    truth = packet.set_index("point_id")["iteration_time_s"].astype(float)
    best_packet = list(truth.sort_values(kind="stable").index[:args.best])
    best_two = list(refined["iteration_time_s"].astype(float).sort_values(kind="stable").index[:args.best])
    in_sample = refined["refine_reason"].fillna("").str.split(",").map(lambda reasons: "sample" in reasons)
    sample_error = (refined.loc[in_sample, "iteration_time_s"].astype(float)
                    / screen.loc[refined.index[in_sample], "iteration_time_s"].astype(float) - 1)
    grid_error = truth / screen["iteration_time_s"].astype(float).reindex(truth.index) - 1
    low, high = (float(sample_error.min()), float(sample_error.max())) if len(sample_error) else (0.0, 0.0)
    unrefined = grid_error.drop(index=refined.index, errors="ignore")
    result: dict[str, Any] = {
        "experiment": args.experiment, "grid": args.grid, "screen": args.screen, "points": points,
        "budget": budget, "top": args.top, "top_per": args.top_per, "sample": args.sample,
        "packet_runs_all_packet": int(len(packet)), "packet_runs_two_fidelity": int(len(refined)),
        "packet_run_fraction": len(refined) / points,
        "all_packet_wall_s": packet_s, "two_fidelity_wall_s": two_s,
        # engine time summed over the runs (each run's wall_s): the work, whatever else shares the machine
        "all_packet_engine_s": float(packet["wall_s"].sum()),
        "two_fidelity_screen_engine_s": float(screen["wall_s"].sum()),
        "two_fidelity_refine_engine_s": float(refined["wall_s"].sum()),
        f"best_{args.best}_same": set(best_packet) == set(best_two),
        f"best_{args.best}_found": len(set(best_packet) & set(best_two)),
        "best_order_same": best_packet == best_two,
        "sample_error_median_abs": float(sample_error.abs().median()) if len(sample_error) else None,
        "sample_error_min": low, "sample_error_max": high,
        "grid_error_median_abs": float(grid_error.abs().median()),
        "grid_error_p90_abs": float(np.nanpercentile(grid_error.abs(), 90)),
        "grid_error_max": float(grid_error.max()),
        "unrefined_inside_band": float(unrefined.between(low, high).mean()) if len(unrefined) else None,
        "unrefined_worst": float(unrefined.max()) if len(unrefined) else None,
        "refined_at_risk": int(refined["refine_reason"].fillna("").str.contains("link_load|port_fan_in|slow_start|"
                                                                               "screen_failed").sum()),
    }
    (results_dir / f"bench_two_fidelity_{args.experiment}_{args.screen}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))

    report = build_report(results_dir / two_name)
    if args.figures is not None:
        args.figures.mkdir(parents=True, exist_ok=True)
        for name in ("two_fidelity_scatter.png", "calibration_error.png"):
            if (report / name).exists():
                shutil.copy(report / name, args.figures / f"two_fidelity_{args.experiment}_{args.screen}_"
                            f"{name.removeprefix('two_fidelity_')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
