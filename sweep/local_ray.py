"""The private local Ray of one sweep: started on loopback in a folder of its own, and stopped so that
none of its processes and none of its files outlive the sweep, however the sweep ends.

`ray.init` starts a handful of processes (GCS server, raylet, dashboard, log monitor; the raylet
starts the dashboard and runtime-env agents and the workers). `ray.shutdown` stops those Ray knows
of, and only once `ray.init` has returned; an agent still starting when its raylet goes does not
notice, and lives on with parent PID 1 (some ignore SIGTERM). So, on Linux, this process is made a
child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`) while its Ray runs: a process orphaned anywhere
below it is re-parented to it instead of to init, and every process Ray started stays a
descendant. On stopping, after `ray.shutdown`, each descendant that was not there before Ray
started gets SIGTERM, then SIGKILL if it is still there `STOP_GRACE_S` later. Where there is no
subreaper (macOS), the descendants are also listed before `ray.shutdown`, while the tree is whole:
only processes orphaned before the sweep stops are missed there. A driver killed with SIGKILL stops
nothing: Ray's kernel fate-sharing then takes down the processes it started itself, not the agents.

Ray's files (logs, sockets, spilled objects) go to a temporary folder of the sweep instead of the
shared `/tmp/ray`: removed when the sweep ends or is interrupted; kept, and its path printed, when
Ray did not start, an error stopped the sweep, or a worker process died (Ray's logs say why).

Ray's token authentication stays as Ray sets it (on for a local cluster, with a token made once in
`~/.ray/auth_token`; `RAY_AUTH_MODE` decides otherwise), without the warning Ray logs about it on
every `ray.init`: it asks the user to opt out of a defence that costs nothing on loopback.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .internals import RAY_UNWANTED_WARNINGS, ray_sets_no_sigterm_handler
from .interrupts import interrupts_deferred

# Seconds a process of the local Ray has to exit after SIGTERM before it gets SIGKILL (Ray itself
# gives each of its processes 1 s), and to vanish after SIGKILL.
STOP_GRACE_S = 2.0
KILL_WAIT_S = 5.0
# What `ray.init` raises when its raylet has not registered within Ray's fixed 30 s (a busy machine: seen
# with sixteen CPU-bound processes on 2 cores, and at load 5-7); `LocalRay.start` then tries once more.
RAY_START_TIMEOUT = "timed out during startup"
START_ATTEMPTS = 2
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_PR_GET_CHILD_SUBREAPER = 37


def _prctl() -> Any:
    """libc's prctl with its argument types, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


def set_child_subreaper(enabled: bool) -> bool | None:
    """Make this process a child subreaper (Linux 3.4+), or stop it being one. Returns the previous
    setting, or None where there is no such thing (then nothing changed)."""
    prctl = _prctl()
    if prctl is None:
        return None
    previous = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(previous), 0, 0, 0) != 0:
        return None
    if prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) != 0:
        return None
    return bool(previous.value)


def _temp_root() -> str:
    """Where Ray puts its temporary folder by default (`RAY_TMPDIR`, else /tmp: Ray's socket paths
    must stay short)."""
    return os.environ.get("RAY_TMPDIR") or ("/tmp" if os.name == "posix" else tempfile.gettempdir())


class ProcessTree:
    """The processes below this one, in its session, that were not there when it was made: those it
    started since, and those they started (psutil, which Ray ships and puts on `sys.path`: make one
    after importing Ray). A child started in a session of its own (`ray start` of a cluster) is not
    part of it, nor anything below it."""

    def __init__(self) -> None:
        import psutil  # noqa: PLC0415 - Ray's copy, once Ray is imported

        self._psutil = psutil
        self._me = psutil.Process()
        self._session = os.getsid(0) if hasattr(os, "getsid") else None  # None: no sessions (Windows)
        self._before = {key for process in self._me.children(recursive=True) if (key := self._key(process))}

    def _key(self, process: Any) -> tuple[int, float] | None:
        """(pid, start time): a pid alone may be reused. None once the process is gone."""
        try:
            return process.pid, process.create_time()
        except self._psutil.Error:
            return None

    def new_processes(self) -> dict[tuple[int, float], Any]:
        """The descendants started since, by (pid, start time)."""
        found = {}
        for process in self._me.children(recursive=True):
            key = self._key(process)
            if key is not None and key not in self._before and self._in_session(process.pid):
                found[key] = process
        return found

    def _in_session(self, pid: int) -> bool:
        if self._session is None:
            return True
        try:
            return os.getsid(pid) == self._session
        except OSError:  # gone meanwhile
            return False

    def stop(self, processes: list[Any], grace_s: float = STOP_GRACE_S) -> tuple[int, list[Any]]:
        """SIGTERM to `processes`, SIGKILL to those still there after `grace_s` seconds; each is
        reaped if it is a child. Returns how many needed SIGKILL and which survived even that (a
        process stuck in the kernel)."""
        psutil = self._psutil
        signalled = []
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.terminate()  # psutil checks the pid still names the same process
                signalled.append(process)
        _, stubborn = psutil.wait_procs(signalled, timeout=grace_s)
        for process in stubborn:
            with contextlib.suppress(psutil.Error):
                process.kill()
        _, survivors = psutil.wait_procs(stubborn, timeout=KILL_WAIT_S)
        return len(stubborn), survivors


