"""`system.astra_compat`: ASTRA-sim 1.0's choices where netsweep deliberately differs, each against a
hand computation of ASTRA-sim 1.0's rule (read in its source: commit 07d5d19 of branch ASTRA-sim-1.0 of
github.com/astra-sim/astra-sim, and its analytical backend github.com/astra-sim/astra-network-analytical
at commit d27635b, the submodule extern/network_backend/analytical; paths below are in those trees):

(a) on alpha_beta, the analytical network's cost: every message alone, whole and cut-through, hops x
    link latency + payload / bandwidth (AnalyticalNetwork::sim_send, HierarchicalTopology::send), and
    a direct collective keeps all p-1 messages in flight (AllToAll.cc, window -1), so a direct
    all-to-all lasts one message;
(b) the tree all-reduce sends the whole chunk up and down one tree, unpipelined
    (DoubleBinaryTreeAllReduce.cc on the trees of BinaryTree.cc);
(c) every collective's phases go through the queues of the network's dimensions (Sys.cc): an
    all-to-all issued while an all-reduce runs starts when it ends;
(d) the ring all-to-all is p(p-1)/2 messages of one block, one after another (Ring.cc).

Network of every case: 100 Gb/s and 1 us links, one switch unless said; netsweep's TCP/IP framing,
where a backend charges it, with MSS 1,460 bytes and 40-byte headers (timestamps off).
"""

from __future__ import annotations

import pytest

import engine
from engine.backends.analytical import FluidMessages
from engine.config import ConfigError, HierarchicalNetwork, SwitchNetwork, load_config
from engine.eventlist import EventList
from engine.system import AlphaBetaSystemLayer, Dimension, SystemLayer
from engine.system.algorithms import RING, SymmetricStep, astra_tree_links, symmetric_steps
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


def astra_message_ns(payload_bytes: int, hops: int) -> int:
    """ASTRA-sim 1.0's latency of one message, by hand from its source (astra-network-analytical):
    src/topology/HierarchicalTopology.cc:258-283 (`HierarchicalTopology::send`): `communication_latency`
    (an int, line 258, so each `+=` truncates to whole ns) = hops x link-latency (linkLatency, lines
    227-231; a Switch is 2 hops, line 279; a Ring the shorter way round, lines 262-266) + payload /
    bandwidth (Topology.cc:45-49), NIC and router latencies 0. The bandwidth is 100 Gb/s = 12.5 bytes
    per ns (main.cc:175-176 turns `link-bandwidth` GiB/s into B/ns); AnalyticalNetwork.cc:96-114
    (`sim_send`) schedules the delivery that long after the send, whatever else is in flight."""
    return hops * 1000 + payload_bytes * 2 // 25  # payload / 12.5 B/ns, truncated


ENDPOINT_DELAY_NS = 10  # ASTRA-sim's `endpoint-delay`: its memory bus charges it per packet bundle
# (astra-sim/system/MemBus.cc:61-65, `communication_delay`), one bundle per message and one more per
# phase (its first, zero-latency bundle): netsweep's system.endpoint_delay_ns charges it per step


def astra_error_ns(messages: int) -> int:
    """How far netsweep's `alpha_beta` with astra_compat may sit from ASTRA-sim 1.0's rule, by
    construction: ASTRA-sim truncates each message's latency to whole ns (under 1 ns a message,
    netsweep keeps the fraction) and charges one more endpoint delay per phase (10 ns)."""
    return messages + ENDPOINT_DELAY_NS


def collective_ps(op: str, size_bytes: int, backend: str, astra_compat: bool, npus: int = 16,
                  endpoint_delay_ns: float = 0, topology: str = "switch", **system) -> int:
    row = engine.run({
        "engine": {"backend": backend},
        "network": {"topology": topology, "npus": npus, "link_gbps": 100, "link_latency_us": 1, "buffer_kb": None},
        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers: one_message_ps's arithmetic
        "system": {"astra_compat": astra_compat, "endpoint_delay_ns": endpoint_delay_ns, **system},
        "workload": {"type": "collective", "op": op, "bytes": size_bytes},
    })["runs"][0]
    assert row["status"] == "ok", row["error"]
    return round(row["iteration_time_s"] * 1e12)


# -- (a) ASTRA-sim's analytical network on alpha_beta ------------------------------------------------

