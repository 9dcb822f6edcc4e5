"""`system.astra_compat`: ASTRA-sim 1.0's three choices where netsweep deliberately differs, each
against a hand computation of ASTRA-sim 1.0's rule (read in its source, branch ASTRA-sim-1.0 of
github.com/astra-sim/astra-sim and its analytical backend astra-network-analytical):

(a) the analytical network times every message alone (AnalyticalNetwork::sim_send) and a direct
    collective keeps all p-1 messages in flight (AllToAll.cc, window -1): on alpha_beta a direct
    all-to-all lasts one message;
(b) the tree all-reduce sends the whole chunk up and down one tree, unpipelined
    (DoubleBinaryTreeAllReduce.cc on the trees of BinaryTree.cc);
(c) every collective's phases go through the queues of the network's dimensions (Sys.cc): an
    all-to-all issued while an all-reduce runs starts when it ends.

Network of every case: one switch, 100 Gb/s and 1 us links, MSS 1,460 bytes.
"""

from __future__ import annotations

import pytest

import engine
from engine.backends.analytical import FluidMessages
from engine.config import ConfigError, NetworkConfig, load_config
from engine.eventlist import EventList
from engine.system import AlphaBetaSystemLayer, Dimension, SystemLayer
from engine.system.algorithms import astra_tree_links
from engine.topology import build_topology

PS_PER_BYTE = 80  # 100 Gb/s: 8 bits / 100e9 b/s = 80 ps per byte
LINK_LATENCY_PS = 1_000_000  # 1 us
MSS = 1460


