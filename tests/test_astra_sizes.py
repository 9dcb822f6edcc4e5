"""ASTRA-sim's size conventions, read from its text workloads and from Chakra traces (docs/workloads.md).

ASTRA-sim (1.0: astra-sim/system/collective/Ring.cc, HalvingDoubling.cc, AllToAll.cc; 2: the same
constructors under astraccl/) takes a collective's size as `data_size` and sends, per NPU of a group
of p:
- ALLREDUCE S (each NPU's buffer): messages of S/p, 2 (p-1) of them on a ring: 2 (p-1) S/p;
- REDUCESCATTER S (each NPU's input): messages of S/p, p-1 of them: (p-1) S/p;
- ALLGATHER S (each NPU's input, final_data_size = S p): messages of S, p-1 of them: (p-1) S;
- ALLTOALL S (each NPU's buffer): S/p to each of the p-1 others: (p-1) S/p.
netsweep's system layer sizes a collective by each NPU's full vector (the gathered result for an
all-gather), so a reader multiplies an all-gather's size by the group's NPUs and leaves the others.
The expected bytes below are those sums, computed by hand; they are what ASTRA-sim moves too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chakra import coll, write_trace

import engine

S = 65536  # ASTRA-sim's size of every collective below
P = 8  # NPUs
# bytes each NPU sends, per ASTRA-sim's Ring.cc with p = 8: hand sums of the module docstring
SENT_PER_NPU = {
    "ALLREDUCE": 2 * (P - 1) * S // P,  # 14 x 8,192 = 114,688
    "REDUCESCATTER": (P - 1) * S // P,  # 7 x 8,192 = 57,344
    "ALLGATHER": (P - 1) * S,  # 7 x 65,536 = 458,752
    "ALLTOALL": (P - 1) * S // P,  # 7 x 8,192 = 57,344
}
# the `collectives` table's `bytes` (the system layer's size): the gathered P x S for an all-gather
SYSTEM_BYTES = {"ALLREDUCE": S, "REDUCESCATTER": S, "ALLGATHER": P * S, "ALLTOALL": S}
OPS = {"ALLREDUCE": "all_reduce", "REDUCESCATTER": "reduce_scatter", "ALLGATHER": "all_gather",
       "ALLTOALL": "all_to_all"}
CHAKRA_TYPE = {"ALLREDUCE": "ALL_REDUCE", "REDUCESCATTER": "REDUCE_SCATTER", "ALLGATHER": "ALL_GATHER",
               "ALLTOALL": "ALL_TO_ALL"}
HIERARCHICAL = {"topology": "hierarchical", "npus_per_node": 2, "scaleup_gbps": 400, "scaleup_latency_us": 0.5}


def run(workload: dict, npus: int = P, system: dict | None = None, **network) -> dict:
    return engine.run({"engine": {"backend": "analytical"},
                       "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1,
                                   **network},
                       "system": {"endpoint_delay_ns": 0, "splits": 1, **(system or {})}, "workload": workload})


def sent_by(rows: dict) -> dict[int, int]:
    """Bytes of the messages each NPU sent."""
    sent: dict[int, int] = {}
    for flow in rows["flows"]:
        sent[flow["src"]] = sent.get(flow["src"], 0) + flow["bytes"]
    return sent


def micro_file(tmp_path: Path, comm: str, size: int = S) -> str:
    path = tmp_path / f"micro_{comm}.txt"
    path.write_text(f"MICRO\n1\nc -1 0 NONE 0 0 NONE 0 0 {comm} {size} 0\n")
    return str(path)


# ring for the three that have one; all-to-all's default, direct, sends the same bytes as ASTRA-sim's direct
@pytest.mark.parametrize("comm", sorted(SENT_PER_NPU))
def test_text_workload_sizes_mean_what_astra_sim_means(comm, tmp_path):
    rows = run({"type": "astra", "path": micro_file(tmp_path, comm), "iterations": 1, "cycle_ns": 1.0})
    (collective,) = rows["collectives"]
    assert (collective["op"], collective["bytes"]) == (OPS[comm], SYSTEM_BYTES[comm])
    assert sent_by(rows) == {npu: SENT_PER_NPU[comm] for npu in range(P)}


@pytest.mark.parametrize("comm", sorted(SENT_PER_NPU))
def test_chakra_comm_size_means_what_astra_sim_2_means(comm, tmp_path):
    path = write_trace(tmp_path / comm, [[coll(0, CHAKRA_TYPE[comm], S)]] * P)
    rows = run({"type": "chakra", "path": path, "duration_unit": "us"})
    (collective,) = rows["collectives"]
    assert (collective["op"], collective["bytes"]) == (OPS[comm], SYSTEM_BYTES[comm])
    assert sent_by(rows) == {npu: SENT_PER_NPU[comm] for npu in range(P)}


@pytest.mark.parametrize("algorithm", ["halving_doubling", "direct"])
def test_all_gather_input_is_sent_p_minus_1_times_by_every_algorithm(algorithm, tmp_path):
    # ASTRA-sim's halving-doubling all-gather (HalvingDoubling.cc) sends S, 2S, 4S: 7 S on 8 NPUs; its
    # direct one (AllToAll.cc, msg_size = S) S to each of the 7 others: the ring's 7 S both ways
    rows = run({"type": "astra", "path": micro_file(tmp_path, "ALLGATHER"), "iterations": 1, "cycle_ns": 1.0},
               system={"all_gather": algorithm})
    assert sent_by(rows) == {npu: (P - 1) * S for npu in range(P)}


def test_chakra_all_gather_of_a_process_group_gathers_over_the_group(tmp_path):
    # 4 NPUs, groups {0, 1} and {2, 3}: p = 2, so each NPU sends its S once (p - 1 = 1) and the
    # collective's gathered result is 2 S
    pair = [coll(0, "ALL_GATHER", S, pg_name="a")]
    other = [coll(0, "ALL_GATHER", S, pg_name="b")]
    rows = run({"type": "chakra", "path": write_trace(tmp_path / "groups", [pair, pair, other, other]),
                "duration_unit": "us"}, npus=4)
    assert [c["bytes"] for c in rows["collectives"]] == [2 * S, 2 * S]
    assert sent_by(rows) == {npu: S for npu in range(4)}


@pytest.mark.parametrize("involved, group", [([True, False], 2), ([True, True], 4)])
def test_chakra_all_gather_over_involved_dimensions(involved, group, tmp_path):
    # hierarchical, 2 nodes of 2 NPUs: within a node p = 2 (S sent once, 2 S gathered); over both
    # dimensions p = 4 (4 S gathered): across nodes S is sent, then within nodes the 2 S gathered so
    # far (the last dimension first, as ASTRA-sim's Sys::generate_collective orders an all-gather):
    # each NPU sends (p - 1) S = 3 S
    path = write_trace(tmp_path / str(group), [[coll(0, "ALL_GATHER", S, involved_dim=involved)]] * 4)
    rows = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=4, **HIERARCHICAL)
    assert [c["bytes"] for c in rows["collectives"]] == [group * S]
    assert sent_by(rows) == {npu: (group - 1) * S for npu in range(4)}


def test_text_all_gather_over_both_dimensions_of_a_hierarchical_network(tmp_path):
    # MICRO runs its collective over every dimension: 2 x 2 NPUs gather 4 S, each sending 3 S
    rows = run({"type": "astra", "path": micro_file(tmp_path, "ALLGATHER"), "iterations": 1, "cycle_ns": 1.0},
               npus=4, **HIERARCHICAL)
    assert [c["bytes"] for c in rows["collectives"]] == [4 * S]
    assert sent_by(rows) == {npu: 3 * S for npu in range(4)}
