"""TCP or RoCE: DLRM iteration time over TCP variants and RoCEv2, by oversubscription, buffer size and load
balancing (docs/tcp-or-roce.md; run on demand).

One astra_dlrm iteration on the packet backend, on a leaf-spine of 16 NPUs a leaf and 4 spines (100 Gb/s
links; uplinks of 400, 200 or 100 Gb/s: 1:1, 2:1, 4:1 at the leaves), for

- TCP: `tcp=newreno`, `cubic`, `linux` (Linux's defaults: CUBIC with RACK-TLP, PRR and HyStart++) and `dctcp`
  (with `network.ecn_threshold_kb=32`), drop-tail switch buffers of 128 and 512 KiB;
- RoCE: `transport=roce` with PFC and no congestion control (`roce.cc=none`) or DCQCN (`roce.cc=dcqcn`);
  PFC bounds the queues, so the buffer size is not read (one point stands for both);

each with per-flow ECMP and, where the engine has it, per-packet spraying (`network.load_balancing`).
Each family is one `python -m sweep -m` grid over one Parquet dataset (`--results`), run one after the
other; a point already in the dataset is not run again. Run it under `nice`:

    nice -n 10 python benchmarks/study_tcp_roce.py --npus 64 256       # runs, then the CSV, table, plots
    nice -n 10 python benchmarks/study_tcp_roce.py --npus 1024 --load-balancing ecmp --uplink-gbps 200 \
        --tcp newreno dctcp --buffer-kb 128                           # a part of the grid
    python benchmarks/study_tcp_roce.py --replot                       # table and plots from the CSV only

Writes benchmarks/study_tcp_roce.csv (a row per point: its settings, iteration time, drops, timeouts,
pause frames, wall time, the load when its grid started) and docs/tcp_or_roce_<npus>.png, and prints the
Markdown table of docs/tcp-or-roce.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

import engine
import sweep
from sweep.report.plots import LOG_RATIO, STYLES, save

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
DATASET = "tcp_or_roce"
COMMON = ("network=leaf_spine", "network.hosts_per_leaf=16", "network.spines=4", "network.link_gbps=100",
          "workload=astra_dlrm", "workload.iterations=1", "engine.max_sim_time_s=100000")
OVERSUBSCRIPTION = {400.0: "1:1", 200.0: "2:1", 100.0: "4:1"}  # uplink Gb/s -> 16 x 100 : 4 x uplink
BUFFERS_KB = (128, 512)
LOSS_BASED_TCP = ("newreno", "cubic", "linux")  # the `tcp` family's variants (DCTCP is a family of its own)


def families(tcp_variants: list[str], buffers_kb: list[int], roce_cc: list[str]) -> dict[str, tuple[str, ...]]:
    """The transport families, each one grid: its name, and its overrides (a family left out where it has
    nothing to run)."""
    buffers = f"network.buffer_kb={','.join(map(str, buffers_kb))}"
    loss_based = [name for name in tcp_variants if name != "dctcp"]
    grids = {"tcp": ("transport=tcp", f"tcp={','.join(loss_based)}", buffers) if loss_based else None,
             "dctcp": ("transport=tcp", "tcp=dctcp", "network.ecn_threshold_kb=32", buffers)
             if "dctcp" in tcp_variants else None,
             "roce": ("transport=roce", f"roce.cc={','.join(roce_cc)}") if roce_cc else None}
    return {name: overrides for name, overrides in grids.items() if overrides is not None}
SERIES = ("newreno", "cubic", "linux", "dctcp", "RoCE PFC", "RoCE PFC+DCQCN")
FIELDS = ("npus", "oversubscription", "buffer_kb", "load_balancing", "transport", "status", "iteration_ms",
          "drops", "timeouts", "retransmits", "pause_frames", "ecn_marks", "wall_s", "load_1min")


def load_balancings() -> list[str]:
    """`ecmp`, and `spray` where this engine has `network.load_balancing` (else ECMP alone)."""
    try:
        engine.load_config({"network": {"topology": "leaf_spine", "npus": 32, "load_balancing": "spray"}})
    except engine.ConfigError:
        return ["ecmp"]
    return ["ecmp", "spray"]


def run_grids(sizes: list[int], results: Path, args: argparse.Namespace) -> dict[str, float]:
    """Each family's grid at each size, one command after the other, over the uplinks, TCP variants, buffers,
    RoCE congestion controls and load balancings `args` asks for (load balancing None: every one the engine
    has); the load when each started, by size and family."""
    balancing = [name for name in load_balancings() if args.load_balancing is None or name in args.load_balancing]
    lb = [f"network.load_balancing={','.join(balancing)}"] if balancing != ["ecmp"] else []
    uplinks = "network.uplink_gbps=" + ",".join(f"{gbps:g}" for gbps in args.uplink_gbps)
    loads = {}
    for npus in sizes:
        for family, overrides in families(args.tcp, args.buffer_kb, args.roce_cc).items():
            argv = [sys.executable, "-m", "sweep", "-m", *COMMON, f"network.npus={npus}", uplinks, *overrides, *lb,
                    f"results_dir={results}", f"name={DATASET}"]
            loads[f"{npus} {family}"] = os.getloadavg()[0]
            print("$", " ".join(argv[1:]), file=sys.stderr, flush=True)
            subprocess.run(argv, check=False)
    return loads


def transport_of(row: pd.Series) -> str:
    """Which series a runs row belongs to."""
    if row["transport.protocol"] == "roce":
        return "RoCE PFC+DCQCN" if row["roce.cc"] == "dcqcn" else "RoCE PFC"
    return str(row["tcp"]) if "tcp" in row and isinstance(row["tcp"], str) else str(row["tcp.cc"])


def family_of(transport: str) -> str:
    """The grid (`families`) a series was run in."""
    return "roce" if transport.startswith("RoCE") else "dctcp" if transport == "dctcp" else "tcp"


def points(results: Path, sizes: list[int], loads: dict[str, float]) -> pd.DataFrame:
    """The study's points from the dataset's runs (the last run of each point)."""
    runs = sweep.load_runs(results / DATASET)
    runs = runs[runs["network.npus"].isin(sizes)]
    frame = pd.DataFrame({
        "npus": runs["network.npus"].astype(int),
        "oversubscription": runs["network.uplink_gbps"].astype(float).map(OVERSUBSCRIPTION),
        "buffer_kb": [None if protocol == "roce" else float(kb)
                      for protocol, kb in zip(runs["transport.protocol"], runs["network.buffer_kb"])],
        # null in rows written before the key existed: per flow, as then
        "load_balancing": runs["network.load_balancing"].fillna("ecmp") if "network.load_balancing" in runs else "ecmp",
        "transport": runs.apply(transport_of, axis=1),
        "status": runs["status"],
        "iteration_ms": runs["iteration_time_s"] * 1e3,
        "drops": runs["drops"], "timeouts": runs["timeouts"], "retransmits": runs["retransmits"],
        "pause_frames": runs["pause_frames"], "ecn_marks": runs["ecn_marks"], "wall_s": runs["wall_s"].round(1),
    })
    frame["load_1min"] = [round(loads.get(f"{npus} {family_of(name)}", float("nan")), 1)
                          for npus, name in zip(frame["npus"], frame["transport"])]
    keys = ["npus", "oversubscription", "buffer_kb", "load_balancing", "transport"]
    return frame.drop_duplicates(keys, keep="last").sort_values(keys, na_position="first")


def table(frame: pd.DataFrame) -> str:
    """Markdown: a row per size, oversubscription, buffer and load balancing; a column per transport (iteration
    ms; RTOs or pause frames in brackets). RoCE's cells repeat on both buffer rows (PFC: the buffer is not read)."""
    lines = ["| NPUs | oversubscription | buffer KiB | load balancing | " + " | ".join(SERIES) + " |",
             "| ---: | --- | ---: | --- |" + " ---: |" * len(SERIES)]
    tcp_rows = frame[frame["buffer_kb"].notna()][["npus", "oversubscription", "buffer_kb", "load_balancing"]]
    for npus, ratio, buffer_kb, balancing in tcp_rows.drop_duplicates().itertuples(index=False):
        cells = []
        for name in SERIES:
            roce = name.startswith("RoCE")
            hits = frame[(frame["npus"] == npus) & (frame["oversubscription"] == ratio)
                         & (frame["load_balancing"] == balancing) & (frame["transport"] == name)
                         & (frame["buffer_kb"].isna() if roce else frame["buffer_kb"] == buffer_kb)]
            if hits.empty:
                cells.append("not run")
                continue
            hit = hits.iloc[-1]
            if pd.isna(hit["iteration_ms"]) or hit["status"] != "ok":
                cells.append(str(hit["status"]))
                continue
            extra = (f" ({int(hit['pause_frames']):,} pauses)" if roce
                     else f" ({int(hit['timeouts']):,} RTOs)" if hit["timeouts"] else "")
            cells.append(f"{hit['iteration_ms']:.4g}{extra}")
        lines.append(f"| {npus:,} | {ratio} | {buffer_kb:g} | {balancing} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(frame: pd.DataFrame, npus: int, path: Path) -> None:
    """Iteration time by oversubscription and buffer (x) for each transport (a marker style), ECMP hollow and
    spraying filled; log axis where times span decades (the report's rule)."""
    figure = Figure(figsize=(10, 4.8))
    axes = figure.add_subplot()
    subset = frame[(frame["npus"] == npus) & frame["iteration_ms"].notna()]
    labels = [f"{ratio}\n{kb} KiB" for ratio in OVERSUBSCRIPTION.values() for kb in BUFFERS_KB]
    for offset, (name, style) in enumerate(zip(SERIES, STYLES)):
        for balancing in ("ecmp", "spray"):
            points_ = subset[(subset["transport"] == name) & (subset["load_balancing"] == balancing)]
            if points_.empty:
                continue
            x, y = [], []
            for row in points_.itertuples(index=False):
                buffers = BUFFERS_KB if pd.isna(row.buffer_kb) else (int(row.buffer_kb),)  # RoCE: both columns
                for kb in buffers:
                    shift = 0.04 if balancing == "spray" else -0.04  # side by side where they tie
                    x.append(labels.index(f"{row.oversubscription}\n{kb} KiB") + (offset - 2.5) * 0.12 + shift)
                    y.append(row.iteration_ms)
            marker_style = {**style, "linestyle": "none"}
            if balancing == "spray":  # filled; ECMP's hollow, as the report draws every series
                marker_style["markerfacecolor"] = style["color"]
            axes.plot(x, y, label=f"{name}, {balancing}", **marker_style)
    axes.set_xticks(range(len(labels)), labels)
    if not subset.empty and subset["iteration_ms"].max() >= LOG_RATIO * subset["iteration_ms"].min():
        axes.set_yscale("log")
        axes.set_ylabel("iteration time (ms, log)")
    else:
        axes.set_ylim(bottom=0)
        axes.set_ylabel("iteration time (ms)")
    axes.set_xlabel("oversubscription at the leaves, switch buffer (TCP; PFC bounds RoCE's queues)")
    axes.set_title(f"astra_dlrm, one iteration, {npus:,} NPUs, leaf-spine (16 a leaf, 4 spines), packet backend")
    axes.grid(True, which="both", axis="y", alpha=0.3)
    axes.legend(fontsize=7, ncols=2)
    figure.tight_layout()
    save(figure, path)


def main() -> None:
    """Run the grids (or read the CSV with --replot), then print the table and draw the plots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--npus", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--results", type=Path, default=HERE.parent / "results",
                        help=f"results_dir of the Parquet dataset `{DATASET}`")
    parser.add_argument("--csv", type=Path, default=HERE / "study_tcp_roce.csv")
    parser.add_argument("--replot", action="store_true", help="run nothing: table and plots from --csv")
    parser.add_argument("--load-balancing", nargs="+", choices=["ecmp", "spray"], default=None,
                        help="run only these (default: every one the engine has)")
    parser.add_argument("--uplink-gbps", type=float, nargs="+", choices=list(OVERSUBSCRIPTION),
                        default=list(OVERSUBSCRIPTION), help="leaf uplinks (400, 200, 100: 1:1, 2:1, 4:1)")
    parser.add_argument("--tcp", nargs="+", choices=[*LOSS_BASED_TCP, "dctcp"], default=[*LOSS_BASED_TCP, "dctcp"])
    parser.add_argument("--buffer-kb", type=int, nargs="+", default=list(BUFFERS_KB), help="TCP's switch buffers")
    parser.add_argument("--roce-cc", nargs="*", choices=["none", "dcqcn"], default=["none", "dcqcn"])
    args = parser.parse_args()
    if not args.replot:
        loads = run_grids(args.npus, args.results.resolve(), args)
        fresh = points(args.results.resolve(), args.npus, loads)
        kept = pd.read_csv(args.csv) if args.csv.exists() else pd.DataFrame(columns=FIELDS)
        kept = kept[~kept["npus"].isin(args.npus)]
        pd.concat([kept, fresh[list(FIELDS)]]).to_csv(args.csv, index=False)
    frame = pd.read_csv(args.csv)
    print(table(frame))
    for npus in sorted(frame["npus"].unique()):
        plot(frame, int(npus), DOCS / f"tcp_or_roce_{npus}.png")
        print("wrote", DOCS / f"tcp_or_roce_{npus}.png")


if __name__ == "__main__":
    main()