def micro_ps(tmp_path, comm: str, size_bytes: int, npus: int, topology: str, **system) -> int:
    """netsweep's alpha_beta with astra_compat on an ASTRA-sim MICRO workload of one collective (as
    ASTRA-sim's inputs/workload/microAllReduce.txt), ps."""
    path = tmp_path / "micro.txt"
    path.write_text(f"MICRO\n1\nc -1 0 NONE 0 0 NONE 0 0 {comm} {size_bytes} 5\n")
    row = engine.run({
        "engine": {"backend": "alpha_beta"},
        "network": {"topology": topology, "npus": npus, "link_gbps": 100, "link_latency_us": 1},
        "system": {"astra_compat": True, "endpoint_delay_ns": ENDPOINT_DELAY_NS, "splits": 1, **system},
        "workload": {"type": "astra", "path": str(path), "iterations": 1, "cycle_ns": 1.0},
    })["runs"][0]
    assert row["status"] == "ok", row["error"]
    return round(row["iteration_time_s"] * 1e12)


def test_micro_ring_all_reduce_on_a_switch_is_astra_sims_rule(tmp_path):
    # ALLREDUCE of 1 MiB on 8 NPUs of a switch, ring, one chunk. ASTRA-sim 1.0 (Ring.cc:48-49:
    # `stream_count = 2 * (nodes_in_ring - 1)`, 14 messages one after another; Ring.cc:76-78:
    # `msg_size = data_size / nodes_in_ring` = 131,072 bytes), each message 2 x 1,000 ns + 131,072 /
    # 12.5 = 10,485.76 -> 12,485 ns, + the 10 ns endpoint delay: 14 x 12,495 + 10 = 174,940 ns (its
    # AnalyticalAstra prints 174,940 ns, 174,945 with the update delay of 5 in the file)
    assert 14 * (astra_message_ns(131_072, hops=2) + ENDPOINT_DELAY_NS) + ENDPOINT_DELAY_NS == 174_940
    ours_ps = micro_ps(tmp_path, "ALLREDUCE", 2**20, 8, "switch")
    assert abs(ours_ps - 174_940_000) <= astra_error_ns(14) * 1000
    # no TCP/IP header, no store-and-forward: exactly 14 x (10 ns + 2 us + 131,072 x 80 ps)
    assert ours_ps == 14 * (10_000 + 2_000_000 + 131_072 * 80)


@pytest.mark.parametrize("npus, topology, hops, messages, block_bytes, astra_ns", [
    # 8 NPUs of a switch: 28 messages of 131,072 bytes, 2 hops: 28 x (12,485 + 10) + 10
    (8, "switch", 2, 28, 131_072, 349_870),
    # 16 NPUs of a ring: 120 messages of 65,536 bytes to the neighbour, 1 hop:
    # 1,000 + 5,242.88 -> 6,242 ns; 120 x (6,242 + 10) + 10
    (16, "ring", 1, 120, 65_536, 750_250),
])
def test_ring_all_to_all_is_astra_sims_rule(tmp_path, npus, topology, hops, messages, block_bytes, astra_ns):
    # ALLTOALL of 1 MiB with ASTRA-sim's ring: Ring.cc:51-52 `stream_count = ((nodes_in_ring - 1) *
    # nodes_in_ring) / 2` messages; Ring.cc:90-92 `msg_size = data_size / nodes_in_ring`; one in flight
    # (Ring.cc:53-58 `parallel_reduce = 1` under the `Normal` injection policy, which
    # astra-sim/system/Sys.cc:1217-1225 passes); each to the next NPU of the ring
    # (AnalyticalAstra prints 349,875 and 750,255 ns: these + the update delay of 5 in the file)
    assert messages == npus * (npus - 1) // 2 and block_bytes == 2**20 // npus
    assert messages * (astra_message_ns(block_bytes, hops) + ENDPOINT_DELAY_NS) + ENDPOINT_DELAY_NS == astra_ns
    ours_ps = micro_ps(tmp_path, "ALLTOALL", 2**20, npus, topology, all_to_all="ring")
    assert abs(ours_ps - astra_ns * 1000) <= astra_error_ns(messages) * 1000
    # netsweep's own ring all-to-all (astra_compat false): p-1 steps of decreasing size, far fewer latencies
    assert symmetric_steps("all_to_all", "ring", npus, 2**20) == \
        [SymmetricStep(RING, block_bytes * (npus - 1 - s)) for s in range(npus - 1)]
    assert symmetric_steps("all_to_all", "ring", npus, 2**20, astra_compat=True) == \
        [SymmetricStep(RING, block_bytes)] * messages