def wanted_ray_record(record: logging.LogRecord) -> bool:
    """A logging filter: False for the warnings of `RAY_UNWANTED_WARNINGS`."""
    unwanted = RAY_UNWANTED_WARNINGS.get(record.name)
    return unwanted is None or not record.getMessage().startswith(unwanted)


@contextlib.contextmanager
def ray_starting(ray: Any) -> Iterator[None]:
    """Around `ray.init`: SIGINT and SIGTERM stop the sweep once Ray is up (a second one at once;
    see `interrupts_deferred`), this process's SIGTERM handler stays in place, and Ray's warnings
    that do not apply to a sweep (`RAY_UNWANTED_WARNINGS`) are not printed. `ray.init` would set a
    SIGTERM handler of its own, raising SystemExit at whatever point of its start-up it is in
    (`sweep.internals.ray_sets_no_sigterm_handler`)."""
    loggers = [logging.getLogger(name) for name in RAY_UNWANTED_WARNINGS]
    for logger in loggers:
        logger.addFilter(wanted_ray_record)
    try:
        with interrupts_deferred(second_interrupts=True,
                                 notice="interrupted: stopping once Ray is up (Ctrl-C again: now)"), \
                ray_sets_no_sigterm_handler(ray):
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(wanted_ray_record)


class RayStartError(RuntimeError):
    """The local Ray did not start in `START_ATTEMPTS` tries: the message says why and what to do."""


class LocalRay:
    """A private local Ray for one sweep (see the module docstring): `start`, then `stop`."""

    def __init__(self) -> None:
        self.temp_dir: str | None = None  # Ray's temporary folder, once started
        self._tree: ProcessTree | None = None
        self._was_subreaper: bool | None = None

    def start(self, ray: Any, **init_kwargs: Any) -> None:
        """`ray.init(address="local", **init_kwargs)` in a temporary folder of its own. A signal
        while Ray starts stops the sweep once Ray is up (a second one at once); whatever is raised,
        what had started is stopped before it propagates. Where Ray's node times out during its
        start-up (a busy machine), it is stopped and started once more; a second time out raises
        `RayStartError`, which says what to do."""
        for attempt in range(1, START_ATTEMPTS + 1):
            self._tree = ProcessTree()
            self.temp_dir = tempfile.mkdtemp(prefix="netsweep-ray-", dir=_temp_root())
            self._was_subreaper = set_child_subreaper(True)
            try:
                with ray_starting(ray):
                    ray.init(address="local", _temp_dir=self.temp_dir, **init_kwargs)
                return
            except KeyboardInterrupt:
                self.stop(ray)
                raise
            except Exception as exc:
                if RAY_START_TIMEOUT not in str(exc):
                    self.stop(ray, keep_logs="Ray did not start")
                    raise
                if attempt < START_ATTEMPTS:
                    self.stop(ray)
                    continue
                self.stop(ray, keep_logs="Ray did not start")
                load = os.getloadavg()[0]
                raise RayStartError(
                    f"the local Ray did not start: its node timed out during start-up {START_ATTEMPTS} times (Ray "
                    f"allows 30 s; load average {load:.1f} on {os.cpu_count()} CPUs). Run the sweep again when the "
                    "machine is less busy, or start a Ray head beforehand (ray start --head) and pass its "
                    "address as ray.address") from None

    def stop(self, ray: Any, keep_logs: str | None = None) -> None:
        """`ray.shutdown()`, then stop every process it left (see `ProcessTree.stop`) and remove the
        temporary folder, unless `keep_logs` says why to keep it (then its path is printed). Signals
        wait until this is done; it takes about `STOP_GRACE_S` at most, plus `ray.shutdown`."""
        if self._tree is None:  # not started, or stopped already
            return
        with interrupts_deferred():
            before = self._tree.new_processes()  # while the tree is whole (for lack of a subreaper)
            try:
                ray.shutdown()
            finally:
                left = {**before, **self._tree.new_processes()}
                _, survivors = self._tree.stop(list(left.values()))
                if survivors:
                    keep_logs = keep_logs or f"{len(survivors)} of its processes did not exit"
                self._remove_temp_dir(keep_logs)
                if self._was_subreaper is not None:
                    set_child_subreaper(self._was_subreaper)
                self._tree = None

    def _remove_temp_dir(self, keep_logs: str | None) -> None:
        """Remove Ray's temporary folder, or say where its logs are and why they are kept."""
        if self.temp_dir is None:
            return
        if keep_logs is None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        else:
            logs = sorted(Path(self.temp_dir).glob("session_2*/logs")) or [Path(self.temp_dir)]
            print(f"ray: {keep_logs}; the local Ray's logs are kept in {logs[-1]}", file=sys.stderr)
        self.temp_dir = None
