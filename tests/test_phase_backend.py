"""The phase backend: collective phases as fluid coflows sharing links max-min fairly.

Expected values are hand computations written here: max-min fair shares (progressive filling),
the alpha-beta costs of docs/theory.md at 80 ps a byte (100 Gb/s), the bytes a leaf's uplink carries in
a direct all-to-all, and the incast rule (messages into a port x min(message, initial window) vs the
port's buffer). Where nothing is shared, the backend must give alpha_beta's figure.
"""

from __future__ import annotations

import dataclasses
from math import inf

import numpy as np
import pytest

import engine
import engine.system.phase as phase_module
from engine.config import load_config
from engine.eventlist import EventList
from engine.run import prepare
from engine.system.phase import (
    EVENT_MERGE,
    VectorRoutes,
    XorStep,
    max_min_levels,
    max_min_message_rates,
    xor_exchange_ps,
)
from engine.topology import build_topology, flow_hash, flow_hash_array

MSS = 1460
PS_PER_BYTE = 80  # 100 Gb/s: 8 bits / 100e9 b/s
LINK_LATENCY_PS = 1_000_000  # 1 us
STORE_AND_FORWARD_PS = 1500 * PS_PER_BYTE  # one full packet at a switch


def run(op: str, algorithm: str, size_bytes: int, backend: str = "phase", npus: int = 8, engine_keys=None,
        system=None, **network) -> dict:
    """One collective, its rows."""
    network = {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1, **network}
    rows = engine.run({
        "engine": {"backend": backend, **(engine_keys or {})},
        "network": network,
        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers: the hand computations' framing
        "system": {op: algorithm, "endpoint_delay_ns": 0, **(system or {})},
        "workload": {"type": "collective", "op": op, "bytes": size_bytes},
    })
    assert rows["runs"][0]["status"] == "ok", rows["runs"][0]["error"]
    return rows


def time_ps(*args, **kwargs) -> int:
    """The collective's duration in integer picoseconds."""
    return round(run(*args, **kwargs)["runs"][0]["iteration_time_s"] * 1e12)


# -- max-min fair sharing -------------------------------------------------------------------------

def test_two_flows_sharing_one_link_get_half_each() -> None:
    assert max_min_levels(np.array([[1.0], [1.0]]), np.array([10.0])).tolist() == [5.0, 5.0]


def test_progressive_filling_by_hand() -> None:
    # A crosses links 0 (capacity 1) and 1 (capacity 2), B link 0, C link 1: link 0 fills first at
    # 1/2 each for A and B; C takes what A leaves of link 1: 2 - 1/2 = 3/2
    shares = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert max_min_levels(shares, np.array([1.0, 2.0])).tolist() == [0.5, 0.5, 1.5]
    # a phase with 3 messages on a link and one with 1: per message fair, 3/4 and 1/4 of it
    levels = max_min_levels(np.array([[3.0], [1.0]]), np.array([8.0]))
    assert (3 * levels[0], levels[1]) == (6.0, 2.0)


def test_message_rates_by_progressive_filling_by_hand(monkeypatch) -> None:
    # the same three flows as messages (index 2: the padding hop, no link): A on links 0 and 1, B on
    # link 0, C on link 1 get 1/2, 1/2 and 3/2
    hops = np.array([[0, 0, 1], [1, 2, 2]])
    capacity = np.array([1.0, 2.0, inf])
    assert max_min_message_rates(hops, capacity).tolist() == [0.5, 0.5, 1.5]
    # with one round, the messages not fixed in it keep their share of their busiest link in it:
    # C, 2 / 2 = 1 (A's unused 1/2 of link 1 is not handed on)
    monkeypatch.setattr(phase_module, "FILL_ROUNDS", 1)
    assert max_min_message_rates(hops, capacity).tolist() == [0.5, 0.5, 1.0]


