"""The report's Markdown: the sections of `summary.md` as lists of lines, from the runs and the axes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from ..schema import PRESET_COLUMNS
from ..store import QUARANTINE, quarantined_parts
from .axes import (
    Axis,
    at,
    backend_classes,
    describe,
    fmt,
    is_config_column,
    key_words,
    point_means,
    point_runs,
    replicated,
    row_keys,
    swept_axes,
)
from .reading import Dataset, exposed_from_collectives

MS = 1e3  # s -> ms
# Settings named in the summary when every run has the same value.
KEY_SETTINGS = ("engine.backend", "network.topology", "network.npus", "network.link_gbps",
                "network.link_latency_us", "network.buffer_kb", "network.ecn_threshold_kb", "tcp.cc",
                "tcp.min_rto_ms", "tcp.init_cwnd_pkts", "tcp.delayed_ack", "system.all_reduce",
                "system.all_to_all", "system.splits", "workload.type", "workload.iterations")
HOT_RUNS, HOT_LINKS = 3, 5  # the hottest links of the slowest runs with a links table
MAX_LISTED = 40   # runs listed one by one in the summary; beyond, the fastest and slowest few
EXTREMES = 5
BREAKDOWN_DEFINITION = (
    "Time per iteration is split with the `layers` table (ASTRA-sim's EndToEnd breakdown), summed over "
    "the finished iterations and divided by their number: **compute** = `compute_s` (every pass of "
    "every layer); **exposed all-to-all** = the embedding layer's `fwd_exposed_comm_s` + "
    "`ig_exposed_comm_s` (the forward all-to-all waited for at the interaction, the backward one "
    "waited for at the embedding); **exposed all-reduce** = every layer's `wg_exposed_comm_s` (the "
    "weight-gradient all-reduces waited for by the next iteration's forward pass, or at the end); "
    "**other exposed comm** = any other layer's forward or input-gradient wait (collectives that block "
    "where they are issued, as in a `collective` microbenchmark). Compute + exposed communication = "
    "iteration time. `all_to_all_s` and `all_reduce_s` of the runs table are different numbers: the "
    "time such collectives were in flight, hidden behind compute or not.")


def ms(value: Any, digits: int = 4) -> str:
    """Seconds as milliseconds with `digits` significant digits, or `n/a`."""
    return "n/a" if value is None or pd.isna(value) else f"{float(value) * MS:.{digits}g}"


def count(value: Any) -> str:
    """A count with thousands separators (a mean over seeds with one decimal), or `n/a`."""
    if value is None or pd.isna(value):
        return "n/a"
    return f"{int(value):,}" if float(value).is_integer() else f"{float(value):,.1f}"


def mean_pm(row: pd.Series, metric: str) -> str:
    """A point's mean of `metric` in ms, with ± the half-width of its 95 % interval where it has one."""
    half_width = row.get("half_width_s", math.nan)
    return ms(row[metric]) if pd.isna(half_width) else f"{ms(row[metric])} ± {ms(half_width, 2)}"


def interval_pct(row: pd.Series, metric: str) -> str:
    """The half-width of a point's interval in percent of its mean, or `n/a`."""
    half_width = row.get("half_width_s", math.nan)
    return "n/a" if pd.isna(half_width) or not row[metric] else f"{100 * half_width / abs(row[metric]):.3g}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def waited_for_rto(flows: pd.DataFrame, unit: str) -> str:
    """How many of the completed `flows` waited for a retransmission timeout, with the share at
    three significant digits so that a rare timeout never rounds to zero (`10 of 69,888 messages
    waited for an RTO (0.0143 %)`); '' where no flow counts its timeouts (the fluid backends)."""
    counted = flows.loc[flows["fct_s"].notna(), "timeouts"].dropna()
    if counted.empty:
        return ""
    waited = int((counted > 0).sum())
    if not waited:
        return f"none of {len(counted):,} {unit} waited for an RTO"
    return f"{waited:,} of {len(counted):,} {unit} waited for an RTO ({100 * waited / len(counted):.3g} %)"


