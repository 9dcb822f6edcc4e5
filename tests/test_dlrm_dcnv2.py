"""DLRM-DCNv2 (MLPerf Training's recommendation model): the cross layers' sizes and FLOPs, multi-hot
lookups, the input all-to-all of sparse indices, all from hand computations written here."""

from __future__ import annotations

import pytest

import engine
from engine.workload.layers import dlrm_layers, table_wise_lookups

# MLPerf's reference (mlcommons/training recommendation_v2/torchrec_dlrm, README): --multi_hot_sizes
MLPERF_MULTI_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
COMPUTE_BOUND = {"npu_tflops": 1.0, "hbm_gbps": 1e6}  # memory next to free (the largest rate allowed)
MEMORY_BOUND = {"npu_tflops": 1e6, "hbm_gbps": 1000.0}  # FLOPs take next to no time; 1000 Gb/s = 125 bytes per ns


def small_dcn(**overrides) -> engine.workload.WorkloadSpec:
    # 2 tables of dimension 4: x0 = [bottom output, 2 pooled vectors] has d = 3 x 4 = 12 features
    sizes = dict(num_tables=2, emb_dim=4, dense_features=5, bottom_mlp=[4], top_mlp=[6, 1], batch_per_npu=10,
                 dtype_bytes=4, npus=2, interaction="dcn", dcn_layers=2, dcn_low_rank=3, **COMPUTE_BOUND)
    return dlrm_layers(**{**sizes, **overrides})


def test_cross_layer_weights_and_flops_by_hand():
    # x_{l+1} = x0 * (U (V^T x_l) + b) + x_l, U and V of d x r = 12 x 3, b of d = 12:
    # weights 12*3 + 12*3 + 12 = 84 per layer, all-reduced as 84 x 4 bytes = 336 bytes.
    # FLOPs per sample: V^T x_l 2*12*3 = 72, U(.) 72, + b 12, x0 * 12, + x_l 12: 180;
    # batch 10 at 1 TFLOP/s: 1,800 FLOP = 1.8 ns per pass.
    spec = small_dcn()
    names = [layer.name for layer in spec.layers]
    assert names == ["embedding", "mlp_bottom_0", "dcn_cross_0", "dcn_cross_1", "mlp_top_0", "mlp_top_1"]
    for cross in spec.layers[2:4]:
        assert cross.wg_comm.op == "all_reduce" and cross.wg_comm.size_bytes == 336
        assert cross.fwd_compute_ps == cross.ig_compute_ps == cross.wg_compute_ps == 1_800
    # the cross layers keep the width d = 12: the top MLP's first layer all-reduces (12*6 + 6) x 4 bytes
    assert spec.layers[4].wg_comm.size_bytes == (12 * 6 + 6) * 4
    assert spec.layers[1].wg_comm.size_bytes == (5 * 4 + 4) * 4  # the bottom MLP as before
    # the backward embedding all-to-all is issued after the first cross layer's input gradient, the
    # layer right after the bottom MLP (it is then the gradient of the pooled vectors)
    assert spec.last_bottom_layer == 1


def test_cross_layer_memory_traffic_by_hand():
    # Weights 84 x 4 = 336 bytes; activations per sample: x0, x_l, x_{l+1} (12 each) and V^T x_l
    # (3): 39 values, 10 x 39 x 4 = 1,560 bytes; 1,896 bytes at 125 bytes/ns = 15.168 ns.
    spec = small_dcn(**MEMORY_BOUND)
    assert spec.layers[2].fwd_compute_ps == 15_168


