"""Topologies: which links a route crosses, at which rate, and the exact timing of one packet.

Timing is hand-computed: serialisation = bytes * 8 bits/byte / rate; at 100 Gb/s one byte takes
8 / 1e11 s = 80 ps, so a 1500-byte packet takes 120,000 ps = 120 ns. A store-and-forward hop costs
serialisation + propagation latency.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

import engine
from engine import load_config
from engine.config import smallest_fat_tree_k
from engine.eventlist import EventList
from engine.links import Link, Packet, PacketSink
from engine.topology import build_topology
from engine.units import PS_PER_NS, PS_PER_US, gbps_to_bps, serialisation_ps


def network(**overrides):
    mapping = {"network": overrides, "workload": {"flows": [{"src": 0, "dst": 1, "bytes": 1000}]}}
    return load_config(mapping).network


def build(seed: int = 0, **overrides):
    eventlist = EventList()
    return eventlist, build_topology(eventlist, network(**overrides), seed)


class RecordingSink(PacketSink):
    """The end of a route: records (arrival time, packet)."""

    def __init__(self, eventlist: EventList) -> None:
        self.eventlist = eventlist
        self.arrivals: list[tuple[int, Packet]] = []

    def receive_packet(self, pkt: Packet) -> None:
        self.arrivals.append((self.eventlist.now_ps, pkt))


def send_packet(eventlist, links, sink, size_bytes=1500, at_ps=0):
    pkt = Packet(tuple(links) + (sink,), size_bytes, size_bytes - 40, 0, 0, at_ps, False, False)
    if at_ps == eventlist.now_ps:
        pkt.route[0].receive_packet(pkt)
    else:
        eventlist.call_at(at_ps, lambda: pkt.route[0].receive_packet(pkt))
    return pkt


# --------------------------------------------------------------------------------------------
# units and a single link
# --------------------------------------------------------------------------------------------

def test_serialisation_exact():
    # 1 byte at 100 Gb/s: 8 bits / 1e11 bit/s = 8e-11 s = 80 ps
    assert serialisation_ps(1, gbps_to_bps(100)) == 80
    # 1500 B at 100 Gb/s: 1500 * 80 = 120,000 ps = 120 ns
    assert serialisation_ps(1500, gbps_to_bps(100)) == 120_000
    # 1500 B at 25 Gb/s: 1500 * 8 / 25e9 = 480 ns; at 400 Gb/s: 30 ns; at 10 Gb/s: 1.2 us
    assert serialisation_ps(1500, gbps_to_bps(25)) == 480_000
    assert serialisation_ps(1500, gbps_to_bps(400)) == 30_000
    assert serialisation_ps(1500, gbps_to_bps(10)) == 1_200_000


def test_single_link_timing_and_back_to_back_packets():
    # Link 100 Gb/s, 1 us: packet 1 leaves at 120 ns and arrives at 1.12 us; packet 2, enqueued at
    # the same instant, waits for packet 1: leaves at 240 ns and arrives at 1.24 us.
    eventlist = EventList()
    link = Link(eventlist, "l", gbps_to_bps(100), 1 * PS_PER_US)
    sink = RecordingSink(eventlist)
    send_packet(eventlist, [link], sink)
    send_packet(eventlist, [link], sink)
    eventlist.run(10**12)
    assert [t for t, _ in sink.arrivals] == [1_120_000, 1_240_000]
    assert link.packets_sent == 2 and link.bytes_sent == 3000 and link.drops == 0


# --------------------------------------------------------------------------------------------
# routes
# --------------------------------------------------------------------------------------------

def test_switch_route_two_links():
    _, topo = build(topology="switch", npus=8)
    for src in range(8):
        for dst in range(8):
            if src == dst:
                continue
            path = topo.path(src, dst, flow_id=0)
            assert len(path) == 2
            assert path[0].name == f"h{src}->sw" and path[1].name == f"sw->h{dst}"
    # host NICs have no drop-tail limit (a host qdisc backs up into TCP); switch ports have buffer_kb
    path = topo.path(0, 1, 0)
    assert path[0].buffer_bytes is None
    assert path[1].buffer_bytes == 512 * 1024


def test_switch_idle_one_way_latency_of_a_real_packet():
    # host -> switch -> host, both links 100 Gb/s and 1 us: 2 * (120 ns + 1 us) = 2.24 us = 2,240,000 ps
    eventlist, topo = build(topology="switch", npus=4, link_gbps=100, link_latency_us=1.0)
    sink = RecordingSink(eventlist)
    pkt = send_packet(eventlist, topo.path(0, 3, 0), sink)
    eventlist.run(10**12)
    assert sink.arrivals == [(2 * (120 * PS_PER_NS + 1 * PS_PER_US), pkt)]
    assert sink.arrivals[0][0] == 2_240_000


def test_switch_pipelining_of_two_packets():
    # two 1500 B packets at t = 0: first link sends them at 120 and 240 ns (arrive 1.12, 1.24 us);
    # the switch port forwards the first at 1.12 -> 1.24 us on the wire -> 2.24 us, the second
    # arrives at 1.24 us when the port is free again: 1.36 -> 2.36 us.
    eventlist, topo = build(topology="switch", npus=4, link_gbps=100, link_latency_us=1.0)
    sink = RecordingSink(eventlist)
    send_packet(eventlist, topo.path(0, 3, 0), sink)
    send_packet(eventlist, topo.path(0, 3, 0), sink)
    eventlist.run(10**12)
    assert [t for t, _ in sink.arrivals] == [2_240_000, 2_360_000]


DUMBBELL = dict(topology="dumbbell", npus=8, link_gbps=100, link_latency_us=1.0, bottleneck_gbps=10,
                bottleneck_latency_us=5.0)


def test_dumbbell_routes():
    _, topo = build(**DUMBBELL)
    # hosts 0..3 left, 4..7 right
    for src, dst in [(0, 3), (1, 2), (4, 7), (6, 5)]:
        path = topo.path(src, dst, 0)
        assert len(path) == 2, (src, dst)
    for src, dst in [(0, 4), (3, 7), (5, 1), (7, 0)]:
        path = topo.path(src, dst, 0)
        assert len(path) == 3, (src, dst)
        middle = path[1]
        assert middle.rate_bps == gbps_to_bps(10)
        assert middle.latency_ps == 5 * PS_PER_US
        assert path[0].rate_bps == path[2].rate_bps == gbps_to_bps(100)
    # one bottleneck link per direction, shared by every crossing flow
    left_to_right = {topo.path(s, d, 0)[1] for s in range(4) for d in range(4, 8)}
    right_to_left = {topo.path(s, d, 0)[1] for s in range(4, 8) for d in range(4)}
    assert len(left_to_right) == 1 and len(right_to_left) == 1
    assert left_to_right != right_to_left


def test_dumbbell_idle_latency_across():
    # 100 Gb/s NIC (120 ns + 1 us) + 10 Gb/s bottleneck (1.2 us + 5 us) + 100 Gb/s port (120 ns + 1 us)
    # = 1.12 + 6.2 + 1.12 = 8.44 us
    eventlist, topo = build(**DUMBBELL)
    sink = RecordingSink(eventlist)
    send_packet(eventlist, topo.path(1, 6, 0), sink)
    eventlist.run(10**12)
    assert sink.arrivals[0][0] == 8_440_000


def test_full_mesh_routes_are_one_link_of_their_own():
    _, topo = build(topology="full_mesh", npus=5)
    links = {topo.path(src, dst, flow_id=7) for src in range(5) for dst in range(5) if src != dst}
    assert len(links) == 5 * 4 == len(topo.links)  # one link per ordered pair, each used by that pair only
    for src in range(5):
        for dst in range(5):
            if src != dst:
                (link,) = topo.path(src, dst, flow_id=0)
                assert link.name == f"n{src}->n{dst}" and link.buffer_bytes is None  # no switch: no drop-tail


def test_full_mesh_idle_latency_is_one_hop_and_links_do_not_share():
    # one 1500 B packet: 120 ns on the wire at 100 Gb/s + 1 us: 1.12 us; a second packet sent at the
    # same time from the same NPU to another one takes a link of its own, so it arrives at 1.12 us too
    # (through one switch it would wait 120 ns for the NIC and cross a second link: 2.36 us)
    eventlist, topo = build(topology="full_mesh", npus=4, link_gbps=100, link_latency_us=1.0)
    sink = RecordingSink(eventlist)
    first, second = (send_packet(eventlist, topo.path(0, dst, 0), sink) for dst in (1, 2))
    eventlist.run(10**12)
    assert sink.arrivals == [(1_120_000, first), (1_120_000, second)]


@pytest.mark.parametrize("backend", ["alpha_beta", "analytical"])
def test_full_mesh_ring_all_reduce_is_the_alpha_beta_sum_over_one_hop(backend):
    # Ring all-reduce of 1 MiB on 8 NPUs: 2 (8 - 1) = 14 steps of a 131,072-byte chunk, each to the
    # next NPU over a link of its own (nothing shares it). A chunk is 91 segments of at most 1,448
    # bytes with 52 bytes of headers each: 135,804 bytes, 10.86432 us at 100 Gb/s; plus 1 us of
    # propagation and the 10 ns endpoint delay: 11.87432 us a step, 166.24048 us in all.
    rows = engine.run({"engine": {"backend": backend}, "network": {"topology": "full_mesh", "npus": 8},
                       "workload": {"type": "collective", "op": "all_reduce", "bytes": 1_048_576}})
    assert rows["runs"][0]["sim_time_s"] == pytest.approx(14 * (135_804 * 8 / 100e9 + 1e-6 + 10e-9), rel=1e-9)


def test_full_mesh_is_refused_beyond_its_largest_size():
    with pytest.raises(engine.ConfigError, match="at most 64 for a full mesh"):
        network(topology="full_mesh", npus=65)


def _ring_hops(path) -> list[tuple[int, int]]:
    hops = []
    for link in path:
        match = re.fullmatch(r"n(\d+)->n(\d+)", link.name)
        assert match, link.name
        hops.append((int(match[1]), int(match[2])))
    return hops


@pytest.mark.parametrize("n", [7, 8])
def test_ring_takes_the_shorter_direction(n):
    # hop count = min(d, n - d) with d = (dst - src) mod n; the links form a chain from src to dst,
    # each between ring neighbours
    _, topo = build(topology="ring", npus=n)
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            d = (dst - src) % n
            for flow_id in range(3):
                hops = _ring_hops(topo.path(src, dst, flow_id))
                assert len(hops) == min(d, n - d), (src, dst)
                assert hops[0][0] == src and hops[-1][1] == dst
                for (_, b), (c, _) in zip(hops, hops[1:]):
                    assert b == c
                for a, b in hops:
                    assert (b - a) % n in (1, n - 1)


def test_ring_idle_latency_scales_with_hops():
    # 3 hops of (120 ns + 1 us) each, store-and-forward: 3.36 us
    eventlist, topo = build(topology="ring", npus=8, link_gbps=100, link_latency_us=1.0)
    sink = RecordingSink(eventlist)
    send_packet(eventlist, topo.path(0, 5, 0), sink)  # d = 5, shorter way = 3 hops counter-clockwise
    eventlist.run(10**12)
    assert sink.arrivals[0][0] == 3 * 1_120_000


def test_ring_routes_are_the_paths_through_their_ports():
    # packets enter each ring link through its port (own and forwarded packets share the link)
    _, topo = build(topology="ring", npus=8)
    for src, dst in [(0, 1), (0, 3), (5, 1), (2, 6)]:
        data, acks = topo.routes(src, dst, 0)
        assert tuple(port.link for port in data) == topo.path(src, dst, 0)
        assert tuple(port.link for port in acks) == topo.path(dst, src, 0)


# --------------------------------------------------------------------------------------------
# a host's own packets never drop at their first hop; forwarded ones meet the buffer
# --------------------------------------------------------------------------------------------

OWN_BURST_NETWORKS = [
    dict(topology="switch", npus=4),
    dict(topology="dumbbell", npus=4, bottleneck_gbps=100, bottleneck_latency_us=1),
    dict(topology="ring", npus=8),
    dict(topology="leaf_spine", npus=16, hosts_per_leaf=4, spines=4, uplink_gbps=400),
    dict(topology="fat_tree", npus=16),
    dict(topology="hierarchical", npus=8, npus_per_node=4, scaleup_gbps=100, scaleup_latency_us=1.0),
]


@pytest.mark.parametrize("overrides", OWN_BURST_NETWORKS, ids=lambda net: net["topology"])
def test_a_hosts_own_burst_never_drops_at_its_first_hop(overrides):
    # A host qdisc backs up into TCP rather than dropping: 40 packets written at once by host 0,
    # with buffers of 1.5 KiB (one packet) everywhere, all arrive, to a neighbour (within a node,
    # leaf or edge switch) and to the farthest host (on the hierarchical, across nodes). Every link
    # runs at 100 Gb/s (leaf_spine's uplinks at 400), so after the first hop the packets come 120 ns
    # apart and never queue: no drop anywhere, and the last arrives 39 x 120 ns after the first.
    for dst in (1, overrides["npus"] - 1):
        eventlist, topo = build(buffer_kb=1.5, link_gbps=100, link_latency_us=1.0, **overrides)
        sink = RecordingSink(eventlist)
        for _ in range(40):
            send_packet(eventlist, topo.routes(0, dst, 0)[0], sink)
        eventlist.run(10**12)
        assert sum(link.drops for link in topo.links) == 0, dst
        assert len(sink.arrivals) == 40
        assert sink.arrivals[-1][0] - sink.arrivals[0][0] == 39 * 120_000


def test_ring_port_serves_own_and_forwarded_packets_round_robin():
    # Port n2->n3 (100 Gb/s: 120 ns a packet, 1 us; buffer 12 KiB = 983,040 ps of backlog): NPU 2
    # writes 200 packets to NPU 3, NPU 1 writes 100 to NPU 3 through it, all at t = 0. NPU 2's own
    # run alone until NPU 1's first arrives at 1.12 us (its link's 120 ns + 1 us), during the 10th
    # own packet; from 1.2 us the port alternates, one forwarded packet every 240 ns, while
    # forwarded ones arrive every 120 ns: the forwarded queue fills and drops, the own one waits.
    # Forwarded delivered = those served by the last arrival (at 1.12 + 99 x 0.12 = 13.0 us: slots
    # 1.2 + 0.24 j us, j = 0..49: 50) + those it finds queued or admits behind the 80 ns left of the
    # packet on the link: 80,000 + 120,000 q <= 983,040 for q = 0..7: 8. So 58 delivered, 42 dropped.
    eventlist, topo = build(topology="ring", npus=8, link_gbps=100, link_latency_us=1.0, buffer_kb=12)
    own, forwarded = RecordingSink(eventlist), RecordingSink(eventlist)
    for _ in range(200):
        send_packet(eventlist, topo.routes(2, 3, 0)[0], own)
    for _ in range(100):
        send_packet(eventlist, topo.routes(1, 3, 0)[0], forwarded)
    eventlist.run(10**12)
    port_link = topo.path(2, 3, 0)[0]
    assert len(own.arrivals) == 200
    assert len(forwarded.arrivals) == 58 and port_link.drops == 42
    assert sum(link.drops for link in topo.links) == 42  # only forwarded packets, only there
    order = "".join(kind for _, kind in sorted([(t, "o") for t, _ in own.arrivals] +
                                               [(t, "f") for t, _ in forwarded.arrivals]))
    assert order == "o" * 10 + "fo" * 58 + "o" * (200 - 10 - 58)
    # work-conserving: 258 packets back to back, the last arriving 1 us after its serialisation
    assert own.arrivals[-1][0] == 258 * 120_000 + 1_000_000


LEAF_SPINE = dict(topology="leaf_spine", npus=16, hosts_per_leaf=4, spines=4, link_gbps=100,
                  uplink_gbps=400, link_latency_us=1.0)


def _spine_of(path) -> int:
    match = re.fullmatch(r"leaf(\d+)->spine(\d+)", path[1].name)
    assert match, path[1].name
    return int(match[2])


def test_leaf_spine_routes():
    _, topo = build(**LEAF_SPINE)
    # same leaf (hosts 0..3 on leaf 0): host -> leaf -> host
    assert len(topo.path(0, 3, 0)) == 2
    assert len(topo.path(13, 12, 0)) == 2
    # across leaves: host -> leaf -> spine -> leaf -> host, uplinks at uplink_gbps
    path = topo.path(1, 9, 0)  # leaf 0 -> leaf 2
    assert len(path) == 4
    spine = _spine_of(path)
    assert path[1].name == f"leaf0->spine{spine}"
    assert path[2].name == f"spine{spine}->leaf2"
    assert path[1].rate_bps == path[2].rate_bps == gbps_to_bps(400)
    assert path[0].rate_bps == path[3].rate_bps == gbps_to_bps(100)


def test_leaf_spine_ecmp_spreads_and_is_symmetric():
    # 12 hosts on other leaves x 16 sources x 5 flow ids = 960 (src, dst, flow) triples over 4 spines:
    # 240 expected per spine; a uniform hash has a standard deviation of sqrt(960 * 1/4 * 3/4) = 13.4,
    # so +-20 % (48, about 3.6 sigma) is a loose bound for "roughly even".
    _, topo = build(**LEAF_SPINE)
    counts = Counter()
    for src in range(16):
        for dst in range(16):
            if src // 4 == dst // 4:
                continue
            for flow_id in range(5):
                forward = topo.path(src, dst, flow_id)
                backward = topo.path(dst, src, flow_id)
                spine = _spine_of(forward)
                counts[spine] += 1
                # both directions of a connection (same flow id) cross the same spine
                assert _spine_of(backward) == spine
                assert backward[2].name == f"spine{spine}->leaf{src // 4}"
    assert set(counts) == {0, 1, 2, 3}
    total = sum(counts.values())
    assert total == 960
    for count in counts.values():
        assert abs(count - total / 4) <= 0.2 * total / 4, counts


@pytest.mark.parametrize("topology", [LEAF_SPINE, dict(topology="switch", npus=4),
                                      dict(topology="fat_tree", npus=16, fat_tree_k=4)])
def test_routes_are_the_path_both_ways(topology):
    # a connection's data route is path(src, dst) and its ACK route path(dst, src), for the same
    # flow id; leaf_spine computes both from one ECMP hash, which must pick what path would
    _, topo = build(**topology)
    npus = topology["npus"]
    for src in range(npus):
        for dst in range(npus):
            if src != dst:
                for flow_id in range(3):
                    assert topo.routes(src, dst, flow_id) == (topo.path(src, dst, flow_id),
                                                              topo.path(dst, src, flow_id))


def test_leaf_spine_idle_latency_across():
    # 2 x (1500 B at 100 Gb/s = 120 ns + 1 us) + 2 x (1500 B at 400 Gb/s = 30 ns + 1 us)
    # = 2.24 + 2.06 = 4.30 us
    eventlist, topo = build(**LEAF_SPINE)
    sink = RecordingSink(eventlist)
    send_packet(eventlist, topo.path(2, 14, 7), sink)
    eventlist.run(10**12)
    assert sink.arrivals[0][0] == 4_300_000


HIERARCHICAL = dict(topology="hierarchical", npus=8, npus_per_node=4, link_gbps=100, link_latency_us=1.0,
                    scaleup_gbps=400, scaleup_latency_us=0.1)


def test_hierarchical_routes():
    _, topo = build(**HIERARCHICAL)
    # NPUs 0..3 form node 0, 4..7 node 1
    for src, dst in [(0, 3), (2, 1), (5, 7)]:
        path = topo.path(src, dst, 0)
        assert len(path) == 2
        for link in path:
            assert link.rate_bps == gbps_to_bps(400)  # scale-up fabric
            assert link.latency_ps == 100 * PS_PER_NS
    for src, dst in [(0, 4), (3, 7), (6, 1)]:
        path = topo.path(src, dst, 0)
        assert len(path) == 2
        for link in path:
            assert link.rate_bps == gbps_to_bps(100)  # NICs to the scale-out switch
            assert link.latency_ps == 1 * PS_PER_US
    # intra- and inter-node traffic of one NPU leave by different ports
    assert topo.path(0, 1, 0)[0] is not topo.path(0, 4, 0)[0]


def test_hierarchical_idle_latencies():
    # intra-node: 2 x (1500 B at 400 Gb/s = 30 ns + 100 ns) = 260 ns
    # inter-node: 2 x (120 ns + 1 us) = 2.24 us
    eventlist, topo = build(**HIERARCHICAL)
    intra, inter = RecordingSink(eventlist), RecordingSink(eventlist)
    send_packet(eventlist, topo.path(0, 2, 0), intra)
    send_packet(eventlist, topo.path(0, 6, 0), inter)
    eventlist.run(10**12)
    assert intra.arrivals[0][0] == 260_000
    assert inter.arrivals[0][0] == 2_240_000


# 2 groups of 2 nodes of 4 GPUs: rail leaf s * 4 + i holds NIC i of nodes 2s and 2s + 1; 3 spines
RAIL = dict(topology="rail_optimized", npus=16, npus_per_node=4, hosts_per_leaf=2, spines=3, link_gbps=100,
            link_latency_us=1.0, scaleup_gbps=400, scaleup_latency_us=0.1)


def _names(path) -> list[str]:
    return [link.name for link in path]


def test_rail_optimized_routes_by_rail_with_and_without_pxn():
    _, rails = build(**RAIL)
    # NPU 1 (node 0, rail 1) to NPU 5 (node 1, rail 1): one rail leaf, the first group's rail 1
    assert _names(rails.path(1, 5, 0)) == ["npu1->leaf1", "leaf1->npu5"]
    # to NPU 9 (node 2, rail 1, the second group): up to a spine and down to the second group's rail-1 leaf
    path = _names(rails.path(1, 9, 0))
    assert path[0] == "npu1->leaf1" and path[1].startswith("leaf1->spine") and path[3] == "leaf5->npu9"
    # to NPU 6 (node 1, rail 2) with PXN: over the scale-up switch to NPU 2 (node 0's GPU on rail 2),
    # out of its NIC to rail 2's leaf
    assert _names(rails.path(1, 6, 0)) == ["npu1->node0", "node0->npu2", "npu2->leaf2", "leaf2->npu6"]
    # and its ACKs back the same way round: NPU 5 (node 1 on rail 1) relays them
    assert _names(rails.path(6, 1, 0)) == ["npu6->node1", "node1->npu5", "npu5->leaf1", "leaf1->npu1"]
    # without PXN: across a spine from rail 1's leaf to rail 2's
    _, spines = build(**{**RAIL, "pxn": False})
    path = _names(spines.path(1, 6, 0))
    assert len(path) == 4 and path[0] == "npu1->leaf1" and path[3] == "leaf2->npu6" and "spine" in path[1]
    # within a node: the scale-up switch either way
    assert _names(rails.path(0, 3, 0)) == _names(spines.path(0, 3, 0)) == ["npu0->node0", "node0->npu3"]
    # the collective dimensions: the nodes, then the rails
    assert rails.dimensions()[1][2] == (2, 6, 10, 14)


def test_rail_optimized_route_classes_count_the_peers_as_the_paths_do():
    # every member's count of peers per route class, from the paths themselves, is what
    # peer_class_counts gives, with and without PXN
    for pxn in (True, False):
        _, topo = build(**{**RAIL, "pxn": pxn})
        group = list(range(topo.npus))
        by_paths = set()
        for src in group:
            kinds = Counter(topo.route_class(src, dst) for dst in group if dst != src)
            by_paths.add(tuple(sorted(kinds.items())))
            for dst in group:  # a class is one sequence of link rates and latencies
                if dst != src:
                    same = [(link.rate_bps, link.latency_ps) for link in topo.path(src, dst, 0)]
                    other = next(d for d in group if d != 0 and topo.route_class(0, d) == topo.route_class(src, dst))
                    assert same == [(link.rate_bps, link.latency_ps) for link in topo.path(0, other, 0)]
        assert {tuple(sorted(counts)) for counts in topo.peer_class_counts(group)} == by_paths


@pytest.mark.parametrize("scaleout", [
    {"scaleout": "leaf_spine", "hosts_per_leaf": 4, "spines": 2},  # a node's 8 NICs on two leaves
    {"scaleout": "fat_tree", "fat_tree_k": 4},
])
def test_hierarchical_scaleout_routes_and_classes(scaleout):
    _, topo = build(topology="hierarchical", npus=16, npus_per_node=8, **scaleout)
    for src in range(16):
        for dst in range(16):
            if src // 8 == dst // 8 and src != dst:
                assert [link.rate_bps for link in topo.path(src, dst, 0)] == [gbps_to_bps(400)] * 2
            elif src != dst:  # between nodes: the NICs and the scale-out switches, never the scale-up fabric
                names = _names(topo.path(src, dst, 3))
                assert names[0].startswith(f"npu{src}->") and names[-1].endswith(f"->npu{dst}")
                assert not any("node" in name for name in names)
    group = list(range(16))
    by_paths = {tuple(sorted(Counter(topo.route_class(s, d) for d in group if d != s).items())) for s in group}
    assert {tuple(sorted(counts)) for counts in topo.peer_class_counts(group)} == by_paths


def test_drop_tail_switch_port():
    # A switch port with a 3000 B buffer (backlog measured in bytes still to serialise ahead of the
    # arriving packet; a packet is dropped when that backlog exceeds the buffer). Five 1500 B packets
    # arrive at an idle 100 Gb/s port at the same instant: backlogs 0, 1500, 3000 (accepted: not
    # above 3000), 4500 and 6000 (dropped).
    eventlist = EventList()
    port = Link(eventlist, "port", gbps_to_bps(100), 0, buffer_bytes=3000)
    sink = RecordingSink(eventlist)
    for _ in range(5):
        send_packet(eventlist, [port], sink)
    eventlist.run(10**12)
    assert len(sink.arrivals) == 3
    assert port.drops == 2
    assert port.max_queue_bytes == 3000


# --------------------------------------------------------------------------------------------
# fat tree
# --------------------------------------------------------------------------------------------

def fat_tree(**overrides):
    return build(**{"topology": "fat_tree", "link_gbps": 100, "link_latency_us": 1.0, **overrides})[1]


def _ends(link) -> tuple[str, str]:
    source, target = link.name.split("->")
    return source, target


def test_fat_tree_hop_counts_and_connected_routes():
    # k = 4: 2 hosts per edge switch, 4 per pod. 2 links within an edge switch, 4 within a pod,
    # 6 across pods; every route starts at its host, ends at the other and each link starts where
    # the previous one ended.
    topo = fat_tree(npus=16)
    assert topo.k == 4
    for src, dst, hops in [(0, 1, 2), (3, 2, 2), (0, 2, 4), (5, 7, 4), (0, 4, 6), (15, 0, 6), (6, 9, 6)]:
        for flow_id in range(8):
            path = topo.path(src, dst, flow_id)
            assert len(path) == hops
            assert _ends(path[0])[0] == f"h{src}" and _ends(path[-1])[1] == f"h{dst}"
            for previous, link in zip(path, path[1:]):
                assert _ends(previous)[1] == _ends(link)[0], [link.name for link in path]


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_counts_switches_and_links(k):
    # k pods x (k/2 edge + k/2 aggregation) + (k/2)^2 core = 5k^2/4 switches; links each way:
    # one per host, k * (k/2)^2 edge-aggregation and as many aggregation-core: 2 * hosts + k^3 in all.
    hosts = k ** 3 // 4
    topo = fat_tree(npus=hosts, fat_tree_k=k)
    names = {end for link in topo.links for end in _ends(link)}
    switches = {name for name in names if not name.startswith("h")}
    assert len(switches) == 5 * k * k // 4
    assert sum(name.startswith("core") for name in switches) == (k // 2) ** 2
    assert len(topo.links) == 2 * hosts + k ** 3
    assert len(topo.switch_ports) == hosts + k ** 3  # every link but the hosts' NICs
    if k > 2:  # a tree that is not full builds the links of its hosts only, and of every switch
        assert len(fat_tree(npus=hosts - 1, fat_tree_k=k).links) == 2 * (hosts - 1) + k ** 3


@pytest.mark.parametrize("uplink_gbps, bisection_gbps", [(None, 8 ** 3 / 8 * 100), (25, 8 ** 3 / 8 * 25)])
def test_fat_tree_bisection_bandwidth(uplink_gbps, bisection_gbps):
    # Cut the pods in two halves. Every route from the left half to the right crosses exactly one
    # aggregation->core link leaving the left half, so the cut's capacity is those k^3/8 links:
    # k^3/8 x link rate at full bisection, less when the switch links are slower (oversubscribed).
    k = 8
    topo = fat_tree(npus=k ** 3 // 4, fat_tree_k=k, uplink_gbps=uplink_gbps)
    half_hosts = topo.npus // 2
    crossing = [link for link in topo.agg_up if int(_ends(link)[0][3:]) < k * k // 4]  # aggregation a = pod*k/2 + j
    assert len(crossing) == k ** 3 / 8
    crossing_ids = {id(link) for link in crossing}
    for src in range(0, half_hosts, 7):
        for dst in range(half_hosts, topo.npus, 5):
            assert sum(id(link) in crossing_ids for link in topo.path(src, dst, src * dst)) == 1
    host_gbps = half_hosts * 100  # the left hosts' NICs could send no more than this
    assert min(sum(link.rate_bps for link in crossing) / 1e9, host_gbps) == bisection_gbps


def test_fat_tree_ecmp_spreads_over_every_core_and_is_symmetric():
    # k = 8: 16 cores. 2,048 flows from pod 0 to pod 1 (16 x 16 host pairs x 8 flow ids): 128 per
    # core expected; a uniform hash has a standard deviation of sqrt(2048 * 1/16 * 15/16) = 11, so
    # +-35 % (45, 4 sigma) is a loose bound for "roughly even".
    topo = fat_tree(npus=128, fat_tree_k=8)
    counts = Counter()
    for src in range(16):
        for dst in range(16, 32):
            for flow_id in range(8):
                forward, backward = topo.path(src, dst, flow_id), topo.path(dst, src, flow_id)
                core = _ends(forward[2])[1]
                counts[core] += 1
                assert _ends(backward[3])[0] == core  # both directions of a connection cross one core
    assert len(counts) == 16
    mean = sum(counts.values()) / 16
    assert all(abs(count - mean) <= 0.35 * mean for count in counts.values()), counts


def test_fat_tree_idle_latency_across_pods_with_oversubscribed_uplinks():
    # 2 host links (1500 B at 100 Gb/s = 120 ns, + 1 us) + 4 switch links (1500 B at 25 Gb/s =
    # 480 ns, + 1 us), store-and-forward: 2.24 + 5.92 = 8.16 us
    topo = fat_tree(npus=16, uplink_gbps=25)
    sink = RecordingSink(topo.eventlist)
    send_packet(topo.eventlist, topo.path(1, 13, 3), sink)
    topo.eventlist.run(10**12)
    assert sink.arrivals[0][0] == 8_160_000


@pytest.mark.parametrize("npus, k", [(2, 2), (3, 4), (16, 4), (17, 6), (54, 6), (55, 8), (128, 8), (129, 10),
                                     (1024, 16), (8192, 32), (9216, 34)])
def test_fat_tree_k_is_the_smallest_that_holds_the_npus(npus, k):
    assert smallest_fat_tree_k(npus) == k
    if npus <= 128:
        assert fat_tree(npus=npus).k == k
    assert fat_tree(npus=2, fat_tree_k=6).k == 6  # a given k is kept


def test_fat_tree_runs_on_the_packet_backend():
    # k = 4, 16 NPUs: a ring all-reduce has neighbours on one edge switch or across it; TCP gets
    # within a few percent of the fluid model, as on a switch (tests/test_collectives.py)
    def run(backend: str) -> dict:
        return engine.run({"engine": {"backend": backend}, "network": {"topology": "fat_tree", "npus": 16},
                           "system": {"endpoint_delay_ns": 0},
                           "workload": {"type": "collective", "op": "all_reduce", "bytes": 2**22}})["runs"][0]
    packet, analytical = run("packet"), run("analytical")
    assert packet["status"] == "ok" and packet["drops"] == 0
    assert packet["iteration_time_s"] == pytest.approx(analytical["iteration_time_s"], rel=0.10)


# --------------------------------------------------------------------------------------------
# route classes (what the alpha_beta backend costs instead of every pair of hosts)
# --------------------------------------------------------------------------------------------

ROUTE_CLASS_NETWORKS = [
    dict(topology="switch", npus=6),
    dict(topology="dumbbell", npus=6, bottleneck_gbps=10, bottleneck_latency_us=5),
    dict(topology="ring", npus=7),
    dict(topology="ring", npus=8),
    LEAF_SPINE,
    dict(topology="fat_tree", npus=16, uplink_gbps=25),
    dict(topology="fat_tree", npus=45, fat_tree_k=6),  # the last pod partly filled
    HIERARCHICAL,
]


@pytest.mark.parametrize("overrides", ROUTE_CLASS_NETWORKS, ids=lambda net: f"{net['topology']}{net['npus']}")
def test_routes_of_one_class_cross_the_same_kinds_of_links(overrides):
    _, topo = build(**overrides)
    shapes: dict[int, tuple] = {}
    for src in range(topo.npus):
        for dst in range(topo.npus):
            if src == dst:
                continue
            route_class = topo.route_class(src, dst)
            assert topo.route_class(dst, src) == route_class
            for flow_id in range(3):
                shape = tuple((link.rate_bps, link.latency_ps) for link in topo.path(src, dst, flow_id))
                assert shapes.setdefault(route_class, shape) == shape, (src, dst, flow_id)
    # every class occurs from host 0 (the alpha_beta backend takes its representatives there)
    assert {topo.route_class(0, dst) for dst in range(1, topo.npus)} == set(shapes)


@pytest.mark.parametrize("overrides", ROUTE_CLASS_NETWORKS, ids=lambda net: f"{net['topology']}{net['npus']}")
def test_peer_class_counts_match_counting_every_pair(overrides):
    _, topo = build(**overrides)
    groups = [group for dimension in topo.dimensions() for group in dimension] + [tuple(range(topo.npus))]
    for group in groups + [tuple(range(1, topo.npus, 2))]:
        every_pair = {tuple(sorted(Counter(topo.route_class(host, other) for other in group if other != host).items()))
                      for host in group}
        assert topo.peer_class_counts(group) == every_pair, group
