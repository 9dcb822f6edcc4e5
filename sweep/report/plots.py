"""The report's plots, each drawn on matplotlib's Agg canvas without pyplot (building a report never
changes the backend of the process that calls it: a notebook, a Hydra job) and returned as a
`Figure` for the caller to save.

What every plot keeps to, so that a reader compares what should be compared:
- panels that show the same quantity share their y-axis (and their x-axis where it is a time);
- a series keeps one colour, marker and dash in every panel; markers are all the same size, hollow,
  so that series with equal values show through one another;
- legends, titles and ticks are in words with units (`minimum RTO 200 ms`), never raw keys;
- a bar's length is always on a linear axis from zero; times that span decades are dots on a log axis;
- a linear axis starts at zero, so that a 3 % difference looks like 3 %;
- series are split by every swept axis (panels by up to two axes, lines by the rest); only where
  that cannot fit are the remaining axes pooled, and the legend says which.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..replicate import mean_interval
from .axes import Axis, at, describe, fixed_words, in_axis_order, point_means, replicated, swept_axes
from .text import waited_for_rto

if TYPE_CHECKING:  # the module imports sweep.fidelity, hence Hydra: only for a two-fidelity dataset
    from .two_fidelity import TwoFidelity

MS = 1e3  # s -> ms
MAX_BARS = 40       # bars in one breakdown or counter plot; beyond, means per value of the first axes
MAX_SERIES = 8      # series in one panel of markers and lines
MAX_CDF_SERIES = 4  # step lines in one panel of a distribution: they cross and overlap more
MAX_FACET_VALUES = 4  # values of an axis split into panels
MAX_PANELS = 12
LOG_RATIO = 30.0    # values spanning this ratio or more are drawn on a log axis
SCATTER_LOG_RATIO = 10.0  # a scatter of times against times is log-log from this span, else linear from zero
# Settings a plot's subtitle names where all its runs share them and no axis sweeps them (the summary
# lists more: text.KEY_SETTINGS)
PLOT_SETTINGS = ("engine.backend", "network.topology", "network.npus", "network.link_gbps", "network.buffer_kb",
                 "tcp.cc", "tcp.min_rto_ms", "system.all_reduce", "system.all_to_all", "workload")
BREAKDOWN = (  # (runs column, legend, colour) of the stacked time breakdown
    ("compute_s", "compute", "#4c72b0"),
    ("exposed_all_to_all_s", "exposed all-to-all", "#dd8452"),
    ("exposed_all_reduce_s", "exposed all-reduce", "#55a868"),
    ("exposed_other_s", "other exposed comm", "#8172b3"),
    ("unaccounted_s", "not accounted for", "#bbbbbb"),
)
# One style per series, the same in every panel: distinct colours (no grey), distinct hollow markers
# of one size, and dashes, so that series with equal values stay visible on top of one another.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
STYLES = [dict(color=colour, marker=marker, markersize=8, markerfacecolor="none", markeredgewidth=1.8,
               linestyle=dash, linewidth=1.6)
          for colour, marker, dash in zip(COLOURS, "osD^vPX*", ("-", "--", "-.", ":") * 2)]


def save(fig: Figure, path: Any) -> Any:
    """Write `fig` as a PNG at `path` and return `path`."""
    fig.savefig(path, dpi=100)
    return path


@dataclass(frozen=True)
class Layout:
    """How the combinations of some axes are shown: panel rows and columns (an axis each, or None),
    the axes whose combinations are the series, and the axes pooled within a series."""

    rows: Axis | None
    columns: Axis | None
    series: tuple[Axis, ...]
    pooled: tuple[Axis, ...]

    def panels(self, frame: pd.DataFrame) -> list[list[tuple[str, pd.DataFrame]]]:
        """(title, rows of `frame`) of every panel, as rows of panels."""
        row_values = self.rows.order if self.rows else (None,)
        column_values = self.columns.order if self.columns else (None,)
        grid = []
        for row_value in row_values:
            line = []
            for column_value in column_values:
                title = ", ".join(axis.value_words(value) for axis, value in
                                  ((self.rows, row_value), (self.columns, column_value)) if axis is not None)
                line.append((title, at(at(frame, self.rows, row_value), self.columns, column_value)))
            grid.append(line)
        return grid

    def legend_title(self) -> str:
        """The series' axes in words, and what is pooled."""
        title = ", ".join(axis.words for axis in self.series)
        if self.pooled:
            title += f"\n(pooled over {', '.join(axis.words for axis in self.pooled)})"
        return title


