"""Scale benchmark (run on demand, never in the test suite): wall time, events and peak resident
memory of one iteration of ASTRA-sim's DLRM_HybridParallel.txt as the number of NPUs grows.

Each measurement runs the steps of `engine.run` in a child process of its own, so its peak resident
memory is that run's alone, and times them apart: building the network and simulating the
iteration (`simulate s`, with its CPU time, which other processes on a shared machine disturb less),
then building the result rows (`rows s`: a `flows` row per message, so beyond --rows-up-to NPUs
they are left out: tens of millions of dicts would not fit in memory). Figures are those of the
fastest of --repeat runs. A run still going after --timeout seconds is stopped and shown as such,
and larger sizes of that backend and topology are skipped.

Backends and topologies are tables below: a new one is one entry (its config keys), and
`--backends`/`--topologies` pick among them.

Usage: python benchmarks/bench_scale.py [--npus 16 32 64 128 256 512 1024 4096 9216]
       [--backends analytical alpha_beta packet] [--topologies leaf_spine fat_tree] [--repeat 3] [--timeout 600] [--rows-up-to 256]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

WORKLOAD = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"  # shipped with the engine
REPO = Path(__file__).resolve().parents[1]

# Config of each backend: the `engine` section.
BACKENDS = {
    "analytical": {"backend": "analytical"},
    "alpha_beta": {"backend": "alpha_beta"},
    "packet": {"backend": "packet"},
}
# Config of each topology: the `network` section without `npus`.
TOPOLOGIES = {
    "leaf_spine": {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4, "link_gbps": 100,
                   "uplink_gbps": 100, "link_latency_us": 1},
    "fat_tree": {"topology": "fat_tree", "link_gbps": 100, "link_latency_us": 1},  # k from the NPUs
}
DEFAULT_NPUS = (16, 32, 64, 128, 256, 512, 1024)


def config(backend: str, topology: str, npus: int) -> dict:
    """One DLRM iteration on `npus` NPUs (the astra_dlrm preset's workload)."""
    return {
        "engine": BACKENDS[backend],
        "network": {**TOPOLOGIES[topology], "npus": npus},
        "workload": {"type": "astra", "path": WORKLOAD, "iterations": 1, "cycle_ns": 1.0},
    }


def child(config_json: str, rows: bool) -> None:
    """Run one config in this process and print its measurements as JSON (the child's side): the
    steps of `engine.run`, timed apart: build and simulate, then the result rows (if `rows`)."""
    import resource

    import engine
    from engine.run import cyclic_collector_paused, prepare

    def peak_rss_mib() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    with cyclic_collector_paused():
        start, cpu_start = time.perf_counter(), time.process_time()
        prepared = prepare(json.loads(config_json))
        prepared.start()
        prepared.sim.run()
        simulate_s, simulate_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        simulate_rss_mib = peak_rss_mib()
        if rows:
            prepared.rows(simulate_s)
        rows_s = time.perf_counter() - start - simulate_s if rows else None
    sim = prepared.sim
    print(json.dumps({
        "finished": prepared.finished, "simulate_s": simulate_s, "simulate_cpu_s": simulate_cpu_s,
        "rows_s": rows_s, "events": sim.eventlist.events_run,
        "messages": len(prepared.backend.message_log()) if "flows" in prepared.backend.FILLS else None,  # alpha_beta, phase: none
        "simulated_ms": sim.eventlist.now_ps / 1e9,  # ps -> ms: the iteration, which starts at 0
        "simulate_rss_mib": simulate_rss_mib, "peak_rss_mib": peak_rss_mib(),
        "kernel": engine.KERNEL, "engine_dir": str(Path(engine.__file__).parent),
    }))


def measure(cfg: dict, rows: bool, timeout_s: float) -> dict | None:
    """One run in a child process; None if it did not finish within `timeout_s`."""
    # this checkout's engine first, not an installed one elsewhere
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg), *(["--rows"] if rows else [])],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s, check=True)
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
    parser.add_argument("--rows-up-to", type=int, default=256,
                        help="build the result rows only up to this many NPUs (a row per message: "
                             "gigabytes of dicts beyond)")
    parser.add_argument("--csv", type=Path, help="also write the measurements to this CSV file")
    parser.add_argument("--plot", type=Path, help="draw wall time against NPUs (log-log, with the fitted growth "
                        "exponent of each backend and topology) into this PNG; with --before, the earlier "
                        "measurements of benchmarks/scale_before.csv dashed beside them")
    parser.add_argument("--before", type=Path, help="a CSV of earlier measurements (npus, backend, topology, "
                        "simulate_s) to plot beside these")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows)
        return
    print(f"one DLRM_HybridParallel iteration; fastest of {args.repeat} runs (by simulation wall time), "
          f"timeout {args.timeout:g} s; rows built up to {args.rows_up_to} NPUs")
    print(f"{'backend':11} {'topology':11} {'npus':>5} {'messages':>11} {'events':>11} {'simulate s':>11} "
          f"{'cpu s':>8} {'rows s':>7} {'MiB sim':>8} {'MiB rows':>9} {'simulated ms':>13} kernel")
    measured: list[dict] = []
    for backend in args.backends:
        for topology in args.topologies:
            for npus in args.npus:
                rows = npus <= args.rows_up_to
                results = [measure(config(backend, topology, npus), rows, args.timeout) for _ in range(args.repeat)]
                finished = [result for result in results if result is not None]
                if not finished:
                    print(f"{backend:11} {topology:11} {npus:5d}   did not finish in {args.timeout:g} s; "
                          f"larger sizes skipped")
                    break
                best = min(finished, key=lambda result: result["simulate_s"])
                measured.append({"npus": npus, "backend": backend, "topology": topology, **best})
                rows_s = f"{best['rows_s']:7.2f}" if rows else f"{'-':>7}"
                rows_mib = f"{best['peak_rss_mib']:9.0f}" if rows else f"{'-':>9}"
                messages = f"{best['messages']:11,d}" if best["messages"] is not None else f"{'-':>11}"
                print(f"{backend:11} {topology:11} {npus:5d} {messages} {best['events']:11,d} "
                      f"{best['simulate_s']:11.3f} {best['simulate_cpu_s']:8.3f} {rows_s} "
                      f"{best['simulate_rss_mib']:8.0f} {rows_mib} {best['simulated_ms']:13.4f} "
                      f"{best['kernel']}{'' if best['finished'] else ' UNFINISHED'}", flush=True)
    frame = pd.DataFrame(measured)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    if args.plot:
        before = pd.read_csv(args.before) if args.before else None
        for line in plot(frame, before, args.plot):
            print(line)