def _per_axis_tables(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, what: str,
                     extra: Sequence[tuple[str, str]]) -> list[str]:
    """Per axis and value: the runs, mean, min and max of `metric` and the means of `extra`; where seeds
    replicate points, over the points' means (min and max of the means, not of single seeds)."""
    lines: list[str] = []
    seeded = replicated(frame, axes)
    points = point_means(frame, axes, metric, [c for c, _ in extra]) if seeded else frame
    for axis in axes:
        lines += ["", f"**{axis.label}** (`{axis.key}`)", ""]
        rows = []
        for value in axis.order:
            part = at(points, axis, value)
            if part.empty:
                continue
            y = part[metric].astype(float)
            rows.append([fmt(value), *([len(part), int(part["seeds"].sum())] if seeded else [len(part)]),
                         ms(y.mean()), ms(y.min()), ms(y.max()), *(ms(part[c].astype(float).mean()) for c, _ in extra)])
        lines += table([axis.key, *(["points", "runs (seeds)"] if seeded else ["runs"]), f"mean {what} (ms)",
                        "min (ms)", "max (ms)", *(f"mean {label} (ms)" for _, label in extra)], rows)
    return lines


def _ranking(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, columns: Sequence[tuple[str, str, str]]
             ) -> list[str]:
    """The runs by `metric` (`columns[0]`), fastest first: all of them, or the fastest and slowest few.
    Where seeds replicate points, the points by their means: `metric` as mean ± the half-width of its
    95 % Student-t interval, with the number of seeds, the other columns as means."""
    seeded = replicated(frame, axes)
    what = "points" if seeded else "runs"
    if seeded:
        frame = point_means(frame, axes, metric, [c for c, _, _ in columns])
    ranked = frame.sort_values(metric, kind="stable")
    if len(ranked) > MAX_LISTED:
        shown = pd.concat([ranked.head(EXTREMES), ranked.tail(EXTREMES)])
        title = f"The {EXTREMES} fastest and {EXTREMES} slowest of {len(ranked)} {what}"
    else:
        shown, title = ranked, f"All {what}, fastest first"
    rank = {run: i + 1 for i, run in enumerate(ranked["run_id"])}
    headers = ["#", *(label for _, label, _ in columns), "configuration", "run_id"]
    if seeded:
        title += (" (each point: the mean of its seeds ± the half-width of its 95 % Student-t confidence interval; "
                  "run_id: its first seed's)")
        headers[1:2] = [f"{columns[0][1]}: mean ± 95 %", "seeds", "± (% of mean)"]
    rows = []
    for _, row in shown.iterrows():
        cells = [ms(row[c]) if kind == "ms" else count(row[c]) for c, _, kind in columns]
        if seeded:
            cells[0:1] = [mean_pm(row, metric), count(row["seeds"]), interval_pct(row, metric)]
        rows.append([rank[row["run_id"]], *cells, describe(row, axes), f"`{row['run_id']}`"])
    return ["", f"{title}:", "", *table(headers, rows)]


def _extremes(frame: pd.DataFrame, axes: Sequence[Axis], metric: str, what: str) -> list[str]:
    """The fastest and slowest run (where seeds replicate points: point, by its mean)."""
    seeded = replicated(frame, axes)
    ranked = (point_means(frame, axes, metric, []) if seeded else frame).sort_values(metric, kind="stable")

    def words(row: pd.Series) -> str:
        if seeded:
            return (f"**{mean_pm(row, metric)} ms** {what} (mean of {row['seeds']} seeds) — {describe(row, axes)} "
                    f"(first seed's run `{row['run_id']}`)")
        return f"**{ms(row[metric])} ms** {what} — {describe(row, axes)} (run `{row['run_id']}`)"

    fastest, slowest = ranked.iloc[0], ranked.iloc[-1]
    if len(ranked) == 1:
        return [f"- {words(fastest)}"]
    return [f"- Fastest: {words(fastest)}", f"- Slowest: {words(slowest)}"]