def _combinations(frame: pd.DataFrame, axes: Sequence[Axis]) -> int:
    return len(frame.drop_duplicates([a.key for a in axes])) if axes else 1


def layout(frame: pd.DataFrame, axes: Sequence[Axis], rows_first: Axis | None = None,
           max_series: int = MAX_SERIES) -> Layout:
    """Split `axes` into panels (up to two axes of few values) and series so that every axis is
    shown: the fewest panels whose remaining combinations fit `max_series`; `rows_first`, if given
    and small enough, makes the panel rows. Where nothing fits, the last axes are pooled."""
    small = [a for a in axes if len(a.order) <= MAX_FACET_VALUES]
    choices: list[tuple[Axis | None, Axis | None]] = [(None, None), *((None, a) for a in small),
                                                       *itertools.permutations(small, 2)]
    if rows_first in small:  # only the layouts with it, as the rows
        choices = [(rows_first, c if r is rows_first else r) for r, c in choices if rows_first in (r, c)]
    fitting = []
    for rows, columns in choices:
        panels = math.prod(len(a.order) for a in (rows, columns) if a is not None)
        rest = [a for a in axes if a is not rows and a is not columns]
        if panels <= MAX_PANELS:
            fitting.append((_combinations(frame, rest) > max_series, panels, rows, columns, rest))
    # the fewest panels that fit every axis, else the most panels; rows the axis of fewer values
    over, _, rows, columns, rest = min(fitting, key=lambda option: (
        option[0], -option[1] if option[0] else option[1], len(option[2].order) if option[2] else 0))
    series: list[Axis] = []
    for axis in rest:  # where even the most panels leave too many series: the first axes that fit
        if _combinations(frame, [*series, axis]) <= max_series:
            series.append(axis)
    return Layout(rows, columns, tuple(series), tuple(a for a in rest if a not in series))


def _series(frame: pd.DataFrame, axes: Sequence[Axis]) -> list[tuple[str, pd.DataFrame]]:
    """(label in words, rows) of each combination of the axes' values, in the axes' order."""
    if not axes:  # one run: named by its presets
        return [(describe(frame.iloc[0], axes) if len(frame) == 1 else "all runs", frame)]
    groups = in_axis_order(frame, axes).groupby([a.key for a in axes], dropna=False, sort=False)
    return [(describe(part.iloc[0], axes), part) for _, part in groups]


def _styles(frame: pd.DataFrame, grid: list[list[tuple[str, pd.DataFrame]]], axes: Sequence[Axis]
            ) -> dict[str, dict[str, Any]]:
    """The style of each series of the whole figure, by label: the combinations of `axes` in the
    axes' order; with no series axes, each panel's one series (named by its run where it has one)."""
    labels = [label for label, _ in _series(frame, axes)] if axes else [
        label for panel_row in grid for _, panel in panel_row if not panel.empty for label, _ in _series(panel, axes)]
    return {label: STYLES[index % len(STYLES)] for index, label in enumerate(dict.fromkeys(labels))}


