"""`sweep.report` and the loading API, on a small real dataset: runs made with `sweep.runner.execute`
(analytical collectives and DLRM iterations, packet incast flows, a failed run, a run that times out,
a run stored twice) and stored with `ResultStore`, as a sweep stores them."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import matplotlib.colors
import matplotlib.image
import pandas as pd
import pytest
from sweep_support import compose_config

import sweep
from sweep.report import REPORT_DIR, SUMMARY_FILE, build_report, main, swept_axes
from sweep.runner import execute
from sweep.store import ResultStore, read_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ANALYTICAL = ["engine.backend=analytical"]
CONFIGS = {  # name -> overrides; a few milliseconds of wall time each
    "ar_8_small": ["workload=collective", "network.npus=8", "workload.bytes=65536", *ANALYTICAL],
    "ar_8_large": ["workload=collective", "network.npus=8", "workload.bytes=1048576", *ANALYTICAL],
    "ar_16_small": ["workload=collective", "network.npus=16", "workload.bytes=65536", *ANALYTICAL],
    "ar_16_large": ["workload=collective", "network.npus=16", "workload.bytes=1048576", *ANALYTICAL,
                    "engine.link_stats=all"],
    "dlrm_8": ["workload=dlrm_small", "network.npus=8", *ANALYTICAL],
    "dlrm_16": ["workload=dlrm_small", "network.npus=16", *ANALYTICAL, "engine.link_stats=all"],
    "timeout": ["workload=collective", "engine.max_sim_time_s=1e-6", *ANALYTICAL],
    "error": ["workload=astra_dlrm", "workload.path=/nonexistent/workload.txt", *ANALYTICAL],
    "incast_2": ["workload=incast", "workload.senders=2", "workload.bytes_per_flow=60000", "network.buffer_kb=16"],
    "incast_4": ["workload=incast", "workload.senders=4", "workload.bytes_per_flow=60000", "network.buffer_kb=16",
                 "engine.link_stats=switch_ports"],
}
RERUN = "dlrm_16"  # stored twice, as `+force=true` would: the report counts it once


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, list[dict[str, Any]]]]]:
    """The dataset directory and, per config name, the rows `execute` returned (the newest attempt)."""
    path = tmp_path_factory.mktemp("results") / "small"
    rows = {}
    with ResultStore(path) as store:
        for name, overrides in CONFIGS.items():
            rows[name] = execute(compose_config([f"name={name}", *overrides]))
            store.append(rows[name])
        store.flush()  # the rerun goes to newer parts, as a later command's would
        time.sleep(0.01)
        rows[RERUN] = execute(compose_config([f"name={RERUN}", *CONFIGS[RERUN]]))
        store.append(rows[RERUN])
    return path, rows


@pytest.fixture(scope="module")
def report(dataset: tuple[Path, dict]) -> Path:
    return build_report(dataset[0])


def _runs(rows: dict[str, dict[str, list[dict[str, Any]]]]) -> pd.DataFrame:
    return pd.DataFrame([tables["runs"][0] for tables in rows.values()])


def test_load_runs_keeps_the_newest_attempt_of_each_run(dataset: tuple[Path, dict]) -> None:
    path, rows = dataset
    assert len(read_table(path, "runs")) == len(CONFIGS) + 1  # the rerun is stored twice
    runs = sweep.load_runs(path)
    assert sorted(runs["run_id"]) == sorted(_runs(rows)["run_id"])
    rerun = runs.set_index("run_id").loc[rows[RERUN]["runs"][0]["run_id"]]
    assert rerun["started_at"] == pd.Timestamp(rows[RERUN]["runs"][0]["started_at"])
    assert str(runs["started_at"].dtype).startswith("datetime64") and str(runs["started_at"].dt.tz) == "UTC"
    # typed columns, also where every value is null (no run set network.ecn_threshold_kb)
    assert runs["network.npus"].dtype == "Int64" and runs["network.ecn_threshold_kb"].dtype == "float64"
    assert runs["retransmits"].dtype == "Int64" and runs["tcp.delayed_ack"].dtype == "boolean"


def test_load_table_keeps_the_rows_of_the_newest_attempt(dataset: tuple[Path, dict]) -> None:
    path, rows = dataset
    rerun_id = rows[RERUN]["runs"][0]["run_id"]
    for table in ("collectives", "layers", "flows"):
        stored = read_table(path, table)
        loaded = sweep.load_table(path, table)
        assert (stored["run_id"] == rerun_id).sum() == 2 * len(rows[RERUN][table])  # two attempts on disk
        assert (loaded["run_id"] == rerun_id).sum() == len(rows[RERUN][table])
        assert len(loaded) == sum(len(tables.get(table, [])) for tables in rows.values())
    assert list(sweep.load_table(path, "flows", ["fct_s"]).columns) == ["run_id", "fct_s"]


def test_duckdb_reads_the_same_runs_with_no_export(dataset: tuple[Path, dict]) -> None:
    """The query README.md gives."""
    path, _ = dataset
    query = f"""
        select * from read_parquet('{path}/runs/*.parquet', filename = true)
        qualify row_number() over (partition by run_id order by filename desc) = 1
    """
    newest = duckdb.sql(query).df()
    loaded = sweep.load_runs(path)
    assert sorted(newest["run_id"]) == sorted(loaded["run_id"])
    merged = newest.merge(loaded, on="run_id", suffixes=("_duckdb", "_pandas"))
    assert (merged["wall_s_duckdb"] == merged["wall_s_pandas"]).all()  # the same attempt


def _summary(report: Path) -> str:
    return (report / SUMMARY_FILE).read_text()


def test_summary_counts_match_the_data(report: Path, dataset: tuple[Path, dict]) -> None:
    runs = _runs(dataset[1])
    status = runs["status"].value_counts()
    assert (status.get("ok"), status.get("error"), status.get("timeout")) == (len(CONFIGS) - 2, 1, 1)
    summary = _summary(report)
    assert f"**{len(runs)} runs** ({len(runs) + 1} rows read" in summary
    assert f"Status: ok {status['ok']}, error {status['error']}, timeout {status['timeout']}." in summary
    assert "## Failed runs" in summary and "python -m sweep" in summary  # with a repro command
    assert runs.loc[runs["status"] == "timeout", "run_id"].iloc[0] in summary


def _line(summary: str, section: str, prefix: str) -> str:
    part = summary.split(section, 1)[1].split("\n## ", 1)[0]
    return next(line for line in part.splitlines() if line.startswith(prefix))


def test_summary_names_the_fastest_and_slowest(report: Path, dataset: tuple[Path, dict]) -> None:
    runs = _runs(dataset[1])
    summary = _summary(report)
    training = runs[runs["iteration_time_s"].notna()].sort_values("iteration_time_s")
    for prefix, row in (("- Fastest:", training.iloc[0]), ("- Slowest:", training.iloc[-1])):
        line = _line(summary, "## Training runs", prefix)
        assert row["run_id"] in line and f"**{row['iteration_time_s'] * 1e3:.4g} ms**" in line
    flows = pd.DataFrame([flow for name in ("incast_2", "incast_4") for flow in dataset[1][name]["flows"]])
    last = flows.groupby("run_id")["end_s"].max().sort_values()
    for prefix, (run, end_s) in (("- Fastest:", (last.index[0], last.iloc[0])),
                                 ("- Slowest:", (last.index[-1], last.iloc[-1]))):
        line = _line(summary, "## Flows runs", prefix)
        assert run in line and f"**{end_s * 1e3:.4g} ms**" in line


def test_summary_table_per_swept_parameter(report: Path, dataset: tuple[Path, dict]) -> None:
    """Iteration time per value of `network.npus`: runs, mean, min and max over the runs with it."""
    runs = _runs(dataset[1])
    training = runs[runs["iteration_time_s"].notna()]
    part = _summary(report).split("**NPUs** (`network.npus`)", 1)[1]
    for npus, group in training.groupby("network.npus"):
        ms = group["iteration_time_s"] * 1e3
        row = re.search(rf"^\| {npus} \| (\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", part, re.MULTILINE)
        assert row is not None, npus
        assert int(row.group(1)) == len(group)
        assert [float(row.group(i)) for i in (2, 3, 4)] == pytest.approx(
            [ms.mean(), ms.min(), ms.max()], rel=1e-3)


def test_time_breakdown_adds_up(dataset: tuple[Path, dict]) -> None:
    """Exposed all-to-all (the embedding's forward and input-gradient waits) + exposed all-reduce
    (weight-gradient waits) + other = exposed_comm_s; compute + exposed = iteration time; and the
    split equals the collectives' own exposed_s per op."""
    from sweep.report import read_dataset

    runs = read_dataset(dataset[0]).runs.set_index("run_id")
    for name in ("dlrm_8", "dlrm_16", "ar_16_large"):
        tables = dataset[1][name]
        run = runs.loc[tables["runs"][0]["run_id"]]
        parts = run["exposed_all_to_all_s"] + run["exposed_all_reduce_s"] + run["exposed_other_s"]
        assert parts == pytest.approx(run["exposed_comm_s"], rel=1e-9)
        assert run["compute_s"] + parts == pytest.approx(run["iteration_time_s"], rel=1e-9)
        by_op = pd.DataFrame(tables["collectives"]).groupby("op")["exposed_s"].sum() / run["iterations_done"]
        if name.startswith("dlrm"):
            assert run["exposed_all_to_all_s"] == pytest.approx(by_op["all_to_all"], rel=1e-9)
            assert run["exposed_all_reduce_s"] == pytest.approx(by_op["all_reduce"], rel=1e-9)
            assert run["exposed_all_to_all_s"] > 0 and run["exposed_all_reduce_s"] > 0
        else:  # a blocking microbenchmark collective: neither the embedding's nor a weight gradient's
            assert run["exposed_other_s"] == pytest.approx(by_op["all_reduce"], rel=1e-9)


def test_every_plot_is_a_readable_png(report: Path) -> None:
    plots = sorted(report.glob("*.png"))
    names = {plot.name for plot in plots}
    assert {"time_breakdown.png", "message_time_cdf.png", "fct_cdf.png", "iteration_time_vs_network_npus.png",
            "flow_completion_vs_workload_senders.png", "flows_retransmits_timeouts.png"} <= names
    for plot in plots:
        data = plot.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000, plot.name
        height, width, *_ = matplotlib.image.imread(plot).shape
        assert height > 100 and width > 100, plot.name
        assert f"`{plot.name}`" in _summary(report)  # the summary says what each plot shows


def test_swept_axes_group_columns_that_vary_together() -> None:
    """A `workload=dlrm_small,dlrm_large` sweep changes several keys: one axis, named by the presets
    the runs rows store; a topology sweep is one axis with the keys only one topology has; a numeric
    key its own axis."""
    runs = pd.DataFrame([
        {"run_id": f"r{i}", "started_at": pd.Timestamp(i, unit="s", tz="UTC"), "compute_s": compute,
         "network": network, "tcp": "newreno", "system": "default", "workload": workload,
         **{k: v for k, v in sweep.runner.flatten(compose_config(
             [f"workload={workload}", f"network={network}", f"network.link_gbps={gbps}"])).items()}}
        for i, (workload, compute, network, gbps) in enumerate(
            [(w, c, n, g) for w, c in (("dlrm_large", 2.0), ("dlrm_small", 1.0))
             for n in ("switch", "hierarchical") for g in (25, 100)])])
    axes = swept_axes(runs)
    by_key = {axis.key: axis for axis in axes}
    assert set(by_key) == {"network.topology", "network.link_gbps", "workload"}
    assert by_key["workload"].order == ("dlrm_small", "dlrm_large")  # by model size (compute)
    assert set(by_key["workload"].columns) == {"workload.dense_features", "workload.bottom_mlp",
                                               "workload.top_mlp", "workload.batch_per_npu"}
    assert "network.npus_per_node" in by_key["network.topology"].columns
    assert by_key["network.link_gbps"].numeric and by_key["network.link_gbps"].unit == "Gb/s"
    assert by_key["network.topology"].order == ("switch", "hierarchical")  # the order they ran in


def test_cli_prints_the_summary_and_the_plots(report: Path, dataset: tuple[Path, dict],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(dataset[0])]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# netsweep report: {dataset[0].name}")
    for plot in report.glob("*.png"):
        assert str(plot) in out
    assert (dataset[0] / REPORT_DIR / SUMMARY_FILE).is_file()


def test_cli_refuses_a_directory_without_runs(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "sweep.report", str(tmp_path / "nothing")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "not a dataset" in result.stderr


def test_a_very_large_flows_table_is_not_read(dataset: tuple[Path, dict], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond `MAX_FLOW_ROWS` the report leaves the flows table alone (gigabytes on a cluster
    dataset): no CDFs, and a `flows` run's completion is its simulated time (which ends with the
    last ACK, a round trip after the last byte arrived)."""
    import sweep.report.reading as reading

    copy = tmp_path / "copy"
    shutil.copytree(dataset[0], copy)
    monkeypatch.setattr(reading, "MAX_FLOW_ROWS", 0)
    out = build_report(copy)
    summary = (out / SUMMARY_FILE).read_text()
    assert "rows) was not read" in summary
    assert not (out / "fct_cdf.png").exists() and not (out / "message_time_cdf.png").exists()
    for name in ("incast_2", "incast_4"):
        tables = dataset[1][name]
        last_end_s = max(flow["end_s"] for flow in tables["flows"])
        assert tables["runs"][0]["sim_time_s"] == pytest.approx(last_end_s, abs=10e-6)
        assert f"**{tables['runs'][0]['sim_time_s'] * 1e3:.4g} ms**" in summary


def test_the_gap_to_alpha_beta_is_reported_as_the_cost_of_contention(tmp_path: Path) -> None:
    """A direct all-to-all on a 4:1 oversubscribed leaf-spine on alpha_beta (no contention) and on
    analytical (fair-shared uplinks): the report states how much longer the shared fabric takes."""
    dataset = tmp_path / "contention"
    with ResultStore(dataset) as store:
        for backend in ("alpha_beta", "analytical"):
            for npus in (8, 16):
                store.append(execute(compose_config([
                    f"results_dir={tmp_path}", "name=contention", f"engine.backend={backend}", "network=leaf_spine",
                    f"network.npus={npus}", "network.uplink_gbps=25", "workload=collective",
                    "workload.op=all_to_all", "workload.bytes=1048576"])))
    loaded = sweep.load_runs(dataset)
    times = {(row["engine.backend"], int(row["network.npus"])): row["iteration_time_s"] for _, row in loaded.iterrows()}
    gaps = [times[("analytical", n)] / times[("alpha_beta", n)] - 1 for n in (8, 16)]
    assert min(gaps) > 0.5  # the uplinks carry 4 hosts' traffic at a quarter of their rate
    summary = (build_report(dataset) / SUMMARY_FILE).read_text()
    assert "## Contention" in summary
    assert f"- `analytical`: 2 configurations; iteration time above `alpha_beta`'s by {pd.Series(gaps).median():.1%}" \
        in summary


def test_the_hottest_links_of_the_slowest_runs(report: Path, dataset: tuple[Path, dict]) -> None:
    """Three runs recorded links (two analytical, one packet incast with switch ports only); the
    summary lists, for each, its busiest links by utilisation, the incast's at the receiver's port.
    The run stored twice has its links once (its newest attempt)."""
    path, rows = dataset
    links = sweep.load_table(path, "links")
    assert links.groupby("run_id").size().to_dict() == {
        rows["ar_16_large"]["runs"][0]["run_id"]: 32, rows["dlrm_16"]["runs"][0]["run_id"]: 32,
        rows["incast_4"]["runs"][0]["run_id"]: 16}
    part = _summary(report).split("## Hottest links of the slowest runs", 1)[1].split("\n## ", 1)[0]
    for name in ("ar_16_large", "dlrm_16", "incast_4"):
        assert rows[name]["runs"][0]["run_id"] in part
    incast = max(rows["incast_4"]["links"], key=lambda row: row["utilisation"])
    assert incast["link"] == "sw->h0"  # 4 senders into host 0: its switch port is the busiest
    assert re.search(rf"`sw->h0` \| switch_port \| 100 \| {incast['bytes']:,} \| "
                     rf"{incast['utilisation'] * 100:.3g} % \| {incast['drops']:,} \|", part)


def test_each_cdf_series_says_how_many_of_its_own_messages_waited_for_an_rto() -> None:
    """A dataset whose messages waited for retransmission timeouts: four runs (NewReno / DCTCP x
    minimum RTO 1 / 200 ms), each its own series, labelled with its own count, counted by hand:
    - NewReno 200 ms: 7,000 messages, one waited (twice: it is still one message) -> 1/7000 = 0.0143 %,
      the quickstart's case, which a one-decimal percentage showed as 0.0 %;
    - NewReno 1 ms: 1,000 messages, 3 waited -> 0.3 %;
    - DCTCP 200 ms: 500 messages, none waited;
    - DCTCP 1 ms: 500 messages, 1 waited -> 0.2 %; two more rows still in flight (no fct_s) don't count."""
    from sweep.report.plots import plot_cdf

    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "tcp.cc": ["newreno", "newreno", "dctcp", "dctcp"],
                         "tcp.min_rto_ms": [200.0, 1.0, 200.0, 1.0], "engine.backend": "packet",
                         "started_at": pd.Timestamp(0, unit="s", tz="UTC"), "compute_s": 1e-5})
    timeouts = {"a": [2] + [0] * 6_999, "b": [1, 1, 3] + [0] * 997, "c": [0] * 500, "d": [1] + [0] * 501}
    flows = pd.DataFrame([{"run_id": run, "fct_s": (i + 1) * 1e-6, "timeouts": float(count)}
                          for run, counts in timeouts.items() for i, count in enumerate(counts)])
    flows.loc[flows.index[-2:], "fct_s"] = float("nan")  # run d: two messages not delivered
    fig = plot_cdf(runs, flows, swept_axes(runs), "title", "completion time (ms)", "messages")
    labels = {text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()}
    assert labels == {
        "NewReno, minimum RTO 1 ms: 3 of 1,000 messages waited for an RTO (0.3 %)",
        "NewReno, minimum RTO 200 ms: 1 of 7,000 messages waited for an RTO (0.0143 %)",
        "DCTCP, minimum RTO 1 ms: 1 of 500 messages waited for an RTO (0.2 %)",
        "DCTCP, minimum RTO 200 ms: none of 500 messages waited for an RTO",
    }