def test_each_rank_of_an_xor_exchange_waits_for_its_partner_only() -> None:
    # 4 ranks, 1,000 wire bytes a message, no latency, 10 ps endpoint delay; rank r sends on its own
    # link r (1 byte/ps); 0 <-> 1 also cross link 4 (capacity 1/2: 1/4 each, 4,000 ps), and in the
    # second step 2 -> 0 crosses link 5 (1/4: 4,000 ps). Step 1 (partners r ^ 1): 2 and 3 are done at
    # 10 + 1,000, 0 and 1 at 10 + 4,000. Step 2 (r ^ 2): 2 -> 0 leaves at 1,020 and arrives at 5,020,
    # 0 -> 2 and 1 -> 3 leave at 4,020 and arrive at 5,020, 3 -> 1 at 2,020: the last rank is done at
    # 5,020 ps. Ranks waiting for the slowest exchange of each step would take 10 + 4,000 + 10 + 4,000.
    none = 6  # the padding hop
    first = XorStep(np.array([1, 0, 3, 2]), np.array([[0, 1, 2, 3], [4, 4, none, none]]), 1000.0, np.zeros(4))
    second = XorStep(np.array([2, 3, 0, 1]), np.array([[0, 1, 2, 3], [none, none, 5, none]]), 1000.0, np.zeros(4))
    capacity = np.array([1.0, 1.0, 1.0, 1.0, 0.5, 0.25, inf])
    # events closer than EVENT_MERGE of the time elapsed are merged: a start may wait that long
    assert xor_exchange_ps([first, second], capacity, delay_ps=10) == pytest.approx(5020, abs=EVENT_MERGE * 5020)


def test_two_concurrent_phases_share_a_host_link_by_hand() -> None:
    # 2 NPUs on a switch, at time 0: an all-to-all (its own queue) with one 146,000-byte message each
    # way (100 segments: 150,000 wire bytes) and a ring all-reduce, two steps of 438,000 bytes (450,000
    # wire bytes each). Each phase has one message on host 0's link: half of it each until the
    # all-to-all's 150,000 bytes are through at 2 x 150,000 x 80 ps = 24 us; the all-reduce has then
    # sent 150,000 of its 900,000 bytes, the rest at the full rate: 750,000 x 80 ps = 60 us more.
    # Then each waits its fixed part: per step 2 us propagation + one packet's store-and-forward.
    prepared = prepare({"engine": {"backend": "phase"},
                        "network": {"topology": "switch", "npus": 2, "link_gbps": 100, "link_latency_us": 1},
                        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers
                        "system": {"endpoint_delay_ns": 0},
                        "workload": {"type": "collective", "op": "all_reduce", "bytes": 1}})
    system = prepared.system
    all_to_all = system.collective("all_to_all", 2 * 146_000)
    all_reduce = system.collective("all_reduce", 2 * 438_000)
    prepared.sim.run()
    step_fixed_ps = 2 * LINK_LATENCY_PS + STORE_AND_FORWARD_PS
    assert all_to_all.end_ps == 2 * 150_000 * PS_PER_BYTE + step_fixed_ps
    assert all_reduce.end_ps == (2 * 150_000 + 750_000) * PS_PER_BYTE + 2 * step_fixed_ps


# -- oversubscription ------------------------------------------------------------------------------

@pytest.mark.parametrize("uplink_gbps, uplink_ps_per_byte", [(25, 320), (12.5, 640)])
def test_halving_the_uplinks_doubles_the_cross_leaf_part_of_an_all_to_all(uplink_gbps, uplink_ps_per_byte) -> None:
    # 2 leaves of 4 hosts, one spine: each host sends 146,000 bytes (150,000 on the wire) to each of
    # 7 others; a leaf's uplink carries 4 hosts x 4 remote peers = 16 of them, 2,400,000 bytes, far
    # more than a NIC's 7 x 150,000 at 4x or 8x its rate: the phase lasts the uplink's time plus the
    # latency of a cross-leaf route (4 hops of 1 us, a packet's store-and-forward at the leaf uplink,
    # the spine downlink and the host port)
    uplink_ps = 2_400_000 * uplink_ps_per_byte
    latency_ps = 4 * LINK_LATENCY_PS + 2 * 1500 * uplink_ps_per_byte + STORE_AND_FORWARD_PS
    leaf_spine = {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 1, "uplink_gbps": uplink_gbps}
    assert time_ps("all_to_all", "direct", 8 * 146_000, **leaf_spine) == latency_ps + uplink_ps
    # the exact per-message fluid model agrees: 16 equal messages sharing the uplink end together
    analytical_ps = time_ps("all_to_all", "direct", 8 * 146_000, backend="analytical", **leaf_spine)
    assert analytical_ps == pytest.approx(latency_ps + uplink_ps, rel=1e-3)


