"""engine.backend=ns3: ns-3's TCP behind netsweep's system layer.

The first tests need nothing but the engine (what ns-3 cannot express is refused; the topologies
are handed to ns-3 link for link). The others run ns-3 and are skipped, saying why, when the `ns3`
extra or g++ is missing (CI installs only `.[test]`): small scenarios run on both simulators, with
expected values from the collective cost model (Thakur, Rabenseifner and Gropp 2005) and the
validation targets of issue 13 (deep buffers: packet within 2 % of ns-3).
"""

from __future__ import annotations

import signal

import pytest

import engine
from engine.backends.ns3 import build
from engine.backends.ns3.helper import Ns3Error, Ns3Messages, network_graph
from engine.checks import check_backend
from engine.config import ConfigError, load_config
from engine.eventlist import EventList
from engine.topology import build_topology

NS3_MISSING = build.unavailable_reason()
needs_ns3 = pytest.mark.skipif(NS3_MISSING is not None, reason=f"ns3 backend unavailable: {NS3_MISSING}")

MSS_BYTES = 1460
PAYLOAD_RATE_BPS = 100e9 * MSS_BYTES / (MSS_BYTES + 40)  # 100 Gb/s carrying 40 header bytes per segment


def config(backend: str, **overrides: dict) -> dict:
    """A small collective on 100 Gb/s links with 1 us latency and deep (1 MiB) switch buffers, TCP
    timestamps off (40-byte headers, 1460-byte segments: the sizes counted in this module)."""
    base = {"engine": {"backend": backend},
            "network": {"topology": "switch", "npus": 4, "link_gbps": 100.0, "link_latency_us": 1.0,
                        "buffer_kb": 1024.0},
            "tcp": {"cc": "newreno", "timestamps": False},
            "workload": {"type": "collective", "op": "all_reduce", "bytes": 4_194_304, "iterations": 1}}
    for section, values in overrides.items():
        base[section] = {**base[section], **values}
    return base


# -- what ns-3 cannot express: refused before anything runs (no ns-3 needed) ---------------------

@pytest.mark.parametrize("section, key, value", [
    ("network", "loss_rate", 0.01),
    ("tcp", "max_rto_s", 120.0),
    ("network", "npus", 129),
    ("engine", "link_stats", "all"),
    ("tcp", "rack_tlp", True),
    ("tcp", "hystart", True),
    ("tcp", "sack_after_rto", "discard"),
])
def test_settings_ns3_cannot_express_are_refused_naming_the_key(section, key, value):
    with pytest.raises(ConfigError) as refused:
        check_backend(load_config(config("ns3", **{section: {key: value}})))
    assert refused.value.key == f"{section}.{key}"
    assert "engine.backend=ns3" in str(refused.value)


def test_flows_workload_stays_on_the_packet_backend():
    flows = {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 1000}]}
    with pytest.raises(ConfigError) as refused:
        check_backend(load_config({**config("ns3"), "workload": flows}))
    assert refused.value.key == "engine.backend"


def test_a_missing_wheel_or_compiler_is_one_config_error_naming_the_extra(monkeypatch):
    monkeypatch.setattr(build, "unavailable_reason", lambda: "the ns3 wheel is not installed "
                                                             "(pip install 'netsweep[ns3]')")
    with pytest.raises(ConfigError) as refused:
        check_backend(load_config(config("ns3")))
    assert refused.value.key == "engine.backend"
    assert "netsweep[ns3]" in str(refused.value)