def test_astra_sims_ring_all_to_all_is_a_system_layer_choice():
    # On the fluid backend too the ring all-to-all becomes 28 messages one after another (8 NPUs, 1 MiB);
    # each is netsweep's cost there: 90 segments (134,672 wire bytes), the first packet's
    # store-and-forward at the switch, 2 us and the 10 ns endpoint delay
    assert one_message_ps(131_072) == 134_672 * 80 + 1500 * 80 + 2_000_000
    assert collective_ps("all_to_all", 2**20, "analytical", True, npus=8, endpoint_delay_ns=10, all_to_all="ring") == \
        pytest.approx(28 * (10_000 + one_message_ps(131_072)), rel=1e-9)  # float rates of the fluid model


def test_direct_all_to_all_lasts_one_message_on_alpha_beta():
    # 16 MiB per NPU on 16 NPUs: 15 messages of 1 MiB. ASTRA-sim 1.0 keeps all 15 in flight
    # (AllToAll.cc:33-34: `parallel_reduce = nodes_in_ring - 1` for the window -1 of `direct`), each
    # timed alone: one message, 2,000 + 1,048,576 / 12.5 = 85,886.08 -> 85,886 ns, + 10 ns endpoint
    # delay, + 10 ns for the phase's first bundle (AnalyticalAstra: 85.9 us)
    size = 16 * 2**20
    astra_ns = astra_message_ns(2**20, hops=2) + 2 * ENDPOINT_DELAY_NS
    assert astra_ns == 85_906
    ours_ps = collective_ps("all_to_all", size, "alpha_beta", True, endpoint_delay_ns=10)
    assert abs(ours_ps - astra_ns * 1000) <= astra_error_ns(1) * 1000
    assert ours_ps == 10_000 + 2_000_000 + 2**20 * 80
    # netsweep's own: the 15 messages share the NIC, each with its TCP/IP framing (719 segments,
    # 1,077,336 wire bytes), 15 x 1,077,336 x 80 ps + alpha = 1,294.9 us
    assert collective_ps("all_to_all", size, "alpha_beta", False, endpoint_delay_ns=10) == \
        10_000 + 15 * 1_077_336 * 80 + 1500 * 80 + 2_000_000


def test_phase_backend_keeps_link_sharing():
    # astra_compat's network cost is alpha_beta's only: the phase backend (whose phases alpha_beta's
    # layer times) shares the NIC as the fluid backends do
    size = 16 * 2**20
    assert collective_ps("all_to_all", size, "phase", True) == collective_ps("all_to_all", size, "phase", False)


def test_messages_alone_is_alpha_betas_rule_only():
    # The fluid backend shares the NIC whatever astra_compat says: (a) is alpha_beta's network model.
    size = 16 * 2**20
    assert (collective_ps("all_to_all", size, "analytical", True)
            == collective_ps("all_to_all", size, "analytical", False))


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
    # 16 NPUs: leaf -> 3 inner levels -> root is log2(16) = 4 hops, each the whole chunk alone, as
    # ASTRA-sim's network costs it: 2 x 4 messages of 2 x 1 us + 1,168,000 / 12.5 = 95,440 ns
    assert astra_message_ns(N, hops=2) == 95_440
    assert collective_ps("all_reduce", N, "alpha_beta", True, all_reduce="double_binary_tree") == 8 * 95_440_000


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
    # (docs/theory.md#collectives-the-alpha-beta-model: a packet-level time sits a few percent above
    # the bandwidth term).
    expected_ps = 14 * 1_200_000 * PS_PER_BYTE + 8 * (2 * LINK_LATENCY_PS + 1500 * PS_PER_BYTE)
    packet_ps = collective_ps("all_reduce", N, "packet", True, all_reduce="double_binary_tree")
    assert expected_ps <= packet_ps <= 1.03 * expected_ps


# -- (c) one queue -------------------------------------------------------------------------------

SMALL = 8 * 1024  # 8 KiB on 8 NPUs: messages of 1,024 bytes, one segment of 1,064 wire bytes
ASTRA_MESSAGE_PS = 2 * LINK_LATENCY_PS + 1024 * PS_PER_BYTE  # one such message on ASTRA-sim's network


