"""Collectives against the alpha-beta model (Thakur, Rabenseifner and Gropp 2005), both backends,
and where they part."""

from __future__ import annotations

import pytest

import engine
from engine.backends.analytical import FluidMessages
from engine.config import SwitchNetwork
from engine.eventlist import EventList
from engine.system import Dimension, SystemLayer
from engine.system.algorithms import RING, XOR, plan, symmetric_steps
from engine.topology import build_topology

P = 8
LINK_GBPS = 100
LINK_LATENCY_PS = 1_000_000  # 1 us
PS_PER_BYTE = 80  # 100 Gb/s: 8 bits / 100e9 b/s = 80 ps per byte
# TCP timestamps on (the default): each segment carries 52 bytes of headers (IPv4, TCP and the
# 12-byte option), so an MTU of 1500 carries 1448 bytes of payload (MSS 1460 less the option)
HEADER_BYTES = 52
MSS = 1448
EFFICIENCY = MSS / (MSS + HEADER_BYTES)  # payload share of a full segment on the wire
LARGE = 8 * 2**20  # bytes per NPU: the bandwidth term dominates
SMALL = 8 * 2**10  # bytes per NPU: the latency terms dominate


def collective_time_s(op: str, algorithm: str, size_bytes: int, backend: str = "packet", tcp: dict | None = None,
                      **network) -> float:
    config = {
        "engine": {"backend": backend},
        "network": {"topology": "switch", "npus": P, "link_gbps": LINK_GBPS, "link_latency_us": 1,
                    "buffer_kb": 16384, **network},  # deep buffers: an uncongested network
        "host": {"tx_jitter_ns": 0},  # exact transmit timing: the hand-computed times assume it
        "tcp": tcp or {},
        "system": {op: algorithm, "endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": op, "bytes": size_bytes, "iterations": 1},
    }
    row = engine.run(config)["runs"][0]
    assert row["status"] == "ok"
    return row["iteration_time_s"]


def bandwidth_term_s(factor: float, size_bytes: int) -> float:
    """factor * n / B at the payload rate B * MSS / (MSS + headers)."""
    return factor * size_bytes * 8 / (LINK_GBPS * 1e9 * EFFICIENCY)


RING_AR = 2 * (P - 1) / P  # ring and halving-doubling all-reduce: 2 (p-1)/p n / B
ONE_PASS = (P - 1) / P  # all-gather, reduce-scatter, direct all-to-all: (p-1)/p n / B
RING_A2A = (P - 1) / 2  # ring all-to-all: step s forwards p-1-s blocks of n/p: n (p-1) / 2 in all


@pytest.mark.parametrize("op, algorithm, factor", [
    ("all_reduce", "ring", RING_AR),
    ("all_reduce", "halving_doubling", RING_AR),
    ("all_to_all", "ring", RING_A2A),
    ("all_gather", "ring", ONE_PASS),
    ("reduce_scatter", "ring", ONE_PASS),
    ("all_gather", "halving_doubling", ONE_PASS),
    ("reduce_scatter", "halving_doubling", ONE_PASS),
])
def test_large_collectives_sit_a_few_percent_above_the_bandwidth_term(op, algorithm, factor):
    # Neighbour exchanges never share a link, so on both backends the time is the bandwidth term
    # plus the alpha terms (2 us per step here) and, on TCP, the first messages' slow start.
    bandwidth = bandwidth_term_s(factor, LARGE)
    packet = collective_time_s(op, algorithm, LARGE)
    analytical = collective_time_s(op, algorithm, LARGE, "analytical")
    assert 1.0 <= analytical / bandwidth <= 1.03
    assert 1.0 <= packet / bandwidth <= 1.10
    assert packet == pytest.approx(analytical, rel=0.10)  # the backends agree within 10 %


@pytest.mark.parametrize("op", ["all_to_all", "reduce_scatter"])
def test_direct_collectives_match_the_bandwidth_term_analytically(op):
    # Direct: every NPU sends n/p to each of the p-1 others at once. Max-min sharing gives each of
    # the p-1 messages through a port 1/(p-1) of it: exactly (p-1)/p n / B plus one message latency.
    analytical = collective_time_s(op, "direct", LARGE, "analytical")
    assert 1.0 <= analytical / bandwidth_term_s(ONE_PASS, LARGE) <= 1.01


