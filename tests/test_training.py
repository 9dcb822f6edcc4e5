"""The training loop: ASTRA-sim 1.0 inputs, DLRM sizes and the overlap semantics of DESIGN.md."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine
from engine.workload.layers import dlrm_layers

DLRM_FILE = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"  # shipped in the package


def run_workload(workload: dict, backend: str = "analytical", npus: int = 16, **network) -> dict:
    return engine.run({
        "engine": {"backend": backend},
        "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1, **network},
        "system": {"endpoint_delay_ns": 0},
        "workload": workload,
    })


def write_workload(tmp_path: Path, text: str) -> str:
    path = tmp_path / "workload.txt"
    path.write_text(text)
    return str(path)


def test_dlrm_hybrid_parallel_file_compute_and_bytes():
    # DESIGN.md: per NPU and iteration, 51,378 cycles of compute (the embedding computes no input
    # gradient: 51,678 listed minus its 300), 3,191,808 bytes of weight-gradient all-reduce and
    # 98,304 bytes of embedding all-to-all forward and again backward.
    rows = run_workload({"type": "astra", "path": str(DLRM_FILE), "iterations": 2, "cycle_ns": 1.0})
    run = rows["runs"][0]
    assert run["status"] == "ok" and run["iterations_done"] == 2
    assert run["compute_s"] == pytest.approx(51_378e-9, rel=1e-12)
    for iteration in (0, 1):
        collectives = [c for c in rows["collectives"] if c["iteration"] == iteration]
        assert sum(c["bytes"] for c in collectives if c["op"] == "all_reduce") == 3_191_808
        assert sorted(c["bytes"] for c in collectives if c["op"] == "all_to_all") == [98_304, 98_304]
    # the layers table mirrors ASTRA-sim's EndToEnd breakdown: compute per pass adds up
    layers = [layer for layer in rows["layers"] if layer["iteration"] == 0]
    assert len(layers) == 8
    total = sum(layer["fwd_compute_s"] + layer["ig_compute_s"] + layer["wg_compute_s"] for layer in layers)
    assert total == pytest.approx(51_378e-9, rel=1e-12)


def test_iteration_time_is_compute_plus_exposed_communication():
    run = run_workload({"type": "astra", "path": str(DLRM_FILE), "iterations": 3})["runs"][0]
    assert run["iteration_time_s"] == pytest.approx(run["compute_s"] + run["exposed_comm_s"], rel=1e-12)


def test_overlap_hides_communication_behind_compute():
    # 100 ns per cycle makes compute 5.1 ms per iteration, far longer than the communication:
    # most of it hides, so exposed communication is well below the time collectives were in flight.
    run = run_workload({"type": "astra", "path": str(DLRM_FILE), "iterations": 2, "cycle_ns": 100.0})["runs"][0]
    assert 0 <= run["exposed_comm_s"] < 0.5 * run["comm_s"]


def test_without_compute_all_communication_is_exposed():
    # A collective microbenchmark has no compute: every instant of the iteration waits on the network.
    run = run_workload({"type": "collective", "op": "all_reduce", "bytes": 2**20, "iterations": 2})["runs"][0]
    assert run["compute_s"] == 0
    assert run["exposed_comm_s"] == pytest.approx(run["comm_s"], rel=1e-12)
    assert run["exposed_comm_s"] == pytest.approx(run["iteration_time_s"], rel=1e-12)


def test_data_parallel_weight_gradient_waits_for_the_next_forward_pass(tmp_path):
    # One layer: forward C = 1000 cycles, weight gradient W = 500 cycles, then an all-reduce of A
    # seconds issued without blocking. Iteration 1: C + W (the all-reduce runs on). Iteration 2:
    # its forward first waits the all-reduce out (A, exposed), then C + W, and as the last
    # iteration it waits for its own all-reduce (A again). Mean = (C + W + A + C + W + A) / 2.
    path = write_workload(tmp_path, "DATA\n1\nfc -1 1000 NONE 0 0 NONE 0 500 ALLREDUCE 1048576 0\n")
    rows = run_workload({"type": "astra", "path": path, "iterations": 2, "cycle_ns": 1.0})
    all_reduce_s = [c["duration_s"] for c in rows["collectives"]]
    assert len(all_reduce_s) == 2 and all_reduce_s[0] == pytest.approx(all_reduce_s[1])
    a, c_plus_w = all_reduce_s[0], 1500e-9
    assert rows["runs"][0]["iteration_time_s"] == pytest.approx((c_plus_w + a + c_plus_w + a) / 2, rel=1e-9)
    exposed = {row["iteration"]: row["wg_exposed_comm_s"] for row in rows["layers"]}
    assert exposed[0] == 0 and exposed[1] == pytest.approx(2 * a, rel=1e-9)


def _hybrid_embedding_exposure(tmp_path, bottom_cycles: int) -> tuple[float, float]:
    # Embedding (no compute) issues a forward all-to-all and the bottom MLP computes meanwhile; the
    # interaction after the last bottom layer waits for what is left of the all-to-all.
    path = write_workload(tmp_path, (
        "HYBRID_DLRM\n3\n"
        "embedding -1 0 ALLTOALL 1048576 0 ALLTOALL 1048576 0 NONE 0 0\n"
        f"mlp_bottom_0 -1 {bottom_cycles} NONE 0 0 NONE 0 0 NONE 0 0\n"
        "mlp_top_0 -1 0 NONE 0 0 NONE 0 0 NONE 0 0\n"))
    rows = run_workload({"type": "astra", "path": path, "iterations": 1, "cycle_ns": 1.0})
    forward_a2a = rows["collectives"][0]
    embedding = next(r for r in rows["layers"] if r["layer"] == "embedding")
    return forward_a2a["duration_s"], embedding["fwd_exposed_comm_s"]


def test_hybrid_forward_all_to_all_overlaps_the_bottom_mlp(tmp_path):
    duration, exposed = _hybrid_embedding_exposure(tmp_path, bottom_cycles=0)
    assert exposed == pytest.approx(duration, rel=1e-9)  # nothing to hide behind
    long_compute_cycles = 10 * round(duration * 1e9)
    duration, exposed = _hybrid_embedding_exposure(tmp_path, bottom_cycles=long_compute_cycles)
    assert exposed == 0  # fully hidden by the bottom MLP
    half = round(duration * 1e9 / 2)
    duration, exposed = _hybrid_embedding_exposure(tmp_path, bottom_cycles=half)
    assert exposed == pytest.approx(duration - half * 1e-9, rel=1e-6)


def test_dlrm_model_sizes_by_hand():
    # 4 tables x 16-dim embeddings, batch 32 per NPU, fp32: the all-to-all carries each NPU's batch
    # rows of every table: 32 x 4 x 16 x 4 = 8,192 bytes. Bottom MLP 13 -> 16 all-reduces
    # (13 x 16 + 16) x 4 = 896 bytes; the top MLP's input is the dot interaction 16 + 5 x 4 / 2 = 26.
    spec = dlrm_layers(num_tables=4, emb_dim=16, dense_features=13, bottom_mlp=[16], top_mlp=[8, 1],
                       batch_per_npu=32, dtype_bytes=4, npus=4, npu_tflops=1.0, hbm_gbps=1000.0)
    embedding, bottom, top0, top1 = spec.layers
    assert embedding.fwd_comm.op == "all_to_all" and embedding.fwd_comm.size_bytes == 8_192
    assert bottom.wg_comm.size_bytes == (13 * 16 + 16) * 4
    assert top0.wg_comm.size_bytes == (26 * 8 + 8) * 4 and top1.wg_comm.size_bytes == (8 * 1 + 1) * 4
    # roofline of the bottom layer: 2 x 32 x 13 x 16 = 13,312 FLOP at 1 TFLOP/s = 13.312 ns;
    # memory (896 + 32 x 29 x 4 = 4,608 bytes) at 1000 Gb/s = 125 GB/s = 36.864 ns: memory-bound
    assert bottom.fwd_compute_ps == 36_864
    assert spec.last_bottom_layer == 1


def test_dlrm_on_16_npus_over_tcp_end_to_end():
    rows = run_workload({"type": "dlrm", "iterations": 1, "num_tables": 16, "emb_dim": 64, "batch_per_npu": 64,
                         "bottom_mlp": [128, 64], "top_mlp": [128, 1]}, backend="packet")
    run = rows["runs"][0]
    assert run["status"] == "ok" and run["iteration_time_s"] > run["compute_s"] > 0
    assert all(flow["end_s"] is not None for flow in rows["flows"])
    analytical = run_workload({"type": "dlrm", "iterations": 1, "num_tables": 16, "emb_dim": 64,
                               "batch_per_npu": 64, "bottom_mlp": [128, 64], "top_mlp": [128, 1]})["runs"][0]
    # docs/theory.md#collectives-the-alpha-beta-model: on an uncongested network a packet-level time
    # sits a few percent above the fluid
    # one, which has no slow start, ACK clock or queueing (here +0.7 %: the iteration is 99.5 %
    # communication, mostly bandwidth-bound all-reduces); allow 2 %
    assert analytical["iteration_time_s"] <= run["iteration_time_s"] <= 1.02 * analytical["iteration_time_s"]


@pytest.mark.parametrize("text, message", [
    ("", "(this one is empty)"),
    ("DATA\n", "(this one ends after its parallelism line)"),
    ("hello world, no workload at all\n", "line 1: parallelism 'hello' is not one of"),
    ("PIPELINE\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "line 1: parallelism 'PIPELINE'"),
    ("DATA\nx\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "line 2: a positive layer count"),
    ("DATA\n2\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "2 layer lines after line 2, found 1"),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0\n", "line 3: 12 fields"),
    ("DATA\n1\nl -1 1 BROADCAST 8 1 NONE 0 1 NONE 0 0\n", "line 3: comm type 'BROADCAST'"),
    ("DATA\n1\nl -1 x NONE 0 1 NONE 0 1 NONE 0 0\n", "line 3: forward compute cycles must be a non-negative integer"),
])
def test_malformed_astra_files_are_refused_with_the_line(tmp_path, text, message):
    path = write_workload(tmp_path, text)
    config = engine.load_config({"workload": {"type": "astra", "path": path}})  # the config reads no file
    with pytest.raises(engine.ConfigError) as error:
        engine.check_workload_files(config)
    assert error.value.key == "workload.path" and message in str(error.value)


def test_missing_astra_file_is_refused(tmp_path):
    config = engine.load_config({"workload": {"type": "astra", "path": str(tmp_path / "nope.txt")}})
    with pytest.raises(engine.ConfigError, match="workload.path"):
        engine.check_workload_files(config)


def test_a_grid_reads_its_workload_file_once_until_the_file_changes(tmp_path, monkeypatch):
    """Every point of a grid names the same file: the check reads it for the first point only, reads
    it again once it changes (size or modification time), and reads a refused file every time."""
    from engine.workload import files

    reads = []
    monkeypatch.setattr(files, "parse_astra", lambda path, *args: reads.append(path))
    files._check_once.cache_clear()
    path = write_workload(tmp_path, "DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n")
    for seed in range(5):  # five grid points, one file
        engine.check_workload_files(engine.load_config({"seed": seed, "workload": {"type": "astra", "path": path}}))
    assert reads == [path]
    Path(path).write_text("DATA\n1\nl -1 12 NONE 0 1 NONE 0 1 NONE 0 0\n")  # one byte more: a new size
    engine.check_workload_files(engine.load_config({"workload": {"type": "astra", "path": path}}))
    assert reads == [path, path]

    def refuse(path, *args):
        reads.append(path)
        raise engine.ConfigError("workload.path", path, "a readable file")
    monkeypatch.setattr(files, "parse_astra", refuse)
    files._check_once.cache_clear()
    for _ in range(2):
        with pytest.raises(engine.ConfigError):
            engine.check_workload_files(engine.load_config({"workload": {"type": "astra", "path": path}}))
    assert reads == [path] * 4
    files._check_once.cache_clear()


# -- ASTRA-sim 1.0's model-parallel loops (Workload.cc: iterate_model_parallel,
# iterate_hybrid_parallel_data_model / _model_data, decode_involved_dimensions) ---------------------

HYBRID_LAYERS = ("l0 -1 100 ALLGATHER 4096 200 REDUCESCATTER 8192 300 ALLREDUCE 16384 0\n"
                 "l1 -1 100 ALLREDUCE 1024 200 ALLREDUCE 2048 300 ALLREDUCE 32768 0\n")


def _hierarchical_run(tmp_path, parallelism: str) -> dict:
    # 4 NPUs, 2 per node: dimension 0 joins the NPUs of a node ({0, 1}, {2, 3}), dimension 1 the NPUs of
    # equal local index across nodes ({0, 2}, {1, 3})
    path = write_workload(tmp_path, f"{parallelism}\n2\n{HYBRID_LAYERS}")
    return run_workload({"type": "astra", "path": path, "iterations": 1, "cycle_ns": 1.0}, npus=4,
                        topology="hierarchical", npus_per_node=2, scaleup_gbps=400, scaleup_latency_us=0.5)


def _bytes_by_dimension(rows: dict) -> tuple[int, int]:
    """Bytes of the messages within a node (dimension 0) and across nodes (dimension 1)."""
    within = sum(f["bytes"] for f in rows["flows"] if f["src"] // 2 == f["dst"] // 2)
    across = sum(f["bytes"] for f in rows["flows"] if f["src"] // 2 != f["dst"] // 2)
    return within, across


# On a group of p = 2 the ring moves, per NPU: all-reduce 2 (p-1)/p n = n, reduce-scatter (p-1)/p n =
# n/2, and all-gather (p-1) S = S for ASTRA-sim's S = 4,096 (each NPU's input: Ring.cc sends it whole
# at each of the p-1 steps; the `collectives` row holds the gathered p S = 8,192); four NPUs send that
# each. Forward collectives: l0 all-gather, l1 all-reduce 1,024; input gradient: l1's all-reduce
# 2,048 only (the first layer's is never issued); weight gradient: l1 32,768, l0 16,384.
MODEL_PASS_BYTES = 4 * 4096 + 4 * 1024 + 4 * 2048
DATA_PASS_BYTES = 4 * 32768 + 4 * 16384


def test_hybrid_data_model_runs_model_passes_within_nodes_and_data_across(tmp_path):
    rows = _hierarchical_run(tmp_path, "HYBRID_DATA_MODEL")
    issued = [(c["layer"], c["op"], c["bytes"]) for c in sorted(rows["collectives"], key=lambda c: c["start_s"])]
    assert issued == [("l0", "all_gather", 2 * 4096), ("l1", "all_reduce", 1024), ("l1", "all_reduce", 2048),
                      ("l1", "all_reduce", 32768), ("l0", "all_reduce", 16384)]
    assert _bytes_by_dimension(rows) == (MODEL_PASS_BYTES, DATA_PASS_BYTES)
    # every pass computes, the first layer's input gradient too: 2 x (100 + 200 + 300) cycles
    assert rows["runs"][0]["compute_s"] == pytest.approx(1200e-9, rel=1e-12)


def test_hybrid_model_data_runs_model_passes_across_nodes_and_data_within(tmp_path):
    rows = _hierarchical_run(tmp_path, "HYBRID_MODEL_DATA")
    assert len(rows["collectives"]) == 5
    assert _bytes_by_dimension(rows) == (DATA_PASS_BYTES, MODEL_PASS_BYTES)


def test_hybrid_data_model_on_one_dimension_has_no_data_parallel_collectives(tmp_path):
    # ASTRA-sim 1.0 gives the weight gradient dimensions 1.. only: a switch has none, so "all dims
    # disabled, no collective" (Layer::issue_weight_grad_comm)
    path = write_workload(tmp_path, f"HYBRID_DATA_MODEL\n2\n{HYBRID_LAYERS}")
    rows = run_workload({"type": "astra", "path": path, "iterations": 1, "cycle_ns": 1.0}, npus=4)
    # (the all-gather over all 4 NPUs: 4 x ASTRA-sim's 4,096 bytes of input each)
    assert [(c["layer"], c["bytes"]) for c in rows["collectives"]] == [("l0", 4 * 4096), ("l1", 1024), ("l1", 2048)]


def test_model_parallel_forward_blocks_and_backward_waits_for_the_input_gradient(tmp_path):
    # MODEL: no weight-gradient collective; without compute nothing overlaps, so the iteration is
    # the three collectives back to back, every one of them exposed
    path = write_workload(tmp_path, "MODEL\n2\n"
                          "l0 -1 0 ALLREDUCE 65536 0 ALLREDUCE 65536 0 ALLREDUCE 65536 0\n"
                          "l1 -1 0 ALLREDUCE 131072 0 ALLREDUCE 262144 0 ALLREDUCE 65536 0\n")
    rows = run_workload({"type": "astra", "path": path, "iterations": 1, "cycle_ns": 1.0}, npus=4)
    collectives = sorted(rows["collectives"], key=lambda c: c["start_s"])
    assert [(c["layer"], c["bytes"]) for c in collectives] == [("l0", 65536), ("l1", 131072), ("l1", 262144)]
    for before, after in zip(collectives, collectives[1:]):
        assert after["start_s"] == pytest.approx(before["end_s"], abs=1e-12)
    run = rows["runs"][0]
    assert run["iteration_time_s"] == pytest.approx(sum(c["duration_s"] for c in collectives), rel=1e-9)
    layers = {r["layer"]: r for r in rows["layers"]}
    assert layers["l1"]["ig_exposed_comm_s"] == pytest.approx(collectives[2]["duration_s"], rel=1e-9)
    # with compute: the input-gradient all-reduce of l1 hides behind l1's weight-gradient and l0's
    # input-gradient compute? No: the wait comes right after l1's weight gradient (W cycles), so
    # W ns of it hide and the rest is exposed
    w = 2000
    path = write_workload(tmp_path, "MODEL\n2\n"
                          "l0 -1 0 NONE 0 0 NONE 0 0 NONE 0 0\n"
                          f"l1 -1 0 NONE 0 0 ALLREDUCE 262144 {w} NONE 0 0\n")
    rows = run_workload({"type": "astra", "path": path, "iterations": 1, "cycle_ns": 1.0}, npus=4)
    (ig,) = rows["collectives"]
    l1 = next(r for r in rows["layers"] if r["layer"] == "l1")
    assert l1["ig_exposed_comm_s"] == pytest.approx(max(0.0, ig["duration_s"] - w * 1e-9), rel=1e-9)


def test_hybrid_dlrm_enhanced_does_not_wait_for_the_backward_all_to_all(tmp_path):
    # The embedding's backward all-to-all is issued at the first top layer's input gradient; with no
    # compute after it, HYBRID_DLRM waits for all of it at the embedding, HYBRID_DLRM_ENHANCED
    # carries on into the next iteration and waits only at the end of the run.
    layers = ("embedding -1 0 NONE 0 0 ALLTOALL 1048576 0 NONE 0 0\n"
              "mlp_bottom_0 -1 0 NONE 0 0 NONE 0 0 NONE 0 0\n"
              "mlp_top_0 -1 0 NONE 0 0 NONE 0 0 NONE 0 0\n")
    results = {}
    for parallelism in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        path = write_workload(tmp_path, f"{parallelism} 1\n3\n{layers}")
        results[parallelism] = run_workload({"type": "astra", "path": path, "iterations": 2, "cycle_ns": 1.0}, npus=4)
    dlrm, enhanced = results["HYBRID_DLRM"], results["HYBRID_DLRM_ENHANCED"]
    a2a = [c["duration_s"] for c in dlrm["collectives"]]
    assert len(a2a) == 2
    # HYBRID_DLRM: each iteration is one exposed all-to-all
    assert dlrm["runs"][0]["iteration_time_s"] == pytest.approx(a2a[0], rel=1e-9)
    assert [c["start_s"] for c in dlrm["collectives"]] == pytest.approx([0.0, a2a[0]], rel=1e-9)
    # ENHANCED: both all-to-alls are issued at time 0 (nothing waits between them), so iteration 0
    # takes no time; they share the flat dimension, one chunk phase at a time, so the second ends
    # at 2 x A, which the end of the run waits for (charged to the embedding's input gradient)
    assert [c["start_s"] for c in enhanced["collectives"]] == [0.0, 0.0]
    end = max(c["end_s"] for c in enhanced["collectives"])
    assert end == pytest.approx(2 * a2a[0], rel=1e-9)
    embedding = {r["iteration"]: r for r in enhanced["layers"] if r["layer"] == "embedding"}
    assert embedding[0]["ig_exposed_comm_s"] == 0
    assert embedding[1]["ig_exposed_comm_s"] == pytest.approx(end, rel=1e-9)


def test_hybrid_dlrm_reads_the_last_bottom_layer_from_line_1(tmp_path):
    # `HYBRID_DLRM 1`: the interaction follows layer 1 whatever the names say
    path = write_workload(tmp_path, "HYBRID_DLRM 1\n3\n"
                          "emb -1 0 ALLTOALL 8 0 ALLTOALL 8 0 NONE 0 0\nfirst -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n"
                          "second -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n")
    from engine.workload.layers import parse_astra
    assert parse_astra(path, 1, (16,)).last_bottom_layer == 1
    bad = write_workload(tmp_path, "HYBRID_DLRM 3\n1\nemb -1 0 NONE 0 0 NONE 0 0 NONE 0 0\n")
    with pytest.raises(engine.ConfigError, match="line 1: the last bottom-MLP layer"):
        parse_astra(bad, 1, (16,))
