"""Chakra execution traces: read with netsweep's own description of Chakra's schema, replayed rank by
rank; the round trip from ASTRA-sim 1.0 text through Chakra's own converter (its output is kept in
tests/chakra_traces/, written by the script there); errors naming the file and the node.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.workload.chakra import _messages, trace_files  # _messages: the file's length-delimited messages
from engine.workload.chakra_schema import COLLECTIVE_COMM_TYPES, NODE_TYPES, AttributeProto, GlobalMetadata, Node

ASTRA = "bundled:astra-sim-1.0/"
CONVERTED = Path(__file__).parent / "chakra_traces"  # Chakra's converter's output (tests/chakra_traces/convert.py)
NODE_TYPE = {name: number for number, name in NODE_TYPES.items()}
COMM_TYPE = {name: number for number, name in COLLECTIVE_COMM_TYPES.items()}
NETWORK = {"topology": "switch", "link_gbps": 100, "link_latency_us": 1}


def run(workload: dict, npus: int = 4, backend: str = "analytical", **network) -> dict:
    return engine.run({"engine": {"backend": backend}, "network": {**NETWORK, "npus": npus, **network},
                       "system": {"endpoint_delay_ns": 0}, "workload": workload})


def node(node_id: int, kind: str, name: str = "", deps: tuple[int, ...] = (), duration: int = 0,
         **attributes) -> Node:
    built = Node(id=node_id, name=name or f"n{node_id}", type=NODE_TYPE[kind], duration_micros=duration,
                 data_deps=list(deps))
    for key, value in attributes.items():
        if isinstance(value, bool) or (isinstance(value, list) and value and isinstance(value[0], bool)):
            built.attr.append(AttributeProto(name=key, bool_list={"values": value}))
        elif isinstance(value, str):
            built.attr.append(AttributeProto(name=key, string_val=value))
        else:
            built.attr.append(AttributeProto(name=key, int64_val=value))
    return built


def varint(value: int) -> bytes:
    """Base-128 varint: 7 bits a byte, least significant first, the high bit set on all but the last."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(file, message) -> None:
    """Append one length-delimited message, as Chakra's tools write them: its length, then its bytes."""
    data = message.SerializeToString()
    file.write(varint(len(data)) + data)


def write_trace(folder: Path, per_rank: list[list[Node]], prefix: str = "trace") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, nodes in enumerate(per_rank):
        with open(folder / f"{prefix}.{rank}.et", "wb") as file:
            encode(file, GlobalMetadata(version="0.0.4"))
            for item in nodes:
                encode(file, item)
    return str(folder / prefix)


def coll(node_id: int, op: str, size: int, deps: tuple[int, ...] = (), **attributes) -> Node:
    return node(node_id, "COMM_COLL_NODE", deps=deps, comm_type=COMM_TYPE[op], comm_size=size, **attributes)


# -- reading and replaying ---------------------------------------------------------------------


def test_compute_durations_follow_the_unit(tmp_path):
    # one compute node of 7 units per rank: 7 us, 7 ns, or 7 cycles of 2.5 ns
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=7)]] * 2)
    for unit, expected_s in (("us", 7e-6), ("ns", 7e-9), ("cycles", 17.5e-9)):
        row = run({"type": "chakra", "path": path, "duration_unit": unit, "cycle_ns": 2.5}, npus=2)["runs"][0]
        assert row["status"] == "ok" and row["iteration_time_s"] == pytest.approx(expected_s, rel=1e-12)
        assert row["compute_s"] == pytest.approx(expected_s, rel=1e-12)


