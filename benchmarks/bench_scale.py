"""Scale benchmark (run on demand, never in the test suite): CPU and wall time, events and peak resident
memory of one iteration of ASTRA-sim's DLRM_HybridParallel.txt as the number of NPUs grows.

Each measurement runs the steps of `engine.run` in a child process of its own, so its peak resident
memory is that run's alone, and times them apart: building the network and simulating the
iteration (`simulate s`, with its CPU time, which other processes on a shared machine disturb less),
then building the result rows (`rows s`: a `flows` row per message, so beyond --rows-up-to NPUs
they are left out: tens of millions of dicts would not fit in memory). Figures are those of the
fastest of --repeat runs by CPU time. A run still going after --timeout seconds is stopped and shown as such,
and larger sizes of that backend and topology are skipped.

Backends and topologies are tables below: a new one is one entry (its config keys), and
`--backends`/`--topologies` pick among them. Sizes above a backend's `LARGEST_NPUS` are not run.

`--csv FILE` keeps every measured point: the rows measured now replace those of the same backend,
topology and NPUs, and the file's other rows stay (with their `notes`: where a point came from when it
was not re-run). `--plot PNG` draws every row of that file: simulation time (CPU) and peak RSS against NPUs,
log-log, one line per backend and topology, fitted over every size it holds.

Usage: python benchmarks/bench_scale.py [--npus 16 64 256 1024 4096 9216]
       [--backends analytical alpha_beta packet phase] [--topologies leaf_spine fat_tree] [--repeat 3]
       [--timeout 600] [--rows-up-to 256] [--csv benchmarks/scale_after.csv]
       [--plot docs/scale_wall_time.png --before benchmarks/scale_before.csv] [--replot]
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
    "phase": {"backend": "phase"},
}
# The largest size run per backend (others: every size asked): beyond 1,024 NPUs a packet run needs tens
# of GiB and an analytical one hours.
LARGEST_NPUS = {"analytical": 1024, "packet": 1024}
# Config of each topology: the `network` section without `npus`.
TOPOLOGIES = {
    "leaf_spine": {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4, "link_gbps": 100,
                   "uplink_gbps": 100, "link_latency_us": 1},
    "fat_tree": {"topology": "fat_tree", "link_gbps": 100, "link_latency_us": 1},  # k from the NPUs
}
DEFAULT_NPUS = (16, 64, 256, 1024, 4096, 9216)


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
        # alpha_beta, phase: none
        "messages": len(prepared.backend.message_log()) if "flows" in prepared.backend.FILLS else None,
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
    parser.add_argument("--csv", type=Path, help="merge the measurements into this CSV file (rows of the same "
                        "backend, topology and NPUs replaced, the others kept)")
    parser.add_argument("--plot", type=Path, help="draw every row of --csv (or of these measurements): simulation time "
                        "and peak RSS against NPUs, log-log, with the fitted growth exponents of each backend and "
                        "topology, into this PNG; with --before, the earlier times dashed beside them")
    parser.add_argument("--before", type=Path, help="a CSV of earlier measurements (npus, backend, topology, "
                        "simulate_s) to plot beside these")
    parser.add_argument("--replot", action="store_true", help="measure nothing: draw --plot from --csv")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows)
        return
    frame = pd.DataFrame() if args.replot else measure_all(args)
    if args.csv:
        frame = merge_into_csv(frame, args.csv)
    if args.plot:
        before = pd.read_csv(args.before) if args.before else None
        for line in plot(frame, before, args.plot):
            print(line)
    if args.replot:
        print(markdown_table(frame))


def measure_all(args: argparse.Namespace) -> pd.DataFrame:
    """Measure every size of every backend and topology asked, printing a line each; one row per
    measured point (the fastest of `args.repeat` runs) with the machine's load and the date."""
    print(f"one DLRM_HybridParallel iteration; fastest of {args.repeat} runs (by simulation CPU time), "
          f"timeout {args.timeout:g} s; rows built up to {args.rows_up_to} NPUs")
    print(f"{'backend':11} {'topology':11} {'npus':>5} {'messages':>11} {'events':>11} {'simulate s':>11} "
          f"{'cpu s':>8} {'rows s':>7} {'MiB sim':>8} {'MiB rows':>9} {'simulated ms':>13} {'load':>5} kernel")
    measured: list[dict] = []
    for backend in args.backends:
        for topology in args.topologies:
            for npus in args.npus:
                if npus > LARGEST_NPUS.get(backend, npus):
                    continue
                rows = npus <= args.rows_up_to
                load_1min = os.getloadavg()[0]
                results = [measure(config(backend, topology, npus), rows, args.timeout) for _ in range(args.repeat)]
                finished = [result for result in results if result is not None]
                if not finished:
                    print(f"{backend:11} {topology:11} {npus:5d}   did not finish in {args.timeout:g} s; "
                          f"larger sizes skipped")
                    break
                # by CPU time: on a shared machine the wall time measures the other processes too
                best = min(finished, key=lambda result: result["simulate_cpu_s"])
                kept = {key: value for key, value in best.items() if key != "engine_dir"}  # a local path
                measured.append({"npus": npus, "backend": backend, "topology": topology, **kept,
                                 "load_1min": load_1min, "measured_on": time.strftime("%Y-%m-%d", time.gmtime()),
                                 "notes": f"bench_scale.py, fastest of {len(finished)}"})
                rows_s = f"{best['rows_s']:7.2f}" if rows else f"{'-':>7}"
                rows_mib = f"{best['peak_rss_mib']:9.0f}" if rows else f"{'-':>9}"
                messages = f"{best['messages']:11,d}" if best["messages"] is not None else f"{'-':>11}"
                print(f"{backend:11} {topology:11} {npus:5d} {messages} {best['events']:11,d} "
                      f"{best['simulate_s']:11.3f} {best['simulate_cpu_s']:8.3f} {rows_s} "
                      f"{best['simulate_rss_mib']:8.0f} {rows_mib} {best['simulated_ms']:13.4f} {load_1min:5.1f} "
                      f"{best['kernel']}{'' if best['finished'] else ' UNFINISHED'}", flush=True)
    return pd.DataFrame(measured)