def test_a_cdf_of_runs_that_differ_only_by_workload_has_a_panel_per_workload() -> None:
    """CI's wheel check: two runs, one per workload and nothing else swept. The workloads make the
    panel rows, so no axis is left for series: each panel holds its run's messages, one curve each."""
    from sweep.report.plots import plot_cdf

    runs = pd.DataFrame({"run_id": ["a", "b"], "workload": ["astra_micro_allreduce", "astra_dlrm"],
                         "workload.path": ["microAllReduce.txt", "DLRM_HybridParallel.txt"], "engine.backend": "packet",
                         "started_at": pd.Timestamp(0, unit="s", tz="UTC"), "compute_s": 1e-5})
    flows = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 5, "fct_s": [1e-6, 2e-6, 3e-6, 1e-6, 2e-6, 4e-6, 8e-6, 9e-6],
                          "timeouts": 0.0})
    fig = plot_cdf(runs, flows, swept_axes(runs), "title", "completion time (ms)", "messages")
    curves = sorted(len(line.get_xdata()) for ax in fig.axes for line in ax.get_lines())
    assert curves == [3, 5]


def test_messages_of_a_fluid_backend_claim_no_rto_count(report: Path, dataset: tuple[Path, dict]) -> None:
    """The analytical backend stores 0 timeouts per message but counts none (its runs row: null):
    the report says nothing of their timeouts, and says it of the packet runs' flows."""
    from sweep.report import read_dataset

    flows = read_dataset(dataset[0]).flows
    analytical = dataset[1]["dlrm_8"]["runs"][0]["run_id"]
    assert flows.loc[flows["run_id"] == analytical, "timeouts"].isna().all()
    assert flows.loc[flows["run_id"] == dataset[1]["incast_2"]["runs"][0]["run_id"], "timeouts"].notna().all()
    assert "messages waited for an RTO" not in _summary(report) and "flows waited for an RTO" in _summary(report)