def test_the_exchanges_of_halving_doubling_follow_one_another() -> None:
    # 4 NPUs, 2 leaves of 2 hosts, one 100 Gb/s spine: 584,000 bytes each. The exchanges at distance 2
    # (halving's first, doubling's last) send 292,000 bytes (300,000 on the wire) from both hosts of a
    # leaf through its uplink: 2 x 300,000 x 80 ps, one message's time more than alpha_beta charges
    # (each NIC sends one); those at distance 1 stay on the leaf. Each stage lasts its own busiest
    # link's time, so the two crossing exchanges add 2 x 300,000 x 80 ps to alpha_beta's figure (a
    # phase whose stages shared one bound would add the difference of the sums instead: 4 x 300,000 on
    # the uplink against 2 x (300,000 + 150,000) on a NIC, 1 x 300,000 x 80 ps)
    leaf_spine = {"npus": 4, "topology": "leaf_spine", "hosts_per_leaf": 2, "spines": 1, "uplink_gbps": 100}
    alpha_beta_ps = time_ps("all_reduce", "halving_doubling", 4 * 146_000, backend="alpha_beta", **leaf_spine)
    phase_ps = time_ps("all_reduce", "halving_doubling", 4 * 146_000, **leaf_spine)
    assert phase_ps - alpha_beta_ps == 2 * 300_000 * PS_PER_BYTE
    # the exact per-message fluid model agrees to the picosecond
    assert time_ps("all_reduce", "halving_doubling", 4 * 146_000, backend="analytical", **leaf_spine) == phase_ps


def test_halving_doubling_follows_the_exact_fluid_model_where_collisions_differ_by_pair() -> None:
    # reduce-scatter by halving on 8 NPUs, 2 leaves of 4, two 25 Gb/s spines, seed 0: the distance-4
    # exchange (584,000 bytes, 600,000 on the wire) crosses the spines; ECMP sends 3 of leaf 0's 4
    # messages through spine 0, so they take 3 x 600,000 x 320 ps = 576 us, the fourth (2 -> 6) 192 us
    # and leaf 1's four, two a spine, 384 us. `analytical` hashes the same ids here (message i is pair
    # i's first), so it is the exact reference: 643.22 us. The ranks whose message came in early go on (rank 4 sends its
    # distance-2 and distance-1 messages at once, sharing its NIC), which the stage model missed: each
    # step waiting for its busiest link, it gave 576 us + the later steps alone, 621.35 us (-3.4 %).
    # The per-rank model is within its event merging (EVENT_MERGE of the time elapsed, 3 steps).
    leaf_spine = {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 25}
    system = {"endpoint_delay_ns": 10}
    analytical_ps = time_ps("reduce_scatter", "halving_doubling", 8 * 146_000, backend="analytical", system=system,
                            **leaf_spine)
    assert analytical_ps == 643_220_000
    phase_ps = time_ps("reduce_scatter", "halving_doubling", 8 * 146_000, system=system, **leaf_spine)
    assert phase_ps == pytest.approx(analytical_ps, rel=3 * EVENT_MERGE)


