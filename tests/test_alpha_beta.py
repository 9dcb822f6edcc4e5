"""The alpha_beta backend: collectives in closed form per step, no contention.

Expected values come from the alpha-beta model (Thakur, Rabenseifner and Gropp 2005;
docs/theory.md#collectives-the-alpha-beta-model) at
the payload rate MSS/(MSS + 40) of the link (timestamps off: the RFC 6298 form, 40-byte headers,
MSS 1460), hand-computed to the picosecond; then agreement with
the analytical backend where no link is shared, and never above it where links are shared (it is
the lower bound).
"""

from __future__ import annotations

import pytest

import engine
from engine.config import load_config
from engine.eventlist import EventList
from engine.system import AlphaBetaSystemLayer, Dimension
from engine.system.algorithms import plan, symmetric_steps
from engine.topology import build_topology

P = 8
PS_PER_BYTE = 80  # 100 Gb/s: 8 bits / 100e9 b/s = 80 ps per byte
LINK_LATENCY_PS = 1_000_000  # 1 us
MSS = 1460
# n bytes per NPU with n/8 = 100 full segments: every message of these algorithms (n/8, n/4, n/2)
# is a whole number of segments, so its wire bytes are exactly payload x 1500/1460
N = 8 * 100 * MSS
ENDPOINT_DELAY_PS = 10_000  # system.endpoint_delay_ns = 10


def run(op: str, algorithm: str, size_bytes: int, backend: str = "alpha_beta", npus: int = P,
        endpoint_delay_ns: float = 10, **network) -> dict:
    network = {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1, **network}
    row = engine.run({
        "engine": {"backend": backend},
        "network": network,
        "tcp": {"timestamps": False},
        "system": {op: algorithm, "endpoint_delay_ns": endpoint_delay_ns},
        "workload": {"type": "collective", "op": op, "bytes": size_bytes},
    })["runs"][0]
    assert row["status"] == "ok", row["error"]
    return row


def time_ps(op: str, algorithm: str, size_bytes: int, **kwargs) -> int:
    """The collective's duration in integer picoseconds (results are float seconds)."""
    return round(run(op, algorithm, size_bytes, **kwargs)["iteration_time_s"] * 1e12)


def bandwidth_term_ps(factor: float, size_bytes: int) -> int:
    """factor * n / B at the payload rate: n * 1500/1460 wire bytes at 80 ps each."""
    return round(factor * size_bytes * (MSS + 40) / MSS * PS_PER_BYTE)


# alpha of one step on a switch: the endpoint delay, host link and switch port propagation, and
# the switch's store-and-forward of one full packet (1500 B x 80 ps)
ALPHA_PS = ENDPOINT_DELAY_PS + 2 * LINK_LATENCY_PS + 1500 * PS_PER_BYTE


@pytest.mark.parametrize("op, algorithm, alphas, factor", [
    ("all_reduce", "ring", 2 * (P - 1), 2 * (P - 1) / P),  # 2(p-1) a + 2((p-1)/p) n/B
    ("all_gather", "ring", P - 1, (P - 1) / P),  # (p-1) a + ((p-1)/p) n/B
    ("reduce_scatter", "ring", P - 1, (P - 1) / P),
    ("all_reduce", "halving_doubling", 2 * 3, 2 * (P - 1) / P),  # 2 log2(p) a + 2((p-1)/p) n/B
    # direct: docs/theory.md's pairwise exchange takes p-1 steps of one message, (p-1) a; this direct
    # algorithm sends the p-1 messages at once, in one step, so their alphas overlap into one,
    # while its NIC still serialises all of them: a + ((p-1)/p) n/B
    ("all_to_all", "direct", 1, (P - 1) / P),
    ("reduce_scatter", "direct", 1, (P - 1) / P),
    ("all_reduce", "direct", 2, 2 * (P - 1) / P),  # direct reduce-scatter, then direct all-gather
])
def test_collectives_are_the_alpha_beta_formulas_to_the_picosecond(op, algorithm, alphas, factor):
    assert time_ps(op, algorithm, N) == alphas * ALPHA_PS + bandwidth_term_ps(factor, N)