def _title(fig: Figure, text: str, fixed: str = "") -> None:
    """`text` as the figure's title and, on a line of its own, the settings every run drawn shares
    (`fixed`, from `fixed_words`), wrapped to lines that fit its width (a long title would otherwise
    run past both edges of the image)."""
    size_pt = 12.0  # matplotlib's "large", the title's default size
    chars_per_line = int(fig.get_figwidth() * 72 / (0.6 * size_pt))  # a character is about 0.6 em wide
    lines = [textwrap.fill(line, chars_per_line, break_on_hyphens=False)  # all-reduce: one word
             for line in (text, *([f"Fixed: {fixed}"] if fixed else []))]
    fig.suptitle("\n".join(lines), fontsize=size_pt)


def _grid(rows: int, columns: int, width: float = 5.4, height: float = 3.9, sharex: bool = True
          ) -> tuple[Figure, np.ndarray]:
    """A figure of `rows` x `columns` panels sharing their y-axis (and x-axis if `sharex`), with
    room below for a legend."""
    fig = Figure(figsize=(max(width * columns, 8.0), height * rows + 1.8), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, columns, squeeze=False, sharey=True, sharex=sharex)


def _is_wide(values: Iterable[float], ratio: float = LOG_RATIO) -> bool:
    """Whether the positive finite values span `ratio` or more."""
    finite = [v for v in values if v is not None and np.isfinite(v) and v > 0]
    return bool(finite) and max(finite) / min(finite) >= ratio


def _plain_log_ticks(ax: Any, which: str) -> None:
    """Label the log-scaled `which` axis at major ticks only, as plain numbers (0.01, 0.1, 1, 10),
    adding 2 and 5 times each power of ten where the axis spans less than two decades."""
    axis, (low, high) = (ax.xaxis, ax.get_xlim()) if which == "x" else (ax.yaxis, ax.get_ylim())
    if high / low < 100:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _time_axis(axs: np.ndarray, values_ms: pd.Series, which: str = "y") -> None:
    """Scale the shared time axis of all panels: log where the values span `LOG_RATIO` or more, else
    linear from zero (a small difference is not magnified)."""
    ax = axs.flat[0]
    if _is_wide(values_ms):
        (ax.set_yscale if which == "y" else ax.set_xscale)("log")
        _plain_log_ticks(ax, which)
    else:
        top = float(np.nanmax(values_ms)) if len(values_ms) else 1.0
        (ax.set_ylim if which == "y" else ax.set_xlim)(0, top * 1.1 if top > 0 else 1.0)


def _figure_legend(fig: Figure, axs: np.ndarray, title: str) -> None:
    """One legend below the panels with every series of any panel, in the order they were drawn."""
    entries: dict[str, Any] = {}
    for ax in axs.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), title=title, loc="outside lower center",
                   fontsize="small", title_fontsize="small", ncols=2 if max(map(len, entries)) <= 60 else 1)