def test_staggered_direct_all_to_all_needs_no_buffer():
    # Rank r sends to r+1, r+2, ... so at any moment each receiver port is fed by one sender: even a
    # 4 KiB buffer sees no drop and TCP matches the fluid model within a few percent. With exact
    # transmit timing: the default jitter lets a packet reach the port up to 30 ns closer to the one
    # ahead than the line rate spaces them, and a buffer of 2.7 packets then overflows where one
    # sender's messages hand over to the next's.
    rows = engine.run({
        "network": {"topology": "switch", "npus": P, "link_gbps": LINK_GBPS, "link_latency_us": 1, "buffer_kb": 4},
        "host": {"tx_jitter_ns": 0},
        "system": {"endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_to_all", "bytes": LARGE, "iterations": 2},
    })["runs"][0]
    assert rows["drops"] == 0
    analytical = collective_time_s("all_to_all", "direct", LARGE, "analytical")
    assert rows["iteration_time_s"] == pytest.approx(analytical, rel=0.05)


def _dumbbell_all_to_all(backend: str, buffer_kb: float, tcp: dict | None = None) -> dict:
    return engine.run({
        "engine": {"backend": backend},
        "network": {"topology": "dumbbell", "npus": P, "link_gbps": LINK_GBPS, "link_latency_us": 1,
                    "buffer_kb": buffer_kb, "bottleneck_gbps": LINK_GBPS, "bottleneck_latency_us": 1},
        "tcp": tcp or {},
        "system": {"endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_to_all", "bytes": LARGE, "iterations": 2},
    })["runs"][0]


