"""One sweep from start to end: skip what is already done, run the rest, store rows as they arrive.

`run_sweep` takes the validated runs of `sweep.plan` and an executor (`sweep.cluster.RayExecutor`,
or `InProcessExecutor` for `python -m sweep`, a sweep of one: a context manager whose
`results(runs)` generator yields `(run, RunResult)` in completion order and None when nothing
finished for a while) and appends every run's rows (`PlannedRun.rows`) to its dataset's
`ResultStore` the moment they arrive; the store writes Parquet parts by rows or seconds. A run
already stored with status `ok` is skipped (resume) unless it was planned with `force`; a failed
one runs again. Ctrl-C or SIGTERM stops the sweep: what finished is flushed
first (and the executor stops what it started), and running the same sweep again resumes it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generator, Protocol, Sequence, TextIO

from .interrupts import interrupts_deferred, sigterm_as_interrupt
from .plan import PlannedRun
from .progress import ProgressBar, SweepSummary
from .rows import RunResult
from .runner import measure, measure_within_limits
from .store import ResultStore


class Executor(Protocol):
    """What `run_sweep` needs of an executor (see the module docstring)."""

    def __enter__(self) -> Executor: ...

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None: ...

    def results(self, runs: Sequence[PlannedRun]) -> Generator[tuple[PlannedRun, RunResult] | None, None, None]: ...


@dataclass
class InProcessExecutor:
    """Runs the runs one after the other in this process, under the rules a Ray worker runs them by:
    the wall-time budget and the memory rules of `sweep.memory` (a declaration, `run_memory_mb`, is a
    limit; the estimate only marks when a run has outgrown its reservation).
    `last` is the last run done and its outcome, for a caller that shows it (`python -m sweep`)."""

    max_wall_time_s: float | None = None
    run_memory_mb: float | None = None
    run_fn: Callable[..., RunResult] = measure
    last: tuple[PlannedRun, RunResult] | None = field(default=None, init=False)

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        pass

    def results(self, runs: Sequence[PlannedRun]) -> Generator[tuple[PlannedRun, RunResult], None, None]:
        """Run each run here, in order; yield it with its outcome."""
        for run in runs:
            result = measure_within_limits(self.run_fn, run.sim_config, self.max_wall_time_s,
                                           run.declared_bytes(self.run_memory_mb),
                                           run.reserved_bytes(self.run_memory_mb))
            self.last = (run, result)
            yield run, result


def _to_run(runs: Sequence[PlannedRun], stores: dict[Path, ResultStore],
            summary: SweepSummary) -> list[PlannedRun]:
    """The runs not yet done: neither stored with status ok in their dataset (unless forced) nor a
    repeat of an earlier grid point (`link_gbps=100,100.0`). Counts the others as skipped."""
    done = {path: store.completed_run_ids() for path, store in stores.items()}
    queued: set[tuple[Path, str]] = set()
    todo = []
    for run in runs:
        key = (run.dataset, run.run_id)
        if key in queued or (run.run_id in done[run.dataset] and not run.force):
            summary.skipped += 1
            continue
        queued.add(key)
        todo.append(run)
    return todo


# `NETSWEEP_RSS_EVERY=N`: every N runs stored, one line on stderr with this process's memory (for
# soak tests: `benchmarks/soak_sweep.py`).
RSS_EVERY_ENV = "NETSWEEP_RSS_EVERY"


def _memory_mib() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB (Linux /proc; getrusage's peak elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            fields = dict(line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak, peak


def run_sweep(runs: Sequence[PlannedRun], executor: Executor, flush_rows: int = 10_000,
              flush_interval_s: float = 10.0, progress_file: TextIO | None = None,
              show_progress: bool | None = None) -> SweepSummary:
    """Run the runs not yet done with `executor` (entered only if there are any), store their rows
    as they come and return the tally. `show_progress` None shows the progress bar on a terminal
    only."""
    start = time.perf_counter()
    datasets = list(dict.fromkeys(run.dataset for run in runs))
    stores = {path: ResultStore(path, flush_rows, flush_interval_s) for path in datasets}
    summary = SweepSummary(grid_points=len(runs), datasets=datasets)
    todo = _to_run(runs, stores, summary)
    rss_setting = os.environ.get(RSS_EVERY_ENV, "")
    rss_every = int(rss_setting) if rss_setting.isdigit() else 0
    if todo:
        try:
            with sigterm_as_interrupt(), executor, contextlib.closing(executor.results(todo)) as finished, \
                    ProgressBar(len(todo), progress_file, show_progress) as bar:
                try:
                    for item in finished:
                        if item is None:  # nothing finished lately: write what waits, if it is time
                            for store in stores.values():
                                store.flush_if_due()
                            continue
                        run, result = item
                        rows = run.rows(result)
                        with interrupts_deferred():  # stored and counted together, never half
                            stores[run.dataset].append(rows)
                            summary.record(rows["runs"][0])
                        bar.update(rows["runs"][0]["status"])
                        if rss_every and summary.ran % rss_every == 0:
                            rss, peak = _memory_mib()
                            print(f"rss: {summary.ran} runs, {rss:.1f} MiB now, peak {peak:.1f} MiB",
                                  file=sys.stderr, flush=True)
                finally:  # before the executor stops: nothing finished is lost
                    with interrupts_deferred():
                        for store in stores.values():
                            store.flush()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM, also while Ray starts or stops
            summary.interrupted = True
    summary.wall_s = time.perf_counter() - start
    return summary