@pytest.mark.parametrize("network", [
    {"topology": "switch", "npus": 5},
    {"topology": "dumbbell", "npus": 6, "bottleneck_gbps": 10.0, "bottleneck_latency_us": 2.0},
    {"topology": "ring", "npus": 5},
    {"topology": "leaf_spine", "npus": 12, "hosts_per_leaf": 4, "spines": 3, "uplink_gbps": 40.0},
    {"topology": "fat_tree", "npus": 10, "fat_tree_k": 4},
    {"topology": "hierarchical", "npus": 8, "npus_per_node": 4, "scaleup_gbps": 400.0, "scaleup_latency_us": 0.1},
    {"topology": "hierarchical", "npus": 16, "npus_per_node": 4, "scaleout": "leaf_spine", "hosts_per_leaf": 8},
    {"topology": "rail_optimized", "npus": 16, "npus_per_node": 4, "hosts_per_leaf": 2, "spines": 2},
    {"topology": "rail_optimized", "npus": 16, "npus_per_node": 4, "hosts_per_leaf": 2, "spines": 2, "pxn": False},
    {"topology": "full_mesh", "npus": 5},
])
def test_every_link_goes_to_ns3_once_and_every_route_is_a_walk_between_its_hosts(network):
    cfg = load_config({"network": network})
    topology = build_topology(EventList(), cfg.network, cfg.seed)
    nodes, duplex = network_graph(topology)
    ends = {}
    for a, b, forward, backward in duplex:
        assert forward.rate_bps == backward.rate_bps and forward.latency_ps == backward.latency_ps
        ends[id(forward)], ends[id(backward)] = (a, b), (b, a)
    assert all(0 <= node < nodes for pair in ends.values() for node in pair)
    for src in range(topology.npus):
        for dst in range(topology.npus):
            if src == dst:
                continue
            for flow_id in range(3):  # ECMP: several flows, several paths
                hops = [ends[id(link)] for link in topology.path(src, dst, flow_id)]
                assert hops[0][0] == src and hops[-1][1] == dst
                assert all(hops[i][1] == hops[i + 1][0] for i in range(len(hops) - 1))


# -- ns-3 and the packet engine on the same scenarios ---------------------------------------------

def both(cfg_packet: dict) -> tuple[dict, dict]:
    """The runs rows of one config on the packet backend, with ns-3's exact transmit timing
    (`host.tx_jitter_ns=0`: ns-3 is deterministic), and on ns3."""
    cfg_ns3 = {**cfg_packet, "engine": {**cfg_packet["engine"], "backend": "ns3"}}
    exact_timing = {**cfg_packet, "host": {**cfg_packet.get("host", {}), "tx_jitter_ns": 0}}
    return engine.run(exact_timing)["runs"][0], engine.run(cfg_ns3)["runs"][0]


@pytest.mark.ns3
@needs_ns3
def test_ring_all_reduce_agrees_with_ns3_and_with_the_bandwidth_term():
    packet, ns3 = both(config("packet"))
    assert packet["status"] == ns3["status"] == "ok"
    # ring all-reduce, 4 NPUs, 4 MiB each: 2 (p - 1)/p n / B at the payload rate = 517.1 us; slow start
    # and 6 steps of a few microseconds of latency come on top
    bandwidth_term_s = 2 * (3 / 4) * 4_194_304 * 8 / PAYLOAD_RATE_BPS
    assert bandwidth_term_s == pytest.approx(517.1e-6, rel=1e-3)
    assert bandwidth_term_s < ns3["iteration_time_s"] < 1.10 * bandwidth_term_s
    assert packet["iteration_time_s"] == pytest.approx(ns3["iteration_time_s"], rel=0.02)
    assert ns3["retransmits"] == ns3["timeouts"] == ns3["drops"] == 0
    assert ns3["packets_sent"] == packet["packets_sent"]  # the same segments: 2 (p - 1) steps of n/p


@pytest.mark.ns3
@needs_ns3
def test_with_timestamps_both_carry_1448_bytes_a_segment_and_agree():
    """tcp.timestamps: ns-3's SegmentSize becomes MSS - 12 = 1448 and both add the 12-byte option
    to 40 bytes of headers. Ring all-reduce, 4 NPUs, 4 MiB each: every NPU sends 2 (p - 1) = 6
    chunks of n/p = 1,048,576 B, ceil(1,048,576 / 1448) = 725 segments each (724 full + 224 B), so
    4 x 6 x 725 = 17,400 segments and 4 x 6 x (1,048,576 + 725 x 52) = 26,070,624 B on the wire;
    the bandwidth term at the payload rate 100 Gb/s x 1448/1500 is 2 (3/4) n / B = 521.4 us."""
    packet, ns3 = both(config("packet", tcp={"timestamps": True}))
    assert packet["status"] == ns3["status"] == "ok"
    assert ns3["packets_sent"] == packet["packets_sent"] == 4 * 6 * 725 == 17_400
    assert ns3["bytes_sent"] == packet["bytes_sent"] == 4 * 6 * (1_048_576 + 725 * 52) == 26_070_624
    bandwidth_term_s = 2 * (3 / 4) * 4_194_304 * 8 / (100e9 * 1448 / 1500)
    assert bandwidth_term_s == pytest.approx(521.4e-6, rel=1e-3)
    assert bandwidth_term_s < ns3["iteration_time_s"] < 1.10 * bandwidth_term_s
    assert packet["iteration_time_s"] == pytest.approx(ns3["iteration_time_s"], rel=0.02)