def test_every_npu_follows_its_own_file(tmp_path):
    # Asymmetric: rank 0 computes 10 us, then all-reduces; rank 1 computes 2 us. The all-reduce starts
    # when the last member reaches it (rank 0 at 10 us); rank 1 then computes 3 us more, rank 0 nothing.
    path = write_trace(tmp_path, [
        [node(0, "COMP_NODE", duration=10), coll(1, "ALL_REDUCE", 65536, deps=(0,))],
        [node(0, "COMP_NODE", duration=2), coll(1, "ALL_REDUCE", 65536, deps=(0,)),
         node(2, "COMP_NODE", duration=3, deps=(1,))],
    ])
    rows = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=2)
    (record,) = rows["collectives"]
    assert record["start_s"] == pytest.approx(10e-6, rel=1e-12) and record["bytes"] == 65536
    run_row = rows["runs"][0]
    assert run_row["iteration_time_s"] == pytest.approx(record["end_s"] + 3e-6, rel=1e-9)
    assert run_row["compute_s"] == pytest.approx((10e-6 + 5e-6) / 2, rel=1e-12)  # mean over the NPUs
    # compute and exposed communication add up to the iteration, as for the training loop
    assert run_row["compute_s"] + run_row["exposed_comm_s"] == pytest.approx(run_row["iteration_time_s"], rel=1e-9)
    # rank 1 waited from 2 us, rank 0 from 10 us, for the collective's end: the mean is exposed_s
    assert record["exposed_s"] == pytest.approx(record["end_s"] - (2e-6 + 10e-6) / 2, rel=1e-6)


def test_an_npu_computes_one_node_at_a_time(tmp_path):
    # two independent compute nodes of 4 us each on one NPU: 8 us, not 4
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=4), node(1, "COMP_NODE", duration=4)]] * 2)
    row = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=2)["runs"][0]
    assert row["iteration_time_s"] == pytest.approx(8e-6, rel=1e-12)


def test_send_and_receive_match_by_tag(tmp_path):
    # rank 0 sends 1 MB to rank 1 (tag 5); rank 1 receives it, then computes 1 us. On the analytical
    # backend one message alone takes latency + wire bytes / rate (the flows table has it).
    path = write_trace(tmp_path, [
        [node(0, "COMM_SEND_NODE", comm_dst=1, comm_size=1_000_000, comm_tag=5)],
        [node(0, "COMM_RECV_NODE", comm_src=0, comm_size=1_000_000, comm_tag=5),
         node(1, "COMP_NODE", duration=1, deps=(0,))],
    ])
    rows = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=2)
    (flow,) = rows["flows"]
    assert (flow["src"], flow["dst"], flow["bytes"]) == (0, 1, 1_000_000)
    assert rows["runs"][0]["iteration_time_s"] == pytest.approx(flow["end_s"] + 1e-6, rel=1e-9)
    # 1,000,000 bytes in 691 segments of 1,448 (TCP timestamps on: MSS 1460 less the 12-byte option)
    # with 52 header bytes each, at 100 Gb/s: 82.87456 us, plus 2 hops of 1 us and one 1,500-byte
    # packet's store-and-forward (0.12 us)
    assert -(-1_000_000 // 1448) == 691
    assert flow["fct_s"] == pytest.approx((1_000_000 + 691 * 52) * 8 / 100e9 + 2e-6 + 1500 * 8 / 100e9, rel=1e-6)
    alpha_beta = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=2, backend="alpha_beta")
    assert alpha_beta["runs"][0]["iteration_time_s"] == pytest.approx(rows["runs"][0]["iteration_time_s"], rel=1e-6)


def test_process_groups_run_side_by_side(tmp_path):
    # 4 NPUs: ranks {0, 1} all-reduce on group "a", ranks {2, 3} on group "b", at the same time; each
    # takes as long as one all-reduce of 2 NPUs alone, and every message stays in its group
    pair = [coll(0, "ALL_REDUCE", 1 << 20, pg_name="a")]
    other = [coll(0, "ALL_REDUCE", 1 << 20, pg_name="b")]
    path = write_trace(tmp_path / "groups", [pair, pair, other, other])
    rows = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=4)
    assert all((f["src"] < 2) == (f["dst"] < 2) for f in rows["flows"])
    a, b = rows["collectives"]
    assert a["start_s"] == b["start_s"] == 0 and a["duration_s"] == pytest.approx(b["duration_s"], rel=1e-9)
    alone = run({"type": "collective", "op": "all_reduce", "bytes": 1 << 20, "iterations": 1}, npus=2)
    assert a["duration_s"] == pytest.approx(alone["collectives"][0]["duration_s"], rel=1e-9)


