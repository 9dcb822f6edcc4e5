"""netsweep's edge layer: Hydra configs in, one engine run per config, Parquet rows out.

`sweep.runner.execute` runs one resolved config and returns rows; `sweep.store` appends rows to a
dataset and reads it back (`load_runs` and `load_table`: one row set per run, for notebooks).
Neither imports Hydra, so Ray workers can use them; `sweep.cli` is the Hydra command line
(`python -m sweep`) and `sweep.report` turns a dataset into a summary and plots
(`python -m sweep.report results/<name>`).
"""

from .runner import execute, run_id
from .store import ResultStore, load_runs, load_table, read_table

__all__ = ["ResultStore", "execute", "load_runs", "load_table", "read_table", "run_id"]