def test_halving_doubling_on_a_ring_topology_whose_routes_lengthen_with_the_distance() -> None:
    # 8 NPUs on a ring topology: the exchanges at distance 1, 2 and 4 take routes of 1 to 4 hops (one
    # path each, no ECMP: `analytical` routes alike), the far ones loading links with several messages;
    # 6 steps, each event at most EVENT_MERGE of the time elapsed late
    analytical_ps = time_ps("all_reduce", "halving_doubling", 8 * 2**20, backend="analytical", topology="ring")
    phase_ps = time_ps("all_reduce", "halving_doubling", 8 * 2**20, topology="ring")
    assert phase_ps == pytest.approx(analytical_ps, rel=6 * EVENT_MERGE)


def dlrm_ms(**network) -> float:
    row = engine.run({"engine": {"backend": "phase"},
                      "network": {"topology": "leaf_spine", "npus": 256, "hosts_per_leaf": 16, **network},
                      "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt",
                                   "iterations": 1}})["runs"][0]
    return row["iteration_time_s"] * 1e3


def test_fewer_spines_or_slower_uplinks_never_make_an_iteration_faster() -> None:
    by_spines = [dlrm_ms(spines=spines, uplink_gbps=100) for spines in (16, 8, 4, 2, 1)]
    assert by_spines == sorted(by_spines) and by_spines[0] < by_spines[-1]
    by_uplink = [dlrm_ms(spines=4, uplink_gbps=gbps) for gbps in (400, 100, 40, 10)]
    assert by_uplink == sorted(by_uplink) and by_uplink[0] < by_uplink[-1]


# -- nothing shared: alpha_beta's figure ------------------------------------------------------------

UNSHARED = [
    ("all_reduce", "ring", {"topology": "switch"}),
    ("all_gather", "ring", {"topology": "switch"}),
    ("all_to_all", "direct", {"topology": "switch"}),
    ("all_to_all", "ring", {"topology": "switch"}),
    ("all_reduce", "halving_doubling", {"topology": "switch"}),
    ("all_reduce", "double_binary_tree", {"topology": "switch"}),
    # one ring neighbour pair per leaf crosses a spine, alone on its uplink
    ("all_reduce", "ring", {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100}),
]


@pytest.mark.parametrize("size_bytes", [1024, 64 * 1024, 4 * 2**20])
@pytest.mark.parametrize("op, algorithm, network", UNSHARED,
                         ids=[f"{op}-{algorithm}-{network['topology']}" for op, algorithm, network in UNSHARED])
def test_alpha_beta_where_nothing_is_shared(op, algorithm, network, size_bytes) -> None:
    kwargs = {"npus": 16, "system": {"endpoint_delay_ns": 10}, **network}
    alpha_beta_ps = time_ps(op, algorithm, size_bytes, backend="alpha_beta", **kwargs)
    assert abs(time_ps(op, algorithm, size_bytes, **kwargs) - alpha_beta_ps) <= 1  # float rounding of a rate


# -- TCP's signature ------------------------------------------------------------------------------------

@pytest.mark.parametrize("message_bytes, opening_bytes", [
    (1000, 1040),  # one segment: the whole message opens at once
    (146_000, 10 * 1500),  # 100 segments: the initial window of 10 full packets
])
def test_incast_flag_threshold(message_bytes, opening_bytes) -> None:
    # a direct all-to-all on 2 leaves of 4 hosts and one spine: 16 messages into the leaf's uplink,
    # opening 16 x `opening_bytes` at once; each arrives at 1/7 of its sender's 100 Gb/s link (7
    # messages at once), 16/7 x 100 Gb/s into a 100 Gb/s port, which sends on 7/16 of what arrives:
    # it queues 9/16 of the openings. A host's port gets 7 messages at 1/7 each: no queue.
    queue_bytes = 16 * opening_bytes * 9 // 16
    leaf_spine = {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 1, "uplink_gbps": 100}

    def flags(buffer_bytes: int) -> dict:
        return run("all_to_all", "direct", 8 * message_bytes, buffer_kb=buffer_bytes / 1024, **leaf_spine)["runs"][0]

    below, above = flags(queue_bytes - 1), flags(queue_bytes)
    assert (below["incast_phases"], above["incast_phases"]) == (1, 0)
    assert below["max_port_flows"] == above["max_port_flows"] == 16
    # one switch: every port fed at its own rate, never flagged however small its buffer
    assert run("all_to_all", "direct", 8 * message_bytes, buffer_kb=0)["runs"][0]["incast_phases"] == 0


