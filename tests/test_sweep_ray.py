"""Sweeps on a real Ray: a head node on loopback started here (once for the module), joined by
address; `python -m sweep -m` as a user types it; failures, crashed workers, time budgets, resume
after SIGKILL; and one sweep on the private local Ray that `ray.address=null` starts.

The cluster is stopped by signalling the process session of its `ray start --block`, which holds
every process of this cluster and nothing else (`ray stop` would stop every Ray on the machine).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import duckdb
import pyarrow.parquet as pq
import pytest
from ray_support import RAY_ENV, free_port, stop_session, sweep_command
from sweep_support import compose_config

from sweep.cluster import _ONE_MACHINE_ENV, CLIENT_CONNECT_ATTEMPTS, RayExecutor, _join, is_loopback
from sweep.driver import run_sweep
from sweep.local_ray import LocalRay, RayStartError
from sweep.plan import plan
from sweep.runner import PRESET_COLUMNS, measure
from sweep.store import arrow_dataset, part_files, read_table

# Columns that differ between two executions of the same run: timing and provenance (the commit a
# process found when it first looked: one made while the tests run moves HEAD).
TIMING_COLUMNS = {"wall_s", "events_per_s", "started_at", "git_commit"}


def _head_command(port: int, num_cpus: int, temp_dir: str, client_port: int) -> list[str]:
    """`ray start --head --block` of this Python on 127.0.0.1:`port`, no dashboard, every other port free."""
    return [sys.executable, "-m", "ray.scripts.scripts",  # `ray`, of this Python
            "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}",
            f"--ray-client-server-port={client_port}", f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}"]


CLIENT_PORTS: dict[str, int] = {}  # the Ray client server's port of each head `ray_address` started


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """`127.0.0.1:<port>` of a 2-CPU Ray head node on loopback, with no dashboard (its client
    server's port: `CLIENT_PORTS`)."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in RAY_ENV.items():
            env.setenv(key, value)
        temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths are limited
        port, client_port = free_port(), free_port()
        head = subprocess.Popen(_head_command(port, 2, temp_dir, client_port),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        address = f"127.0.0.1:{port}"
        CLIENT_PORTS[address] = client_port
        try:
            import ray  # noqa: PLC0415 - after RAY_ENV is set

            deadline = time.monotonic() + 90
            while True:  # until the head's GCS listens (ray.init would wait long for it)
                assert head.poll() is None, "ray start --head exited"
                assert time.monotonic() < deadline, "the Ray head did not come up"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            while True:  # until its raylet has registered too
                try:
                    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"
            ray.shutdown()
            yield address
        finally:
            stop_session(head)
            shutil.rmtree(temp_dir, ignore_errors=True)


def _grid(tmp_path: Path, address: str | None, name: str) -> list[str]:
    """The 3 x 2 grid of the issue, each point a 2-to-1 incast of a few milliseconds."""
    return ["network.link_gbps=25,100,400", "tcp=newreno,cubic", "workload=incast", "workload.senders=2",
            "workload.bytes_per_flow=20000", f"results_dir={tmp_path / 'results'}", f"name={name}",
            *([f"ray.address={address}"] if address else ["ray.num_cpus=1"])]


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1:6379") and is_loopback("localhost:1") and is_loopback("ray://127.0.0.5:10001")
    assert not is_loopback("auto") and not is_loopback("10.0.0.1:6379") and not is_loopback("head:6379")


class _FlakyClientRay:
    """Stands in for the `ray` module: `init` fails with `errors` in turn, then connects."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls: list[str] = []

    def init(self, address: str, **settings: Any) -> None:
        self.calls.append("init")
        if self.errors:
            raise self.errors.pop(0)

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def test_a_client_server_that_fails_to_start_the_drivers_server_is_tried_again() -> None:
    """Ray's client server starts a server process per driver, which can die as it starts on a busy
    machine (3 of 15 runs of the token tests with 2 to 4 busy loops on the 2 cores; 1 in 4 idle,
    the proxy then finding it a zombie): `ray.init` then raises a ConnectionAbortedError that says
    so, and a new connection starts another process. Anything else is raised at once; the same
    failure every time, after the last attempt."""
    failure = ConnectionAbortedError("Initialization failure from server:\nTraceback (most recent call last):\n"
                                     "RuntimeError: Starting Ray client server failed. See "
                                     "ray_client_server_23000.err for detailed logs.")
    zombie = ConnectionAbortedError('Initialization failure from server:\nTraceback (most recent call last):\n'
                                    '  File "proxier.py", line 396, in start_specific_server\n'
                                    "psutil.ZombieProcess: PID still exists but it's a zombie (pid=10768)")
    ray = _FlakyClientRay(failure, zombie)
    _join(ray, "ray://127.0.0.1:10001", {})
    assert ray.calls == ["init", "shutdown", "init", "shutdown", "init"]
    other = _FlakyClientRay(ConnectionAbortedError("Initialization failure from server:\nsomething else"))
    with pytest.raises(ConnectionAbortedError, match="something else"):
        _join(other, "ray://127.0.0.1:10001", {})
    assert other.calls == ["init"]
    always = _FlakyClientRay(*[failure] * CLIENT_CONNECT_ATTEMPTS)
    with pytest.raises(ConnectionAbortedError, match="Starting Ray client server failed"):
        _join(always, "ray://127.0.0.1:10001", {})
    assert always.calls.count("init") == CLIENT_CONNECT_ATTEMPTS


def test_a_local_ray_that_times_out_during_start_up_is_started_once_more(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine Ray's node can miss its fixed 30 s to register (`ray.init` raises "The current
    node timed out during startup"): the local Ray is stopped and started once more; a second time out
    raises `RayStartError`, one message saying what to do; any other failure is raised at once."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # Ray's temporary folders, kept when it did not start
    # as RayExecutor sets it before Ray's first import: the later tests' Rays then bind to loopback
    os.environ[_ONE_MACHINE_ENV] = "0"
    import ray  # noqa: F401 - LocalRay finds psutil where Ray puts it
    timeout = Exception("The current node timed out during startup. This could happen because some of the "
                        "raylet failed to startup or the GCS has become overloaded.")
    once = _FlakyClientRay(timeout)
    local = LocalRay()
    local.start(once)
    assert once.calls == ["init", "shutdown", "init"]
    local.stop(once)
    twice = _FlakyClientRay(timeout, timeout)
    with pytest.raises(RayStartError, match="timed out during start-up 2 times .* ray.address"):
        LocalRay().start(twice)
    assert twice.calls == ["init", "shutdown", "init", "shutdown"]
    other = _FlakyClientRay(OSError("no space left on device"))
    with pytest.raises(OSError, match="no space left"):
        LocalRay().start(other)
    assert other.calls == ["init", "shutdown"]


def test_grid_runs_on_the_cluster_and_again_runs_nothing(ray_address: str, tmp_path: Path) -> None:
    grid = _grid(tmp_path, ray_address, "grid")
    done = sweep_command(tmp_path, *grid)
    assert done.returncode == 0, done.stderr
    assert "planned 6 runs (2 Hydra compositions" in done.stdout  # one per tcp preset
    assert f"ray: the Ray cluster at {ray_address}, 2 CPUs" in done.stderr
    assert "  ok               6" in done.stdout and "  ran 6 in " in done.stdout

    dataset = tmp_path / "results" / "grid"
    runs = read_table(dataset, "runs")
    assert len(runs) == 6 and set(runs["status"]) == {"ok"}
    assert sorted(zip(runs["network.link_gbps"], runs["tcp.cc"])) == [
        (gbps, cc) for gbps in (25.0, 100.0, 400.0) for cc in ("cubic", "newreno")]
    for column in ("run_id", "status", "error", "wall_s", "engine_version", "git_commit", "started_at", "repro",
                   "network.link_gbps", "tcp.cc", "workload.senders"):
        assert column in runs.columns, column
    # one table for pandas, pyarrow.dataset and DuckDB alike
    assert arrow_dataset(dataset, "runs").to_table().num_rows == 6
    assert arrow_dataset(dataset, "flows").count_rows() == 12
    assert duckdb.sql(f"select count(*) from read_parquet('{dataset}/runs/*.parquet', union_by_name=true) "
                      "where status = 'ok'").fetchall() == [(6,)]

    # determinism: same config and seed -> same run_id and the same engine rows as a run here
    points = [[f"network.link_gbps={gbps}", f"tcp={cc}", *grid[2:]] for gbps in (25, 100, 400)
              for cc in ("newreno", "cubic")]
    stored = runs.set_index("run_id")
    flows = read_table(dataset, "flows")
    for run in plan(points, compose_config):
        local = run.rows(measure(run.sim_config))  # the rows of a run here, by the sweep's one path
        remote = stored.loc[run.run_id]
        for key, value in local["runs"][0].items():
            if key not in TIMING_COLUMNS and key not in PRESET_COLUMNS and key != "run_id":  # no presets here
                assert remote[key] == value or (value is None and remote.isna()[key]), key
        remote_flows = flows[flows["run_id"] == run.run_id].sort_values("flow_id")
        assert remote_flows.drop(columns="run_id").to_dict("records") == [
            {key: value for key, value in row.items() if key != "run_id"} for row in local["flows"]]

    again = sweep_command(tmp_path, *grid)
    assert again.returncode == 0, again.stderr
    assert "  skipped          6" in again.stdout and "  ran 0 in " in again.stdout
    assert "ray:" not in again.stderr  # nothing to run: Ray is not even contacted
    assert len(read_table(dataset, "runs")) == 6


def _misbehaving_execute(marker_dir: str) -> Any:
    """`measure` on a worker, with failures by seed: 1 raises in the engine, 2 kills its worker
    process every time, 3 kills it once (then runs), 4 outlives the wall-time budget."""
    def run_fn(config: Any, max_wall_time_s: float | None = None) -> Any:
        import engine
        from sweep.runner import measure

        seed = config.seed
        marker = os.path.join(marker_dir, "seed-3-crashed")
        if seed == 2 or (seed == 3 and not os.path.exists(marker)):
            open(marker, "w").close() if seed == 3 else None
            os._exit(1)  # the worker process dies, as on a segfault or an OOM kill
        if seed not in (1, 4):
            return measure(config, max_wall_time_s)

        def misbehaving_engine(cfg: Any, **options: Any) -> dict:
            if seed == 1:
                raise RuntimeError("injected engine failure")
            time.sleep(60)
            return {}

        real_run, engine.run = engine.run, misbehaving_engine
        try:
            return measure(config, max_wall_time_s)
        finally:
            engine.run = real_run
    return run_fn


def test_failures_become_rows_and_the_sweep_goes_on(ray_address: str, tmp_path: Path) -> None:
    import ray.cloudpickle  # noqa: PLC0415 - after the cluster fixture set RAY_ENV

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    runs = plan([[f"seed={seed}", "engine.backend=analytical", "workload=collective", "network.npus=4",
                  f"results_dir={tmp_path}", "name=failures"] for seed in range(6)], compose_config)
    executor = RayExecutor(address=ray_address, max_retries=1, max_wall_time_s=2.0,
                           run_fn=_misbehaving_execute(str(tmp_path)))
    summary = run_sweep(runs, executor, show_progress=False)
    assert dict(summary.statuses) == {"ok": 3, "error": 2, "timeout": 1} and summary.failed == 3
    from sweep.progress import format_summary

    text = format_summary(summary)  # what the command prints: counts, then each failed run
    assert "  ok               3\n  error            2\n  timeout          1" in text
    assert "failed runs (3; the sweep run again retries them)" in text
    assert "error    RuntimeError: injected engine failure" in text
    assert "timeout  wall-time budget of 2 s exceeded" in text

    stored = read_table(tmp_path / "failures", "runs").set_index("seed")
    assert stored.loc[[0, 3, 5], "status"].tolist() == ["ok"] * 3
    assert stored.loc[1, "status"] == "error"
    assert stored.loc[1, "error"].splitlines()[-1] == "RuntimeError: injected engine failure"
    assert stored.loc[2, "status"] == "error" and "retried 1 times" in stored.loc[2, "error"]
    assert stored.loc[4, "status"] == "timeout" and "wall-time budget of 2 s" in stored.loc[4, "error"]
    assert stored["repro"].str.startswith("python -m sweep ").all()
    assert len(read_table(tmp_path / "failures", "collectives")) == 3  # only ok runs have rows there

    rerun = run_sweep(runs, RayExecutor(address=ray_address), show_progress=False)
    assert (rerun.skipped, dict(rerun.statuses)) == (3, {"ok": 3})
    assert sorted(read_table(tmp_path / "failures", "runs")["seed"]) == [0, 1, 1, 2, 2, 3, 4, 4, 5]


def _killable_execute(marker_dir: str, lives: dict[int, int]) -> Any:
    """`measure` on a worker that first writes `seed-<seed>-pid-<its pid>` into `marker_dir`; the
    first `lives[seed]` executions of a seed then wait (to be killed from outside), later ones run."""
    def run_fn(config: Any, max_wall_time_s: float | None = None) -> Any:
        from sweep.runner import measure

        seed = config.seed
        prefix = f"seed-{seed}-pid-"
        attempts = sum(name.startswith(prefix) for name in os.listdir(marker_dir))
        open(os.path.join(marker_dir, f"{prefix}{os.getpid()}"), "w").close()
        if attempts < lives.get(seed, 0):
            time.sleep(120)  # mid-run, until SIGKILL
        return measure(config, max_wall_time_s)
    return run_fn


def test_a_worker_killed_mid_run_is_retried_then_recorded(ray_address: str, tmp_path: Path) -> None:
    """SIGKILL of the worker process running a run, from outside: seed 1's worker is killed once
    (Ray runs it again: stored ok, attempt 1), seed 2's at every execution (stored as error after
    `max_retries`); the others are untouched; the summary counts the retried runs."""
    import threading

    import ray.cloudpickle  # noqa: PLC0415 - after the cluster fixture set RAY_ENV

    from sweep.progress import format_summary

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    markers = tmp_path / "markers"
    markers.mkdir()
    runs = plan([[f"seed={seed}", "engine.backend=analytical", "workload=collective", "network.npus=4",
                  f"results_dir={tmp_path}", "name=killed_workers"] for seed in range(4)], compose_config)
    executor = RayExecutor(address=ray_address, max_retries=1, run_fn=_killable_execute(str(markers), {1: 1, 2: 99}))
    killed: list[tuple[int, int]] = []
    stop = threading.Event()

    def killer() -> None:  # SIGKILL every worker that waits (seeds 1 and 2), once each
        seen: set[str] = set()
        while not stop.is_set():
            for name in os.listdir(markers):
                seed, pid = int(name.split("-")[1]), int(name.rsplit("-", 1)[1])
                if name in seen or seed not in (1, 2):
                    continue
                seen.add(name)
                attempt = sum(other.startswith(f"seed-{seed}-") for other in seen) - 1
                if seed == 1 and attempt > 0:
                    continue  # its second execution runs to the end
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:  # a Ray worker, nothing else
                    assert cmdline.read().startswith(b"ray::"), pid
                # mid-run: the marker is written inside the run, which then waits to be killed
                os.kill(pid, signal.SIGKILL)
                killed.append((seed, pid))
            time.sleep(0.05)  # paces the polling only

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        summary = run_sweep(runs, executor, show_progress=False)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert sorted(seed for seed, _ in killed) == [1, 2, 2]  # seed 2: first execution and its one retry
    assert dict(summary.statuses) == {"ok": 3, "error": 1} and summary.retried == 2

    stored = read_table(tmp_path / "killed_workers", "runs").set_index("seed")
    assert stored.index.is_unique and sorted(stored.index) == [0, 1, 2, 3]  # each run stored once
    assert stored.loc[[0, 1, 3], "status"].tolist() == ["ok"] * 3
    assert stored.loc[[0, 3], "attempt"].tolist() == [0, 0] and stored.loc[1, "attempt"] == 1
    assert stored.loc[1, "worker"].rsplit(":", 1)[1] != str(dict(killed)[1])  # another worker process
    assert stored.loc[2, "status"] == "error" and stored.loc[2, "attempt"] == 1
    assert "WorkerCrashedError (the run was retried 1 times)" in stored.loc[2, "error"]
    text = format_summary(summary)
    assert "  retried          2   run again after their worker process or node died" in text
    assert f"  {stored.loc[2, 'run_id']}  error    " in text and "  error            1" in text

    rerun = run_sweep(runs, RayExecutor(address=ray_address), show_progress=False)  # resume: seed 2 only
    assert (rerun.skipped, dict(rerun.statuses), rerun.retried) == (3, {"ok": 1}, 0)
    again = read_table(tmp_path / "killed_workers", "runs")
    assert sorted(again["seed"]) == [0, 1, 2, 2, 3]


def test_a_failed_run_makes_the_command_exit_non_zero(ray_address: str, tmp_path: Path) -> None:
    """A run past its wall-time budget: status timeout, listed with its repro, exit code 1."""
    done = sweep_command(tmp_path, "workload=incast", "workload.bytes_per_flow=20000,5000000000", "name=budget",
                  f"results_dir={tmp_path / 'results'}", f"ray.address={ray_address}",
                  "hydra.launcher.max_wall_time_s=1")
    assert done.returncode == 1, done.stderr
    runs = read_table(tmp_path / "results" / "budget", "runs").set_index("workload.bytes_per_flow")
    assert runs.loc[20000, "status"] == "ok" and runs.loc[5000000000, "status"] == "timeout"
    assert "  timeout          1" in done.stdout
    assert f"  {runs.loc[5000000000, 'run_id']}  timeout  wall-time budget of 1 s exceeded" in done.stdout
    assert runs.loc[5000000000, "repro"] in done.stdout


def test_sigkill_of_the_driver_loses_no_finished_run(ray_address: str, tmp_path: Path) -> None:
    """Kill -9 mid-sweep (every finished run flushed at once), then the same command again."""
    grid = ["seed=range(24)", "workload=incast", "workload.bytes_per_flow=200000000", "name=killed",
            f"results_dir={tmp_path / 'results'}", f"ray.address={ray_address}", "hydra.launcher.flush_rows=1"]
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    driver = subprocess.Popen([sys.executable, "-m", "sweep", "-m", *grid], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dataset = tmp_path / "results" / "killed"
    deadline = time.monotonic() + 120
    while len(part_files(dataset, "runs")) < 3:
        assert driver.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)

    for table in ("runs", "flows"):  # every visible part is whole
        for path in part_files(dataset, table):
            pq.read_table(path)
    before = read_table(dataset, "runs")
    assert 3 <= len(before) < 24 and set(before["status"]) == {"ok"}
    assert set(before["run_id"]) <= set(read_table(dataset, "flows")["run_id"])  # runs rows are written last

    again = sweep_command(tmp_path, *grid)
    assert again.returncode == 0, again.stderr
    assert f"  skipped{len(before):>11}" in again.stdout
    after = read_table(dataset, "runs")
    assert len(after) == 24 and after["run_id"].is_unique and set(after["status"]) == {"ok"}
    kept = after.set_index("run_id").loc[before["run_id"], "started_at"]
    assert kept.tolist() == before["started_at"].tolist()  # the runs stored before the kill, untouched


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_nothing_answers_at_is_refused_at_once(tmp_path: Path, scheme: str) -> None:
    """Refused by the sweep's own connection attempt, before `ray.init` (which would keep retrying
    for many minutes): its one line, and nothing written."""
    address = f"{scheme}127.0.0.1:{free_port()}"
    refused = sweep_command(tmp_path, "seed=0,1", f"ray.address={address}", f"results_dir={tmp_path / 'results'}")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: no Ray cluster answers at ray.address={address}: ")
    assert len(refused.stderr.splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_a_client_server_port_without_ray_scheme_says_to_write_it(ray_address: str, tmp_path: Path) -> None:
    """`host:port` of Ray's client server (the head's 10001 by default) is not where `ray.init` looks for
    a head without `ray://`: refused at once in one line that says what to write, nothing written."""
    address = f"127.0.0.1:{CLIENT_PORTS[ray_address]}"
    refused = sweep_command(tmp_path, "seed=0,1", f"ray.address={address}", f"results_dir={tmp_path / 'results'}")
    assert refused.returncode == 2
    assert refused.stderr == f"error: ray.address={address} is a Ray client server's port: write ray://{address}\n"
    assert not (tmp_path / "results").exists()


def test_local_ray_on_loopback(tmp_path: Path) -> None:
    """`ray.address` null: the sweep starts its own Ray on 127.0.0.1 (here with 1 CPU) and stops it."""
    done = sweep_command(tmp_path, *_grid(tmp_path, None, "local")[2:], "seed=0,1")
    assert done.returncode == 0, done.stderr
    assert "ray: a local Ray on 127.0.0.1, 1 CPUs" in done.stderr
    assert len(read_table(tmp_path / "results" / "local", "runs")) == 2


def _outgrows_a_short_machine() -> Any:
    """`measure` after holding 64 MiB more than the run reserved, on a worker made to see a machine with
    1 MiB left (`sweep.memory.machine_memory` faked in the worker only), working until the watch stops it."""
    def run_fn(config: Any, max_wall_time_s: float | None = None) -> Any:
        import sweep.memory
        from sweep.runner import measure

        real = sweep.memory.machine_memory
        sweep.memory.machine_memory = lambda: (16 * 2**30, 2**20)
        try:
            held = bytearray(64 * 2**20)  # zeroed: resident
            for _ in range(10**9):  # CPU time for the watch's timer; it raises long before the end
                sum(range(100))
            return measure(config, max_wall_time_s) if held else None
        finally:
            sweep.memory.machine_memory = real
    return run_fn


def test_an_estimate_never_stops_a_run_a_declaration_does(ray_address: str, tmp_path: Path) -> None:
    """An estimate only reserves: a run estimated far too low (1 MiB) or beyond every node (1 PiB) runs
    to the end, and its row keeps its peak and what it reserved. A declaration is a limit: a run declared
    too small ends with a row that says its peak and what to declare; one declared larger than any node is
    refused without waiting for ever."""
    import dataclasses

    # seed 1 on 256 NPUs: its first all-to-all opens 65,280 connections, more than a worker that ran
    # 8-NPU runs before has mapped and freed
    runs = plan([[f"seed={seed}", "workload=dlrm_small", f"network.npus={256 if seed == 1 else 8}",
                  f"results_dir={tmp_path}", "name=memory"] for seed in range(3)], compose_config)
    assert all(run.memory_bytes > 0 for run in runs)  # estimated from the config when planned
    runs[1] = dataclasses.replace(runs[1], memory_bytes=2**20)  # 1 MiB: the engine needs more
    runs[2] = dataclasses.replace(runs[2], memory_bytes=2**50)  # 1 PiB: no node has it
    summary = run_sweep(runs, RayExecutor(address=ray_address), show_progress=False)
    assert dict(summary.statuses) == {"ok": 3}
    stored = read_table(tmp_path / "memory", "runs").set_index("seed")
    assert stored.loc[1, "reserved_memory_mb"] == 1 and stored.loc[1, "peak_memory_mb"] > 1
    assert stored.loc[2, "reserved_memory_mb"] < 2**30  # the largest node, not the estimate's PiB

    declared = [dataclasses.replace(run, config={**run.config, "name": "declared"}) for run in runs[1:2]]
    run_sweep(declared, RayExecutor(address=ray_address, run_memory_mb=1), show_progress=False)
    (error,) = read_table(tmp_path / "declared", "runs")["error"]
    assert error.startswith("MemoryError: the run needed more memory than it may use: 1 MiB (its declaration: "
                            "hydra.launcher.run_memory_mb), peak ")
    assert "declare hydra.launcher.run_memory_mb=" in error

    refused = [dataclasses.replace(run, config={**run.config, "name": "refused"}) for run in runs[:1]]
    run_sweep(refused, RayExecutor(address=ray_address, run_memory_mb=2**30), show_progress=False)
    (error,) = read_table(tmp_path / "refused", "runs")["error"]
    assert error.startswith("the run declares 1,073,741,824 MiB of memory") and "more than any Ray node offers" in error


def test_a_run_past_its_estimate_on_a_machine_running_short_is_stopped_with_its_row(ray_address: str,
                                                                                   tmp_path: Path) -> None:
    import dataclasses

    (run,) = plan([["workload=incast", "workload.senders=1", f"results_dir={tmp_path}", "name=short"]],
                  compose_config)
    run = dataclasses.replace(run, memory_bytes=2**20)
    summary = run_sweep([run], RayExecutor(address=ray_address, run_fn=_outgrows_a_short_machine()),
                        show_progress=False)
    assert dict(summary.statuses) == {"error": 1}
    (row,) = read_table(tmp_path / "short", "runs").to_dict("records")
    assert row["error"].startswith("MemoryError: the run needed more memory than it may use: it reached ")
    assert ", past its estimate of 1 MiB, when the machine had 1 MiB left; declare hydra.launcher.run_memory_mb=" \
        in row["error"]
    assert row["peak_memory_mb"] > 64


@pytest.fixture(scope="module")
def token_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, str]]:
    """A 1-CPU head node on loopback that requires a token, as `ray start --head` makes one on a
    machine with a Ray token (here given in RAY_AUTH_TOKEN, so no ~/.ray is read or written):
    `(host:port, its Ray client server port, the token)`."""
    token = uuid.uuid4().hex
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths are limited
    port, client_port = free_port(), free_port()
    env = {**os.environ, **RAY_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    head = subprocess.Popen(_head_command(port, 1, temp_dir, client_port), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        # until the head answers with its raylet registered: a driver connects (in a child process,
        # so that this one's Ray settings stay as they are)
        probe = [sys.executable, "-c", f"import ray; ray.init(address={address!r}, logging_level='ERROR')"]
        while subprocess.run(probe, env=env, capture_output=True, timeout=120).returncode != 0:
            assert head.poll() is None, "ray start --head exited"
        yield address, client_port, token
    finally:
        stop_session(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _user_env(home: Path, **settings: str) -> dict[str, str]:
    """This process's environment without any Ray authentication setting, with `home` as HOME (no
    ~/.ray/auth_token there), plus `settings`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_AUTH")}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", **settings}


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_explicit_loopback_address_gets_the_token_its_head_expects(
        token_head: tuple[str, int, str], tmp_path: Path, scheme: str) -> None:
    """RAY_AUTH_MODE unset and this machine's token at hand: the sweep sends it to a head on its own
    loopback (`ray.init` would not, for an explicit address: 20 lines of InvalidAuthToken, then an
    error). The terminal shows the sweep's lines only."""
    address, client_port, token = token_head
    target = address if not scheme else f"ray://127.0.0.1:{client_port}"
    done = sweep_command(tmp_path, "seed=0,1", "engine.backend=analytical", "workload=collective", "network.npus=4",
                  f"results_dir={tmp_path / 'results'}", "name=token", f"ray.address={target}",
                  env=_user_env(tmp_path, RAY_AUTH_TOKEN=token))
    assert done.returncode == 0, done.stderr
    # and, where Ray had trouble on the way (`ray://` connecting again, `_join`), where its log is
    log_line = f"ray: Ray's own messages of this sweep are in {tmp_path / 'results' / 'token' / '_ray.log'}"
    assert done.stderr.splitlines() in ([f"ray: the Ray cluster at {target}, 1 CPUs"],
                                        [f"ray: the Ray cluster at {target}, 1 CPUs", log_line]), done.stderr
    assert len(read_table(tmp_path / "results" / "token", "runs")) == 2