def test_involved_dim_picks_the_dimensions_of_the_network(tmp_path):
    # hierarchical, 2 nodes of 2 NPUs: involved_dim [true, false] keeps the all-reduce within nodes,
    # [false, true] across them, [false, false] issues nothing
    results = {}
    for dims in ([True, False], [False, True], [False, False]):
        path = write_trace(tmp_path / str(dims), [[coll(0, "ALL_REDUCE", 4096, involved_dim=dims)]] * 4)
        results[tuple(dims)] = run({"type": "chakra", "path": path, "duration_unit": "us"}, npus=4,
                                   topology="hierarchical", npus_per_node=2, scaleup_gbps=400, scaleup_latency_us=0.5)
    within = results[(True, False)]["flows"]
    across = results[(False, True)]["flows"]
    assert within and all(f["src"] // 2 == f["dst"] // 2 for f in within)
    assert across and all(f["src"] % 2 == f["dst"] % 2 for f in across)
    # ring all-reduce on 2 NPUs: each sends 2 (p-1)/p x 4,096 = 4,096 bytes
    assert sum(f["bytes"] for f in within) == sum(f["bytes"] for f in across) == 4 * 4096
    assert results[(False, False)]["collectives"] == [] and results[(False, False)]["runs"][0]["status"] == "ok"


def test_iterations_replay_the_trace(tmp_path):
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=3), coll(1, "ALL_GATHER", 8192, deps=(0,))]] * 4)
    rows = run({"type": "chakra", "path": path, "duration_unit": "us", "iterations": 3})
    assert rows["runs"][0]["iterations_done"] == 3
    assert [c["iteration"] for c in rows["collectives"]] == [0, 1, 2]
    starts = [c["start_s"] for c in rows["collectives"]]
    period = starts[1] - starts[0]
    assert starts[2] - starts[1] == pytest.approx(period, rel=1e-9)
    assert rows["runs"][0]["iteration_time_s"] == pytest.approx(period, rel=1e-9)


# -- round trip: ASTRA-sim 1.0 text -> chakra_converter Text -> trace ----------------------------------

# A tiny file of each type the converter takes (tests/chakra_traces/<type>.txt; compute in cycles). In
# HYBRID_DLRM_ENHANCED the bottom MLP hides both all-to-alls (see test_round_trip_of_the_bundled_dlrm
# for when not).
TINY = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM_ENHANCED")
# What the two must agree on: ASTRA-sim 1.0's text names the dimensions of each pass, Chakra's text
# converter writes no involved_dim, so a trace runs every collective over the whole network. On one
# switch that is the same for MODEL (every pass over all dimensions); HYBRID_DATA_MODEL keeps its model
# passes on dimension 0 (the whole switch) but has no dimension 1 for its weight gradients, and
# HYBRID_MODEL_DATA the reverse: their traces are checked with the involved_dim ASTRA-sim 2.0 reads added.
DIMENSIONS_1D = {"HYBRID_DATA_MODEL": {"fwd": [True, False], "ig": [True, False], "wg": [False, True]},
                 "HYBRID_MODEL_DATA": {"fwd": [False, True], "ig": [False, True], "wg": [True, False]}}


def converted(source: str, npus: int, passes: int = 1) -> str:
    """The prefix of `source` (a text's name without .txt) as Chakra's own converter (the library behind
    `chakra_converter Text`) wrote it for `npus` NPUs and `passes` passes."""
    prefix = CONVERTED / source / f"{npus}npus_{passes}pass" / source
    assert Path(f"{prefix}.{npus - 1}.et").is_file(), f"{prefix}: run tests/chakra_traces/convert.py"
    return str(prefix)


def add_involved_dims(prefix: str, npus: int, dims: dict[str, list[bool]], out: Path) -> str:
    """A copy in `out` of the converter's output where each collective has the involved_dim of its
    pass (which the converter leaves out), the attribute ASTRA-sim 2.0 reads. A collective's pass is
    that of the compute node it depends on (COMP_NODE_<layer>_FWD, _BWD_IG or _BWD_WG)."""
    passes = {"FWD": "fwd", "BWD_IG": "ig", "BWD_WG": "wg"}
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        file = Path(f"{prefix}.{rank}.et")
        messages = _messages(file.read_bytes(), file)
        nodes = [Node.FromString(raw) for _, raw in messages[1:]]
        names = {item.id: item.name for item in nodes}
        with open(out / file.name, "wb") as copy:
            encode(copy, GlobalMetadata.FromString(messages[0][1]))
            for item in nodes:
                if item.type == NODE_TYPE["COMM_COLL_NODE"]:
                    (parent,) = [names[d] for d in item.data_deps]
                    kind = next(kind for suffix, kind in passes.items() if parent.endswith("_" + suffix))
                    item.attr.append(AttributeProto(name="involved_dim", bool_list={"values": dims[kind]}))
                encode(copy, item)
    return str(out / Path(prefix).name)


