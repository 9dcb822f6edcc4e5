"""The files a workload names, read and checked before any simulation starts.

`engine.load_config` checks the config on its own and reads no file (the config is the floor every
layer stands on); the readers of ASTRA-sim text workloads and Chakra traces live here, in the
workload layer, and refuse a bad file with a `ConfigError` naming `workload.path`, the file and the
line or node. Callers that launch runs (`sweep.plan.validate`, used by a single run and by every
grid point) call `check_workload_files` right after `load_config`; `engine.prepare` reads the
files again to build the run, so a direct `engine.run` refuses them too, before simulating.
"""

from __future__ import annotations

from ..config import SimConfig
from .chakra import read_trace
from .layers import parse_astra


def check_workload_files(config: SimConfig) -> None:
    """Read the ASTRA-sim workload or Chakra trace `config` names (other workload types name no
    file); raise `ConfigError` if it cannot run. The sizes the readers convert do not matter here,
    so the network is read as one dimension of `network.npus`."""
    wl, npus = config.workload, config.network.npus
    if wl.type == "astra":
        assert wl.path is not None  # load_config requires it
        parse_astra(wl.path, 1, (npus,))
    elif wl.type == "chakra":
        assert wl.path is not None  # load_config requires it
        read_trace(wl.path, npus, (npus,))
