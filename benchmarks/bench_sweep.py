"""Sweep orchestration benchmark (run on demand): what a sweep costs beyond its simulations.

A grid of `--runs` trivial runs (`seed=range(N)`: one 1 MiB all-reduce on 8 NPUs, analytical backend,
about 1 ms of engine time each), three ways:

1. `python -m sweep -m ...` with netsweep's launcher on a local Ray of `--num-cpus` CPUs, timed from
   the command's start to its end (Python and Hydra start-up, planning, Ray's start and stop, the
   runs, the Parquet writes), with the time each phase ends (its output lines timestamped);
2. the same sweep in this process, each finished run timestamped: the time to the first result
   (Ray's start, worker start-up) and the steady-state rate (runs/s between 10 % and 90 % done);
3. Hydra's own basic sweeper and basic launcher (`hydra/sweeper=basic hydra/launcher=basic`) on
   the first `--basic-runs` points of the same grid, in series in one process (each job composed
   by the sweeper to validate it and again by the launcher, then run and stored by the single-run
   command); if that is fewer than `--runs`, its time is extrapolated linearly, which flatters it
   (every job rereads the dataset to resume, so its cost per job grows with the job count).

Usage: python benchmarks/bench_sweep.py [--runs 1000] [--num-cpus 2] [--basic-runs 1000 | 0 to skip]
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
from typing import Any, Iterator, Sequence

# The trivial run: an 8-NPU ring all-reduce of 1 MiB per NPU, analytical backend (~1 ms of engine time).
GRID = ["engine.backend=analytical", "workload=collective", "network.npus=8", "workload.bytes=1048576"]


def _sweep_command(runs: int, results_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sweep", "-m", f"seed=range({runs})", *GRID, "name=bench",
            f"results_dir={results_dir}", *extra]


def cli(runs: int, num_cpus: int, workdir: Path) -> dict[str, Any]:
    """End to end: the command as a user types it, each line of its output timestamped on arrival
    (stdout and stderr merged, unbuffered): when planning ends (`planned ...`), when Ray is up
    (`ray: ...`), when the summary comes (`sweep of ...`), when the command ends."""
    start = time.perf_counter()
    command = _sweep_command(runs, workdir / "cli", f"ray.num_cpus={num_cpus}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        assert process.stdout is not None
        lines = [(time.perf_counter() - start, line) for line in process.stdout]
    wall_s = time.perf_counter() - start
    output = "".join(line for _, line in lines)
    assert process.returncode == 0 and f"  {'ok':<10}{runs:>8}" in output, output
    plan_s = float(re.search(r"planned \d+ runs \(.*, ([\d.]+) s\)", output).group(1))
    at = {prefix: next(when for when, line in lines if line.startswith(prefix))
          for prefix in ("planned", "ray:", "sweep of")}
    return {"wall_s": wall_s, "plan_s": plan_s, "planned_at_s": at["planned"], "ray_up_at_s": at["ray:"],
            "summary_at_s": at["sweep of"]}


def in_process(runs: int, num_cpus: int, workdir: Path) -> dict[str, Any]:
    """The same sweep here, with a timestamp per finished run."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from sweep.cli import CONF_DIR
    from sweep.cluster import RayExecutor
    from sweep.driver import run_sweep
    from sweep.plan import GridComposer, PlannedRun, plan

    fixed = [*GRID, "name=bench", f"results_dir={workdir / 'in_process'}", f"ray.num_cpus={num_cpus}"]
    start = time.perf_counter()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", fixed, RunMode.MULTIRUN)
    planned = plan([[f"seed={seed}", *fixed] for seed in range(runs)], GridComposer(loader, master).compose)
    plan_s = time.perf_counter() - start

    finished: list[float] = []

    class TimedExecutor(RayExecutor):
        def results(self, todo: Sequence[PlannedRun]) -> Iterator[Any]:
            results = super().results(todo)
            try:
                for item in results:
                    if item is not None:
                        finished.append(time.perf_counter())
                    yield item
            finally:
                results.close()

    sweep_start = time.perf_counter()
    summary = run_sweep(planned, TimedExecutor(num_cpus=num_cpus), show_progress=False)
    assert summary.statuses["ok"] == runs, summary
    low, high = finished[runs // 10], finished[runs * 9 // 10]
    return {"plan_s": plan_s, "first_result_s": finished[0] - sweep_start,
            "sweep_s": time.perf_counter() - sweep_start,
            "steady_runs_per_s": (runs * 9 // 10 - runs // 10) / (high - low)}


def basic(runs: int, workdir: Path) -> dict[str, Any]:
    """Hydra's basic sweeper and launcher, on `runs` points."""
    start = time.perf_counter()
    subprocess.run(_sweep_command(runs, workdir / "basic", "hydra/sweeper=basic", "hydra/launcher=basic"),
                   cwd=workdir, capture_output=True, text=True, check=True)
    return {"wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--basic-runs", type=int, default=1000, help="0: skip Hydra's basic launcher")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        workdir = Path(tmp)
        ours = cli(args.runs, args.num_cpus, workdir)
        here = in_process(args.runs, args.num_cpus, workdir)
        hydra = basic(args.basic_runs, workdir) if args.basic_runs else None
    print(f"{args.runs} runs of `{' '.join(GRID)}`, {args.num_cpus} CPUs")
    print(f"netsweep launcher on Ray, start to end: {ours['wall_s']:.1f} s ({args.runs / ours['wall_s']:.0f} runs/s); "
          f"planning {ours['plan_s']:.1f} s")
    print(f"  timeline: planned at {ours['planned_at_s']:.1f} s, Ray up at {ours['ray_up_at_s']:.1f} s, "
          f"runs stored by {ours['summary_at_s']:.1f} s, Ray stopped and exit at {ours['wall_s']:.1f} s")
    print(f"  in process: planning {here['plan_s']:.1f} s, first result after {here['first_result_s']:.1f} s "
          f"(Ray start), all {here['sweep_s']:.1f} s, steady state {here['steady_runs_per_s']:.0f} runs/s")
    if hydra is not None:
        basic_s = hydra["wall_s"] * args.runs / args.basic_runs
        extrapolated = "" if args.basic_runs == args.runs else f" (extrapolated from {args.basic_runs} runs)"
        print(f"Hydra basic sweeper + launcher: {hydra['wall_s']:.1f} s for {args.basic_runs} runs "
              f"({args.basic_runs / hydra['wall_s']:.1f} runs/s); {args.runs} runs: {basic_s:.0f} s{extrapolated}")
        print(f"speed-up start to end: {basic_s / ours['wall_s']:.0f}x")


if __name__ == "__main__":
    main()