def test_incast_rto_charges_an_rto_to_each_flagged_phase() -> None:
    # as above: 9/16 x 16 x 1,040 bytes queue at the leaf's uplink, of 1 KiB: flagged, both
    # all-to-alls. The first opens the connections: after a handshake (default) its first loss waits
    # the minimum RTO (the handshake's microsecond RTT sets SRTT + 4 RTTVAR far below it: 200 ms);
    # without one, RFC 6298's initial RTO before any sample (tcp.initial_rto_ms = 1 s). The second
    # finds them open: tcp.min_rto_ms = 200 ms either way.
    leaf_spine = {"topology": "leaf_spine", "hosts_per_leaf": 4, "spines": 1, "uplink_gbps": 100, "buffer_kb": 1.0}

    def total_ps(handshake: bool = True, **engine_keys) -> int:
        rows = engine.run({"engine": {"backend": "phase", **engine_keys},
                           "network": {"npus": 8, "link_gbps": 100, "link_latency_us": 1, **leaf_spine},
                           "tcp": {"handshake": handshake, "timestamps": False},
                           "workload": {"type": "collective", "op": "all_to_all", "bytes": 8 * 1000, "iterations": 2}})
        return round(rows["runs"][0]["sim_time_s"] * 1e12)

    assert total_ps(incast_rto=True) - total_ps() == (200 + 200) * 10**9
    assert total_ps(False, incast_rto=True) - total_ps(False) == (1000 + 200) * 10**9


def test_incast_rto_needs_the_phase_backend() -> None:
    with pytest.raises(engine.ConfigError, match="engine.incast_rto"):
        run("all_to_all", "direct", 8 * 1000, backend="analytical", engine_keys={"incast_rto": True})


def test_rows_say_what_the_backend_does_not_know() -> None:
    rows = run("all_to_all", "direct", 8 * 146_000, engine_keys={"link_stats": "all"})
    row = rows["runs"][0]
    assert row["flows"] is None and row["drops"] is None
    assert rows["flows"] == []
    # a NIC carries 7 messages of 150,000 wire bytes for the whole phase (7 x 150,000 x 80 ps) and
    # its fixed part (2 us + a packet's store-and-forward)
    busy_ps = 7 * 150_000 * PS_PER_BYTE
    total_ps = busy_ps + 2 * LINK_LATENCY_PS + STORE_AND_FORWARD_PS
    assert row["max_link_utilisation"] == pytest.approx(busy_ps / total_ps, rel=1e-9)
    nic = [link for link in rows["links"] if link["kind"] == "host_nic"]
    assert [link["bytes"] for link in nic] == [7 * 150_000] * 8


def test_slow_start_share_as_analytical_counts_it() -> None:
    # ring all-reduce on 8 NPUs of one switch, blocks of n / 8 (tests/test_screen_risks.py's hand
    # computation): RTT 4.24 us, BDP 53,000 bytes; 30,000-byte blocks need 2 doublings of 14,600 bytes
    # (8.48 us) against 2.47 us of transmission: all count; 10,000 bytes fit the initial window and 2 MiB
    # take 172 us: none does
    assert run("all_reduce", "ring", 8 * 30_000)["runs"][0]["slow_start_share"] == 1.0
    assert run("all_reduce", "ring", 8 * 10_000)["runs"][0]["slow_start_share"] == 0.0
    assert run("all_reduce", "ring", 8 * 2**21)["runs"][0]["slow_start_share"] == 0.0
    # every message of a DLRM iteration on leaf_spine, routes of both classes: the same share as analytical
    network = {"topology": "leaf_spine", "npus": 32, "hosts_per_leaf": 8, "spines": 2, "uplink_gbps": 50}
    shares = [engine.run({"engine": {"backend": backend}, "network": network,
                          "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt",
                                       "iterations": 1}})["runs"][0]["slow_start_share"]
              for backend in ("phase", "analytical")]
    assert 0.0 < shares[0] < 1.0 and shares[0] == shares[1]