def plot_vs_axis(frame: pd.DataFrame, axis: Axis, others: Sequence[Axis], metric: str, ylabel: str,
                 title: str) -> Figure:
    """`metric` (seconds, shown in ms) against `axis`: panels and series by the `others` (`layout`),
    the mean of the runs at each point, with the 95 % Student-t interval of that mean as an error bar
    where seeds replicate points (median and min-max band where axes are pooled)."""
    plan = layout(frame, others)
    grid = plan.panels(frame)
    fig, axs = _grid(len(grid), len(grid[0]))
    positions = {v: (float(v) if axis.numeric else i) for i, v in enumerate(axis.order)}
    seeded = replicated(frame, [axis, *others])
    drawn_ms: list[float] = []  # every value drawn, the tops of intervals and bands included: they choose the scale
    styles = _styles(frame, grid, plan.series)
    order = list(styles)
    for panel_row, ax_row in zip(grid, axs):
        for (panel_title, panel), ax in zip(panel_row, ax_row):
            for label, part in _series(panel, plan.series):
                index = order.index(label)
                x = part[axis.key].map(positions).astype(float)
                if not axis.numeric:  # spread the markers of a category a little so none hides another
                    x = x + (index - (len(order) - 1) / 2) * min(0.08, 0.4 / max(len(order) - 1, 1))
                points = pd.DataFrame({"x": x, "y": part[metric].astype(float) * MS}).groupby("x")["y"]
                style = styles[label] if axis.numeric else {**styles[label], "linestyle": "none"}
                if plan.pooled:
                    stats = points.agg(["median", "min", "max"])
                    ax.plot(stats.index, stats["median"], label=label, **style)
                    ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.15, color=style["color"])
                    drawn_ms.extend([*stats["min"], *stats["max"]])
                elif seeded:  # a point's runs are its seeds: their mean and its 95 % interval
                    intervals = pd.DataFrame([mean_interval(list(values)) for _, values in points],
                                             index=[x for x, _ in points], columns=["mean", "half_width"])
                    half_width = intervals["half_width"].where(np.isfinite(intervals["half_width"]), 0.0)
                    ax.errorbar(intervals.index, intervals["mean"], yerr=half_width, capsize=4, elinewidth=1.2,
                                label=label, **style)
                    drawn_ms.extend([*intervals["mean"], *(intervals["mean"] + half_width)])
                else:
                    means = points.mean()
                    ax.plot(means.index, means.values, label=label, **style)
                    drawn_ms.extend(means)
            ax.set_title(panel_title, fontsize="medium")
            ax.grid(True, which="major", alpha=0.3)
    for ax in axs[-1]:
        ax.set_xlabel(axis.label)
        if axis.numeric:
            if _is_wide(axis.order, ratio=10.0):
                ax.set_xscale("log")
            ax.set_xticks([positions[v] for v in axis.order], [axis.tick(v) for v in axis.order])
            ax.minorticks_off()
        else:
            labels = [axis.tick(v) for v in axis.order]
            ax.set_xticks(range(len(axis.order)), labels, rotation=30 if sum(map(len, labels)) > 40 else 0)
    for ax_row in axs:
        ax_row[0].set_ylabel(ylabel)
    _time_axis(axs, pd.Series(drawn_ms, dtype=float))
    note = ("\n(median of the runs; band: min-max)" if plan.pooled else
            "\n(mean of each point's seeds; bars: its 95 % Student-t interval)" if seeded else "")
    _figure_legend(fig, axs, plan.legend_title() + note)
    _title(fig, title, fixed_words(frame, [axis, *others], PLOT_SETTINGS))
    return fig


def plot_cdf(frame: pd.DataFrame, flows: pd.DataFrame, axes: Sequence[Axis], title: str, xlabel: str,
             unit: str) -> Figure:
    """Distribution of the completion times `fct_s` (ms, `_time_axis`) of the flows of `frame`'s runs as
    the fraction of `unit` that took at least each time (log scale: the tail, where the timeouts are,
    is as readable as the bulk); panel rows per workload, series split by every other axis. Each
    panel has its own legend: every series with how many of its flows waited for a retransmission
    timeout (`waited_for_rto`)."""
    workload = next((a for a in axes if a.key in ("workload", "workload.type")), None)
    plan = layout(frame, axes, rows_first=workload, max_series=MAX_CDF_SERIES)
    grid = plan.panels(frame)
    fig, axs = _grid(len(grid), len(grid[0]), height=4.4)
    completed = flows[flows["fct_s"].notna()]
    styles = _styles(frame, grid, plan.series)
    fewest = 1.0
    for panel_row, ax_row in zip(grid, axs):
        for (panel_title, panel), ax in zip(panel_row, ax_row):
            for label, part in _series(panel, plan.series):
                series_flows = completed[completed["run_id"].isin(part["run_id"])]
                fct_ms = np.sort(series_flows["fct_s"].astype(float).to_numpy()) * MS
                if not len(fct_ms):
                    continue
                at_least = 1.0 - np.arange(len(fct_ms)) / len(fct_ms)  # share of flows taking fct_ms[i] or longer
                fewest = min(fewest, 1.0 / len(fct_ms))
                style = styles[label]
                rto = waited_for_rto(series_flows, unit)
                ax.step(fct_ms, at_least, where="post", color=style["color"], linestyle=style["linestyle"],
                        linewidth=style["linewidth"], label=f"{label}: {rto}" if rto else label)
            ax.set_title(panel_title, fontsize="medium")
            ax.grid(True, which="major", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:  # below its panel: the counts are the panel's own
                ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.12),
                          title=plan.legend_title(), title_fontsize="x-small")
    _time_axis(axs, completed.loc[completed["run_id"].isin(frame["run_id"]), "fct_s"].astype(float) * MS, "x")
    first = axs.flat[0]
    first.set_yscale("log")
    first.set_ylim(fewest / 2, 1.5)
    first.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    for ax in axs.flat:
        ax.set_xlabel(xlabel)
        ax.tick_params(labelbottom=True)  # every panel's own ticks: its legend sits below it
    for ax_row in axs:
        ax_row[0].set_ylabel(f"fraction of {unit} taking this long or longer")
    _title(fig, title, fixed_words(frame, axes, PLOT_SETTINGS))
    return fig