@pytest.mark.parametrize("scheme, settings, advice", [
    ("", {"RAY_AUTH_MODE": "disabled"}, "requires token authentication: export RAY_AUTH_MODE=token, "),
    ("", {"RAY_AUTH_TOKEN": "not-the-token"}, "refused this machine's Ray token (RAY_AUTH_TOKEN, "),
    ("ray://", {}, "requires token authentication: export RAY_AUTH_MODE=token, "),
    ("ray://", {"RAY_AUTH_TOKEN": "not-the-token"}, "refused this machine's Ray token (RAY_AUTH_TOKEN, "),
])
def test_a_head_that_refuses_the_sweep_says_what_to_set_in_one_line(
        token_head: tuple[str, int, str], tmp_path: Path, scheme: str, settings: dict[str, str],
        advice: str) -> None:
    """No token sent (authentication off, or no token on this machine) or the wrong one: exit 2 with
    one line that says what to set, before `ray.init` is tried (not its 20 retries), and nothing
    written: not even the Ray log that held the refused request."""
    address, client_port, _ = token_head
    target = address if not scheme else f"ray://127.0.0.1:{client_port}"
    refused = sweep_command(tmp_path, "seed=0,1", f"results_dir={tmp_path / 'results'}", "name=refused",
                     f"ray.address={target}", env=_user_env(tmp_path, **settings))
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: the Ray cluster at ray.address={target} {advice}" + refused.stderr.split(advice, 1)[1].rstrip("\n")]
    assert not (tmp_path / "results").exists()
