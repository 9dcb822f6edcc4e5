"""The summary benchmarks/validate_ns3.py writes: drop and timeout agreement counted over the cases
with losses only, and the same summary read back from its CSV (no simulation runs here)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _script():
    spec = importlib.util.spec_from_file_location("validate_ns3", BENCHMARKS / "validate_ns3.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(case: int, drops: tuple[int, int], timeouts: tuple[int, int]) -> list[dict]:
    """One shallow-buffer case on the four backends; (packet, ns3) drops and timeouts."""
    base = {"case": case, "workload": "collective", "op": "all_to_all", "bytes": 4096, "npus": 4,
            "topology": "switch", "buffer": "shallow", "cc": "newreno", "status": "ok", "time_s": 1e-3,
            "retransmits": 0, "ecn_marks": 0, "wall_s": 0.0}
    counted = {"packet": 0, "ns3": 1}
    return [{**base, "backend": backend,
             "drops": drops[counted[backend]] if backend in counted else None,
             "timeouts": timeouts[counted[backend]] if backend in counted else None}
            for backend in ("packet", "ns3", "analytical", "alpha_beta")]


def test_drops_and_timeouts_are_compared_over_the_cases_with_losses(tmp_path):
    # Case 0 loses nothing on either side: not counted. Case 1: drops |130 - 100| / 100 = 30 %
    # (within), timeouts |2 - 4| / 4 = 50 % (not). Case 2: drops |0 - 10| / 10 = 100 % (not),
    # timeouts 0 = 0 (within). So 2 cases with losses, 1 of 2 within 30 % for each counter.
    script = _script()
    rows = _rows(0, (0, 0), (0, 0)) + _rows(1, (130, 100), (2, 4)) + _rows(2, (0, 10), (0, 0))
    _, summary = script.summarise(rows)
    shallow = summary["shallow"]
    assert (shallow["cases"], shallow["lossy_cases"]) == (3, 2)
    assert (shallow["drops_within_30pct"], shallow["timeouts_within_30pct"]) == (1, 1)
    assert summary["deep"]["lossy_cases"] == 0
    # written as the script writes it and read back: the same summary, and its Markdown says it
    path = tmp_path / "validate.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=script.COLUMNS)
        writer.writeheader()
        writer.writerows({key: row.get(key) for key in script.COLUMNS} for row in rows)
    assert script.summarise(script.read_rows(path))[1] == summary
    script.write_summary(script.read_rows(path), tmp_path / "validate.md")
    assert "2 with losses: drops within 30 % in 1 of 2, timeouts within 30 % in 1 of 2" in \
        (tmp_path / "validate.md").read_text()