def test_where_the_backends_part_shallow_buffers_at_a_bottleneck():
    # On a dumbbell, 4 x 4 = 16 flows of n/p cross the bottleneck each way. The fluid model shares
    # it perfectly: 16 x 1 MiB at the payload rate = 1.38 ms. TCP's 16 synchronised windows overflow
    # a shallow buffer, lose tails and wait out 200 ms minimum RTOs (incast), an order of magnitude
    # slower; a 1 ms minimum RTO removes most of that gap (with a 1 ms initial RTO too: a flow that
    # loses its first window has no RTT sample yet and would wait RFC 6298's initial 1 s).
    bottleneck_bits = 16 * (LARGE // P) * 8
    analytical = _dumbbell_all_to_all("analytical", 64)["iteration_time_s"]
    assert analytical == pytest.approx(bottleneck_bits / (LINK_GBPS * 1e9 * EFFICIENCY), rel=0.02)
    shallow = _dumbbell_all_to_all("packet", 64)
    assert shallow["timeouts"] > 0 and shallow["drops"] > 0
    assert shallow["iteration_time_s"] > 10 * analytical
    fast_rto = _dumbbell_all_to_all("packet", 64, tcp={"min_rto_ms": 1, "initial_rto_ms": 1})
    assert fast_rto["iteration_time_s"] < shallow["iteration_time_s"] / 10


def test_where_the_backends_part_slow_start():
    # A 100 us one-way latency makes the BDP 100 Gb/s x 400 us (two hops each way) = 5 MB; a ring
    # step of 128 KB fits in far less than that, so each message is window-limited while TCP's window
    # grows from 10 segments: a few RTTs per step that the alpha-beta model does not charge.
    packet = collective_time_s("all_reduce", "ring", 2**20, link_latency_us=100)
    analytical = collective_time_s("all_reduce", "ring", 2**20, "analytical", link_latency_us=100)
    assert packet > 1.3 * analytical


def one_message_ps(payload_bytes: int) -> int:
    """Hand computation of a message through host link + switch port (both 100 Gb/s, 1 us): the
    switch port starts when the first segment has crossed the NIC and its wire, then (equal rates,
    so no gap) serialises every segment back to back; the last bit then crosses the second wire."""
    segments = [MSS] * (payload_bytes // MSS) + ([payload_bytes % MSS] if payload_bytes % MSS else [])
    wire = [size + HEADER_BYTES for size in segments]
    return wire[0] * PS_PER_BYTE + LINK_LATENCY_PS + sum(wire) * PS_PER_BYTE + LINK_LATENCY_PS


def test_small_ring_all_reduce_is_2_p_minus_1_alphas():
    # 2(p-1) = 14 sequential steps of n/p = 1024 bytes: alpha = one message time, one segment of
    # 1,076 wire bytes crossing two links: 2 x (1,076 x 80 ps + 1 us) = 2.17216 us
    assert one_message_ps(SMALL // P) == 2_172_160
    steps = 2 * (P - 1)
    expected_s = steps * one_message_ps(SMALL // P) / 1e12
    assert collective_time_s("all_reduce", "ring", SMALL) == pytest.approx(expected_s, rel=1e-9)
    assert collective_time_s("all_reduce", "ring", SMALL, "analytical") == pytest.approx(expected_s, rel=0.01)


def test_uncontended_ring_all_reduce_on_a_ring_is_lossless_and_at_the_framed_bandwidth_term():
    # Issue 21 item 3: on a ring topology each NPU sends its ring all-reduce blocks to its neighbour,
    # one hop, alone on that link. Its own packets wait in its host queue instead of overflowing a
    # 16 KiB port buffer (they used to: 204 drops, 4 RTOs, 0.2 s instead of 0.5 ms). Hand
    # computation: p = 4, n = 4 MiB, 2(p-1) = 6 steps of n/p = 1 MiB = 719 segments (718 x 1460 +
    # 296), 1,048,576 + 719 x 40 = 1,077,336 bytes on the wire = 86.18688 us at 80 ps/byte, + 1 us
    # of propagation (one hop: no store-and-forward term) = 87.18688 us a step, 523.12128 us in all.
    # TCP adds its first window's slow start (about one 2.2 us round trip): within 0.5 %.
    p, n = 4, 4 * 2**20
    rows = {backend: engine.run({
        "engine": {"backend": backend},
        "network": {"topology": "ring", "npus": p, "link_gbps": LINK_GBPS, "link_latency_us": 1, "buffer_kb": 16},
        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers, as computed above
        "system": {"endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_reduce", "bytes": n, "iterations": 1},
    })["runs"][0] for backend in ("packet", "analytical")}
    step_ps = (n // p + 719 * 40) * PS_PER_BYTE + LINK_LATENCY_PS
    expected_s = 2 * (p - 1) * step_ps / 1e12
    assert expected_s == pytest.approx(523.12128e-6, rel=1e-12)
    assert rows["packet"]["drops"] == 0 and rows["packet"]["retransmits"] == 0
    assert rows["analytical"]["iteration_time_s"] == pytest.approx(expected_s, rel=1e-6)
    assert 1.0 <= rows["packet"]["iteration_time_s"] / expected_s <= 1.005


def test_forwarded_traffic_on_a_ring_still_meets_the_buffer():
    # Incast on a ring of 8: NPUs 1..7 each send 1 MB to NPU 0, so the ports into NPU 0 (n1->n0,
    # n7->n0) carry their NPU's own flow and up to three forwarded ones. The own packets wait in
    # the host queue; the forwarded ones overflow the 16 KiB buffer and are lost.
    result = engine.run({
        "network": {"topology": "ring", "npus": 8, "link_gbps": LINK_GBPS, "link_latency_us": 1, "buffer_kb": 16},
        "engine": {"link_stats": "all"},
        "tcp": {"min_rto_ms": 1, "initial_rto_ms": 1},
        "workload": {"type": "flows", "pattern": "incast", "senders": 7, "bytes_per_flow": 1_000_000},
    })
    assert result["runs"][0]["status"] == "ok" and result["runs"][0]["drops"] > 0
    drops = {row["link"]: row["drops"] for row in result["links"] if row["drops"]}
    assert {"n1->n0", "n7->n0"} <= set(drops)


def test_small_halving_doubling_all_reduce_is_2_log2_p_alphas():
    # 2 log2(8) = 6 steps: halving with n/2, n/4, n/8, doubling with n/8, n/4, n/2
    sizes = [SMALL // 2, SMALL // 4, SMALL // 8, SMALL // 8, SMALL // 4, SMALL // 2]
    expected_s = sum(one_message_ps(size) for size in sizes) / 1e12
    assert collective_time_s("all_reduce", "halving_doubling", SMALL) == pytest.approx(expected_s, rel=1e-9)
    # fewer, larger steps than the ring: faster when latency dominates
    assert expected_s < 2 * (P - 1) * one_message_ps(SMALL // P) / 1e12


def test_double_binary_tree_approaches_2n_over_b():
    # docs/theory.md#collectives-the-alpha-beta-model: two pipelined trees, each with half the data:
    # about 2 log2(p) alpha + 2 n / B. An
    # inner node receives n/2 from each of two children (reduce) and n/2 from its parent in each
    # tree (broadcast): 2 n through its port. Pipelining in 8 blocks over 3 tree levels adds a fill
    # of about (levels - 1) / blocks = 25 % in the analytical backend.
    two_n_over_b = 2 * LARGE * 8 / (LINK_GBPS * 1e9 * EFFICIENCY)
    analytical = collective_time_s("all_reduce", "double_binary_tree", LARGE, "analytical")
    assert 1.0 <= analytical / two_n_over_b <= 1.3
    # (the packet backend against this fluid time, and why it lags: the next test)


def test_double_binary_tree_lags_the_fluid_model_by_its_windows():
    # Issue 21 item 4 (docs/topologies.md): with nothing lost, TCP windows only grow. A leaf's
    # connection has all its blocks at t = 0 and grows a window of MiBs that waits in its NIC's
    # FIFO; the same NPU's connection of the other tree starts later with 10 segments and, by
    # Little's law, gets its window's share of that FIFO (tests/test_tcp_throughput.py), so its
    # parent waits for it: 1.37 x the fluid model's time here. Capping every window at 64 KiB
    # (1.2 bandwidth-delay products: 100 Gb/s x 4.25 us round trip = 53 KB) bounds the queue a
    # window can build, and the gap falls to 7 % (measured: 1.747 vs 1.628 ms).
    analytical = collective_time_s("all_reduce", "double_binary_tree", LARGE, "analytical")
    packet = collective_time_s("all_reduce", "double_binary_tree", LARGE)
    capped = collective_time_s("all_reduce", "double_binary_tree", LARGE, tcp={"rcv_wnd_kb": 64})
    # a node passes block b on once both children's block b are in: the max-min fluid's equal
    # shares are the best TCP can do, so the fluid time is a lower bound for every window
    assert packet > 1.3 * analytical
    assert analytical <= capped <= 1.10 * analytical


def test_hierarchical_local_bw_aware_cuts_the_scale_out_term():
    # 4 nodes x 4 NPUs; scale-up 400 Gb/s, NICs 100 Gb/s. Baseline: the full all-reduce in each
    # dimension, the scale-out term 2 (4-1)/4 n / B_nic. local_bw_aware: reduce-scatter inside the
    # node first, so the scale-out all-reduce moves n/4: its term shrinks 4x.
    def run(hierarchy: str) -> float:
        return engine.run({
            "engine": {"backend": "analytical"},
            "network": {"topology": "hierarchical", "npus": 16, "npus_per_node": 4, "link_gbps": 100,
                        "link_latency_us": 1, "scaleup_gbps": 400, "scaleup_latency_us": 0.5},
            "system": {"hierarchy": hierarchy, "endpoint_delay_ns": 0},
            "workload": {"type": "collective", "op": "all_reduce", "bytes": LARGE},
        })["runs"][0]["iteration_time_s"]

    bits = LARGE * 8
    scale_up = 2 * 3 / 4 * bits / (400e9 * EFFICIENCY)
    scale_out = 2 * 3 / 4 * bits / (100e9 * EFFICIENCY)
    baseline, aware = run("baseline"), run("local_bw_aware")
    assert baseline == pytest.approx(scale_up + scale_out, rel=0.03)
    # reduce-scatter + all-gather inside the node = one scale-up all-reduce; a quarter of scale-out
    assert aware == pytest.approx(scale_up + scale_out / 4, rel=0.05)


def _end_order(scheduling: str) -> list[int]:
    eventlist = EventList()
    topology = build_topology(eventlist, SwitchNetwork(npus=4), seed=0)
    messages = FluidMessages(eventlist, topology, MSS)
    dimension = Dimension("dim0", ((0, 1, 2, 3),))
    system = SystemLayer(eventlist, messages, [dimension], dimension, {"all_reduce": "ring"}, 1,
                         scheduling, "baseline", 0)
    finished: list[int] = []
    for index in range(3):
        system.collective("all_reduce", 4096, lambda index=index: finished.append(index))
    eventlist.run(10**15)
    return finished


def test_one_active_chunk_per_dimension_in_fifo_or_lifo_order():
    # The first collective finds the dimension idle; the other two wait. FIFO serves them in issue
    # order, LIFO the newest first (ASTRA-sim's scheduling policies).
    assert _end_order("fifo") == [0, 1, 2]
    assert _end_order("lifo") == [0, 2, 1]


def test_splits_pipeline_chunks_without_changing_the_bandwidth_term():
    # 4 chunks run one after another in one dimension: the same bytes, 4x the alpha steps.
    one = collective_time_s("all_reduce", "ring", LARGE, "analytical")
    four = engine.run({
        "engine": {"backend": "analytical"},
        "network": {"topology": "switch", "npus": P, "link_gbps": LINK_GBPS, "link_latency_us": 1},
        "system": {"splits": 4, "endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_reduce", "bytes": LARGE},
    })["runs"][0]["iteration_time_s"]
    extra_alphas = 3 * 2 * (P - 1) * one_message_ps(MSS) / 1e12
    assert one < four <= one + extra_alphas


ENDPOINT_DELAY_PS = 10_000  # system.endpoint_delay_ns = 10


def tiny_message_ps(payload_bytes: int, peers: int, ps_per_byte: int, hop_latency_ps: int) -> int:
    """Hand computation of a step sending one single-packet message to each of `peers` NPUs
    through one switch, after the 10 ns endpoint delay: the NIC serialises the packets back to back,
    the last one then crosses a wire, its switch port (a port of its own, nothing queued) and the
    second wire; `peers` + 1 serialisations in all."""
    return ENDPOINT_DELAY_PS + (peers + 1) * (payload_bytes + 40) * ps_per_byte + 2 * hop_latency_ps


def _out(payload_bytes: int, peers: int = 1) -> int:
    """A step on the 100 Gb/s, 1 us NICs."""
    return tiny_message_ps(payload_bytes, peers, PS_PER_BYTE, LINK_LATENCY_PS)


def _up(payload_bytes: int, peers: int = 1) -> int:
    """A step inside a node of HIERARCHICAL: 400 Gb/s = 20 ps per byte, 0.5 us per hop."""
    return tiny_message_ps(payload_bytes, peers, 20, LINK_LATENCY_PS // 2)


def _pipelined(first_ps: int, second_ps: int) -> int:
    """4 chunks through two dimensions, one chunk at a time in each: the first chunk crosses both,
    the other three follow at the pace of the slower dimension."""
    return first_ps + second_ps + 3 * max(first_ps, second_ps)


HIERARCHICAL = {"topology": "hierarchical", "npus": 16, "npus_per_node": 8, "link_gbps": 100,
                "link_latency_us": 1, "scaleup_gbps": 400, "scaleup_latency_us": 0.5}
# Messages of a few bytes (one packet each) arrive before the receiver's endpoint delay has passed: a
# step must still wait for its own sends before it moves on (a regression of double_binary_tree).
# Times by hand, in ps (None: not computed by hand, only required to finish). workload.bytes = 1024
# in 4 chunks of 256 bytes. One switch of 8 NPUs, the chunks one after another: direct all-reduce,
# a reduce-scatter and an all-gather step of 256 / 8 = 32 bytes to 7 peers; halving-doubling, 128,
# 64, 32, 32, 64, 128 bytes to one peer; ring all-to-all, step s forwards 7 - s blocks of 32 bytes;
# direct all-gather, one step of 32 bytes to 7 peers. HIERARCHICAL (baseline hierarchy): the
# chunk's whole all-reduce inside the node, then across the 2 nodes (direct: 32 bytes to 7 peers
# twice, then 128 bytes to 1 peer twice; halving-doubling: 128, 64, 32, 32, 64, 128 bytes, then
# 128 and 128); the all-gather across nodes first (each NPU's 16 bytes), then inside (its node
# peer's and its own: 32 bytes to 7 peers); the ring all-to-all over all 16 NPUs, step s forwarding
# 15 - s blocks of 16 bytes: rank r's step s waits only for rank r-1's message of step s, so the
# longest chain crosses 15 consecutive ring links, one per step, among them both node-crossing
# links, 8 steps apart: costliest at steps 0 and 8 (240 and 112 bytes), the 13 others in a node.
TINY_MESSAGES = [
    ("all_reduce", "double_binary_tree", None, None),
    ("all_reduce", "direct", 4 * 2 * _out(32, peers=7), _pipelined(2 * _up(32, peers=7), 2 * _out(128))),
    ("all_reduce", "halving_doubling", 4 * sum(_out(size) for size in (128, 64, 32, 32, 64, 128)),
     _pipelined(sum(_up(size) for size in (128, 64, 32, 32, 64, 128)), 2 * _out(128))),
    ("all_to_all", "ring", 4 * sum(_out(32 * (7 - s)) for s in range(7)),
     4 * (sum(_up(16 * (15 - s)) for s in range(15)) + _out(240) - _up(240) + _out(112) - _up(112))),
    ("all_gather", "direct", 4 * _out(32, peers=7), _pipelined(_out(16), _up(32, peers=7))),
]


@pytest.mark.parametrize("op, algorithm, switch_ps, hierarchical_ps", TINY_MESSAGES,
                         ids=[f"{op}-{algorithm}" for op, algorithm, *_ in TINY_MESSAGES])
def test_every_algorithm_with_endpoint_delay_and_tiny_messages_takes_its_hand_computed_time(
        op, algorithm, switch_ps, hierarchical_ps):
    switch = {"topology": "switch", "npus": 8, "link_gbps": 100, "link_latency_us": 1}
    for network, expected_ps in ((switch, switch_ps), (HIERARCHICAL, hierarchical_ps)):
        row = engine.run({"network": {**network, "mtu_bytes": 1500},
                          "host": {"tx_jitter_ns": 0},  # exact transmit timing: the hand computation's
                          "tcp": {"timestamps": False},  # 40 header bytes a packet
                          "system": {op: algorithm, "endpoint_delay_ns": 10, "splits": 4},
                          "workload": {"type": "collective", "op": op, "bytes": 1024}})["runs"][0]
        assert row["status"] == "ok", (network["topology"], row["error"])
        if expected_ps is not None:
            assert row["iteration_time_s"] == pytest.approx(expected_ps / 1e12, rel=1e-9), network["topology"]


def test_hierarchical_direct_all_to_all_is_staggered_across_nodes():
    # With 8 NPUs per node, a naive order makes all 8 NPUs of a node send to the same remote NPU
    # first: an 8-to-1 burst into its NIC port. The two-level order sends the i-th NPU of node n to
    # the i-th NPU of node n+1 first, so each remote port has one sender at a time: no drops even
    # with a 16 KiB buffer, and the packet backend matches the fluid model. With exact transmit timing,
    # as test_staggered_direct_all_to_all_needs_no_buffer (why there).
    network = {**HIERARCHICAL, "buffer_kb": 16}
    workload = {"type": "collective", "op": "all_to_all", "bytes": 4 * 2**20, "iterations": 2}
    packet = engine.run({"network": network, "host": {"tx_jitter_ns": 0}, "workload": workload})["runs"][0]
    analytical = engine.run({"engine": {"backend": "analytical"}, "network": network, "workload": workload})["runs"][0]
    assert packet["drops"] == 0
    assert packet["iteration_time_s"] == pytest.approx(analytical["iteration_time_s"], rel=0.10)


@pytest.mark.parametrize("op, algorithm", [
    ("all_reduce", "ring"), ("all_to_all", "ring"), ("all_gather", "ring"), ("all_reduce", "direct"),
    ("all_to_all", "direct"), ("all_reduce", "halving_doubling"), ("reduce_scatter", "halving_doubling"),
    ("all_gather", "halving_doubling"),
])
def test_every_rank_program_is_its_symmetric_steps(op, algorithm):
    # The per-rank programs the packet and analytical backends run are expanded from the symmetric
    # description the alpha_beta backend costs: one source for the step sizes and peers.
    p = 8
    steps = symmetric_steps(op, algorithm, p, 100_000)
    (program,) = plan(op, algorithm, p, 100_000, node_size=2)
    for rank, rank_steps in enumerate(program):
        assert len(rank_steps) == len(steps)
        for step, symmetric in zip(rank_steps, steps):
            peers = {RING: {(rank + 1) % p}, XOR: {rank ^ symmetric.mask}}.get(symmetric.pattern,
                                                                             set(range(p)) - {rank})
            assert {(rank + send.peer_offset) % p for send in step.sends} == peers and step.receives == len(peers)
            assert {send.size_bytes for send in step.sends} == {symmetric.size_bytes}
    assert symmetric_steps("all_reduce", "double_binary_tree", p, 100_000) is None  # ranks differ in role