def compare(text_rows: dict, trace_rows: dict, tolerance: float = 1e-3) -> None:
    """Same compute, same bytes per collective, same iteration time (within `tolerance`)."""
    text, trace = text_rows["runs"][0], trace_rows["runs"][0]
    assert text["status"] == trace["status"] == "ok"
    assert trace["compute_s"] == pytest.approx(text["compute_s"], rel=1e-12)
    assert sorted((c["op"], c["bytes"]) for c in trace_rows["collectives"]) == \
        sorted((c["op"], c["bytes"]) for c in text_rows["collectives"])
    assert trace["iteration_time_s"] == pytest.approx(text["iteration_time_s"], rel=tolerance)


@pytest.mark.parametrize("parallelism", sorted(TINY))
@pytest.mark.parametrize("npus", [2, 4])
def test_round_trip_of_tiny_files(parallelism, npus, tmp_path):
    text = CONVERTED / f"{parallelism}.txt"
    prefix = converted(parallelism, npus)
    if parallelism in DIMENSIONS_1D:
        prefix = add_involved_dims(prefix, npus, DIMENSIONS_1D[parallelism], tmp_path)
    text_rows = run({"type": "astra", "path": str(text), "iterations": 1, "cycle_ns": 1.0}, npus=npus)
    trace_rows = run({"type": "chakra", "path": prefix, "duration_unit": "cycles", "cycle_ns": 1.0}, npus=npus)
    compare(text_rows, trace_rows)


def test_without_involved_dim_a_converted_hybrid_runs_every_pass_over_the_whole_network():
    # what the converter alone gives: HYBRID_DATA_MODEL's weight-gradient all-reduces, which ASTRA-sim
    # 1.0 runs on dimension 1 (none on a switch), become all-reduces over all 4 NPUs
    text = CONVERTED / "HYBRID_DATA_MODEL.txt"
    prefix = converted("HYBRID_DATA_MODEL", 4)
    trace_rows = run({"type": "chakra", "path": prefix, "duration_unit": "cycles"})
    text_rows = run({"type": "astra", "path": str(text), "iterations": 1, "cycle_ns": 1.0})
    extra = sorted(c["bytes"] for c in trace_rows["collectives"])
    for c in text_rows["collectives"]:
        extra.remove(c["bytes"])
    assert extra == [16384, 262144]  # the two weight gradients


@pytest.mark.parametrize("name", ["microAllReduce.txt", "microAllToAll.txt"])
@pytest.mark.parametrize("npus", [2, 4, 8])
def test_round_trip_of_the_bundled_micro_workloads(name, npus):
    # Chakra's converter writes only MICRO's collective (as ASTRA-sim 1.0's iterate_micro_benchmark
    # runs no compute); netsweep's text loop also computes the file's forward and weight-gradient
    # cycles (5 + 5) before it. Bytes agree; the trace's iteration is the text's minus its compute.
    prefix = converted(name.removesuffix(".txt"), npus)
    text = run({"type": "astra", "path": ASTRA + name, "iterations": 1, "cycle_ns": 1.0}, npus=npus)
    trace = run({"type": "chakra", "path": prefix, "duration_unit": "cycles"}, npus=npus)
    assert text["runs"][0]["compute_s"] == pytest.approx(10e-9, rel=1e-12) and trace["runs"][0]["compute_s"] == 0
    assert [(c["op"], c["bytes"]) for c in trace["collectives"]] == [(c["op"], c["bytes"]) for c in text["collectives"]]
    assert trace["runs"][0]["iteration_time_s"] == pytest.approx(text["runs"][0]["iteration_time_s"] - 10e-9,
                                                                 rel=1e-3)


