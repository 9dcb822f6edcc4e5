"""The files a workload names, read and checked before any simulation starts.

`engine.load_config` checks the config on its own and reads no file (the config is the floor every
layer stands on); the readers of ASTRA-sim text workloads and Chakra traces live here, in the
workload layer, and refuse a bad file with a `ConfigError` naming `workload.path`, the file and the
line or node. Callers that launch runs (`sweep.plan.validate`, used by a single run and by every
grid point) call `check_workload_files` right after `load_config`; `engine.prepare` reads the
files again to build the run, so a direct `engine.run` refuses them too, before simulating.

A grid names the same file at every point (each seed, TCP setting, link speed): a file that passed
is not read again while its size and modification time stay the same, so planning reads it once.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..config import AstraWorkload, ChakraWorkload, SimConfig
from .chakra import read_trace, trace_files
from .layers import parse_astra, workload_file


def check_workload_files(config: SimConfig) -> None:
    """Read the ASTRA-sim workload or Chakra trace `config` names (other workload types name no
    file); raise `ConfigError` if it cannot run. The sizes the readers convert do not matter here,
    so the network is read as one dimension of `network.npus`."""
    wl, npus = config.workload, config.network.npus
    if not isinstance(wl, (AstraWorkload, ChakraWorkload)):
        return
    assert wl.path is not None  # load_config requires it
    # Finding the files raises the reader's own ConfigError when they are missing.
    files = [workload_file(wl.path)] if isinstance(wl, AstraWorkload) else trace_files(wl.path)
    _check_once(wl.type, wl.path, npus, _stamp(files))


def _stamp(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """What tells that the files changed: each one's path, modification time (ns) and size."""
    stats = [(file, file.stat()) for file in files]
    return tuple((str(file.resolve()), stat.st_mtime_ns, stat.st_size) for file, stat in stats)


@lru_cache(maxsize=256)  # a refused file raises, and exceptions are never cached: it is read again
def _check_once(kind: str, path: str, npus: int, stamp: tuple[tuple[str, int, int], ...]) -> None:
    """Read the files once for this stamp (`stamp` only keys the cache)."""
    if kind == "astra":
        parse_astra(path, 1, (npus,))
    else:
        read_trace(path, npus, (npus,))