def _runs_on(axes_values: dict[str, list[Any]], times_s: list[float]) -> pd.DataFrame:
    """Runs with the given config columns and iteration times (one run each)."""
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(len(times_s))], **axes_values, "iteration_time_s": times_s,
                         "started_at": pd.Timestamp(0, unit="s", tz="UTC"), "compute_s": 1e-5})


def test_panels_share_their_time_axis_and_markers_their_size() -> None:
    """The quickstart's case: a panel whose runs take 0.07-3 ms beside one of 0.05-300 ms. Both
    panels get one log axis (300 / 0.05 > 30x), the same limits, so a 100x gap shows as one; every
    series has a marker of the same size."""
    from sweep.report.plots import plot_vs_axis

    grid = [(cc, rto, npus, gbps) for rto in (1.0, 200.0) for cc in ("newreno", "dctcp") for npus in (8, 16, 32)
            for gbps in (100.0, 400.0)]  # 2 x 3 x 2 = 12 combinations beside the x axis: more than a panel's 8
    values = {key: [point[i] for point in grid] for i, key in
              enumerate(("tcp.cc", "tcp.min_rto_ms", "network.npus", "network.link_gbps"))}
    times_s = [7e-5, 3e-3, *[1e-3] * 10, 5e-5, 0.3, *[1e-3] * 10]  # minimum RTO 1 ms: 0.07-3 ms; 200 ms: 0.05-300 ms
    runs = _runs_on(values, times_s)
    axes = swept_axes(runs)
    cc = next(a for a in axes if a.key == "tcp.cc")
    fig = plot_vs_axis(runs, cc, [a for a in axes if a is not cc], "iteration_time_s", "iteration time (ms)", "t")
    panels = [ax for ax in fig.axes if ax.lines]
    assert len(panels) == 2 and {ax.get_yscale() for ax in panels} == {"log"}
    assert panels[0].get_ylim() == panels[1].get_ylim()
    assert {line.get_markersize() for ax in panels for line in ax.lines} == {8}