def bar_rows(frame: pd.DataFrame, axes: Sequence[Axis], columns: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """One row per run to draw as a bar (sorted along the axes, labelled in words), or per point where
    seeds replicate points (the means of its seeds, `half_width_s` the 95 % interval of the first
    column's mean), or, for more than `MAX_BARS` of those, the mean per combination of the first axes
    that fit; and a note saying which."""
    frame = in_axis_order(frame, axes)
    seeded = replicated(frame, axes)
    if seeded:
        frame = point_means(frame, axes, columns[0], columns)
    if len(frame) <= MAX_BARS:
        labels = [describe(row, axes) for _, row in frame.iterrows()]
        kept_columns = [*columns, "half_width_s"] if seeded else list(columns)
        return (frame[kept_columns].astype(float).set_axis(labels),
                " (each row: the mean of a point's seeds, with its 95 % Student-t interval)" if seeded else "")
    kept: list[Axis] = []
    for axis in axes:
        if len(frame.drop_duplicates([a.key for a in [*kept, axis]])) <= MAX_BARS:
            kept.append(axis)
    kept = kept or list(axes[:1])  # an axis of more than MAX_BARS values: a bar per value
    means = frame.groupby([a.key for a in kept], sort=False, dropna=False)[list(columns)].mean()
    labels = [", ".join(a.value_words(v) for a, v in zip(kept, key if isinstance(key, tuple) else (key,)))
              for key in means.index]
    pooled = [a.words for a in axes if a not in kept]
    return means.set_axis(labels), f" (mean over {', '.join(pooled)})"


def _bar_figure(bars: int) -> tuple[Figure, Any, Any]:
    """A figure of two panels of horizontal rows side by side, tall enough for `bars` labels."""
    fig = Figure(figsize=(13, max(3.0, 0.32 * bars + 1.8)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    return fig, left, right


def plot_breakdown(frame: pd.DataFrame, axes: Sequence[Axis]) -> Figure:
    """Per run (per point where seeds replicate points, with its 95 % interval): the iteration time (ms;
    bars from zero, or dots on a log axis where the runs span `LOG_RATIO` or more, so that no run is
    invisible and no length is implied) beside its split into compute / exposed all-to-all / exposed
    all-reduce as shares of the iteration."""
    parts = [(c, label, colour) for c, label, colour in BREAKDOWN
             if c in ("compute_s", "exposed_all_to_all_s", "exposed_all_reduce_s")
             or (frame[c].abs() > 1e-3 * frame["iteration_time_s"]).any()]
    bars, note = bar_rows(frame, axes, ["iteration_time_s", *(c for c, _, _ in parts)])
    fig, absolute, share = _bar_figure(len(bars))
    y = np.arange(len(bars))
    total_ms = bars["iteration_time_s"].astype(float).to_numpy() * MS
    # a point's seeds: its mean's 95 % interval (none for one seed)
    error_ms = bars["half_width_s"].fillna(0).to_numpy() * MS if "half_width_s" in bars else None
    if _is_wide(total_ms):
        absolute.grid(True, axis="y", alpha=0.3)  # full-width rows: a line from the axis would read as a length
        absolute.errorbar(total_ms, y, xerr=error_ms, linestyle="none", marker="o", markersize=7, color="#333333",
                          capsize=3)
        absolute.set_xscale("log")
        absolute.set_xlim(np.nanmin(total_ms) / 2, np.nanmax(total_ms) * 4)
        _plain_log_ticks(absolute, "x")
        absolute.set_xlabel("iteration time (ms, log scale: dots, not bars)")
    else:
        absolute.barh(y, total_ms, xerr=error_ms, color="#555555", capsize=3)
        top_ms = np.nanmax(total_ms + (error_ms if error_ms is not None else 0))
        absolute.set_xlim(0, top_ms * 1.2 if top_ms > 0 else 1)
        absolute.set_xlabel("iteration time (ms)")
    for i, total in enumerate(total_ms):  # beside the bar, past its interval
        end = total + error_ms[i] if error_ms is not None else total
        absolute.annotate(f"{total:.3g} ms", (end, y[i]), xytext=(5, 0), textcoords="offset points",
                          va="center", fontsize="x-small")
    left_pct = np.zeros(len(bars))
    for column, label, colour in parts:
        values = bars[column].astype(float).clip(lower=0).fillna(0).to_numpy()
        pct = 100 * values / bars["iteration_time_s"].astype(float).to_numpy()
        share.barh(y, pct, left=left_pct, color=colour, label=label)
        left_pct += pct
    absolute.set_yticks(y, bars.index, fontsize="small")
    absolute.invert_yaxis()
    share.set_xlabel("share of the iteration time (%)")
    share.set_xlim(0, 100)
    for ax in (absolute, share):
        ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=len(parts), fontsize="small")
    _title(fig, "Where an iteration goes: its length (left) and its shares of compute and exposed "
                 "communication (right)" + note, fixed_words(frame, axes, PLOT_SETTINGS))
    return fig


def plot_counters(frame: pd.DataFrame, axes: Sequence[Axis], kind: str) -> Figure:
    """Retransmitted segments and retransmission timeouts of the `kind` runs (of the backends that
    count them) that had any; the title says on which backends and how many had none."""
    counts = frame[["retransmits", "timeouts"]].astype(float).fillna(0)
    lossy = frame[counts.sum(axis=1) > 0]
    bars, note = bar_rows(lossy, axes, ["retransmits", "timeouts"])
    fig, left, right = _bar_figure(len(bars))
    y = np.arange(len(bars))
    for ax, column, label, colour in ((left, "retransmits", "retransmitted segments", "#c44e52"),
                                      (right, "timeouts", "retransmission timeouts (RTOs)", "#937860")):
        values = bars[column].astype(float).fillna(0)
        ax.barh(y, values, color=colour)
        for i, value in enumerate(values):
            ax.annotate(f"{value:.4g}", (value, y[i]), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize="x-small")
        ax.set_xlabel(f"{label} per run")
        ax.set_xlim(0, max(values.max() * 1.15, 1))
        ax.grid(True, axis="x", alpha=0.3)
    left.set_yticks(y, bars.index, fontsize="small")
    left.invert_yaxis()
    quiet = len(frame) - len(lossy)
    backends = sorted(frame["engine.backend"].unique())
    _title(fig, f"TCP loss recovery ({', '.join(backends)} backend{'s' if len(backends) > 1 else ''}): "
                f"the {len(lossy)} {kind} runs that retransmitted"
                + (f"; the other {quiet} retransmitted nothing" if quiet else "") + note,
           fixed_words(frame, axes, [c for c in PLOT_SETTINGS if c != "engine.backend"]))  # the title names it
    return fig


def _two_fidelity_fixed(two: TwoFidelity) -> str:
    """The settings every point of a two-fidelity dataset shares (its plots name both backends)."""
    return fixed_words(two.points, swept_axes(two.points), [c for c in PLOT_SETTINGS if c != "engine.backend"])


def plot_screen_vs_fine(two: TwoFidelity) -> Figure:
    """Refined points: `fine_s` against `screen_s` (ms; log-log where the times span
    `SCATTER_LOG_RATIO` or more, else linear from zero) with the line y = x; the calibration sample,
    the top points and the at-risk points marked."""
    refined = two.points[two.points["refined"]]
    fig = Figure(figsize=(7.0, 6.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x, y = refined["screen_s"] * MS, refined["fine_s"] * MS
    log = _is_wide([*x, *y], ratio=SCATTER_LOG_RATIO)  # a narrower span on log axes magnifies a small one
    top = max(x.max(), y.max())
    low, high = (min(x.min(), y.min()) / 1.5, top * 1.5) if log else (0.0, top * 1.1)
    ax.plot([low, high], [low, high], color="#888888", linestyle="--", linewidth=1, label="y = x (no error)")
    marks: list[tuple[pd.Series, dict[str, Any]]] = [
        (two.in_top[refined.index], dict(marker="o", s=70, facecolors="none", edgecolors="#55a868", linewidths=1.5,
                                         label="top by the screen")),
        (two.in_sample[refined.index], dict(marker="s", s=28, color="#4c72b0", label="calibration sample")),
        (refined["at_risk"] != "", dict(marker="x", s=45, color="#c44e52", linewidths=1.5, label="at risk (screen)"))]
    for mask, style in marks:
        if mask.any():
            ax.scatter(x[mask], y[mask], **style)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    if log:
        _plain_log_ticks(ax, "x")
        _plain_log_ticks(ax, "y")
    ax.set_xlabel(f"iteration time, {two.screen_backend} screen (ms)")
    ax.set_ylabel(f"iteration time, {two.fine_backend} (ms)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    _title(fig, f"Screen against refinement: {len(refined)} refined points of {len(two.points)}"
                + ("" if log else " (linear: the times span less than 10x)"), _two_fidelity_fixed(two))
    return fig


def plot_calibration(two: TwoFidelity) -> Figure:
    """The screen's error (%) over the calibration sample and over all refined points, as dots per
    group with the calibrated band shaded (a symmetric log scale when errors span decades)."""
    fig = Figure(figsize=(7.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    # hollow markers of two colours (no grey): overlapping points show through one another
    groups = [("calibration sample", two.sample_errors * 100, COLOURS[0], "o"),
              ("all refined points", two.points["error"].dropna() * 100, COLOURS[1], "s")]
    for row, (label, values, colour, marker) in enumerate(groups):
        jitter = np.random.default_rng(row).uniform(-0.15, 0.15, len(values))  # fixed: same plot every time
        ax.scatter(values, np.full(len(values), row) + jitter, s=30, marker=marker, facecolors="none",
                   edgecolors=colour, linewidths=1.4, label=f"{label} ({len(values)})")
    band = two.band
    if band is not None:
        ax.axvspan(band[0] * 100, band[1] * 100, color=COLOURS[0], alpha=0.15, label="calibrated band")
    fig.legend(fontsize="small", loc="outside lower center", ncols=3)
    ax.axvline(0, color="#444444", linewidth=1)
    everything = groups[1][1]
    if len(everything) and everything.abs().max() > 100:
        ax.set_xscale("symlog", linthresh=10)
    ax.set_yticks(range(len(groups)), [f"{label} ({len(values)})" for label, values, _, _ in groups])
    ax.set_ylim(-0.6, len(groups) - 0.4)
    ax.set_xlabel(f"screen error: {two.fine_backend} / {two.screen_backend} - 1 (%)")
    ax.grid(True, axis="x", alpha=0.3)
    _title(fig, "How far the screen is from the refinement", _two_fidelity_fixed(two))
    return fig
