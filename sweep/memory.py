"""A run's memory where it runs: what it reserves, what may stop it, and the peak it reached.

A run reserves memory so that a scheduler never starts more big runs at once than a machine holds:
its declaration (`hydra.launcher.run_memory_mb`) or else its estimate from its config
(`engine.estimate_run_bytes`), counted against a Ray node's `memory` resource. The estimate is a
guess for scheduling and never stops a run. Two things do:

- a declaration, which is a limit: `declared_limit` holds the process to it (Linux: RLIMIT_DATA, which
  counts the heap and private mappings, where Python's objects live), so an allocation beyond raises
  MemoryError;
- the machine: `MachineWatch` looks, every `WATCH_INTERVAL_S` of the run's CPU time, at the run's resident
  memory and at what the machine (or the container's cgroup) has left. A run past its reservation while
  less than `MACHINE_FLOOR_FRACTION` of the memory is left raises `MachineMemoryExhausted`, a MemoryError:
  its row is stored with the peak it reached, instead of the kernel's or Ray's out-of-memory killer taking
  its worker and the row with it. A run within its reservation is never stopped by the watch: when the
  machine runs short, the runs that outgrew theirs give way.

`reset_peak` and `peak_resident_bytes` measure a run's peak resident memory (Linux: VmHWM, reset through
/proc/self/clear_refs), which its runs row keeps as `peak_memory_mb`. Standard library only: a Ray
worker imports this.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Iterator

MIB = 2**20
# Below this share of the machine's (or cgroup's) memory left, a run past its reservation is stopped:
# above Ray's memory monitor, which kills a worker at 95 % use (RAY_memory_usage_threshold), so that the
# run ends with its row first.
MACHINE_FLOOR_FRACTION = 0.08
# CPU seconds of the run between two looks at its memory: a run that allocates as fast as the engine does
# (tens of MiB a second) overshoots the floor by a few MiB at most.
WATCH_INTERVAL_S = 0.25
_CGROUP_V2 = Path("/sys/fs/cgroup")
_CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def _status_kib(field: str) -> int | None:
    """A field of /proc/self/status in KiB (VmData, VmRSS, VmHWM), or None where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def resident_bytes() -> int | None:
    """This process's resident memory now, in bytes (None where unknown)."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_resident_bytes() -> int | None:
    """This process's peak resident memory since it started or since `reset_peak`, in bytes (Linux: VmHWM;
    elsewhere getrusage's peak)."""
    kib = _status_kib("VmHWM")
    if kib is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux, the only case here
    return kib * 1024


def reset_peak() -> None:
    """Make `peak_resident_bytes` count from now (Linux 4.0+: writing 5 to /proc/self/clear_refs resets
    VmHWM to the resident memory); elsewhere the peak stays the process's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _read_int(path: Path) -> int | None:
    """The integer a cgroup file holds, or None if it is absent or says `max` (no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def machine_memory() -> tuple[int, int] | None:
    """(total, available) memory of this machine in bytes, bounded by the cgroup this process is in when it
    has a limit (a container's); None where /proc/meminfo is absent."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo
                      if line.startswith(("MemTotal:", "MemAvailable:"))}
        total, available = fields["MemTotal"], fields["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return None
    for limit_file, usage_file in ((_CGROUP_V2 / "memory.max", _CGROUP_V2 / "memory.current"),
                                   (_CGROUP_V1 / "memory.limit_in_bytes", _CGROUP_V1 / "memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < total:
            return limit, min(available, max(limit - usage, 0))
    return total, available


class MachineMemoryExhausted(MemoryError):
    """The run outgrew its reservation while the machine had almost no memory left."""

    def __init__(self, resident_bytes: int, available_bytes: int) -> None:
        super().__init__(f"{resident_bytes / MIB:,.0f} MiB resident, {available_bytes / MIB:,.0f} MiB left")
        self.resident_bytes = resident_bytes
        self.available_bytes = available_bytes


class MachineWatch:
    """While entered, stops the run (raises `MachineMemoryExhausted` in the main thread, from a SIGPROF
    timer of the process's CPU time) once it holds more than `reserved_bytes` while the machine has less
    than `MACHINE_FLOOR_FRACTION` of its memory left. Stops at most once; `stopped` keeps what it saw.
    Off outside the main thread and where /proc is absent (nothing to look at)."""

    def __init__(self, reserved_bytes: int) -> None:
        self.reserved_bytes = reserved_bytes
        self.stopped: MachineMemoryExhausted | None = None
        self._previous: Any = None  # the SIGPROF handler to put back
        self._armed = False

    def _look(self, signum: int, frame: FrameType | None) -> None:
        """The timer's handler: stop the run if it is past its reservation and the machine is short."""
        resident = resident_bytes()
        if resident is None or resident <= self.reserved_bytes or self.stopped is not None:
            return
        memory = machine_memory()
        if memory is None:
            return
        total, available = memory
        if available < MACHINE_FLOOR_FRACTION * total:
            signal.setitimer(signal.ITIMER_PROF, 0)  # once: the run ends with this
            self.stopped = MachineMemoryExhausted(resident, available)
            raise self.stopped

    def __enter__(self) -> MachineWatch:
        if threading.current_thread() is threading.main_thread() and machine_memory() is not None:
            self._previous = signal.signal(signal.SIGPROF, self._look)
            signal.setitimer(signal.ITIMER_PROF, WATCH_INTERVAL_S, WATCH_INTERVAL_S)
            self._armed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, self._previous)
            self._armed = False


@contextlib.contextmanager
def declared_limit(max_bytes: int | None) -> Iterator[None]:
    """Hold this process to `max_bytes` more memory than it uses now while inside: an allocation
    beyond raises MemoryError (Linux: RLIMIT_DATA). Elsewhere, or with `max_bytes` None, nothing is
    limited."""
    data_kib = _status_kib("VmData") if max_bytes is not None else None
    if max_bytes is None or data_kib is None:
        yield
        return
    limit = data_kib * 1024 + max_bytes
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