@pytest.mark.parametrize("npus", [4, 8])
@pytest.mark.parametrize("passes", [1, 2])
def test_round_trip_of_the_bundled_dlrm(npus, passes):
    """The study's workload. One difference lies in the converter: ASTRA-sim 1.0 waits for the
    forward all-to-all after the last bottom-MLP layer's forward compute (F = 800 cycles), Chakra's
    converter makes that compute wait for it. Where the all-to-all ends at E, after that layer
    could start at S, the trace takes min(E - S, F) longer (none if it ends before S). At 100 ns a
    cycle the bottom MLP hides the all-to-all and the two agree within 0.1 %; at 1 ns the gap is
    computed by hand from the text run's own rows."""
    dlrm = ASTRA + "DLRM_HybridParallel.txt"
    prefix = converted("DLRM_HybridParallel", npus, passes)
    for cycle_ns in (100.0, 1.0):
        text_rows = run({"type": "astra", "path": dlrm, "iterations": passes, "cycle_ns": cycle_ns}, npus=npus)
        trace_rows = run({"type": "chakra", "path": prefix, "duration_unit": "cycles", "cycle_ns": cycle_ns},
                         npus=npus)
        text, trace = text_rows["runs"][0], trace_rows["runs"][0]
        # the trace is all passes in one replay: its iteration is the text's whole run
        assert trace["compute_s"] == pytest.approx(passes * text["compute_s"], rel=1e-12)
        assert sorted((c["op"], c["bytes"]) for c in trace_rows["collectives"]) == \
            sorted((c["op"], c["bytes"]) for c in text_rows["collectives"])
        gap_s = 0.0
        if cycle_ns == 1.0 and passes == 1:
            forward_a2a = min((c for c in text_rows["collectives"] if c["op"] == "all_to_all"),
                              key=lambda c: c["start_s"])
            start_s = sum(r["fwd_compute_s"] for r in text_rows["layers"][:4])  # layers 0..3, nothing waited
            gap_s = min(max(forward_a2a["end_s"] - start_s, 0.0), 800e-9)
            assert gap_s > 0  # this case shows the difference
        if cycle_ns == 100.0 or passes == 1:
            assert trace["iteration_time_s"] == pytest.approx(passes * text["iteration_time_s"] + gap_s, rel=1e-3)


def test_the_schema_names_every_field_chakra_writes():
    # Decoded with netsweep's description of the schema, with the fields it does not name dropped, and
    # written again: every file of Chakra's converter (the bundled trace and tests/chakra_traces/)
    # comes back byte for byte, so the description holds every field there, with Chakra's numbers
    # and types (and the test's writer frames messages as Chakra's tools do).
    files = sorted(CONVERTED.glob("*/*/*.et")) + trace_files("bundled:astra-sim-1.0-chakra/DLRM_HybridParallel")
    assert len(files) == 82 + 16
    for file in files:
        data = file.read_bytes()
        messages = _messages(data, file)
        written = io.BytesIO()
        for index, (_, raw) in enumerate(messages):
            message = (Node if index else GlobalMetadata).FromString(raw)
            message.DiscardUnknownFields()
            encode(written, message)
        assert written.getvalue() == data, file


def test_the_chakra_preset_is_the_converted_study_workload():
    # the bundled trace (Chakra's converter, 16 NPUs, one pass) against the text on the default network
    base = {"engine": {"backend": "analytical"}, "network": {**NETWORK, "npus": 16}}
    trace = engine.run({**base, "workload": {"type": "chakra",
                                             "path": "bundled:astra-sim-1.0-chakra/DLRM_HybridParallel",
                                             "duration_unit": "cycles", "cycle_ns": 100.0, "iterations": 1}})
    text = engine.run({**base, "workload": {"type": "astra", "path": ASTRA + "DLRM_HybridParallel.txt",
                                            "cycle_ns": 100.0, "iterations": 1}})
    compare(text, trace)
    # the #207 trap: read as the schema's microseconds, the same numbers are 1000x the compute
    micros = engine.run({**base, "workload": {"type": "chakra",
                                              "path": "bundled:astra-sim-1.0-chakra/DLRM_HybridParallel",
                                              "duration_unit": "us", "iterations": 1}})
    assert micros["runs"][0]["compute_s"] == pytest.approx(text["runs"][0]["compute_s"] * 10, rel=1e-12)


# -- errors: a ConfigError naming the file and the node; exit 2, one line, nothing written --------------