def growth_exponent(npus: pd.Series, seconds: pd.Series) -> float:
    """The slope of log(seconds) against log(npus), by least squares: cost ~ npus ** slope."""
    slope, _ = np.polyfit(np.log(npus.astype(float)), np.log(seconds.astype(float)), 1)
    return float(slope)


def plot(after: pd.DataFrame, before: pd.DataFrame | None, path: Path) -> list[str]:
    """Wall time of the simulation against NPUs, log-log, one line per backend and topology (solid:
    these measurements; dashed: `before`), each labelled with its fitted growth exponent; returns
    one line of text per fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 5.0))
    lines = []
    colours = {"packet": "tab:red", "analytical": "tab:blue", "alpha_beta": "tab:green"}
    markers = {"leaf_spine": "o", "fat_tree": "s"}
    for label, frame, style in (("before", before, "--"), ("now", after, "-")):
        if frame is None or frame.empty:
            continue
        for (backend, topology), series in frame.groupby(["backend", "topology"]):
            series = series.sort_values("npus")
            positive = series[series["simulate_s"] > 0]
            exponent = growth_exponent(positive["npus"], positive["simulate_s"]) if len(positive) >= 2 else float("nan")
            legend = f"{backend}, {topology}, {label}: ~ NPUs^{exponent:.2f}"
            axes.plot(series["npus"], series["simulate_s"], style, marker=markers.get(topology, "x"),
                      color=colours.get(backend, "black"), label=legend)
            lines.append(f"fit {legend} ({len(positive)} sizes, {int(series['npus'].min())} to "
                         f"{int(series['npus'].max())} NPUs)")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("NPUs")
    axes.set_ylabel("wall time of one DLRM iteration (s)")
    axes.set_title("netsweep at scale: one ASTRA-sim DLRM iteration, 2-core laptop")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return lines


if __name__ == "__main__":
    main()