# -- the routes are the packet engine's ----------------------------------------------------------------

def test_vectorised_hash_is_flow_hash() -> None:
    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(0, 2**31, 100) for _ in range(3))
    assert flow_hash_array(7, a, b, c).tolist() == [flow_hash(7, int(x), int(y), int(z)) for x, y, z in zip(a, b, c)]


@pytest.mark.parametrize("network", [
    {"topology": "switch", "npus": 8},
    {"topology": "leaf_spine", "npus": 24, "hosts_per_leaf": 4, "spines": 3, "uplink_gbps": 100},
    {"topology": "fat_tree", "npus": 54},  # k = 6: pods of 9 hosts, 3 per edge switch
    {"topology": "ring", "npus": 6},  # routed one by one through `path`
    {"topology": "hierarchical", "npus": 16, "npus_per_node": 4},
    # a node's NICs on two leaves (4 NICs a leaf, 8 NPUs a node), ECMP over 3 spines
    {"topology": "hierarchical", "npus": 32, "npus_per_node": 8, "scaleout": "leaf_spine", "hosts_per_leaf": 4,
     "spines": 3},
    {"topology": "hierarchical", "npus": 24, "npus_per_node": 2, "scaleout": "fat_tree", "fat_tree_k": 6},
    # 2 groups of 3 nodes of 4 GPUs: 8 rail leaves of 3 NICs, 2 spines; with and without PXN
    {"topology": "rail_optimized", "npus": 24, "npus_per_node": 4, "hosts_per_leaf": 3, "spines": 2},
    {"topology": "rail_optimized", "npus": 24, "npus_per_node": 4, "hosts_per_leaf": 3, "spines": 2, "pxn": False},
])
def test_vectorised_routes_are_the_topologys_paths(network) -> None:
    topology = build_topology(EventList(), load_config({"network": network}).network, 5)
    n = network["npus"]
    src, dst = (array.ravel() for array in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    src, dst = src[src != dst], dst[src != dst]
    flow_ids = np.arange(len(src)) * 7 + 3
    hops, endpoint = VectorRoutes(topology).hops(src, dst, flow_ids)
    index = {id(link): position for position, link in enumerate(topology.links)}
    for message, (s, d, f) in enumerate(zip(src, dst, flow_ids)):
        path = [index[id(link)] for link in topology.path(int(s), int(d), int(f))]
        routed = [int(hop[message]) for hop in hops if hop[message] >= 0]
        assert routed == path
        ends = [int(hop[message]) for hop, is_end in zip(hops, endpoint) if is_end and hop[message] >= 0]
        assert ends == ([path[0], path[-1]] if len(path) > 1 else path)


def test_memory_estimate_counts_a_flow_id_per_ordered_pair() -> None:
    # an int32 per ordered pair (the connection ids ECMP hashes): 9,216^2 x 4 bytes of the estimate
    from engine import estimate_run_bytes
    from engine.backends.phase import PHASE_BYTES_PER_PAIR

    config = engine.load_config({
        "engine": {"backend": "phase"},
        "network": {"npus": 9216, "topology": "leaf_spine", "hosts_per_leaf": 16, "spines": 4, "uplink_gbps": 100},
        "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"}})
    assert PHASE_BYTES_PER_PAIR == 4
    estimate = estimate_run_bytes(config)
    alpha_beta = estimate_run_bytes(dataclasses.replace(config, engine=dataclasses.replace(config.engine,
                                                                                         backend="alpha_beta")))
    assert estimate - alpha_beta >= 9216 * 9216 * 4
    assert estimate >= 423 * 2**20  # the peak measured (docs/phase-backend.md)