def setting_lines(runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """The presets and the key settings every run shares."""
    swept = {c for axis in axes for c in axis.columns} | {axis.key for axis in axes}
    presets = [f"{key_words(group)} `{runs[group].iloc[0]}`" for group in PRESET_COLUMNS
               if group in runs and group not in swept and runs[group].notna().all() and runs[group].nunique() == 1]
    fixed = [f"`{c}`={fmt(runs[c].iloc[0])}" for c in KEY_SETTINGS
             if c in runs and c not in swept and runs[c].nunique(dropna=False) == 1]
    lines = [f"Presets every run was composed from: {', '.join(presets)}."] if presets else []
    return lines + ([f"Settings every run shares: {', '.join(fixed)}."] if fixed else [])


def axes_lines(runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """The swept parameters: values and config columns; and the seeds, where they replicate points."""
    seeded = replicated(runs, axes)
    if not axes:
        return [f"Nothing was swept: every run has the same configuration{' but its seed' if seeded else ''}."]
    lines = table(["axis", "in words", "unit", "values", "config columns"],
                  [[f"`{a.key}`", a.words, a.unit or "", ", ".join(fmt(v) for v in a.order),
                    ", ".join(f"`{c}`" for c in a.columns)] for a in axes])
    if seeded:
        seeds = [len(part) for part in point_runs(runs, axes)]
        per_point = f"{min(seeds)}" if min(seeds) == max(seeds) else f"{min(seeds)} to {max(seeds)}"
        lines += ["", f"Seeds replicate the points ({per_point} runs a point, which differ only by `seed`: no "
                  "parameter): each point is drawn and ranked by its mean, with the 95 % Student-t confidence "
                  "interval of that mean (mean ± half-width)."]
    return lines


def training_section(dataset: Dataset, training: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """Summary of the training runs (`training`: their rows)."""
    ok = training[(training["status"] != "error") & training["iteration_time_s"].notna()]
    lines = ["", "## Training runs: iteration time", ""]
    if ok.empty:
        return lines + ["No training run finished an iteration."]
    lines += _extremes(ok, axes, "iteration_time_s", "per iteration")
    breakdown = [("compute_s", "compute"), ("exposed_all_to_all_s", "exposed all-to-all"),
                 ("exposed_all_reduce_s", "exposed all-reduce")]
    if ok["exposed_other_s"].fillna(0).gt(0).any():
        breakdown.append(("exposed_other_s", "other exposed"))
    if axes:
        lines += ["", "Iteration time per swept parameter (each row: the runs with that value, whatever "
                  "the other parameters):"]
        lines += _per_axis_tables(ok, axes, "iteration_time_s", "iteration", breakdown)
    columns = [("iteration_time_s", "iteration (ms)", "ms"), *((c, f"{label} (ms)", "ms") for c, label in breakdown),
               ("retransmits", "retransmits", "n"), ("timeouts", "timeouts", "n")]
    lines += _ranking(ok, axes, "iteration_time_s", columns)
    lines += ["", BREAKDOWN_DEFINITION]
    check = exposed_from_collectives(dataset)
    joined = ok.set_index("run_id")[["exposed_all_to_all_s", "exposed_all_reduce_s"]].join(check, how="inner")
    if not joined.empty:
        gap = pd.concat([(joined["exposed_all_to_all_s"] - joined["all_to_all"]).abs(),
                         (joined["exposed_all_reduce_s"] - joined["all_reduce"]).abs()], axis=1).max(axis=1)
        tolerance = 1e-9 + 1e-6 * ok.set_index("run_id")["iteration_time_s"].reindex(gap.index)
        differ = gap[gap > tolerance]
        if differ.empty:
            lines += ["", f"Check: for all {len(joined)} finished runs this split equals the `collectives` "
                      f"table's `exposed_s` summed by `op` (largest difference {gap.max() * 1e9:.3g} ns)."]
        else:
            lines += ["", f"Check: for {len(differ)} of {len(joined)} finished runs this split differs from the "
                      "`collectives` table's `exposed_s` by `op` (their collectives are not the DLRM's: an "
                      "embedding all-to-all and weight-gradient all-reduces), e.g. "
                      + ", ".join(f"`{run}` by {ms(value)} ms" for run, value in differ.head(3).items()) + "."]
    return lines


def flows_section(dataset: Dataset, flow_runs: pd.DataFrame, axes: Sequence[Axis]) -> list[str]:
    """Summary of the `flows` runs (`flow_runs`: their rows)."""
    flow_runs = flow_runs[flow_runs["status"] != "error"]
    lines = ["", "## Flows runs: flow completion time", ""]
    finished = flow_runs[flow_runs["last_flow_end_s"].notna()]
    if finished.empty:
        return lines + ["No flow completed."]
    lines += _extremes(finished, axes, "last_flow_end_s", "until the last flow finished")
    if axes:
        lines += ["", "Time until the last flow finished, per swept parameter:"]
        lines += _per_axis_tables(finished, axes, "last_flow_end_s", "completion", [("mean_fct_s", "FCT")])
    fct = dataset.flows[dataset.flows["fct_s"].notna()].groupby("run_id")["fct_s"]
    stats = pd.DataFrame({"p50_s": fct.median(), "p99_s": fct.quantile(0.99)})
    ranked = finished.join(stats, on="run_id")
    columns = [("last_flow_end_s", "last flow done (ms)", "ms"), ("p50_s", "FCT p50 (ms)", "ms"),
               ("p99_s", "FCT p99 (ms)", "ms"), ("max_fct_s", "FCT max (ms)", "ms"),
               ("flows_completed", "flows done", "n"), ("retransmits", "retransmits", "n"),
               ("timeouts", "timeouts", "n"), ("drops", "drops", "n"), ("ecn_marks", "ECN marks", "n")]
    return lines + _ranking(ranked, axes, "last_flow_end_s", columns)


def rto_lines(runs: pd.DataFrame, axes: Sequence[Axis], flows: pd.DataFrame, unit: str) -> list[str]:
    """How many completed messages (flows) waited for a retransmission timeout, per workload where
    it was swept, on the backends that count timeouts (packet)."""
    workload = next((a for a in axes if a.key in ("workload", "workload.type")), None)
    values = workload.order if workload else (None,)
    parts = []
    for value in values:
        runs_at = at(runs, workload, value)["run_id"]
        rto = waited_for_rto(flows[flows["run_id"].isin(runs_at)], unit)
        if rto:
            parts.append(f"{workload.value_words(value)}: {rto}" if workload else rto)
    return ["", "Retransmission timeouts, where the backend counts them: " + "; ".join(parts) + "."] if parts else []


def hot_link_lines(dataset: Dataset) -> list[str]:
    """The busiest links (by utilisation over the run) of the slowest runs that recorded links:
    where the time of a slow configuration went."""
    links = dataset.links[dataset.links["utilisation"].notna()] if "utilisation" in dataset.links else dataset.links
    if links.empty:
        return []
    runs = dataset.runs
    axes = swept_axes(runs)
    runs = runs[runs["run_id"].isin(links["run_id"]) & (runs["status"] != "error")]
    # training runs by iteration time, flows runs by the end of their last flow: each run's own length
    length = runs["iteration_time_s"].fillna(runs["last_flow_end_s"]).fillna(runs["sim_time_s"])
    slowest = runs.assign(length_s=length).sort_values("length_s", ascending=False, kind="stable").head(HOT_RUNS)
    lines = ["", "## Hottest links of the slowest runs", "",
             f"The {HOT_LINKS} links with the highest utilisation (bytes x 8 / (rate x run length)) of each of "
             f"the {len(slowest)} slowest runs that recorded links (`engine.link_stats`); n/a where the backend "
             "does not know a column (the fluid backends count bytes only; alpha_beta only on host links).", ""]
    rows = []
    for _, run in slowest.iterrows():
        hottest = links[links["run_id"] == run["run_id"]].sort_values(
            ["utilisation", "bytes"], ascending=False, kind="stable").head(HOT_LINKS)
        for _, link in hottest.iterrows():
            rows.append([f"`{run['run_id']}` ({describe(run, axes)}, {ms(run['length_s'])} ms)", f"`{link['link']}`",
                         link["kind"], fmt(link["gbps"]), count(link["bytes"]), f"{link['utilisation'] * 100:.3g} %",
                         count(link["drops"]), count(link["ecn_marks"]),
                         "n/a" if pd.isna(link["max_queue_kb"]) else f"{link['max_queue_kb']:.1f}"])
    return lines + table(["run", "link", "kind", "Gb/s", "bytes", "utilisation", "drops", "ECN marks",
                          "max queue (KiB)"], rows)


def contention_lines(runs: pd.DataFrame) -> list[str]:
    """Where one configuration ran on the lower-bound backend (`alpha_beta`, whose class says
    `LOWER_BOUND`) and on a backend that shares links: how much longer an iteration took there. The
    lower bound leaves all contention out (each message costs what it would alone on its path), so
    that gap is the cost of contention."""
    ok = runs[(runs["status"] == "ok") & runs["iteration_time_s"].notna()]
    backends = set(ok["engine.backend"])
    bounds = sorted(name for name, backend in backend_classes(backends).items() if backend.LOWER_BOUND)
    if not bounds or len(backends) < 2:
        return []
    lower_name = bounds[0]
    others = [column for column in ok.columns if is_config_column(column) and column != "engine.backend"]
    keyed = ok.assign(_key=row_keys(ok, others))
    lower = keyed[keyed["engine.backend"] == lower_name]
    bound = dict(zip(lower["_key"], lower["iteration_time_s"]))  # config (backend aside) -> its lower bound
    lines: list[str] = []
    for backend in sorted(backends - {lower_name}):
        matched = keyed[(keyed["engine.backend"] == backend) & keyed["_key"].isin(bound.keys())]
        if matched.empty:
            continue
        gap = pd.Series([time_s / bound[key] - 1 for time_s, key in zip(matched["iteration_time_s"], matched["_key"])],
                        index=matched.index)
        worst = matched.loc[gap.idxmax()]
        lines.append(f"- `{backend}`: {len(matched)} configurations; iteration time above `{lower_name}`'s by "
                     f"{gap.median():.1%} (median), at most {gap.max():.1%} (`{worst['run_id']}`: "
                     f"{ms(worst['iteration_time_s'])} ms against {ms(bound[worst['_key']])} ms)")
    if not lines:
        return []
    return ["", "## Contention", "",
            f"`{lower_name}` costs every message as if it were alone on its path (no link shared between NPUs or "
            "collectives): a lower bound. Where the same configuration also ran on a backend that shares links "
            "(max-min fair shares of a fluid model, or TCP with queues and losses), the gap is the cost of "
            "contention (at packet level, and of TCP's dynamics):", "", *lines]


def problem_lines(runs: pd.DataFrame) -> list[str]:
    """Failed runs by message with a command that reproduces one; runs that timed out."""
    lines: list[str] = []
    failed = runs[runs["status"] == "error"]
    if not failed.empty:
        lines += ["", "## Failed runs", "", f"{len(failed)} runs failed (status `error`); by message:"]
        last_line = failed["error"].fillna("").map(lambda text: (text.strip().splitlines() or [""])[-1])
        for message, part in failed.groupby(last_line, sort=False):
            lines += ["", f"- {len(part)} x `{message}`; to reproduce one:", "",
                      f"      {part['repro'].iloc[0]}"]
    timed_out = runs[runs["status"] == "timeout"]
    if not timed_out.empty:
        lines += ["", "## Runs that timed out", "",
                  f"{len(timed_out)} runs reached `engine.max_sim_time_s` before their work was done "
                  "(their means cover the iterations or flows that finished): "
                  + ", ".join(f"`{run}`" for run in timed_out["run_id"].head(10))
                  + (" ..." if len(timed_out) > 10 else "")]
    return lines


def quarantine_lines(path: Path) -> list[str]:
    """A line on the parts moved to `quarantine/` (unreadable: their rows are not in this report)."""
    parts = quarantined_parts(path)
    if not parts:
        return []
    tables = pd.Series([part.parent.name for part in parts]).value_counts()
    return ["", f"**{len(parts)} unreadable parts were moved to `{path / QUARANTINE}/`** ("
            + ", ".join(f"{name} {number}" for name, number in tables.items())
            + "): their rows are not in this report; a resumed sweep runs again the runs that lost rows."]