def merge_into_csv(measured: pd.DataFrame, path: Path) -> pd.DataFrame:
    """`measured` merged into the CSV at `path` (created if missing): its rows replace the file's rows of
    the same npus, backend and topology, every other row is kept. Writes the file; returns all rows."""
    key = ["npus", "backend", "topology"]
    kept = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=key)
    if not measured.empty:
        stale = kept.set_index(key).index.isin(measured.set_index(key).index)
        kept = pd.concat([kept[~stale], measured], ignore_index=True)
    kept = kept.sort_values(["backend", "topology", "npus"], kind="stable").reset_index(drop=True)
    counts = [column for column in ("events", "messages") if column in kept]
    kept[counts] = kept[counts].astype("Int64")  # counts stay integers beside rows that lack them
    kept.to_csv(path, index=False)
    return kept


def markdown_table(frame: pd.DataFrame) -> str:
    """Every row of `frame` as a Markdown table, a line per size, a column per backend and topology:
    simulation time (`simulate_time_s`; wall time in brackets where it differs by 20 % or more) and peak
    RSS, with the load average of each measurement."""
    frame = frame.assign(time_s=simulate_time_s)
    series = sorted({(backend, topology) for backend, topology in zip(frame["backend"], frame["topology"])})
    lines = ["| NPUs | " + " | ".join(f"{backend}, {topology}: s / MiB (load)" for backend, topology in series) + " |",
             "| ---: |" + " ---: |" * len(series)]
    for npus, size in frame.groupby("npus"):
        cells = []
        for backend, topology in series:
            row = size[(size["backend"] == backend) & (size["topology"] == topology)]
            if row.empty:
                cells.append("")
                continue
            row = row.iloc[0]
            wall = f" [wall {row['simulate_s']:.3g}]" if row["simulate_s"] > 1.2 * row["time_s"] else ""
            rss = f" / {row['simulate_rss_mib']:,.0f}" if pd.notna(row.get("simulate_rss_mib")) else " / n/a"
            load = f" ({row['load_1min']:.0f})" if pd.notna(row.get("load_1min")) else ""
            cells.append(f"{row['time_s']:.3g}{wall}{rss}{load}")
        lines.append(f"| {npus:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def growth_exponent(npus: pd.Series, values: pd.Series) -> float:
    """The slope of log(values) against log(npus), by least squares: cost ~ npus ** slope."""
    slope, _ = np.polyfit(np.log(npus.astype(float)), np.log(values.astype(float)), 1)
    return float(slope)


def fitted(series: pd.DataFrame, column: str) -> tuple[float, int]:
    """The growth exponent of `column` over every size of `series` where it is measured (NaN below two
    sizes), and how many sizes that is."""
    points = series[series[column].notna() & (series[column] > 0)]
    exponent = growth_exponent(points["npus"], points[column]) if len(points) >= 2 else float("nan")
    return exponent, len(points)


def simulate_time_s(frame: pd.DataFrame) -> pd.Series:
    """The time a row's simulation took: its CPU time, or its wall time where no CPU time was recorded
    (points measured on a quiet machine, where the two agree). On a shared machine the wall time of a
    single-threaded run is its CPU time stretched by the other processes' load."""
    wall_s = frame["simulate_s"].astype(float)
    return frame["simulate_cpu_s"].astype(float).fillna(wall_s) if "simulate_cpu_s" in frame else wall_s


def plot(after: pd.DataFrame, before: pd.DataFrame | None, path: Path) -> list[str]:
    """Simulation time (`simulate_time_s`, left) and peak resident memory (right) against NPUs, log-log,
    one line per backend and topology (solid: `after`, every size it holds; dashed: the times of
    `before`), each labelled with its fitted growth exponents; returns one line of text per fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axes, rss_axes) = plt.subplots(1, 2, figsize=(12.0, 5.5))
    lines = []
    colours = {"packet": "tab:red", "analytical": "tab:blue", "alpha_beta": "tab:green", "phase": "tab:purple"}
    markers = {"leaf_spine": "o", "fat_tree": "s"}
    for label, frame, style in (("before", before, "--"), ("now", after, "-")):
        if frame is None or frame.empty:
            continue
        for (backend, topology), series in frame.groupby(["backend", "topology"]):
            series = series.sort_values("npus").assign(time_s=simulate_time_s)
            time_exponent, time_sizes = fitted(series, "time_s")
            legend = f"{backend}, {topology}, {label}: time ~ NPUs^{time_exponent:.2f}"
            if "simulate_rss_mib" in series:
                rss_exponent, rss_sizes = fitted(series, "simulate_rss_mib")
                legend += f", RSS ~ NPUs^{rss_exponent:.2f}"
                rss = series[series["simulate_rss_mib"].notna()]
                rss_axes.plot(rss["npus"], rss["simulate_rss_mib"], style, marker=markers.get(topology, "x"),
                              color=colours.get(backend, "black"))
            time_axes.plot(series["npus"], series["time_s"], style, marker=markers.get(topology, "x"),
                           color=colours.get(backend, "black"), label=legend)
            timed = series[series["time_s"].notna()].tail(2)
            local = growth_exponent(timed["npus"], timed["time_s"]) if len(timed) == 2 else float("nan")
            lines.append(f"fit {legend} (time: {time_sizes} sizes, {int(series['npus'].min())} to "
                         f"{int(series['npus'].max())} NPUs; between the last two sizes ~ NPUs^{local:.2f})")
    for axes, ylabel in ((time_axes, "time of one DLRM iteration (s, CPU)"),
                         (rss_axes, "peak resident memory, build and simulate (MiB)")):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("NPUs")
        axes.set_ylabel(ylabel)
        axes.grid(True, which="both", alpha=0.3)
    figure.legend(loc="lower center", ncol=2, fontsize=7)
    figure.suptitle("netsweep at scale: one ASTRA-sim DLRM iteration per run, 2-core machine")
    figure.tight_layout(rect=(0, 0.22, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return lines


if __name__ == "__main__":
    main()
