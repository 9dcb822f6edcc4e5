"""Building a report: read the dataset, find its axes, write `summary.md`, the plots and, for a
two-fidelity dataset, `points.csv`, into `<dataset>/report/`; print it for the command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence, TextIO

import pandas as pd

from . import plots, reading, text
from .axes import Axis, backend_classes, replicated, swept_axes
from .reading import Dataset, ReportError, read_dataset

REPORT_DIR = "report"
SUMMARY_FILE = "summary.md"
POINTS_FILE = "points.csv"  # a two-fidelity dataset's points with their best estimates
# What each kind of run is measured by: (runs column, file prefix, axis label).
METRICS = {"training": ("iteration_time_s", "iteration_time", "iteration time (ms)"),
           "flows": ("last_flow_end_s", "flow_completion", "time until the last flow finished (ms)")}


def _kind_plots(dataset: Dataset, kind: str, usable: pd.DataFrame, axes: Sequence[Axis], out: Path
                ) -> tuple[list[tuple[str, str]], list[str]]:
    """Draw the plots of the training or `flows` runs (`usable`: those with a measurement); return
    (file name, what it shows) per plot and any line the summary should add."""
    metric, prefix, ylabel = METRICS[kind]
    what = ylabel.split(" (")[0]
    drawn, lines = [], []
    for axis in axes:
        others = [a for a in axes if a is not axis]
        name = f"{prefix}_vs_{axis.slug}.png"
        plots.save(plots.plot_vs_axis(usable, axis, others, metric, ylabel,
                                      f"{what[0].upper()}{what[1:]} against {axis.words}"), out / name)
        drawn.append((name, f"{what} against {axis.words} (`{axis.key}`)"
                      + (f", split by {', '.join(a.words for a in others)}" if others else "")))
    if kind == "training":
        plots.save(plots.plot_breakdown(usable, axes), out / "time_breakdown.png")
        per = ("point (the mean of its seeds, with its 95 % interval)" if replicated(usable, axes) else "run")
        drawn.append(("time_breakdown.png", f"iteration time per {per} (left) and its shares of compute, exposed "
                      "all-to-all and exposed all-reduce (right)"))
    flows = dataset.flows[dataset.flows["run_id"].isin(usable["run_id"])]
    if flows["fct_s"].notna().any():
        name, unit, times = (("message_time_cdf.png", "messages", "completion time of the point-to-point messages "
                              "of the collectives") if kind == "training" else
                             ("fct_cdf.png", "flows", "flow completion time"))
        plots.save(plots.plot_cdf(usable, flows, axes, f"Distribution of the {times}",
                                  f"{times.split(' of the')[0]} (ms)", unit), out / name)
        drawn.append((name, f"distribution of the {times} (share taking at least each time, log-log), series split "
                      f"by every swept parameter; each says how many of its {unit} waited for a retransmission "
                      "timeout"))
        lines += text.rto_lines(usable, axes, flows, unit)
    # the runs of the backends that count retransmissions and timeouts (packet level: packet, ns3, hybrid's episodes)
    counting = sorted(name for name, backend in backend_classes(usable["engine.backend"].unique()).items()
                      if {"retransmits", "timeouts"} <= backend.FILLS)
    counted = usable[usable["engine.backend"].isin(counting)]
    if counted["retransmits"].fillna(0).sum() + counted["timeouts"].fillna(0).sum() > 0:
        name = "retransmits_timeouts.png" if kind == "training" else "flows_retransmits_timeouts.png"
        plots.save(plots.plot_counters(counted, axes, kind), out / name)
        drawn.append((name, f"retransmitted segments and RTO timeouts of the {kind} runs that had any "
                      f"({', '.join(counting)} backend{'s' if len(counting) > 1 else ''})"))
    elif not counted.empty:
        lines += ["", f"No {kind} run on the {' or '.join(counting)} backend retransmitted a segment or timed out."]
    return drawn, lines


def build_report(path: str | os.PathLike[str]) -> Path:
    """Write `summary.md` and the plots of the dataset at `path` into `<path>/report/` (replacing an
    earlier report) and return that directory. Raises `ReportError` if there is no run to report."""
    dataset = read_dataset(path)
    out = dataset.path / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.png"), out / SUMMARY_FILE]:
        old.unlink(missing_ok=True)

    runs = dataset.runs
    status = runs["status"].value_counts()
    all_axes = swept_axes(runs)
    lines = [f"# netsweep report: {dataset.name}", "",
             f"Dataset `{dataset.path}`: **{len(runs)} run{'s' if len(runs) > 1 else ''}** ({dataset.rows_read} rows "
             "read; a run stored more than once counts once, its newest attempt: the one written last).", "",
             f"Status: ok {status.get('ok', 0)}, error {status.get('error', 0)}, timeout {status.get('timeout', 0)}.",
             "", "Workloads: " + ", ".join(f"{kind} {number}" for kind, number in
                                           runs["workload.type"].value_counts().items())
             + "; backends: " + ", ".join(f"{kind} {number}" for kind, number in
                                          runs["engine.backend"].value_counts().items()) + ".", "",
             *text.setting_lines(runs, all_axes), *text.quarantine_lines(dataset.path), "", "## Swept parameters", "",
             *text.axes_lines(runs, all_axes)]
    if dataset.flows_unread:
        lines += ["", f"The `flows` table ({dataset.flows_unread:,} rows) was not read, being larger than "
                  f"{reading.MAX_FLOW_ROWS:,} rows: no completion-time distributions, and a `flows` run's completion "
                  "is its `sim_time_s` (the last ACK, a round trip after the last byte). Query it with DuckDB."]

    drawn: list[tuple[str, str]] = []
    general = runs
    two = None
    if "refine_reason" in runs and runs["refine_reason"].notna().any():
        from . import two_fidelity  # it imports sweep.fidelity, hence Hydra: only for a two-fidelity dataset

        two = two_fidelity.two_fidelity(runs)
    if two is not None:
        general = runs[runs["engine.backend"].isin(two.screen_backends)]
        lines += [*two_fidelity.section(two, swept_axes(general), out / POINTS_FILE), "",
                  f"The sections below describe the screening runs (`{two.screen_backend}`), which cover every "
                  "point; the refined ones are above."]
        if two.points["error"].notna().any():
            plots.save(plots.plot_screen_vs_fine(two), out / "two_fidelity_scatter.png")
            plots.save(plots.plot_calibration(two), out / "calibration_error.png")
            drawn += [("two_fidelity_scatter.png", f"iteration time on `{two.fine_backend}` against "
                       f"`{two.screen_backend}` for every refined point (log-log where the times span 10x or more, "
                       "else linear from zero; the line y = x), calibration sample and at-risk points marked"),
                      ("calibration_error.png", f"the screen's error ({two.fine_backend} / {two.screen_backend} - 1) "
                       "over the calibration sample and over all refined points")]
    for kind in METRICS:
        frame = general[(general["workload.type"] == "flows") == (kind == "flows")]
        if frame.empty:
            continue
        axes = swept_axes(frame)
        lines += (text.training_section if kind == "training" else text.flows_section)(dataset, frame, axes)
        usable = frame[(frame["status"] != "error") & frame[METRICS[kind][0]].notna()]
        if not usable.empty:
            kind_plots, kind_lines = _kind_plots(dataset, kind, usable, axes, out)
            drawn += kind_plots
            lines += kind_lines

    lines += text.hot_link_lines(dataset)
    lines += text.contention_lines(runs)
    lines += text.problem_lines(runs)
    if drawn:
        lines += ["", "## Plots", "", *(f"- `{name}`: {what}" for name, what in drawn)]
    (out / SUMMARY_FILE).write_text("\n".join(lines) + "\n")
    return out


def print_report(path: str | os.PathLike[str], file: TextIO | None = None) -> Path:
    """`build_report`, then print the summary and the path of every plot; return the report directory."""
    file = file or sys.stdout
    out = build_report(path)
    print((out / SUMMARY_FILE).read_text(), file=file)
    print(f"report written to {out}/ ({SUMMARY_FILE} and the plots):", file=file)
    for plot in sorted(out.glob("*.png")):
        print(f"  {plot}", file=file)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m sweep.report results/<name>`; exit code 2 if there is nothing to report."""
    parser = argparse.ArgumentParser(prog="python -m sweep.report",
                                     description="Turn a netsweep dataset into a Markdown summary and PNG plots "
                                                 "under <dataset>/report/.")
    parser.add_argument("dataset", help="a dataset directory, e.g. results/quickstart")
    args = parser.parse_args(argv)
    try:
        print_report(args.dataset)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
