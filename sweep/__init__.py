"""netsweep's edge layer: Hydra configs in, one engine run per config, Parquet rows out.

`sweep.runner.execute` runs one resolved config and returns rows; `sweep.store` appends rows to a
dataset and reads it back. Neither imports Hydra, so Ray workers can use them; `sweep.cli` is the
Hydra command line (`python -m sweep`).
"""

from .runner import execute, run_id
from .store import ResultStore, read_table

__all__ = ["ResultStore", "execute", "read_table", "run_id"]
