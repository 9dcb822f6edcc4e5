"""`python -m sweep.report results/<name>`: a dataset told in a Markdown summary and PNG plots.

The report reads every table of the dataset with `load_runs` / `load_table` (each run once: its
newest attempt), finds what was swept and writes into `<dataset>/report/`:

- `summary.md`: runs and their status, the presets and settings they share, the swept axes, the
  fastest and slowest configurations, iteration time (training) or flow completion time (`flows`)
  per value of every swept axis, failed runs with the command that reproduces them;
- `iteration_time_vs_<axis>.png` (training) and `flow_completion_vs_<axis>.png` (`flows`), one per
  swept axis, panels and series split by the other axes;
- `time_breakdown.png` (training): compute, exposed all-to-all and exposed all-reduce per iteration;
- `message_time_cdf.png` (training) and `fct_cdf.png` (`flows`): completion-time distributions;
- `retransmits_timeouts.png`: TCP retransmissions and timeouts of packet-backend runs (if any);
- for a two-fidelity dataset, its section, `two_fidelity_scatter.png`, `calibration_error.png` and
  `points.csv`.

One module per job: `reading` (the tables), `axes` (what was swept, labels in words), `plots`,
`text` (the Markdown), `two_fidelity` (its section), `build` (the files and the command).
"""

from .axes import Axis, swept_axes
from .build import POINTS_FILE, REPORT_DIR, SUMMARY_FILE, build_report, main, print_report
from .reading import Dataset, ReportError, read_dataset

__all__ = ["Axis", "Dataset", "POINTS_FILE", "REPORT_DIR", "ReportError", "SUMMARY_FILE", "build_report", "main",
           "print_report", "read_dataset", "swept_axes"]