def one_message_ps(payload_bytes: int) -> int:
    """One message alone through host link and switch port: its wire bytes (a 40-byte header per
    segment) serialised once, its first packet once more at the switch (store-and-forward), two
    propagation delays."""
    segments = -(-payload_bytes // MSS)
    first_packet = min(MSS, payload_bytes) + 40
    return (payload_bytes + 40 * segments) * PS_PER_BYTE + first_packet * PS_PER_BYTE + 2 * LINK_LATENCY_PS


def collective_ps(op: str, size_bytes: int, backend: str, astra_compat: bool, npus: int = 16,
                  endpoint_delay_ns: float = 0, **system) -> int:
    row = engine.run({
        "engine": {"backend": backend},
        "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1, "buffer_kb": None},
        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers: one_message_ps's arithmetic
        "system": {"astra_compat": astra_compat, "endpoint_delay_ns": endpoint_delay_ns, **system},
        "workload": {"type": "collective", "op": op, "bytes": size_bytes},
    })["runs"][0]
    assert row["status"] == "ok", row["error"]
    return round(row["iteration_time_s"] * 1e12)


# -- (a) messages alone on alpha_beta ------------------------------------------------------------

def test_direct_all_to_all_lasts_one_message_on_alpha_beta():
    # 16 MiB per NPU on 16 NPUs: 15 messages of 1 MiB (719 segments: 718 full, one of 296 bytes,
    # 1,077,336 wire bytes). ASTRA-sim 1.0 keeps all 15 in flight, each timed alone: one message,
    # 1,077,336 x 80 + 1,500 x 80 + 2 us = 88.30688 us, plus the 10 ns endpoint delay
    size = 16 * 2**20
    assert one_message_ps(2**20) == 1_077_336 * 80 + 1500 * 80 + 2_000_000 == 88_306_880
    assert collective_ps("all_to_all", size, "alpha_beta", True, endpoint_delay_ns=10) == 10_000 + 88_306_880
    # netsweep's own: the 15 messages share the NIC, 15 x 1,077,336 x 80 ps + alpha = 1,294.9 us
    assert collective_ps("all_to_all", size, "alpha_beta", False, endpoint_delay_ns=10) == \
        10_000 + 15 * 1_077_336 * 80 + 1500 * 80 + 2_000_000


def test_messages_alone_is_alpha_betas_rule_only():
    # The fluid backend shares the NIC whatever astra_compat says: (a) is alpha_beta's network model.
    size = 16 * 2**20
    assert collective_ps("all_to_all", size, "analytical", True) == collective_ps("all_to_all", size, "analytical", False)


# -- (b) ASTRA-sim 1.0's tree ---------------------------------------------------------------------

def test_trees_are_astra_sims_in_order_binary_trees():
    # BinaryTree.cc for 8 NPUs: a complete tree of 3 levels numbered in order (left, node, right),
    # under a root with one child. RootMax: subtree 0..6 (its root 3; 1 and 5; leaves 0, 2, 4, 6),
    # root 7. RootMin: root 0, subtree 1..7 (its root 4; 2 and 6; leaves 1, 3, 5, 7).
    parent, children = astra_tree_links(8, root_max=True)
    assert parent == [1, 3, 1, 7, 5, 3, 5, -1]
    assert children == [[], [0, 2], [], [1, 5], [], [4, 6], [], [3]]
    parent, children = astra_tree_links(8, root_max=False)
    assert parent == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert children == [[4], [], [1, 3], [], [2, 6], [], [5, 7], []]


N = 8 * 100 * MSS  # 1,168,000 bytes: 800 full segments, 1,200,000 wire bytes = 96 us at 100 Gb/s


def test_unpipelined_tree_on_alpha_beta_is_depth_times_chunk_up_and_down():
    # 16 NPUs: leaf -> 3 inner levels -> root is log2(16) = 4 hops, each the whole chunk alone:
    # 2 x 4 messages of 96 us + 1,500 x 80 ps + 2 us
    assert one_message_ps(N) == 98_120_000
    assert collective_ps("all_reduce", N, "alpha_beta", True, all_reduce="double_binary_tree") == 8 * 98_120_000


def test_unpipelined_tree_on_analytical_shares_links_at_inner_nodes():
    # The fluid backend shares links: an inner node's two children send into its one link at
    # once (up), and it sends to both through its NIC (down), so those hops carry 2 x 96 us; the
    # hops between the root and its only child carry 96 us. Up 3 shared + 1, down 1 + 3 shared:
    # 14 x 96 us of serialisation, and 8 x (2 us + 1,500 x 80 ps store-and-forward)
    expected_ps = 14 * 1_200_000 * PS_PER_BYTE + 8 * (2 * LINK_LATENCY_PS + 1500 * PS_PER_BYTE)
    assert collective_ps("all_reduce", N, "analytical", True, all_reduce="double_binary_tree") == \
        pytest.approx(expected_ps, rel=1e-9)  # float rates of the fluid model
    # netsweep's (NCCL's two pipelined trees, half the data each) is several times faster
    assert collective_ps("all_reduce", N, "analytical", False, all_reduce="double_binary_tree") < expected_ps / 3


def test_unpipelined_tree_on_packets_sits_a_few_percent_above_the_fluid_time():
    # Same tree over TCP (unlimited buffers: no loss): slow start and ACKs add a few percent
    # (docs/theory.md#collectives-the-alpha-beta-model: a packet-level time sits a few percent above the bandwidth term).
    expected_ps = 14 * 1_200_000 * PS_PER_BYTE + 8 * (2 * LINK_LATENCY_PS + 1500 * PS_PER_BYTE)
    packet_ps = collective_ps("all_reduce", N, "packet", True, all_reduce="double_binary_tree")
    assert expected_ps <= packet_ps <= 1.03 * expected_ps


# -- (c) one queue -------------------------------------------------------------------------------

SMALL = 8 * 1024  # 8 KiB on 8 NPUs: messages of 1,024 bytes, one segment of 1,064 wire bytes
RING_ALL_REDUCE_PS = 14 * one_message_ps(1024)  # 2 (p - 1) steps of one message, alone on a switch


def _system(backend: str, astra_compat: bool) -> SystemLayer:
    eventlist = EventList()
    topology = build_topology(eventlist, NetworkConfig(npus=8), seed=0)
    dim0 = Dimension("dim0", (tuple(range(8)),))
    flat = Dimension("flat", (tuple(range(8)),))
    algorithms = {"all_reduce": "ring", "all_to_all": "direct"}
    if backend == "alpha_beta":
        return AlphaBetaSystemLayer(eventlist, topology, MSS, [dim0], flat, algorithms, 1, "lifo", "baseline", 0,
                                    astra_compat=astra_compat)
    return SystemLayer(eventlist, FluidMessages(eventlist, topology, MSS), [dim0], flat, algorithms, 1,
                       "lifo", "baseline", 0, astra_compat)


def _all_to_all_during_all_reduce(system: SystemLayer) -> tuple[int, int]:
    """End of a ring all-reduce issued at 0 and of a direct all-to-all issued 1 us later."""
    all_reduce = system.collective("all_reduce", SMALL)
    records = []
    system.eventlist.call_at(LINK_LATENCY_PS, lambda: records.append(system.collective("all_to_all", SMALL)))
    system.eventlist.run(10**15)
    return all_reduce.end_ps, records[0].end_ps


@pytest.mark.parametrize("backend, all_to_all_alone_ps", [
    # alpha_beta with messages alone: one 1,024-byte message
    ("alpha_beta", one_message_ps(1024)),
    # the fluid backend: 7 messages share the NIC, the first packet's store-and-forward and 2 us
    ("analytical", 7 * 1064 * PS_PER_BYTE + 1064 * PS_PER_BYTE + 2 * LINK_LATENCY_PS),
])
def test_one_queue_all_to_all_waits_for_the_running_all_reduce(backend, all_to_all_alone_ps):
    all_reduce_end, all_to_all_end = _all_to_all_during_all_reduce(_system(backend, astra_compat=True))
    assert all_reduce_end == pytest.approx(RING_ALL_REDUCE_PS, rel=1e-9)
    assert all_to_all_end == pytest.approx(RING_ALL_REDUCE_PS + all_to_all_alone_ps, rel=1e-9)


def test_own_queue_all_to_all_runs_beside_the_all_reduce():
    # netsweep's default on alpha_beta (no contention): issued at 1 us, the all-to-all takes its
    # own time (7 messages through the NIC), whatever the all-reduce does
    all_reduce_end, all_to_all_end = _all_to_all_during_all_reduce(_system("alpha_beta", astra_compat=False))
    assert all_reduce_end == RING_ALL_REDUCE_PS
    assert all_to_all_end == LINK_LATENCY_PS + 7 * 1064 * PS_PER_BYTE + 1064 * PS_PER_BYTE + 2 * LINK_LATENCY_PS


def _hierarchical_alpha_beta(astra_compat: bool) -> AlphaBetaSystemLayer:
    """2 nodes x 4 NPUs: dimension 0 the NPUs of a node (400 Gb/s, 0.5 us), dimension 1 across nodes."""
    eventlist = EventList()
    topology = build_topology(eventlist, NetworkConfig(topology="hierarchical", npus=8, npus_per_node=4,
                                                       scaleup_gbps=400, scaleup_latency_us=0.5), seed=0)
    dimensions = [Dimension(f"dim{i}", groups) for i, groups in enumerate(topology.dimensions())]
    flat = Dimension("flat", (tuple(range(8)),), 4)
    return AlphaBetaSystemLayer(eventlist, topology, MSS, dimensions, flat, {"all_reduce": "ring", "all_to_all": "direct"},
                                1, "lifo", "baseline", 0, astra_compat=astra_compat)


def test_one_queue_on_two_dimensions_is_the_first_dimensions():
    # ASTRA-sim 1.0's one-phase all-to-all over all NPUs (`oneDirect`) takes a queue of the first
    # dimension: issued while an all-reduce's phase in the node runs, it starts when that phase
    # ends (and then runs beside the all-reduce's phase across nodes, which has a queue of its own).
    # The node phase: a ring all-reduce of 8 KiB on 4 NPUs, 6 steps of 2 KiB (2 segments, 2,128 wire
    # bytes) at 20 ps per byte, through the node's switch: store-and-forward of the first packet
    # (1,500 bytes) and 2 x 0.5 us each
    node_phase_ps = 6 * (2128 * 20 + 1500 * 20 + 2 * 500_000)

    def alone_ps(astra_compat: bool) -> int:
        system = _hierarchical_alpha_beta(astra_compat)
        record = system.collective("all_to_all", SMALL)
        system.eventlist.run(10**15)
        return record.end_ps

    _, all_to_all_end = _all_to_all_during_all_reduce(_hierarchical_alpha_beta(astra_compat=True))
    assert all_to_all_end == node_phase_ps + alone_ps(True)
    _, all_to_all_end = _all_to_all_during_all_reduce(_hierarchical_alpha_beta(astra_compat=False))
    assert all_to_all_end == LINK_LATENCY_PS + alone_ps(False)


def test_dlrm_collectives_are_served_one_at_a_time():
    # The bundled DLRM workload on alpha_beta (no contention, so a collective served alone always
    # takes the same time): with one queue the collectives form a single server, taken in order of
    # their ends each starts when it was issued or when the previous one ended, whichever is later,
    # and lasts its time alone. (Embedding all-to-alls issued while weight-gradient all-reduces run
    # wait for them: ASTRA-sim 1.0's one queue per dimension.)
    def rows(astra_compat: bool) -> list[dict]:
        return engine.run({"engine": {"backend": "alpha_beta"}, "network": {"topology": "switch", "npus": 16},
                           "tcp": {"timestamps": False},  # as collective_ps
                           "system": {"astra_compat": astra_compat},
                           "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt",
                                        "iterations": 2}})["collectives"]

    served = sorted(rows(True), key=lambda r: r["end_s"])
    alone_ps = {(r["op"], r["bytes"]): collective_ps(r["op"], r["bytes"], "alpha_beta", True, endpoint_delay_ns=10)
                for r in served}
    free_ps, waited = 0, 0
    for record in served:
        issued_ps = round(record["start_s"] * 1e12)
        waited += record["op"] == "all_to_all" and free_ps > issued_ps
        free_ps = max(issued_ps, free_ps) + alone_ps[(record["op"], record["bytes"])]
        assert round(record["end_s"] * 1e12) == free_ps
    assert waited  # the case the switch is about happened
    # netsweep's own queue: every all-to-all takes its time alone (the all-reduces share the other queue)
    for record in (r for r in rows(False) if r["op"] == "all_to_all"):
        assert round(record["duration_s"] * 1e12) == collective_ps("all_to_all", record["bytes"], "alpha_beta", False,
                                                                   endpoint_delay_ns=10)


# -- configuration ---------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, key, message", [
    ({"system": {"astra_compat": "yes"}}, "system.astra_compat", "true or false"),
    ({"system": {"astra_compat": True, "all_reduce": "double_binary_tree"}, "network": {"npus": 12}},
     "system.astra_compat", "power-of-two"),
    ({"system": {"astra_compat": True, "all_reduce": "double_binary_tree"},
      "network": {"topology": "hierarchical", "npus": 24, "npus_per_node": 8, "scaleup_gbps": 400,
                  "scaleup_latency_us": 0.5}}, "system.astra_compat", "groups of 3 NPUs"),
    ({"system": {"astra_compat": True}, "workload": {"type": "flows", "pattern": "incast", "senders": 3}},
     "system.astra_compat", "flows"),
])
def test_impossible_combinations_are_refused_naming_the_key(overrides, key, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config({"network": {"npus": 4}, **overrides})
    assert error.value.key == key