@pytest.mark.ns3
@needs_ns3
def test_ecmp_paths_and_all_to_all_on_a_leaf_spine_agree_with_ns3():
    leaf_spine = {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100.0,
                  "buffer_kb": 16384.0}
    packet, ns3 = both(config("packet", network=leaf_spine, workload={"op": "all_to_all", "bytes": 1_048_576}))
    # direct all-to-all, 8 NPUs, 1 MiB: (p - 1)/p n / B = 75.4 us at least
    bandwidth_term_s = (7 / 8) * 1_048_576 * 8 / PAYLOAD_RATE_BPS
    assert bandwidth_term_s < ns3["iteration_time_s"]
    assert packet["iteration_time_s"] == pytest.approx(ns3["iteration_time_s"], rel=0.02)
    assert packet["drops"] == ns3["drops"] == 0


@pytest.mark.ns3
@needs_ns3
def test_dctcp_marks_in_ns3_and_the_counts_reach_the_runs_row():
    # 7 all-to-all senders per leaf share 2 uplinks (3.5:1): queues pass the 20 KiB marking threshold
    leaf_spine = {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 8, "spines": 2, "uplink_gbps": 100.0,
                  "buffer_kb": 16384.0, "ecn_threshold_kb": 20.0}
    cfg = config("ns3", network=leaf_spine, tcp={"cc": "dctcp"},
                 workload={"op": "all_to_all", "bytes": 1_048_576})
    rows = engine.run(cfg)
    run_row = rows["runs"][0]
    assert run_row["status"] == "ok"
    assert run_row["ecn_marks"] > 0 and run_row["drops"] == 0
    # the runs row counts marks at switch ports; ns-3's DCTCP (like Linux's) also sends its pure ACKs
    # ECN-capable, so some marks land on ACKs, which no message counts
    data_marks = sum(flow["ecn_marks"] for flow in rows["flows"])
    assert 0 < data_marks < run_row["ecn_marks"]


@pytest.mark.ns3
@needs_ns3
def test_ns3_runs_are_deterministic():
    cfg = config("ns3", workload={"op": "all_to_all", "bytes": 65_536})
    first, second = engine.run(cfg), engine.run(cfg)
    volatile = {"wall_s", "events_per_s"}
    assert [{k: v for k, v in row.items() if k not in volatile} for row in first["runs"]] == \
        [{k: v for k, v in row.items() if k not in volatile} for row in second["runs"]]
    assert first["flows"] == second["flows"]


@pytest.mark.ns3
@needs_ns3
@pytest.mark.parametrize("network", [
    {"topology": "hierarchical", "npus": 8, "npus_per_node": 4, "scaleup_gbps": 400.0, "scaleup_latency_us": 0.1},
    {"topology": "fat_tree", "npus": 16, "fat_tree_k": 4},
    {"topology": "ring", "npus": 6},  # hosts forward for each other: every egress is a ring port
    {"topology": "dumbbell", "npus": 4, "bottleneck_gbps": 10.0, "bottleneck_latency_us": 2.0},
    # NPUs relay to other rails over the scale-up fabric (PXN): they forward, as on the ring
    {"topology": "rail_optimized", "npus": 16, "npus_per_node": 4, "hosts_per_leaf": 2, "spines": 2},
    {"topology": "full_mesh", "npus": 4},  # hosts joined directly, no switch
])
def test_every_topology_runs_on_ns3_and_agrees_with_the_packet_engine(network):
    packet, ns3 = both(config("packet", network=network, workload={"op": "all_to_all", "bytes": 262_144}))
    assert packet["status"] == ns3["status"] == "ok"
    assert packet["iteration_time_s"] == pytest.approx(ns3["iteration_time_s"], rel=0.02)


