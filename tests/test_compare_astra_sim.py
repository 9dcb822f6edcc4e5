"""The mapping of benchmarks/compare_astra_sim.py to ASTRA-sim 1.0's knobs (docs/validation-astra-sim.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "compare_astra_sim.py"
spec = importlib.util.spec_from_file_location("compare_astra_sim", SCRIPT)
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def test_bandwidth_is_in_gib_per_s():
    # ASTRA-sim 1.0's main.cc: bytes per ns = GiB/s x 2^30 / 10^9; 100 Gb/s = 12.5 bytes per ns
    assert compare.gib_per_s(100) * 2**30 / 1e9 == pytest.approx(12.5, rel=1e-12)
    assert compare.gib_per_s(100) == pytest.approx(11.641532, rel=1e-6)


def test_a_ring_has_two_links_of_half_the_rate():
    # HierarchicalTopology multiplies a Ring's bandwidth by its links count (and refuses 1 link), so a
    # message sees 2 x half = one netsweep link's 12.5 bytes per ns
    ring = compare.astra_network({"topology": "ring", "npus": 8})
    assert ring["links-count"] == [2] and ring["topologies-per-dim"] == ["Ring"]
    assert 2 * ring["link-bandwidth"][0] * 2**30 / 1e9 == pytest.approx(12.5, rel=1e-12)
    switch = compare.astra_network({"topology": "switch", "npus": 16})
    assert switch["links-count"] == [1] and switch["units-count"] == [16] and switch["link-latency"] == [1000.0]
    assert switch["hbm-scale"] == [0]  # no HBM time in ASTRA-sim's max(network, HBM)


def test_micro_files_carry_the_size_as_astra_sim_writes_it():
    # the update delay is 5 cycles, as ASTRA-sim's inputs/workload/microAllReduce.txt: a 0 schedules an
    # event at the current time, which its analytical backend's EventQueue.cc:20 asserts against
    case = {"case": "micro", "op": "ALLGATHER", "mib": 4}
    assert compare.workload_text(case) == "MICRO\n1\nc -1 0 NONE 0 0 NONE 0 0 ALLGATHER 4194304 5\n"


def test_ring_all_to_all_cases_use_astra_sims_ring():
    rows = [case for case in compare.cases(quick=False) if case["case"] == "ring_a2a"]
    assert len(rows) == 8 and {case["algorithms"]["all_to_all"] for case in rows} == {"ring"}
    assert "all-to-all-implementation: ring\n" in compare.astra_system(rows[0])