def one_message_ps(payload_bytes: int) -> int:
    """One message through host link + switch port, both 100 Gb/s and 1 us: its wire bytes (a
    40-byte header per segment) serialised once, the first packet once more at the switch port
    (store-and-forward), and two propagation delays."""
    segments = -(-payload_bytes // MSS)
    first_packet = min(MSS, payload_bytes) + 40
    return (payload_bytes + 40 * segments) * PS_PER_BYTE + first_packet * PS_PER_BYTE + 2 * LINK_LATENCY_PS


def test_small_ring_all_reduce_by_hand():
    # 8 KiB on 8 NPUs: 14 steps of one 1,024-byte message (one segment of 1,064 wire bytes):
    # 1,064 x 80 ps twice (NIC, then switch port) + 2 us = 2.17024 us, plus the 10 ns endpoint delay
    assert one_message_ps(1024) == 2_170_240
    assert time_ps("all_reduce", "ring", 8 * 1024) == 14 * (ENDPOINT_DELAY_PS + 2_170_240)


def test_small_halving_doubling_by_hand():
    # 10,000 bytes on 8 NPUs: halving 5000, 2500, 1250, doubling 1250, 2500, 5000 (partial segments:
    # 5,000 bytes are 4 segments, 3 full and one of 620 bytes, 5,160 wire bytes)
    sizes = [5000, 2500, 1250, 1250, 2500, 5000]
    assert one_message_ps(5000) == 5160 * 80 + 1500 * 80 + 2_000_000
    assert time_ps("all_reduce", "halving_doubling", 10_000) == sum(ENDPOINT_DELAY_PS + one_message_ps(size)
                                                                    for size in sizes)


UNCONTENDED = [
    # (op, algorithm, network): no link carries two messages at once
    ("all_reduce", "ring", {"topology": "switch"}),
    ("all_gather", "ring", {"topology": "switch"}),
    ("all_to_all", "direct", {"topology": "switch"}),
    ("all_reduce", "halving_doubling", {"topology": "switch"}),
    # a ring over leaves: one neighbour pair per leaf crosses a spine, alone on its uplink. The
    # ring's chain of dependent steps runs at the mean of the two route classes, not at the slower
    # one (which would be up to twice as long for small messages)
    ("all_reduce", "ring", {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100}),
    ("all_reduce", "ring", {"topology": "fat_tree"}),
]


@pytest.mark.parametrize("npus", [4, 16])
@pytest.mark.parametrize("size_bytes", [1024, 64 * 1024, 4 * 2**20])
@pytest.mark.parametrize("op, algorithm, network", UNCONTENDED,
                         ids=[f"{op}-{algorithm}-{network['topology']}" for op, algorithm, network in UNCONTENDED])
def test_agrees_with_analytical_within_1_percent_where_no_link_is_shared(op, algorithm, network, size_bytes, npus):
    alpha_beta = run(op, algorithm, size_bytes, npus=npus, **network)["iteration_time_s"]
    analytical = run(op, algorithm, size_bytes, "analytical", npus=npus, **network)["iteration_time_s"]
    assert alpha_beta == pytest.approx(analytical, rel=0.01)
    assert alpha_beta <= analytical * (1 + 1e-9)  # float rounding of the fluid model's rates


OVERSUBSCRIBED_LEAF_SPINE = {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 1, "uplink_gbps": 100}
# (op, algorithm, network, k): 16 NPUs, n bytes each; k bounds by hand how many times longer link
# sharing can make the bandwidth term than alpha_beta's, which has no sharing
CONTENDED = [
    # direct all-to-all through 4:1 oversubscribed uplinks: a leaf's uplink carries 4 hosts x 12
    # remote peers x n/16 = 3n, a NIC 15n/16: k = 3 / (15/16) = 3.2
    ("all_to_all", "direct", OVERSUBSCRIBED_LEAF_SPINE, 3.2),
    # k = 4 fat tree (2 hosts per edge switch), 25 Gb/s between switches: at worst ECMP puts all of
    # an edge switch's 2 x 14 off-edge messages of n/16 (1.75n) on one uplink at a quarter of the
    # NIC rate: k = 1.75 x 4 / (15/16) = 7.47
    ("all_to_all", "direct", {"topology": "fat_tree", "uplink_gbps": 25}, 7.47),
    # ECMP collisions on a full-bisection tree: each direct step (reduce-scatter, all-gather) as the
    # all-to-all above, at worst 1.75n on one uplink at the NIC rate: k = 1.75 / (15/16) = 1.87
    ("all_reduce", "direct", {"topology": "fat_tree"}, 1.87),
    # XOR partners at distances 8, 4, 2, 1 exchange n/2, n/4, n/8, n/16 and back: distances 8 and 4
    # cross leaves (2 x 0.75n), the 4 hosts of a leaf sharing its uplink; 2 and 1 (2 x 0.1875n) do
    # not: k = (0.375 + 4 x 1.5) / 1.875 = 3.4
    ("all_reduce", "halving_doubling", OVERSUBSCRIBED_LEAF_SPINE, 3.4),
    # a slow link every 2 hops, but each ring link on its own route, charged at its slowest link by
    # alpha_beta too: k = 1
    ("all_reduce", "ring", {"topology": "fat_tree", "uplink_gbps": 25}, 1.0),
    # every step's data through the slow NIC link, one message on it: k = 1
    ("all_to_all", "ring", {"topology": "hierarchical", "npus_per_node": 4, "scaleup_gbps": 400,
                            "scaleup_latency_us": 0.5}, 1.0),
    # two trees share every NIC: a link carries at most 3 of their messages at once (to 2 children
    # or 1 parent in the tree where the NPU is inner, 1 in the other): k = 3
    ("all_reduce", "double_binary_tree", {"topology": "switch"}, 3.0),
]


@pytest.mark.parametrize("size_bytes", [4096, 4 * 2**20])
@pytest.mark.parametrize("op, algorithm, network, k", CONTENDED,
                         ids=[f"{op}-{algorithm}-{network['topology']}" for op, algorithm, network, _ in CONTENDED])
def test_never_above_analytical_where_links_are_shared(op, algorithm, network, k, size_bytes):
    alpha_beta = run(op, algorithm, size_bytes, npus=16, **network)["iteration_time_s"]
    analytical = run(op, algorithm, size_bytes, "analytical", npus=16, **network)["iteration_time_s"]
    assert alpha_beta <= analytical * (1 + 1e-9)
    # and sharing stretches the time at most k times, within the backends' 1 % agreement where no
    # link is shared (the test above)
    assert analytical <= k * alpha_beta * 1.01


def test_the_contention_alpha_beta_leaves_out_by_hand():
    # 4 MiB per NPU on the oversubscribed leaf-spine, at the payload rate B = 100 Gb/s x 1460/1500.
    # The analytical backend's extra time is the shared uplinks' extra bytes: direct all-to-all
    # (3 - 15/16) n / B = 711.02 us; halving-doubling (4 - 1) x 1.5n / B = 1551.32 us (its
    # cross-leaf steps at a quarter of the rate). The alpha terms are the same in both.
    n = 4 * 2**20
    payload_bps = 100e9 * MSS / (MSS + 40)
    for op, algorithm, extra_bytes in (("all_to_all", "direct", (3 - 15 / 16) * n),
                                       ("all_reduce", "halving_doubling", 3 * 1.5 * n)):
        alpha_beta = run(op, algorithm, n, npus=16, **OVERSUBSCRIBED_LEAF_SPINE)["iteration_time_s"]
        analytical = run(op, algorithm, n, "analytical", npus=16, **OVERSUBSCRIBED_LEAF_SPINE)["iteration_time_s"]
        assert analytical - alpha_beta == pytest.approx(extra_bytes * 8 / payload_bps, rel=1e-3)


def test_training_lower_bound_with_same_rows_and_null_message_counters():
    # DLRM on an oversubscribed leaf-spine: all-to-alls and all-reduces overlap and share links in
    # the analytical backend, never in alpha_beta
    config = {"network": {**OVERSUBSCRIBED_LEAF_SPINE, "npus": 16}, "workload": {"type": "dlrm", "iterations": 2}}
    alpha_beta = engine.run({**config, "engine": {"backend": "alpha_beta"}})
    analytical = engine.run({**config, "engine": {"backend": "analytical"}})
    run_row = alpha_beta["runs"][0]
    assert run_row["status"] == "ok"
    assert run_row["iteration_time_s"] <= analytical["runs"][0]["iteration_time_s"]
    assert 0 < run_row["exposed_comm_s"] <= run_row["comm_s"]
    # the same collectives and layers, timed differently; no messages, so no flows rows
    assert [(r["op"], r["bytes"], r["layer"]) for r in alpha_beta["collectives"]] == \
        [(r["op"], r["bytes"], r["layer"]) for r in analytical["collectives"]]
    assert len(alpha_beta["layers"]) == len(analytical["layers"])
    assert alpha_beta["flows"] == []
    for key in ("bytes_sent", "packets_sent", "retransmits", "timeouts", "drops", "ecn_marks", "max_queue_kb",
                "flows", "flows_completed", "mean_fct_s", "max_fct_s"):
        assert run_row[key] is None, key


def _layer(topology: dict, algorithms: dict[str, str], scheduling: str = "lifo") -> AlphaBetaSystemLayer:
    eventlist = EventList()
    topo = build_topology(eventlist, load_config({"network": topology}).network, seed=0)
    flat = Dimension("flat", (tuple(range(topo.npus)),))
    return AlphaBetaSystemLayer(eventlist, topo, MSS, [flat], flat, algorithms, 1, scheduling, "baseline",
                                ENDPOINT_DELAY_PS)


@pytest.mark.parametrize("topology", [
    {"topology": "switch", "npus": 16},
    {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100},
    {"topology": "fat_tree", "npus": 16},
    {"topology": "fat_tree", "npus": 45, "fat_tree_k": 6},  # an uneven last pod
], ids=lambda topology: f"{topology['topology']}{topology['npus']}")
@pytest.mark.parametrize("size_bytes", [1000, 2**20])
def test_step_shortcuts_against_every_rank_program(topology, size_bytes):
    # The shortcuts against the step programs evaluated rank by rank, message by message, under the
    # same cost model: the ring's slowest chain is that graph's longest path; the symmetric steps
    # never exceed it (their later steps take the quickest rank), and equal it on one switch.
    layer = _layer(topology, {"all_reduce": "ring", "all_to_all": "direct"})
    group = tuple(range(layer.topology.npus))
    p = len(group)
    for op, algorithm in [("all_reduce", "ring"), ("all_gather", "ring"), ("all_to_all", "direct"),
                          ("all_reduce", "direct")]:
        steps = symmetric_steps(op, algorithm, p, size_bytes)
        (program,) = plan(op, algorithm, p, size_bytes)
        every_rank = layer.program_ps(group, program)
        if algorithm == "ring":
            assert layer.ring_ps(group, steps) == every_rank, (op, algorithm)
        else:
            shortcut = layer.symmetric_ps(group, steps)
            assert shortcut <= every_rank, (op, algorithm)
            if topology["topology"] == "switch":
                assert shortcut == every_rank


def test_one_active_chunk_per_dimension_in_fifo_or_lifo_order():
    # The same scheduling as the message-level system layer (tests/test_collectives.py)
    for scheduling, expected in [("fifo", [0, 1, 2]), ("lifo", [0, 2, 1])]:
        layer = _layer({"topology": "switch", "npus": 4}, {"all_reduce": "ring"}, scheduling)
        finished: list[int] = []
        for index in range(3):
            layer.collective("all_reduce", 4096, lambda index=index, finished=finished: finished.append(index))
        layer.eventlist.run(10**15)
        assert finished == expected


def test_hierarchical_local_bw_aware_cuts_the_scale_out_term():
    # As tests/test_collectives.py: 4 nodes x 4 NPUs, reduce-scatter in the node first leaves a
    # quarter of the data for the NICs. With whole segments everywhere the times are exact sums
    # of the per-dimension formulas: ring all-reduce on 4 = 6 steps, reduce-scatter/all-gather 3.
    n = 4 * 4 * 100 * MSS

    def run_hierarchy(hierarchy: str) -> int:
        row = engine.run({
            "engine": {"backend": "alpha_beta"},
            "network": {"topology": "hierarchical", "npus": 16, "npus_per_node": 4, "link_gbps": 100,
                        "link_latency_us": 1, "scaleup_gbps": 400, "scaleup_latency_us": 0.5},
            "tcp": {"timestamps": False},
            "system": {"hierarchy": hierarchy, "endpoint_delay_ns": 0},
            "workload": {"type": "collective", "op": "all_reduce", "bytes": n},
        })["runs"][0]
        return round(row["iteration_time_s"] * 1e12)

    def ring_step_ps(block_bytes: int, ps_per_byte: int, latency_ps: int) -> int:
        wire = block_bytes * (MSS + 40) // MSS
        return wire * ps_per_byte + 1500 * ps_per_byte + 2 * latency_ps

    scale_up_all_reduce = 6 * ring_step_ps(n // 4, 20, 500_000)  # 400 Gb/s: 20 ps per byte
    scale_out_all_reduce = 6 * ring_step_ps(n // 4, 80, 1_000_000)
    assert run_hierarchy("baseline") == scale_up_all_reduce + scale_out_all_reduce
    # reduce-scatter + all-gather in the node (3 + 3 steps of n/4) and an all-reduce of n/4 outside
    quarter_scale_out = 6 * ring_step_ps(n // 16, 80, 1_000_000)
    assert run_hierarchy("local_bw_aware") == scale_up_all_reduce + quarter_scale_out


@pytest.mark.parametrize("topology", [{"topology": "fat_tree"},
                                      {"topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4,
                                       "uplink_gbps": 100}], ids=["fat_tree", "leaf_spine"])
def test_a_9216_npu_training_iteration_runs(topology):
    # The screen for 10,000-NPU designs (its wall time is measured in benchmarks/bench_scale.py).
    # A DLRM iteration's ring all-reduces of 9,216 NPUs are latency-bound: each takes at least
    # 2 (p - 1) steps of an endpoint delay and two link latencies.
    rows = engine.run({"engine": {"backend": "alpha_beta"}, "network": {**topology, "npus": 9216},
                       "workload": {"type": "dlrm", "iterations": 1}})
    run_row = rows["runs"][0]
    assert run_row["status"] == "ok"
    all_reduces = [r for r in rows["collectives"] if r["op"] == "all_reduce"]
    assert all_reduces
    for record in all_reduces:
        assert record["duration_s"] >= 2 * 9215 * (10e-9 + 2e-6)
    assert run_row["iteration_time_s"] >= run_row["all_reduce_s"] > 0