def test_a_narrow_range_is_drawn_from_zero() -> None:
    """Two configurations 3 % apart (0.1665 and 0.1715 ms): a linear axis from 0, so that the gap
    looks like 3 %, not like the whole height of the plot."""
    from sweep.report.plots import plot_vs_axis

    runs = _runs_on({"tcp.cc": ["newreno", "dctcp"]}, [0.1665e-3, 0.1715e-3])
    (cc,) = swept_axes(runs)
    fig = plot_vs_axis(runs, cc, [], "iteration_time_s", "iteration time (ms)", "t")
    (ax,) = fig.axes
    assert ax.get_yscale() == "linear" and ax.get_ylim() == pytest.approx((0.0, 0.1715 * 1.1))


def test_a_replicated_sweep_is_drawn_and_ranked_by_each_points_mean_and_interval(tmp_path: Path) -> None:
    """Two points (8 and 16 NPUs) of three seeds each, as `replicate.until_ci_pct` stores them, their
    iteration times set by hand: 8 NPUs 1, 2, 3 ms (mean 2, s = 1: ± t(0.975, 2) s / sqrt(3) = 4.303 /
    1.732 = 2.484 ms, 124 % of the mean, t from a published table); 16 NPUs 4, 4, 4 ms (± 0). `seed` is
    no swept parameter: no plot against it, no series per seed; the ranking has a row per point."""
    from sweep.report.plots import plot_vs_axis

    times_ms = {8: [1.0, 2.0, 3.0], 16: [4.0, 4.0, 4.0]}
    path = tmp_path / "replicated"
    with ResultStore(path) as store:
        for npus, point_ms in times_ms.items():
            for seed, time_ms in enumerate(point_ms, start=1):
                rows = execute(compose_config(["name=replicated", "workload=collective", f"network.npus={npus}",
                                               f"seed={seed}", *ANALYTICAL]))
                rows["runs"][0]["iteration_time_s"] = time_ms / 1e3
                store.append(rows)
    out = build_report(path)
    assert not list(out.glob("*seed*.png")) and (out / "iteration_time_vs_network_npus.png").exists()
    summary = (out / SUMMARY_FILE).read_text()
    assert "Seeds replicate the points (3 runs a point" in summary
    assert "All points, fastest first" in summary and "All runs" not in summary
    ranking = [line for line in summary.splitlines() if re.match(r"\| [12] \| ", line)]
    assert [line.split(" | ")[1:4] for line in ranking] == [["2 ± 2.5", "3", "124"], ["4 ± 0", "3", "0"]]
    assert "**2 ± 2.5 ms** per iteration (mean of 3 seeds)" in summary

    runs = sweep.load_runs(path)
    (npus,) = swept_axes(runs)
    fig = plot_vs_axis(runs, npus, [], "iteration_time_s", "iteration time (ms)", "t")
    (ax,) = fig.axes
    (line,) = ax.lines[:1]
    assert list(line.get_ydata()) == pytest.approx([2.0, 4.0])  # the means, one marker a point
    (bars,) = [c for c in ax.collections if len(c.get_segments()) == 2]
    ends = sorted(end for segment in bars.get_segments() for end in sorted(point[1] for point in segment))
    half_width_ms = 4.303 / math.sqrt(3)  # the table's 3 decimals: within 5e-4
    assert ends == pytest.approx(sorted([2 - half_width_ms, 2 + half_width_ms, 4.0, 4.0]), abs=5e-4)