def test_mlperf_dcnv2_dense_parameters_and_flops_by_hand():
    # The reference model: 13 dense features, bottom 512-256-128, 26 tables of 128, 3 cross layers
    # of rank 512 on d = 27 x 128 = 3,456, top 1024-1024-512-256-1.
    bottom = (13 * 512 + 512) + (512 * 256 + 256) + (256 * 128 + 128)  # 171,392
    cross = 3 * (2 * 3456 * 512 + 3456)  # 10,627,200
    top = (3456 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 256 + 256) + (256 + 1)
    assert (bottom, cross, top) == (171_392, 10_627_200, 5_245_953)
    # forward FLOPs per sample: 2 per weight of every MLP matrix, 4 d r + 3 d per cross layer
    mlp_flops = 2 * ((13 * 512 + 512 * 256 + 256 * 128) + (3456 * 1024 + 1024 * 1024 + 1024 * 512 + 512 * 256 + 256))
    cross_flops = 3 * (4 * 3456 * 512 + 3 * 3456)
    assert (mlp_flops, cross_flops) == (10_827_264, 21_264_768)
    batch = 64
    spec = dlrm_layers(num_tables=26, emb_dim=128, dense_features=13, bottom_mlp=[512, 256, 128],
                       top_mlp=[1024, 1024, 512, 256, 1], batch_per_npu=batch, dtype_bytes=2, npus=8,
                       interaction="dcn", dcn_layers=3, dcn_low_rank=512, multi_hot=MLPERF_MULTI_HOT, **COMPUTE_BOUND)
    dense = spec.layers[1:]
    assert sum(layer.wg_comm.size_bytes for layer in dense) == (bottom + cross + top) * 2  # 16,044,545 fp16 values
    # compute-bound at 1 TFLOP/s: 1 FLOP = 1 ps (each layer's time rounds to whole ps)
    assert sum(layer.fwd_compute_ps for layer in dense) == pytest.approx(batch * (mlp_flops + cross_flops),
                                                                         abs=len(dense))


def test_table_wise_placement_by_hand():
    # Greedy, largest first onto the least loaded NPU: 5 -> A, 4 -> B, 3 -> B (7), 3 -> A (8), 3 -> B (10)
    assert table_wise_lookups([5, 4, 3, 3, 3], 2) == 10
    assert table_wise_lookups([1] * 26, 8) == 4  # one lookup per table: ceil(26 / 8)
    assert table_wise_lookups([1] * 8, 16) == 1
    # MLPerf's multi-hot: table 20's 100 lookups alone outweigh the mean, 214 / 8 = 26.75 per NPU
    assert sum(MLPERF_MULTI_HOT) == 214 and table_wise_lookups(MLPERF_MULTI_HOT, 8) == 100


# 3 tables of dimension 4 looked up 2, 5 and 1 times per sample, 10 samples per NPU, fp16, int32
# indices, 2 NPUs, one cross layer of rank 2 on d = 4 x 4 = 16.
SMALL = {"type": "dlrm", "num_tables": 3, "emb_dim": 4, "dense_features": 5, "bottom_mlp": [4], "top_mlp": [1],
         "batch_per_npu": 10, "dtype_bytes": 2, "interaction": "dcn", "dcn_layers": 1, "dcn_low_rank": 2,
         "multi_hot": [2, 5, 1], "index_bytes": 4, **MEMORY_BOUND}


def test_all_to_all_and_all_reduce_bytes_per_npu_by_hand():
    rows = engine.run({"engine": {"backend": "analytical"}, "network": {"topology": "switch", "npus": 2},
                       "workload": {**SMALL, "iterations": 2}})
    assert rows["runs"][0]["status"] == "ok"
    by_iteration = {i: sorted((c["op"], c["layer"], c["bytes"]) for c in rows["collectives"] if c["iteration"] == i)
                    for i in (0, 1)}
    pooled = 10 * 3 * 4 * 2  # samples x tables x dimension x fp16 = 240 bytes, forward and backward
    indices = 10 * (2 + 5 + 1) * 4  # samples x lookups per sample x int32 = 320 bytes
    bottom = (5 * 4 + 4) * 2  # 48
    cross = (2 * 16 * 2 + 16) * 2  # U, V and b: 80 values, 160 bytes
    top = (16 * 1 + 1) * 2  # 34
    weight_grads = [("all_reduce", "dcn_cross_0", cross), ("all_reduce", "mlp_bottom_0", bottom),
                    ("all_reduce", "mlp_top_0", top)]
    # iteration 0 sends its own indices and, pipelined, those of iteration 1; the last sends none
    assert by_iteration[0] == sorted(weight_grads + [("all_to_all", "embedding", pooled)] * 2
                                     + [("all_to_all", "embedding", indices)] * 2)
    assert by_iteration[1] == sorted(weight_grads + [("all_to_all", "embedding", pooled)] * 2)
    # lookups: table 1 (5) on one NPU, tables 0 and 2 (2 + 1) on the other; the busiest reads the
    # whole batch's rows: 2 NPUs x 10 samples x 5 lookups x 4 values x 2 bytes = 800 bytes at
    # 125 bytes/ns = 6.4 ns, forward and again backward (the update of the rows read)
    embedding = next(r for r in rows["layers"] if r["layer"] == "embedding" and r["iteration"] == 0)
    assert embedding["fwd_compute_s"] == pytest.approx(6.4e-9, rel=1e-12)
    assert embedding["wg_compute_s"] == pytest.approx(6.4e-9, rel=1e-12)


