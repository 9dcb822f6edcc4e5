"""Sweeps on multi-node Ray clusters on loopback: a head and two worker nodes (runs spread over
them), and a worker node removed mid-sweep (its runs retried on the node that is left).

Each node is a `ray start ... --block` in its own process session, stopped by signalling that
session's processes (never `ray stop`, which would stop every Ray on the machine). Every address is
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
from ray_support import RAY_ENV, free_port, session_pids, sweep_command

from sweep.store import read_table

RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # `ray`, of this Python
# `ray start --address=...` for a node joining a head on this machine, kept on loopback. With
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (every service on 127.0.0.1) `ray start` refuses to join a
# cluster at all; with 1 it rewrites the 127.0.0.1 of `--address` and of the node to the machine's
# network address. So the joining `ray start` keeps the variable 0 (its subprocesses stay on
# loopback) and, in its own process only, lifts the refusal and leaves loopback addresses alone.
JOIN_ON_LOOPBACK = [sys.executable, "-c", (
    "import sys; import ray._private.ray_constants as constants, ray._private.services as services; "
    "constants.ENABLE_RAY_CLUSTER = True; services.resolve_ip_for_localhost = lambda host: host; "
    "services.get_node_ip_address = lambda address=None: '127.0.0.1'; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()")]


def _node_ports() -> list[str]:
    """Every port a node opens, chosen free: two nodes on one machine must not share one."""
    return [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
            "--min-worker-port=0", "--max-worker-port=0"]


class LoopbackCluster:
    """A Ray head and worker nodes on 127.0.0.1, one process session each."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: socket paths are limited
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, **RAY_ENV, "RAY_raylet_start_wait_time_s": "120"}
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.logs: list[str] = []

    def _start(self, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(f"{self.temp_dir}-node{len(self.nodes)}.log", "wb")  # noqa: SIM115 - the node's output
        self.logs.append(log.name)
        node = subprocess.Popen([*(RAY if "--head" in args else JOIN_ON_LOOPBACK), "start", "--block",
                                 "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                 "--disable-usage-stats", *_node_ports(), *args], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.nodes.append(node)
        return node

    def start(self, workers: int) -> None:
        """The head (1 CPU; a node that stops answering is declared dead within a few seconds) and
        `workers` nodes of 1 CPU."""
        self._start(["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}",
                     f"--ray-client-server-port={free_port()}",
                     '--system-config={"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, '
                     '"health_check_failure_threshold": 3}'])
        self._wait(1)
        for index in range(workers):  # one at a time: two raylets registering at once on 2 busy cores can time out
            self._start([f"--address={self.address}"])
            self._wait(2 + index)

    def _wait(self, count: int, timeout_s: float = 90) -> None:
        """Until `count` nodes are alive."""
        deadline = time.monotonic() + timeout_s
        while True:
            for node, log in zip(self.nodes, self.logs):
                assert node.poll() is None, "ray start exited: " + Path(log).read_text()[-2000:]
            assert time.monotonic() < deadline, f"{count} Ray nodes did not come up"
            if len(self.alive_nodes()) >= count:
                return
            time.sleep(0.5)

    def alive_nodes(self) -> list[str]:
        """The ids of the alive nodes, asked in a child process (so this one holds no Ray session);
        empty while the head is not up."""
        code = (f"import ray, json; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
                "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive']]))")
        probe = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True,
                               timeout=60)
        if probe.returncode != 0:
            return []
        return json.loads(probe.stdout.strip().splitlines()[-1])

    def node_id_of(self, node: subprocess.Popen[bytes]) -> str:
        """The Ray node id of a node started here: read from its raylet's command line."""
        for pid in session_pids(node.pid):
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                args = cmdline.read().decode(errors="replace").split("\0")
            if args and args[0].endswith("raylet"):
                for arg in args:
                    if arg.startswith("--node_id="):
                        return arg.split("=", 1)[1]
        raise AssertionError(f"no raylet in the session of node {node.pid}")

    def listen_addresses(self) -> set[str]:
        """The addresses the cluster's processes accept connections on (`ss`)."""
        pids = {pid for node in self.nodes for pid in session_pids(node.pid)}
        listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
        return {line.split()[3].rsplit(":", 1)[0] for line in listening.splitlines()
                if any(f"pid={pid}," in line for pid in pids)}

    def stop(self) -> None:
        """SIGTERM to every process of every node, SIGKILL to any left after a few seconds."""
        for signum, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
            for node in self.nodes:
                for pid in session_pids(node.pid):
                    try:
                        os.kill(pid, signum)
                    except OSError:
                        pass
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                for node in self.nodes:
                    node.poll()  # reap our own child, `ray start`: a zombie would still count
                if not any(session_pids(node.pid) for node in self.nodes):
                    break
                time.sleep(0.1)
        for node in self.nodes:
            node.wait(timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        for log in self.logs:
            Path(log).unlink(missing_ok=True)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:  # gone
        return b""


@pytest.fixture()
def cluster() -> Iterator[LoopbackCluster]:
    started = LoopbackCluster()
    try:
        yield started
    finally:
        started.stop()
        for node in started.nodes:  # nothing of the cluster is left
            assert session_pids(node.pid) == [], f"processes left in session {node.pid}"


def test_a_sweep_spreads_over_three_nodes(cluster: LoopbackCluster, tmp_path: Path) -> None:
    cluster.start(workers=2)
    node_ids = {cluster.node_id_of(node) for node in cluster.nodes}
    assert len(node_ids) == 3
    if shutil.which("ss"):  # every service of every node on loopback only
        assert cluster.listen_addresses() <= {"127.0.0.1", "[::ffff:127.0.0.1]"}
    # 1 GB a flow, about 0.5 s a run: every node's worker is up before the runs are all done
    done = sweep_command(tmp_path, "seed=range(12)", "workload=incast", "workload.senders=2",
                  "workload.bytes_per_flow=1000000000", "name=spread", f"results_dir={tmp_path / 'results'}",
                  f"ray.address={cluster.address}")
    assert done.returncode == 0, done.stderr
    assert f"ray: the Ray cluster at {cluster.address}, 3 CPUs" in done.stderr
    runs = read_table(tmp_path / "results" / "spread", "runs")
    assert len(runs) == 12 and runs["run_id"].is_unique and set(runs["status"]) == {"ok"}
    assert set(runs["worker_node"]) == node_ids  # every node ran some
    assert (runs["attempt"] == 0).all()


def test_a_node_removed_mid_sweep(cluster: LoopbackCluster, tmp_path: Path) -> None:
    """SIGKILL of every process of a worker node while it runs a run: Ray retries the lost runs on
    the head, the sweep finishes with every run stored once, and its summary counts the retries."""
    cluster.start(workers=1)
    head, node = cluster.nodes
    head_id, node_id = cluster.node_id_of(head), cluster.node_id_of(node)
    # 1 GB a flow: about a second a run with the compiled kernel; the node is killed inside one
    grid = ["seed=range(16)", "workload=incast", "workload.senders=2", "workload.bytes_per_flow=1000000000",
            "name=node_lost", f"results_dir={tmp_path / 'results'}", f"ray.address={cluster.address}",
            "hydra.launcher.flush_rows=1"]
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    driver = subprocess.Popen([sys.executable, "-m", "sweep", "-m", *grid], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Until a run is going on the worker node: a Ray worker names its process after the task it
        # executes (`ray::_on_worker`) from the task's start to its end, and a run is seconds long.
        while not any(_cmdline(pid).startswith(b"ray::_on_worker") for pid in session_pids(node.pid)):
            assert driver.poll() is None, "the sweep ended before the node could be removed"
            time.sleep(0.05)  # paces the polling only
        for pid in session_pids(node.pid):  # the whole node at once, as a machine lost
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        stdout, stderr = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, stderr
    runs = read_table(tmp_path / "results" / "node_lost", "runs")
    assert len(runs) == 16 and runs["run_id"].is_unique and set(runs["status"]) == {"ok"}
    retried = runs[runs["attempt"] > 0]
    assert len(retried) >= 1, runs[["seed", "worker_node", "attempt"]]
    assert set(retried["worker_node"]) == {head_id}  # run again on the node that is left
    assert set(runs["worker_node"]) <= {head_id, node_id}
    assert "  ok              16" in stdout
    assert f"  retried{len(retried):>11}   run again after their worker process or node died" in stdout
    # on the terminal only the sweep's own lines; what Ray printed about the lost node is in the log
    log = tmp_path / "results" / "node_lost" / "_ray.log"
    assert [line for line in stderr.splitlines() if not line.startswith("ray: ")] == [], stderr
    assert f"ray: Ray's own messages of this sweep are in {log}" in stderr
    assert "(raylet)" not in stdout
    assert f"node ID: {node_id}" in log.read_text()  # Ray's message that the run's node died
