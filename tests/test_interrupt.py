"""Interrupting `python -m sweep -m` at any moment: Ctrl-C (SIGINT to the command's process group, as a
terminal sends it) or SIGTERM (to the command alone, as `kill` or a batch scheduler sends it), while
planning, while its local Ray starts, mid-sweep and during the final writes. Each time: exit code
130, no process of the sweep left (the command runs in a process session of its own, which holds
every process it and its Ray start), Ray's temporary folder removed, every Parquet part whole; and
the same command resumes. Then the pieces: signals deferred around a block, the process tree of a
local Ray stopped with SIGKILL after a grace period, Ray's logs kept when a worker process died.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow.parquet as pq
import pytest

import sweep
from sweep.interrupts import EXIT_INTERRUPTED, interrupts_deferred, sigterm_as_interrupt
from sweep.store import read_table

LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="follows processes through /proc")
TABLES = ("runs", "flows", "collectives", "layers")
CODE_ROOT = Path(sweep.__file__).resolve().parent.parent  # the folder holding the `sweep` package under test
ONE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # 0: Ray binds to loopback (read when Ray is imported)
# A run of about half a second of wall time (1 GB a flow); with flush_rows=1 each finished run is
# written at once.
SECOND_RUNS = ["workload=incast", "workload.senders=2", "workload.bytes_per_flow=1000000000"]
# Runs the rest of its command line (`python ...`) with SIGINT and SIGTERM at their defaults, as a
# terminal's foreground command has them, whatever pytest inherited: a suite started as a script's
# background job has SIGINT ignored, a disposition a child keeps across exec (and the sweep, rightly,
# leaves alone). The exec keeps the process id, so the command is still the session leader.
WITH_DEFAULT_SIGNALS = [sys.executable, "-c", "import os, signal, sys\n"
                        "for signum in (signal.SIGINT, signal.SIGTERM): signal.signal(signum, signal.SIG_DFL)\n"
                        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone meanwhile
        return b""


class SweepProcess:
    """`python -m sweep -m overrides...` in a process session of its own, watched through /proc."""

    def __init__(self, cwd: Path, overrides: list[str]) -> None:
        self.cwd = cwd
        self.overrides = overrides
        # Ray's own defaults: its token authentication on (the warning about it must not show).
        env = {key: value for key, value in os.environ.items() if key not in ("HYDRA_FULL_ERROR", "RAY_AUTH_MODE")}
        # the code under test, also where another checkout is installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CODE_ROOT), env.get("PYTHONPATH")]))
        self.stdout_path, self.stderr_path = cwd / "stdout.txt", cwd / "stderr.txt"
        with open(self.stdout_path, "w") as stdout, open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen([*WITH_DEFAULT_SIGNALS, "-m", "sweep", "-m", *overrides], cwd=cwd,
                                            env=env, stdout=stdout, stderr=stderr, start_new_session=True)
        self.session_dirs: set[str] = set()  # Ray's session folders, read from its processes' command lines

    def processes(self) -> list[int]:
        """Every process of the session but the command itself (its pid is the session id)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.process.pid:
                try:
                    if os.getsid(int(entry)) == self.process.pid:
                        found.append(int(entry))
                except OSError:  # gone meanwhile
                    pass
        return found

    def command_lines(self) -> list[bytes]:
        """The command lines of the session's processes; notes Ray's session folders they name."""
        lines = [_read(f"/proc/{pid}/cmdline") for pid in self.processes()]
        for line in lines:
            for arg in line.split(b"\0"):
                if arg.startswith(b"--session-dir="):
                    self.session_dirs.add(arg.split(b"=", 1)[1].decode())
        return lines

    def cpu_s(self) -> float:
        """CPU time the command has used (user + system)."""
        fields = _read(f"/proc/{self.process.pid}/stat").rsplit(b")", 1)[-1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0

    def wait_for(self, condition: Callable[[], bool], what: str, timeout_s: float = 180) -> None:
        """Poll `condition` until it holds; fail if the command ends first or it takes too long."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.command_lines()
            assert self.process.poll() is None, f"the sweep ended before {what}:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
            time.sleep(0.01)

    def interrupt(self, signum: int) -> None:
        """SIGINT to the process group, as a terminal's Ctrl-C; any other signal to the command alone."""
        if signum == signal.SIGINT:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)

    def finish(self, timeout_s: float = 180) -> int:
        """Wait for the command to exit; then for its processes to be gone (a few seconds at most)."""
        code = self.process.wait(timeout=timeout_s)
        deadline = time.monotonic() + 5
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        return code

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def kill_all(self) -> None:
        """SIGKILL whatever is left (after a failed test)."""
        for pid in [self.process.pid, *self.processes()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.process.wait(timeout=30)


@pytest.fixture()
def sweeps() -> Iterator[Callable[[Path, list[str]], SweepProcess]]:
    """Starts sweeps; kills what is left of them at the end, whatever happened."""
    started: list[SweepProcess] = []

    def start(cwd: Path, overrides: list[str]) -> SweepProcess:
        started.append(SweepProcess(cwd, overrides))
        return started[-1]

    yield start
    for process in started:
        process.kill_all()


def _assert_nothing_left(sweep: SweepProcess) -> None:
    """No process of the sweep left, Ray's folder removed."""
    left = {pid: _read(f"/proc/{pid}/cmdline").split(b"\0")[0] for pid in sweep.processes()}
    assert not left, f"processes left: {left}"
    assert all(not os.path.exists(path) for path in sweep.session_dirs), sweep.session_dirs


def _assert_whole(dataset: Path) -> int:
    """Every part of every table reads; no temporary part is left. Returns the number of runs."""
    assert not list(dataset.glob("*/.*.tmp")), "a temporary part is left"
    for table in TABLES:
        for part in (dataset / table).glob("part-*.parquet"):
            pq.read_table(part)
    if not (dataset / "runs").exists():
        return 0
    runs = read_table(dataset, "runs")
    assert runs["run_id"].is_unique and set(runs["status"]) <= {"ok"}
    return len(runs)


def _overrides(tmp_path: Path, *grid: str) -> list[str]:
    return [*grid, f"results_dir={tmp_path / 'results'}", "name=interrupted", "ray.num_cpus=2"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_while_planning(tmp_path: Path, sweeps: Any, signum: int) -> None:
    """A grid of 20,000 points takes many seconds to plan: interrupted 2.5 s of CPU time into the
    command (Hydra has composed the config by then), it stops at once, having started nothing."""
    sweep = sweeps(tmp_path, _overrides(tmp_path, "seed=range(20000)", "workload=incast", "workload.senders=2"))
    sweep.wait_for(lambda: sweep.cpu_s() >= 2.5, "2.5 s of CPU time")
    sweep.interrupt(signum)
    assert sweep.finish() == EXIT_INTERRUPTED, sweep.stderr()
    assert "planned" not in sweep.stdout() and sweep.stderr().endswith("interrupted\n"), sweep.stderr()
    assert "Traceback" not in sweep.stderr()
    _assert_nothing_left(sweep)
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_while_ray_starts(tmp_path: Path, sweeps: Any, signum: int) -> None:
    """Interrupted once Ray's raylet runs, while the raylet starts its agents (the moment that left
    `ray::DashboardAgent` and `ray::RuntimeEnvAgent` behind): the sweep lets Ray finish starting,
    stops it and every process it started, removes its folder, and exits 130 having run nothing."""
    sweep = sweeps(tmp_path, _overrides(tmp_path, "seed=range(8)", *SECOND_RUNS))
    sweep.wait_for(lambda: any(line.split(b"\0")[0].endswith(b"/raylet") for line in sweep.command_lines()),
                   "raylet")
    sweep.interrupt(signum)
    assert sweep.finish() == EXIT_INTERRUPTED, sweep.stderr()
    stderr = sweep.stderr()
    assert stderr == "interrupted: stopping once Ray is up (Ctrl-C again: now)\n", stderr  # and not "ray: ..."
    assert "(interrupted: run the same command again to resume)" in sweep.stdout()
    assert sweep.session_dirs, "Ray's session folder was not seen"
    _assert_nothing_left(sweep)
    assert _assert_whole(tmp_path / "results" / "interrupted") == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_mid_sweep_then_resumed(tmp_path: Path, sweeps: Any, signum: int) -> None:
    """Interrupted once two runs are stored: the runs that finished are stored whole, nothing of Ray
    is left, and the same command runs the rest, with no warning on stderr."""
    overrides = _overrides(tmp_path, "seed=range(12)", *SECOND_RUNS, "hydra.launcher.flush_rows=1")
    dataset = tmp_path / "results" / "interrupted"
    sweep = sweeps(tmp_path, overrides)
    sweep.wait_for(lambda: len(list((dataset / "runs").glob("part-*.parquet"))) >= 2, "two runs stored")
    sweep.interrupt(signum)
    assert sweep.finish() == EXIT_INTERRUPTED, sweep.stderr()
    assert "(interrupted: run the same command again to resume)" in sweep.stdout()
    assert sweep.session_dirs, "Ray's session folder was not seen"
    _assert_nothing_left(sweep)
    stored = _assert_whole(dataset)
    assert 2 <= stored < 12

    if signum == signal.SIGTERM:  # resuming once is enough
        return
    resumed = sweeps(tmp_path, overrides)
    assert resumed.finish() == 0, resumed.stderr()
    assert resumed.stderr() == "ray: a local Ray on 127.0.0.1, 2 CPUs\n"  # nothing else: no token-auth warning
    assert f"  skipped{stored:>11}" in resumed.stdout()
    assert _assert_whole(dataset) == 12
    _assert_nothing_left(resumed)


@pytest.mark.slow
def test_interrupted_during_the_final_writes(tmp_path: Path, sweeps: Any) -> None:
    """Every row is held until the end (no flush before it); Ctrl-C as the first part is written:
    the writes finish (no part torn), every run is stored, and the command exits 130."""
    dataset = tmp_path / "results" / "interrupted"
    sweep = sweeps(tmp_path, _overrides(tmp_path, "seed=range(6)", "workload=incast", "workload.senders=8",
                                        "hydra.launcher.flush_rows=1000000", "hydra.launcher.flush_interval_s=3600"))
    sweep.wait_for(lambda: bool(list(dataset.glob("*/.*.tmp")) or list(dataset.glob("*/part-*"))), "a part written")
    sweep.interrupt(signal.SIGINT)
    assert sweep.finish() == EXIT_INTERRUPTED, sweep.stderr()
    _assert_nothing_left(sweep)
    assert _assert_whole(dataset) == 6


@pytest.mark.usefixtures("default_signals")
def test_signals_wait_for_the_end_of_a_deferred_block() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # both handled (recorded) by now
            reached.append("end")
    assert reached == ["end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("default_signals")
def test_a_second_signal_raises_at_once_if_asked() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt, match="again"):
        with interrupts_deferred(second_interrupts=True):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            reached.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
            reached.append(2)
    assert reached == [1]


def test_an_ignored_signal_stays_ignored() -> None:
    # As under `nohup` (SIGINT ignored) and a batch system that ignores SIGTERM: neither context
    # manager installs a handler for a signal whose disposition is SIG_IGN, so the kernel discards
    # both signals (no handler runs, nothing is recorded), the block runs to its end without a
    # KeyboardInterrupt, and both are still ignored inside it and after.
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    reached = []
    try:
        with sigterm_as_interrupt(), interrupts_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            reached.append("end")
        assert reached == ["end"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


ORPHAN_IGNORING_SIGTERM = (
    "import os, signal, subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)'], "
    "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
    "child.stdout.readline()\n"  # its SIGTERM is ignored by now
    "print(child.pid, flush=True)\n"  # then this process exits: the child is orphaned
)


def test_the_process_tree_takes_orphans_and_kills_what_ignores_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """As an agent whose raylet died: a grandchild orphaned (re-parented to this process, a
    subreaper meanwhile) and ignoring SIGTERM is stopped with SIGKILL; a child that was there
    before is left alone."""
    monkeypatch.setenv(ONE_MACHINE_ENV, "0")  # read when Ray is imported: a local Ray here later stays on loopback
    import ray  # noqa: F401, PLC0415 - puts Ray's psutil on sys.path

    from sweep.local_ray import ProcessTree, set_child_subreaper

    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    previous = set_child_subreaper(True)
    orphan = None
    try:
        tree = ProcessTree()
        parent = subprocess.run([sys.executable, "-c", ORPHAN_IGNORING_SIGTERM], capture_output=True, text=True,
                                check=True, timeout=60)
        orphan = int(parent.stdout.split()[-1])
        assert orphan in [process.pid for process in tree.new_processes().values()]
        assert before.pid not in [process.pid for process in tree.new_processes().values()]
        killed, survivors = tree.stop(list(tree.new_processes().values()), grace_s=0.5)
        assert (killed, survivors) == (1, [])
        assert not os.path.exists(f"/proc/{orphan}")  # reaped, not even a zombie
        assert before.poll() is None
    finally:
        set_child_subreaper(bool(previous))
        for pid in (before.pid, orphan):
            if pid is not None and os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGKILL)
        before.wait()


def _dies_once(marker_dir: str) -> Any:
    """`measure` whose worker process dies the first time (Ray runs it again)."""
    def run_fn(config: Any, max_wall_time_s: float | None = None) -> Any:
        from sweep.runner import measure

        marker = os.path.join(marker_dir, "died")
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return measure(config, max_wall_time_s)
    return run_fn


@pytest.mark.slow
def test_the_logs_of_a_local_ray_are_kept_when_a_worker_died(tmp_path: Path, capsys: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A local Ray in this process; a worker process dies under a run (retried, ok): the sweep
    says where Ray's logs are and keeps them."""
    monkeypatch.setenv(ONE_MACHINE_ENV, "0")
    import ray.cloudpickle  # noqa: PLC0415 - after the variable above
    from sweep_support import compose_config

    from sweep.cluster import RayExecutor
    from sweep.driver import run_sweep
    from sweep.plan import plan

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    runs = plan([["engine.backend=analytical", "workload=collective", "network.npus=4", f"results_dir={tmp_path}",
                  "name=worker_died"]], compose_config)
    summary = run_sweep(runs, RayExecutor(num_cpus=1, run_fn=_dies_once(str(tmp_path))), show_progress=False)
    assert dict(summary.statuses) == {"ok": 1} and summary.retried == 1
    stderr = capsys.readouterr().err
    kept = stderr.split("the local Ray's logs are kept in ")[-1].strip()
    assert "ray: a worker process died during the sweep; the local Ray's logs are kept in " in stderr, stderr
    try:
        assert Path(kept).is_dir() and list(Path(kept).glob("raylet.*"))
    finally:
        import shutil

        shutil.rmtree(Path(kept).parent.parent, ignore_errors=True)
