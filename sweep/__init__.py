"""netsweep's edge layer: Hydra configs in, one engine run per config, Parquet rows out.

`sweep.runner.execute` runs one resolved config and returns rows; `sweep.store` appends rows to a
dataset and reads it back (`load_runs` and `load_table`: one row set per run, for notebooks).
Neither imports Hydra, so Ray workers can use them; `sweep.cli` is the Hydra command line
(`python -m sweep`) and `sweep.report` turns a dataset into a summary and plots
(`python -m sweep.report results/<name>`).

The names below are imported on first use: a Ray worker imports `sweep.runner` (and so this
package) and should not pay for pandas and pyarrow, which only the store needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"execute": "runner", "run_id": "runner", "ResultStore": "store", "load_runs": "store",
            "load_table": "store", "read_table": "store"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """`sweep.load_runs` and the like, from their module, on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