def test_a_plot_names_the_settings_it_holds_fixed_below_its_title() -> None:
    """Two congestion controls on 16 NPUs at packet level: the title says what is drawn, the line below
    it what every run shares (the backend and the NPUs), never the swept parameter."""
    from sweep.report.plots import plot_vs_axis

    runs = _runs_on({"tcp.cc": ["newreno", "dctcp"], "network.npus": [16, 16], "engine.backend": "packet"},
                    [1e-3, 2e-3])
    (cc,) = swept_axes(runs)
    fig = plot_vs_axis(runs, cc, [], "iteration_time_s", "iteration time (ms)", "Iteration time against TCP")
    title, fixed = fig.get_suptitle().split("\n")
    assert title == "Iteration time against TCP" and fixed == "Fixed: backend packet, 16 NPUs"


def _two_fidelity(screen_ms: list[float], fine_ms: list[float], reasons: list[str]) -> Any:
    """A two-fidelity dataset's points (every one refined) with these times and reasons, on 16 NPUs."""
    from sweep.report.two_fidelity import TwoFidelity

    points = pd.DataFrame({"screen_s": [t / 1e3 for t in screen_ms], "fine_s": [t / 1e3 for t in fine_ms],
                           "reasons": reasons, "refined": True, "at_risk": "", "engine.backend": "analytical",
                           "network.npus": 16, "tcp.cc": ["newreno", "dctcp"] * (len(screen_ms) // 2),
                           "started_at": pd.Timestamp(0, unit="s", tz="UTC")})
    points["error"] = points["fine_s"] / points["screen_s"] - 1
    return TwoFidelity("analytical", "packet", points)


def test_the_screen_against_refinement_is_log_log_only_where_the_times_span_ten_times() -> None:
    """Times of 1.0 to 1.1 ms on log axes would make 10 % look like a decade: linear from zero; 1 to
    100 ms: log-log."""
    from sweep.report.plots import plot_screen_vs_fine

    narrow = plot_screen_vs_fine(_two_fidelity([1.0, 1.05], [1.02, 1.1], ["sample", "top"]))
    (ax,) = narrow.axes
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
    assert ax.get_xlim() == pytest.approx((0.0, 1.1 * 1.1)) and ax.get_ylim() == ax.get_xlim()
    assert "Fixed: 16 NPUs" in narrow.get_suptitle()
    (ax,) = plot_screen_vs_fine(_two_fidelity([1.0, 100.0], [1.2, 90.0], ["sample", "top"])).axes
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")


def test_calibration_error_dots_are_hollow_coloured_and_named_in_a_legend() -> None:
    """Two calibration points of four refined ones: each group in a colour of its own (no grey), hollow
    so that overlapping errors show through, named with its count in the legend."""
    from sweep.report.plots import COLOURS, plot_calibration

    fig = plot_calibration(_two_fidelity([1.0, 1.0, 1.0, 1.0], [1.1, 0.95, 1.3, 1.02],
                                         ["sample", "sample", "top", "top"]))
    (ax,) = fig.axes
    dots = [c for c in ax.collections if len(c.get_offsets())]
    assert [len(c.get_offsets()) for c in dots] == [2, 4]
    for group, colour in zip(dots, COLOURS):
        assert group.get_facecolors().size == 0  # hollow
        assert matplotlib.colors.to_hex(group.get_edgecolors()[0]) == colour
    legend = {text.get_text() for text in fig.legends[0].get_texts()}
    assert {"calibration sample (2)", "all refined points (4)", "calibrated band"} <= legend