def _error(path: str, npus: int = 2) -> str:
    config = engine.load_config({"network": {**NETWORK, "npus": npus},
                                 "workload": {"type": "chakra", "path": path, "duration_unit": "us"}})
    with pytest.raises(engine.ConfigError) as caught:
        engine.check_workload_files(config)
    return str(caught.value)


def test_rank_count_must_match_the_network(tmp_path):
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=1)]] * 3)
    message = _error(path, npus=4)
    assert message.startswith("network.npus=4 is not valid") and "3 (trace.0.et .. trace.2.et)" in message


def test_a_missing_rank_file(tmp_path):
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=1)]] * 3)
    os.remove(f"{path}.1.et")
    assert f"{path}.1.et is missing" in _error(path, npus=3)


@pytest.mark.parametrize(("nodes", "expected"), [
    ([node(0, "MEM_LOAD_NODE")], "node 0 (n0): node type MEM_LOAD_NODE is not one netsweep runs"),
    ([coll(3, "BROADCAST", 8)], "node 3 (n3): collective comm_type 'BROADCAST' is not one of ALL_REDUCE"),
    ([node(0, "COMP_NODE", deps=(1,)), node(1, "COMP_NODE", deps=(2,)), node(2, "COMP_NODE", deps=(0,))],
     "a dependency cycle runs through it"),
    ([node(0, "COMP_NODE", deps=(9,))], "node 0 (n0): its dependency 9 is not a node of this file"),
    ([node(0, "COMM_SEND_NODE", comm_dst=5, comm_size=8)], "node 0 (n0): comm_dst must be another NPU in 0..1"),
])
def test_bad_nodes_are_named(tmp_path, nodes, expected):
    path = write_trace(tmp_path, [nodes, [node(0, "COMP_NODE", duration=1)]])
    message = _error(path)
    assert f"{path}.0.et" in message and expected in message


def test_corrupt_and_truncated_files(tmp_path):
    path = write_trace(tmp_path, [[node(0, "COMP_NODE", duration=1), node(1, "COMP_NODE", duration=1)]] * 2)
    data = Path(f"{path}.0.et").read_bytes()
    Path(f"{path}.0.et").write_bytes(data[:-3])
    assert "truncated file" in _error(path)
    Path(f"{path}.0.et").write_bytes(data[:-30] + b"\xff" * 30)
    assert f"{path}.0.et" in _error(path)
    Path(f"{path}.0.et").write_bytes(b"")
    assert "the file is empty" in _error(path)


def test_unmatched_collectives_and_messages(tmp_path):
    path = write_trace(tmp_path / "a", [[coll(0, "ALL_REDUCE", 8)], [coll(0, "ALL_REDUCE", 16)]])
    assert "collective 0 of process group of all NPUs is all_reduce of 16 bytes" in _error(path)
    path = write_trace(tmp_path / "b", [[node(0, "COMM_SEND_NODE", comm_dst=1, comm_size=8)],
                                        [node(0, "COMP_NODE", duration=1)]])
    assert "1 more sends" in _error(path)


def test_a_bad_trace_exits_2_with_one_line_and_writes_nothing(tmp_path):
    path = write_trace(tmp_path / "bad", [[node(0, "COMP_NODE", deps=(0,))]] * 16)
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "sweep", "workload=chakra", f"workload.path={path}",
                           f"results_dir={results}"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: workload.path=") and "node 0 (n0)" in lines[0]
    assert "dependency cycle" in lines[0] and not results.exists()


def test_the_memory_estimate_counts_the_trace_messages(tmp_path):
    # one ring all-reduce of 4 NPUs: 2 (p - 1) steps of p messages = 24, in 2 chunks: 48; one send: 49
    path = write_trace(tmp_path, [[coll(0, "ALL_REDUCE", 4096), node(1, "COMM_SEND_NODE", comm_dst=1, comm_size=8)],
                                  [coll(0, "ALL_REDUCE", 4096), node(1, "COMM_RECV_NODE", comm_src=0, comm_size=8)],
                                  [coll(0, "ALL_REDUCE", 4096)], [coll(0, "ALL_REDUCE", 4096)]])
    config = engine.load_config({"network": {**NETWORK, "npus": 4}, "system": {"splits": 2},
                                 "workload": {"type": "chakra", "path": path, "iterations": 3}})
    from engine.memory import estimate_messages
    assert estimate_messages(config) == 3 * 49