def _system(backend: str, astra_compat: bool) -> SystemLayer:
    eventlist = EventList()
    topology = build_topology(eventlist, SwitchNetwork(npus=8), seed=0)
    dim0 = Dimension("dim0", (tuple(range(8)),))
    flat = Dimension("flat", (tuple(range(8)),))
    algorithms = {"all_reduce": "ring", "all_to_all": "direct"}
    if backend == "alpha_beta":
        return AlphaBetaSystemLayer(eventlist, topology, MSS, [dim0], flat, algorithms, 1, "lifo", "baseline", 0,
                                    astra_compat=astra_compat, astra_network=astra_compat)
    return SystemLayer(eventlist, FluidMessages(eventlist, topology, MSS), [dim0], flat, algorithms, 1,
                       "lifo", "baseline", 0, astra_compat)


def _all_to_all_during_all_reduce(system: SystemLayer) -> tuple[int, int]:
    """End of a ring all-reduce issued at 0 and of a direct all-to-all issued 1 us later."""
    all_reduce = system.collective("all_reduce", SMALL)
    records = []
    system.eventlist.call_at(LINK_LATENCY_PS, lambda: records.append(system.collective("all_to_all", SMALL)))
    system.eventlist.run(10**15)
    return all_reduce.end_ps, records[0].end_ps


@pytest.mark.parametrize("backend, message_ps, all_to_all_alone_ps", [
    # alpha_beta on ASTRA-sim's network: 2 (p - 1) = 14 ring steps of one message; the all-to-all one message
    ("alpha_beta", ASTRA_MESSAGE_PS, ASTRA_MESSAGE_PS),
    # the fluid backend, with TCP/IP framing: 7 messages share the NIC, the first packet's
    # store-and-forward and 2 us
    ("analytical", one_message_ps(1024), 7 * 1064 * PS_PER_BYTE + 1064 * PS_PER_BYTE + 2 * LINK_LATENCY_PS),
])
def test_one_queue_all_to_all_waits_for_the_running_all_reduce(backend, message_ps, all_to_all_alone_ps):
    all_reduce_end, all_to_all_end = _all_to_all_during_all_reduce(_system(backend, astra_compat=True))
    assert all_reduce_end == pytest.approx(14 * message_ps, rel=1e-9)
    assert all_to_all_end == pytest.approx(14 * message_ps + all_to_all_alone_ps, rel=1e-9)


def test_own_queue_all_to_all_runs_beside_the_all_reduce():
    # netsweep's default on alpha_beta (no contention): issued at 1 us, the all-to-all takes its
    # own time (7 messages through the NIC), whatever the all-reduce does
    all_reduce_end, all_to_all_end = _all_to_all_during_all_reduce(_system("alpha_beta", astra_compat=False))
    assert all_reduce_end == 14 * one_message_ps(1024)
    assert all_to_all_end == LINK_LATENCY_PS + 7 * 1064 * PS_PER_BYTE + 1064 * PS_PER_BYTE + 2 * LINK_LATENCY_PS


def _hierarchical_alpha_beta(astra_compat: bool) -> AlphaBetaSystemLayer:
    """2 nodes x 4 NPUs: dimension 0 the NPUs of a node (400 Gb/s, 0.5 us), dimension 1 across nodes."""
    eventlist = EventList()
    topology = build_topology(eventlist, HierarchicalNetwork(npus=8, npus_per_node=4, scaleup_gbps=400,
                                                             scaleup_latency_us=0.5), seed=0)
    dimensions = [Dimension(f"dim{i}", groups) for i, groups in enumerate(topology.dimensions())]
    flat = Dimension("flat", (tuple(range(8)),), 4)
    return AlphaBetaSystemLayer(eventlist, topology, MSS, dimensions, flat,
                                {"all_reduce": "ring", "all_to_all": "direct"}, 1, "lifo", "baseline", 0,
                                astra_compat=astra_compat, astra_network=astra_compat)


def test_one_queue_on_two_dimensions_is_the_first_dimensions():
    # ASTRA-sim 1.0's one-phase all-to-all over all NPUs (`oneDirect`) takes a queue of the first
    # dimension: issued while an all-reduce's phase in the node runs, it starts when that phase
    # ends (and then runs beside the all-reduce's phase across nodes, which has a queue of its own).
    # The node phase: a ring all-reduce of 8 KiB on 4 NPUs, 6 steps of 2 KiB at 20 ps per byte
    # through the node's switch, on ASTRA-sim's network: 2 x 0.5 us each, no header, cut-through
    node_phase_ps = 6 * (2048 * 20 + 2 * 500_000)

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