@pytest.mark.ns3
@needs_ns3
def test_loss_free_dctcp_never_waits_for_a_retransmission_timeout():
    # ns-3's TcpDctcp cuts cwnd to (1 - alpha / 2) cwnd with no floor: with every window marked
    # (alpha near 1) it halves each round trip to below one segment, and once all it sent is
    # acknowledged its silly-window check sends nothing until the 200 ms RTO. The helper floors the
    # window at two segments (Linux's dctcp_ssthresh; the engine's DCTCP). Without a floor this
    # case took 200.2 ms in ns-3, with 2 timeouts and no drop or retransmission.
    dumbbell = {"topology": "dumbbell", "npus": 8, "bottleneck_gbps": 100.0, "bottleneck_latency_us": 1.0,
                "ecn_threshold_kb": 20.0}
    ns3 = engine.run(config("ns3", network=dumbbell, tcp={"cc": "dctcp"},
                            workload={"op": "all_to_all", "bytes": 1_048_576}))["runs"][0]
    assert ns3["status"] == "ok"
    assert ns3["ecn_marks"] > 0  # the bottleneck queue passes the marking threshold
    # no loss, so every segment is acknowledged within microseconds: no RTO may fire (RFC 6298)
    assert ns3["timeouts"] == ns3["retransmits"] == ns3["drops"] == 0
    # the bottleneck carries 4 x 4 messages of n/p = 128 KiB from left to right: 2 MiB at the payload
    # rate = 172.4 us at least; DCTCP (alpha starting at 1) halves its first marked windows like Reno
    # and 16 flows of about 25 round trips ramp up and finish unevenly, so allow half as much again
    bottleneck_bound_s = 4 * 4 * (1_048_576 // 8) * 8 / PAYLOAD_RATE_BPS
    assert bottleneck_bound_s == pytest.approx(172.4e-6, rel=1e-3)
    assert bottleneck_bound_s < ns3["iteration_time_s"] < 1.5 * bottleneck_bound_s


@pytest.mark.ns3
@needs_ns3
def test_ns3_dctcp_window_stays_at_two_segments_or_more_as_linux(monkeypatch, capfd):
    # Linux's dctcp_ssthresh keeps max(cwnd (1 - alpha / 2), 2) segments. In this all-to-all the
    # spine ports stay above the marking threshold (32 senders of a leaf on two uplinks), alpha stays
    # near 1 and each marked window halves cwnd: the floor is reached. The helper's debug trace
    # (NETSWEEP_NS3_TRACE=src,dst, on stderr) gives the window of connection 1 -> 31 after each change.
    monkeypatch.setenv("NETSWEEP_NS3_TRACE", "1,31")
    leaf_spine = {"topology": "leaf_spine", "npus": 32, "hosts_per_leaf": 16, "spines": 2, "uplink_gbps": 100.0,
                  "buffer_kb": 16384.0, "ecn_threshold_kb": 20.0}
    packet, ns3 = both(config("packet", network=leaf_spine, tcp={"cc": "dctcp"},
                              workload={"op": "all_to_all", "bytes": 1_048_576}))
    windows = [int(words[2]) for line in capfd.readouterr().err.splitlines()
               for words in (line.split(),) if words and words[0] == "cwnd"]
    assert windows and windows[0] == 10 * MSS_BYTES  # the initial window, then the marked windows' cuts
    assert min(windows) == 2 * MSS_BYTES
    assert ns3["timeouts"] == ns3["drops"] == 0 and ns3["ecn_marks"] > 0
    # with the same floor and the same once-per-window reduction (no growth until the reduced window
    # is acknowledged, Linux's CWR), both simulators give the same completion
    assert packet["iteration_time_s"] == pytest.approx(ns3["iteration_time_s"], rel=0.02)


@pytest.mark.ns3
@needs_ns3
def test_a_helper_that_dies_is_an_error_naming_its_exit_status():
    # ns-3 aborts on its own assertions (NS_ASSERT, NS_FATAL): the run must stop with an error that
    # says the helper ended, not hang or report a silent pipe. SIGKILL stands in for the abort.
    cfg = load_config(config("ns3"))
    eventlist = EventList()
    messages = Ns3Messages(eventlist, build_topology(eventlist, cfg.network, cfg.seed), cfg)
    messages._process.send_signal(signal.SIGKILL)
    messages.send(0, 1, 1_000_000, lambda: None)
    with pytest.raises(Ns3Error, match=f"exit status {-signal.SIGKILL}"):
        messages.run(10**12)


@pytest.mark.ns3
@needs_ns3
def test_ns3_ring_port_serves_own_and_forwarded_packets_round_robin():
    # The engine's RingPort rules (tests/test_topology.py) in ns-3: ring of 5, 100 Gb/s, 1 us, no
    # buffer limit, initial window 40 segments. At t = 0 NPU 1 writes 40 segments to NPU 2 (its own,
    # on port n1->n2) and NPU 0 writes 40 to NPU 2 through NPU 1; each sends its window at once.
    # ns-3's frame is the 1500-byte IP packet + 2 bytes of PPP header: 1502 x 8 / 100e9 = 120.16 ns.
    # NPU 0's packets reach NPU 1 from 120.16 + 1000 = 1120.16 ns, one every 120.16 ns, during NPU 1's
    # 10th own packet; from then the port alternates, forwarded first (NPU 1's own packets took the
    # turns while nothing else waited): own 10..39 leave interleaved with forwarded 0..29, so NPU 1's
    # last packet ends 70 frames after t = 0, and the port, never idle, ends the 10 forwarded left
    # 10 frames later. (A FIFO would send all 40 own first: NPU 1's message at 40 frames + 1 us.)
    # ns-3's TcpSocketBase::Send sends one time step (1 ps here) after the write.
    frame_ps, latency_ps, send_step_ps = 120_160, 1_000_000, 1
    cfg = load_config(config("ns3", network={"topology": "ring", "npus": 5, "buffer_kb": None},
                             tcp={"init_cwnd_pkts": 40}))
    eventlist = EventList()
    messages = Ns3Messages(eventlist, build_topology(eventlist, cfg.network, cfg.seed), cfg)
    delivered_ps: dict[int, int] = {}
    try:
        for src in (1, 0):
            messages.send(src, 2, 40 * MSS_BYTES, lambda src=src: delivered_ps.setdefault(src, eventlist.now_ps))
        assert messages.run(10**12)
        counters = messages.counters()
    finally:
        messages.close()
    assert delivered_ps == {1: send_step_ps + 70 * frame_ps + latency_ps,
                            0: send_step_ps + 80 * frame_ps + latency_ps}
    assert counters["drops"] == 0 and counters["retransmits"] == 0


@pytest.mark.ns3
@needs_ns3
def test_ns3_ring_never_drops_an_npus_own_packets():
    # One 1.5 KiB buffer (a packet) per ring link: NPU 0's window of 40 segments to its neighbour
    # waits in its own, unlimited queue (as at a host NIC) instead of meeting the buffer, so nothing
    # is lost and the message takes 40 back-to-back frames of 120.16 ns (1500 + 2 PPP bytes at
    # 100 Gb/s) plus the 1 us of the link, from 1 ps after the write (ns-3's TcpSocketBase::Send sends
    # one time step later).
    cfg = load_config(config("ns3", network={"topology": "ring", "npus": 5, "buffer_kb": 1.5},
                             tcp={"init_cwnd_pkts": 40}))
    eventlist = EventList()
    messages = Ns3Messages(eventlist, build_topology(eventlist, cfg.network, cfg.seed), cfg)
    delivered_ps: list[int] = []
    try:
        messages.send(0, 1, 40 * MSS_BYTES, lambda: delivered_ps.append(eventlist.now_ps))
        assert messages.run(10**12)
        counters = messages.counters()
    finally:
        messages.close()
    assert delivered_ps == [1 + 40 * 120_160 + 1_000_000]
    assert counters["drops"] == 0 and counters["retransmits"] == 0
