"""What a sweep tells its user: a live progress bar while it runs, a summary table at the end.

`SweepSummary` tallies the runs of one sweep (grid points, runs skipped because they are already
done, the status of every run it ran, the failures with their repro commands); `ProgressBar` shows
runs done, failed, rate and ETA with tqdm (on a terminal; silent otherwise unless asked);
`format_summary` is the closing table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TextIO

from tqdm import tqdm

STATUSES = ("ok", "error", "timeout")  # every status a runs row can have


@dataclass
class SweepSummary:
    """The tally of one sweep."""

    grid_points: int
    datasets: list[Path]
    skipped: int = 0  # already done with status ok (or a repeat of another grid point)
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)  # runs rows of failed runs
    retried: int = 0  # runs Ray executed again because their worker process or node died
    wall_s: float = 0.0
    interrupted: bool = False

    @property
    def ran(self) -> int:
        """Runs this sweep ran to an end (any status)."""
        return sum(self.statuses.values())

    @property
    def failed(self) -> int:
        """Runs that did not end with status ok: `error` or `timeout`; a resume runs them again."""
        return self.ran - self.statuses["ok"]

    def add(self, other: SweepSummary) -> None:
        """Count another sweep of the same grid (a wave of a replicated sweep) into this one."""
        self.skipped += other.skipped
        self.statuses.update(other.statuses)
        self.failures += other.failures
        self.retried += other.retried
        self.wall_s += other.wall_s
        self.interrupted = self.interrupted or other.interrupted

    def record(self, runs_row: Mapping[str, Any]) -> None:
        """Count one finished run by the `runs` row it produced."""
        self.statuses[runs_row["status"]] += 1
        if (runs_row.get("attempt") or 0) > 0:
            self.retried += 1
        if runs_row["status"] != "ok":
            self.failures.append(dict(runs_row))


class ProgressBar:
    """A tqdm bar over the runs of a sweep: done / total, failed so far, runs per second, ETA.

    `enabled=None` shows it only on a terminal (no progress noise in logs and pipes)."""

    def __init__(self, total: int, file: TextIO | None = None, enabled: bool | None = None) -> None:
        self.failed = 0
        disable = None if enabled is None else not enabled  # tqdm: None = only on a terminal
        self._bar = tqdm(total=total, unit="run", desc="sweep", file=file, disable=disable,
                         dynamic_ncols=True, smoothing=0.05, mininterval=0.2, postfix={"failed": 0})

    def update(self, status: str) -> None:
        """One more run finished with `status`."""
        if status != "ok":
            self.failed += 1
            self._bar.set_postfix(failed=self.failed, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _last_line(text: Any) -> str:
    """The last line of an error (the exception and its message), for a one-line listing."""
    lines = str(text or "").strip().splitlines()
    return lines[-1] if lines else ""


def format_summary(summary: SweepSummary) -> str:
    """The closing table: where the rows went, runs by status, rate, and each failed run with the
    last line of its error and the command that reproduces it."""
    datasets = ", ".join(f"{path}/" for path in summary.datasets)
    rate = f" ({summary.ran / summary.wall_s:.1f} runs/s)" if summary.wall_s > 0 and summary.ran else ""
    lines = [
        f"sweep of {summary.grid_points} grid points -> {datasets}"
        + ("  (interrupted: run the same command again to resume)" if summary.interrupted else ""),
        f"  {'status':<10}{'runs':>8}",
        *(f"  {status:<10}{summary.statuses[status]:>8}" for status in STATUSES),
        *(f"  {status:<10}{count:>8}" for status, count in sorted(summary.statuses.items())
          if status not in STATUSES),
        f"  {'skipped':<10}{summary.skipped:>8}   already done with status ok",
        *([f"  {'retried':<10}{summary.retried:>8}   run again after their worker process or node died"]
          if summary.retried else []),
        f"  ran {summary.ran} in {summary.wall_s:.1f} s{rate}",
    ]
    if summary.failures:
        lines.append(f"failed runs ({len(summary.failures)}; the sweep run again retries them), "
                     "each with the command that reproduces it:")
        for row in summary.failures:
            lines.append(f"  {row['run_id']}  {row['status']:<8} {_last_line(row.get('error'))}")
            lines.append(f"    {row.get('repro')}")
    return "\n".join(lines)
