"""netsweep's packet-level network engine.

`run(config) -> rows` takes a plain nested mapping (or a validated `SimConfig`) and returns plain
result rows. The engine imports nothing from the sweep layer, Hydra or Ray.
"""

from .kernel import choose_kernel

KERNEL = choose_kernel()  # first: it decides where the hot-path modules are imported from
from .checks import check_backend  # noqa: E402
from .config import ConfigError, SimConfig, load_config  # noqa: E402
from .run import PreparedRun, estimate_run_bytes, prepare, run  # noqa: E402
from .workload import check_workload_files  # noqa: E402

__version__ = "0.1.0"
ENGINE_VERSION = __version__

__all__ = ["ConfigError", "ENGINE_VERSION", "KERNEL", "PreparedRun", "SimConfig", "check_backend",
           "check_workload_files", "estimate_run_bytes", "load_config", "prepare", "run"]