def test_input_all_to_all_runs_one_batch_ahead():
    # Slow compute (1 GFLOP/s, 0.1 Gb/s memory) hides every collective but the first iteration's own
    # input all-to-all, which nothing precedes: the embedding's forward exposure is exactly that
    # all-to-all's duration in iteration 0 and nothing after.
    slow = {**SMALL, "npu_tflops": 1e-3, "hbm_gbps": 0.1, "iterations": 3}
    rows = engine.run({"engine": {"backend": "analytical"}, "network": {"topology": "switch", "npus": 2},
                       "system": {"endpoint_delay_ns": 0}, "workload": slow})
    indices = [c for c in rows["collectives"] if c["bytes"] == 10 * 8 * 4]
    assert [c["iteration"] for c in indices] == [0, 0, 1]  # issued one iteration ahead
    assert [c["exposed_s"] for c in indices] == [pytest.approx(indices[0]["duration_s"], rel=1e-9), 0, 0]
    exposed = {r["iteration"]: r["fwd_exposed_comm_s"] for r in rows["layers"] if r["layer"] == "embedding"}
    assert exposed[0] == pytest.approx(indices[0]["duration_s"], rel=1e-9)
    assert exposed[1] == exposed[2] == 0


@pytest.mark.parametrize("key, value, message", [
    ("interaction", "cat", "one of dot, dcn"),
    ("dcn_low_rank", 0, "an integer >= 1"),
    ("dcn_layers", -1, "an integer >= 1"),
    ("multi_hot", [1, 2], "a list of workload.num_tables = 3 lookups per sample"),
    ("multi_hot", [1, 0, 2], "a list of workload.num_tables = 3 lookups per sample"),
    ("index_bytes", -4, "an integer >= 0"),
])
def test_bad_dcn_keys_are_refused_by_name(key, value, message):
    with pytest.raises(engine.ConfigError) as error:
        engine.load_config({"workload": {**SMALL, key: value}})
    assert error.value.key == f"workload.{key}" and message in str(error.value)


def test_the_dlrm_dcnv2_preset_on_8_npus_by_hand():
    # MLPerf's model with NVIDIA's 1-node batch (55,296 = 8 x 6,912), fp16 values, int32 indices.
    from sweep_support import compose_config

    config = engine.load_config(compose_config(["workload=dlrm_dcnv2", "network.npus=8"]))
    spec = engine.workload.workload_spec(config, (8,))
    assert spec.input_comm.size_bytes == 6912 * 214 * 4 == 5_916_672
    assert spec.layers[0].fwd_comm.size_bytes == spec.layers[0].ig_comm.size_bytes == 6912 * 26 * 128 * 2
    assert sum(layer.wg_comm.size_bytes for layer in spec.layers) == 16_044_545 * 2
    # the busiest NPU holds the 100-lookup table: 8 x 6,912 x 100 x 128 x 2 bytes = 1,415,577,600
    # bytes at 26,800 Gb/s = 3,350 bytes/ns: 422,560.48 ns
    assert spec.layers[0].fwd_compute_ps == round(1_415_577_600 / 3350 * 1000)
