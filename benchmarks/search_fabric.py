"""The search of `experiment=search_fabric` against the full grid of its space: how close its best is
to the grid's best, after how many runs, and a plot of it (docs/search.md, docs/search_fabric.png).

    python benchmarks/search_fabric.py [--workdir DIR] [--seeds 0 1 2]

Runs, in DIR (default: a new temporary folder), the search once per seed (`hydra.sweeper.sampler.seed`,
each into its own dataset) and the 240-point grid of the same space (the experiment's fixed keys and
`hydra.sweeper.params`, as a grid); prints a Markdown table (the grid's best, each search's best and
the trial that found it, the wall time of each command and the machine's load) and writes the plot.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sweep.cli import CONF_DIR  # noqa: E402
from sweep.store import load_runs  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXPERIMENT = OmegaConf.load(Path(CONF_DIR) / "experiment" / "search_fabric.yaml")
# The experiment's fixed keys, as overrides of the grid that spans its space
FIXED = ["network=leaf_spine", "workload=astra_dlrm", "engine.backend=phase", "engine.incast_rto=true",
         f"network.npus={EXPERIMENT.network.npus}", f"network.hosts_per_leaf={EXPERIMENT.network.hosts_per_leaf}",
         f"workload.iterations={EXPERIMENT.workload.iterations}"]
SPACE = [f"{key}={value}" for key, value in EXPERIMENT.hydra.sweeper.params.items()]


def _sweep(workdir: Path, *overrides: str) -> float:
    """`python -m sweep -m overrides` in `workdir`; its wall time in seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sweep", "-m", *overrides], cwd=workdir, capture_output=True,
                          text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="search-fabric-"))
    results = workdir / "results"

    load = os.getloadavg()[0]
    grid_wall_s = _sweep(workdir, *FIXED, *SPACE, "name=search_fabric_grid")
    grid = load_runs(results / "search_fabric_grid")
    grid_best_s = grid["iteration_time_s"].min()
    rows = [f"| grid (every point) | {len(grid)} | {grid_best_s * 1e3:.3f} | | {grid_wall_s:.1f} | {load:.1f} |"]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.axhline(grid_best_s * 1e3, color="black", linestyle="--", label=f"best of the {len(grid)}-point grid")
    for seed in args.seeds:
        load = os.getloadavg()[0]
        wall_s = _sweep(workdir, "experiment=search_fabric", f"hydra.sweeper.sampler.seed={seed}",
                        f"name=search_fabric_seed{seed}")
        trials = load_runs(results / f"search_fabric_seed{seed}").sort_values(["started_at", "run_id"])
        times_ms = trials["iteration_time_s"].to_numpy() * 1e3
        best_so_far_ms = [min(times_ms[:count]) for count in range(1, len(times_ms) + 1)]
        found_at = best_so_far_ms.index(best_so_far_ms[-1]) + 1
        rows.append(f"| search, seed {seed} | {len(trials)} | {best_so_far_ms[-1]:.3f} (trial {found_at}; "
                    f"{best_so_far_ms[-1] / (grid_best_s * 1e3):.2f} x the grid's) | "
                    f"{(grid['iteration_time_s'] < best_so_far_ms[-1] / 1e3).sum()} | {wall_s:.1f} | {load:.1f} |")
        line = axes.step(range(1, len(times_ms) + 1), best_so_far_ms, where="post", label=f"best so far, seed {seed}")
        axes.scatter(range(1, len(times_ms) + 1), times_ms, s=10, color=line[0].get_color(), alpha=0.5)
    axes.set_yscale("log")
    axes.set_xlabel("trial (runs in the order they started)")
    axes.set_ylabel("iteration time, ms")
    axes.set_title("experiment=search_fabric: 30 trials of a 240-point space", fontsize=10)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(DOCS / "search_fabric.png", dpi=110)
    print("| command | runs | best iteration, ms | grid points better | wall s | load |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    print("\n".join(rows))
    print(f"plot: {DOCS / 'search_fabric.png'}; datasets in {results}")


if __name__ == "__main__":
    main()
