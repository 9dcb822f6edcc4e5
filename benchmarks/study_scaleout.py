"""DLRM iteration time by scale-out design x oversubscription x TCP variant, at 1,024 and 9,216 GPUs
(docs/scaleout-study.md; run on demand).

Nodes of 8 GPUs (100 Gb/s NICs, 400 Gb/s scale-up), 128 KiB switch buffers, one astra_dlrm iteration, on:

- one switch: `network=hierarchical network.scaleout=switch` (no oversubscription);
- leaf-spine: `scaleout=leaf_spine`, 16 NICs a leaf (2 nodes), 8 or 4 spines of 200 Gb/s (1:1, 2:1);
- fat tree: `scaleout=fat_tree` (k the smallest that holds the NICs: 16 at 1,024, 34 at 9,216),
  edge uplinks of 100 or 50 Gb/s (1:1, 2:1);
- rails: `network=rail_optimized network.pxn=true`, 32 nodes a rail leaf, 16 or 8 spines of 200 Gb/s
  (1:1, 2:1);

each with `tcp=newreno`, `cubic` and `dctcp` (with `network.ecn_threshold_kb=32`). Every point is first
tried on the hybrid backend; where it refuses the configuration (exit 2: its one-line reason is kept) the
point is left out, and every design/oversubscription also runs once on phase, which does not model TCP
(its figure is the same for every variant). Each point is one `python -m sweep` command, run one after the
other (the machine is shared), appending to one Parquet dataset (`--results`); a hybrid command that runs
longer than `--timeout-s` is stopped and its point dropped. Run the whole study under `nice -n 10`:

    nice -n 10 python benchmarks/study_scaleout.py            # runs, then the CSV, table and plots
    python benchmarks/study_scaleout.py --replot              # table and plots from the CSV only

Writes benchmarks/study_scaleout.csv (one row per point, with the backend that produced it, the status,
the refusal or drop reason) after every point, docs/scaleout_study_<npus>.png, and prints the Markdown
table of docs/scaleout-study.md.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

import sweep
from sweep.report.plots import LOG_RATIO, STYLES, save

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
SIZES = (1024, 9216)
COMMON = ("network.npus_per_node=8", "network.link_gbps=100", "network.buffer_kb=128", "workload=astra_dlrm",
          "workload.iterations=1", "engine.max_sim_time_s=100000")  # no cap: timeouts' waits are the result
TCP = {"newreno": ("tcp=newreno",), "cubic": ("tcp=cubic",),
       "dctcp": ("tcp=dctcp", "network.ecn_threshold_kb=32")}  # DCTCP needs marks: 32 KiB of 128
DATASET = "scaleout_study"


@dataclass(frozen=True)
class Design:
    """One scale-out design at one oversubscription (at the leaves, rail leaves or edge switches)."""

    design: str
    oversubscription: str
    overrides: tuple[str, ...]


DESIGNS = (
    Design("one switch", "none", ("network=hierarchical", "network.scaleout=switch")),
    Design("leaf-spine", "1:1", ("network=hierarchical", "network.scaleout=leaf_spine", "network.hosts_per_leaf=16",
                                 "network.spines=8", "network.uplink_gbps=200")),
    Design("leaf-spine", "2:1", ("network=hierarchical", "network.scaleout=leaf_spine", "network.hosts_per_leaf=16",
                                 "network.spines=4", "network.uplink_gbps=200")),
    Design("fat tree", "1:1", ("network=hierarchical", "network.scaleout=fat_tree", "network.uplink_gbps=100")),
    Design("fat tree", "2:1", ("network=hierarchical", "network.scaleout=fat_tree", "network.uplink_gbps=50")),
    Design("rails (PXN)", "1:1", ("network=rail_optimized", "network.pxn=true", "network.hosts_per_leaf=32",
                                  "network.spines=16", "network.uplink_gbps=200")),
    Design("rails (PXN)", "2:1", ("network=rail_optimized", "network.pxn=true", "network.hosts_per_leaf=32",
                                  "network.spines=8", "network.uplink_gbps=200")),
)
LABELS = [f"{design.design}\n{design.oversubscription}" for design in DESIGNS]
SERIES = ("phase (no TCP)", *(f"{backend} {tcp}" for backend in ("hybrid", "packet") for tcp in TCP))
PACKET_MAX_NPUS = 1024  # packet runs whole networks: 1,024 GPUs take about 2 minutes a point
FIELDS = ("npus", "design", "oversubscription", "tcp", "backend", "status", "iteration_ms", "timeouts", "drops",
          "ecn_marks", "max_port_flows", "incast_phases", "hybrid_packet_sims", "wall_s", "load_1min", "note",
          "command")


def run_point(overrides: list[str], results: Path, timeout_s: float) -> tuple[str, pd.Series | None, float]:
    """Run one `python -m sweep` command; (refusal, drop or error note, its runs row or None, wall s)."""
    argv = [sys.executable, "-m", "sweep", *overrides, f"results_dir={results}", f"name={DATASET}"]
    start = time.perf_counter()
    # its own session, so that a stopped command's children (if any) go with it
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return f"dropped: still running after {timeout_s:.0f} s", None, time.perf_counter() - start
    wall_s = time.perf_counter() - start
    words = stdout.split()
    if not stdout.startswith("run ") or len(words) < 2:  # refused before it ran (exit 2): keep the reason
        lines = [line for line in stderr.splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit {child.returncode}"), None, wall_s
    runs = sweep.load_runs(results / DATASET)
    return "", runs[runs["run_id"] == words[1]].iloc[-1], wall_s


def measure(sizes: list[int], backends: list[str], results: Path, timeout_s: float, out: Path) -> list[dict]:
    """Every point of `backends` x `sizes` (phase first: fast, the complete picture), a TCP variant at a
    time; the CSV rewritten after each, keeping the points of other backends and sizes it held."""
    rows: list[dict] = []
    if out.exists():
        kept = pd.read_csv(out, dtype=object, keep_default_na=False)
        rows = [row for row in kept.to_dict("records")
                if not (row["backend"] in backends and int(row["npus"]) in sizes)]
    for backend in backends:
        for npus in sizes if backend != "packet" else [npus for npus in sizes if npus <= PACKET_MAX_NPUS]:
            for tcp, design in itertools.product(["newreno"] if backend == "phase" else list(TCP), DESIGNS):
                overrides = [f"engine.backend={backend}", *design.overrides, f"network.npus={npus}", *COMMON,
                             *TCP[tcp]]
                load = os.getloadavg()[0]
                note, row, wall_s = run_point(overrides, results, timeout_s)
                done = row is not None and row["status"] == "ok"
                rows.append({
                    "npus": npus, "design": design.design, "oversubscription": design.oversubscription,
                    "tcp": "n/a (phase)" if backend == "phase" else tcp, "backend": backend,
                    "status": row["status"] if row is not None else ("dropped" if note.startswith("dropped")
                                                                      else "refused"),
                    "iteration_ms": round(row["iteration_time_s"] * 1e3, 4) if done else None,
                    **{key: (None if row is None or pd.isna(row[key]) else int(row[key]))
                       for key in ("timeouts", "drops", "ecn_marks", "max_port_flows", "incast_phases",
                                   "hybrid_packet_sims")},
                    "wall_s": round(wall_s, 1), "load_1min": round(load, 1),
                    "note": note or (row["error"].strip().splitlines()[-1] if row is not None and not done
                                     else ""),
                    "command": "python -m sweep " + " ".join(overrides)})
                print(rows[-1], file=sys.stderr, flush=True)
                write_csv(rows, out)
    return rows


def write_csv(rows: list[dict], out: Path) -> None:
    """The points so far; a note is its last line (an error's: the exception)."""
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({**row, "note": (str(row["note"]).strip().splitlines() or [""])[-1]} for row in rows)


def series_of(row: pd.Series) -> str:
    """Which plotted series a point belongs to."""
    return "phase (no TCP)" if row["backend"] == "phase" else f"{row['backend']} {row['tcp']}"


def plot(frame: pd.DataFrame, npus: int, path: Path) -> None:
    """Iteration time by design and oversubscription at `npus` GPUs: a hollow marker per series (phase, and
    hybrid and packet with each TCP variant), on a log axis where times span decades (else linear from zero,
    as the report draws them); a point a backend refused,
    failed or dropped is absent."""
    figure = Figure(figsize=(10, 4.8))
    axes = figure.add_subplot()
    subset = frame[(frame["npus"] == npus) & frame["iteration_ms"].notna()]
    positions = {label.replace("\n", " "): index for index, label in enumerate(LABELS)}
    present = set(subset.apply(series_of, axis=1)) if not subset.empty else set()
    shown = [(name, style) for name, style in zip(SERIES, STYLES) if name in present]  # one style per series
    for offset, (name, style) in enumerate(shown):
        points = subset[subset.apply(series_of, axis=1) == name]
        x = [positions[f"{design} {ratio}"] + (offset - (len(shown) - 1) / 2) * 0.1
             for design, ratio in zip(points["design"], points["oversubscription"])]
        axes.plot(x, points["iteration_ms"], label=name, **{**style, "linestyle": "none"})
    axes.set_xticks(range(len(LABELS)), LABELS)
    if subset["iteration_ms"].max() >= LOG_RATIO * subset["iteration_ms"].min():  # the report's rule
        axes.set_yscale("log")
        axes.set_ylabel("iteration time (ms, log)")
    else:
        axes.set_ylim(bottom=0)
        axes.set_ylabel("iteration time (ms)")
    axes.set_xlabel("scale-out design, oversubscription at the leaves / rail leaves / edge switches")
    axes.set_title(f"astra_dlrm, one iteration, {npus:,} GPUs (nodes of 8), 100 Gb/s NICs, 128 KiB buffers")
    axes.grid(True, which="both", axis="y", alpha=0.3)
    axes.legend(fontsize=8, title="backend, TCP variant", title_fontsize=8)
    figure.tight_layout()
    save(figure, path)


def table(frame: pd.DataFrame) -> str:
    """Markdown: a row per size, design and oversubscription; a column per series (iteration ms, with the
    timeouts in brackets where the backend counts them; the status where a backend gave no time)."""
    lines = ["| GPUs | design | oversubscription | " + " | ".join(SERIES) + " |",
             "| ---: | --- | --- |" + " ---: |" * len(SERIES)]
    for npus in sorted(frame["npus"].unique()):
        for design in DESIGNS:
            cells = []
            for name in SERIES:
                hits = frame[(frame["npus"] == npus) & (frame["design"] == design.design)
                             & (frame["oversubscription"] == design.oversubscription)
                             & (frame.apply(series_of, axis=1) == name)]
                if hits.empty:
                    cells.append("not run")
                    continue
                hit = hits.iloc[-1]
                if pd.isna(hit["iteration_ms"]):
                    cells.append(str(hit["status"]))
                    continue
                no_count = pd.isna(hit["timeouts"]) or hit["backend"] == "phase"
                timeouts = "" if no_count else f" ({int(hit['timeouts']):,} RTOs)"
                cells.append(f"{hit['iteration_ms']:.4g}{timeouts}")
            lines.append(f"| {npus:,} | {design.design} | {design.oversubscription} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """Run the study (or read its CSV with --replot), then print the table and draw the plots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--npus", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--backends", nargs="+", choices=("phase", "hybrid", "packet"),
                        default=["phase", "hybrid", "packet"], help=f"packet only up to {PACKET_MAX_NPUS:,} GPUs")
    parser.add_argument("--results", type=Path, default=HERE.parent / "results",
                        help=f"results_dir of the Parquet dataset `{DATASET}`")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="drop a point whose command runs longer")
    parser.add_argument("--csv", type=Path, default=HERE / "study_scaleout.csv")
    parser.add_argument("--replot", action="store_true", help="run nothing: table and plots from --csv")
    args = parser.parse_args()
    if not args.replot:
        measure(args.npus, args.backends, args.results.resolve(), args.timeout_s, args.csv)
    frame = pd.read_csv(args.csv)
    print(table(frame))
    for npus in sorted(frame["npus"].unique()):
        plot(frame, int(npus), DOCS / f"scaleout_study_{npus}.png")
        print("wrote", DOCS / f"scaleout_study_{npus}.png")


if __name__ == "__main__":
    main()
