"""RoCEv2 and PFC on the packet engine (`transport.protocol=roce`) against hand computations.

At 100 Gb/s a byte takes 80 ps on the wire. A RoCE packet is its payload and 44 header bytes (IPv4 20,
UDP 8, BTH 12, ICRC 4); with network.mtu_bytes = 1500 a full packet carries 1024 bytes (the largest IB
path MTU that fits) in 1,068 bytes on the wire: 85.44 ns. A NIC sends a connection's packets back to
back (line rate); every switch stores and forwards a packet whole.
"""

from __future__ import annotations

import math
from pathlib import Path
from random import Random

import pytest

from engine import ConfigError, load_config, prepare, run
from engine.eventlist import EventList, EventSource
from engine.links import ROCE_CNP_BYTES, ROCE_HEADER_BYTES, NicSender, Packet, PacketSink, PausableLink, RoceNic
from engine.transport.roce import CNP, Dcqcn

PS_PER_BYTE = 80  # 100 Gb/s
LATENCY_PS = 1_000_000  # 1 us a link


def roce(network: dict, workload: dict, roce_keys: dict | None = None) -> dict:
    """A RoCE run of `workload` on `network` (100 Gb/s, 1 us links unless it says otherwise)."""
    return {"transport": {"protocol": "roce"}, "roce": roce_keys or {}, "network": network, "workload": workload}


def flows(*specs: tuple[int, int, int]) -> dict:
    return {"type": "flows", "flows": [{"src": src, "dst": dst, "bytes": nbytes} for src, dst, nbytes in specs]}


def wire_bytes(nbytes: int, payload: int = 1024) -> int:
    """A message's bytes on the wire: a header per packet of at most `payload` bytes."""
    return nbytes + math.ceil(nbytes / payload) * ROCE_HEADER_BYTES


def test_the_path_mtu_is_the_largest_ib_mtu_that_fits_the_ethernet_mtu() -> None:
    for mtu, payload in ((1500, 1024), (4096, 2048), (4140, 4096), (9000, 4096), (1067, 512)):
        config = load_config(roce({"mtu_bytes": mtu}, flows((1, 0, 10))))
        assert config.roce.path_mtu_bytes(config.network) == payload, mtu


def test_one_flow_completes_in_its_serialisation_and_the_hops_by_hand() -> None:
    # 100,000 bytes: 97 packets of 1,024 and one of 672. The NIC sends them back to back (104,312 bytes
    # on the wire). The switch forwards each after it has arrived whole: the 97th (1,068 bytes) leaves it
    # 1 us + 85.44 ns after leaving the NIC, and the last (716 bytes, arrived meanwhile) right after it.
    nbytes = 100_000
    assert wire_bytes(nbytes) == 104_312
    before_last_ps = (104_312 - 716) * PS_PER_BYTE  # the NIC has sent the first 97
    expected_ps = before_last_ps + LATENCY_PS + 1_068 * PS_PER_BYTE + 716 * PS_PER_BYTE + LATENCY_PS
    row = run(roce({"npus": 2}, flows((1, 0, nbytes))))["runs"][0]
    assert row["status"] == "ok"
    assert row["max_fct_s"] == pytest.approx(expected_ps * 1e-12, rel=1e-12)
    assert (row["packets_sent"], row["bytes_sent"], row["retransmits"], row["pause_frames"]) == (98, 104_312, 0, 0)


def test_an_incast_with_pfc_is_lossless_and_keeps_the_port_busy() -> None:
    # 8 senders of 1 MB into one host of one switch. From the first packet's arrival at the switch
    # (1 us + 85.44 ns) the receiver's port never idles (PFC resumes a sender when its ingress port
    # holds 12 packets, 8 x 12 packets take 8.2 us to drain: longer than a pause's 2 us round trip),
    # so the last byte arrives after the port has serialised every byte, and one more link latency.
    senders, nbytes = 8, 1_000_000
    total_wire = senders * wire_bytes(nbytes)
    assert total_wire == 8_343_904
    expected_ps = LATENCY_PS + 1_068 * PS_PER_BYTE + total_wire * PS_PER_BYTE + LATENCY_PS
    config = roce({"npus": senders + 1}, {"type": "flows", "pattern": "incast", "senders": senders,
                                          "bytes_per_flow": nbytes})
    rows = run(config)
    row = rows["runs"][0]
    assert (row["status"], row["drops"], row["retransmits"], row["timeouts"]) == ("ok", 0, 0, 0)
    assert row["pause_frames"] > 0
    assert row["max_fct_s"] == pytest.approx(expected_ps * 1e-12, rel=1e-9)
    # An ingress port holds at most XOFF (15 packets of 1,500 bytes), what its sender sends while the
    # PAUSE travels (1 us at 100 Gb/s: 12,500 bytes), what is on its wire then (as much) and the packet
    # being serialised; the receiver's port queues at most the 8 ingress ports' worth.
    per_ingress = 15 * 1500 + 2 * 12_500 + 1_068
    assert 0 < row["max_queue_kb"] * 1024 <= senders * per_ingress


def test_the_links_table_counts_each_port_s_pauses_and_time_paused() -> None:
    # 2 senders of 200 KB into h0: the senders' NICs are paused (their rows count the PAUSEs the switch
    # sent them and the time they stood), the receiver's port never is (a host never pauses its switch),
    # and every pause a NIC received is one the run counts.
    config = roce({"npus": 3}, flows((1, 0, 200_000), (2, 0, 200_000)))
    config["engine"] = {"link_stats": "all"}
    rows = run(config)
    links = {row["link"]: row for row in rows["links"]}
    for sender in ("h1->sw", "h2->sw"):
        assert links[sender]["pause_frames"] > 0
        assert 0 < links[sender]["paused_s"] < rows["runs"][0]["sim_time_s"]
    assert (links["sw->h0"]["pause_frames"], links["sw->h0"]["paused_s"]) == (0, 0.0)
    assert sum(row["pause_frames"] for row in links.values()) == rows["runs"][0]["pause_frames"]


def test_without_pfc_a_shallow_buffer_drops_and_go_back_n_recovers_every_loss() -> None:
    # Four senders into one port through a 16 KiB buffer, starting 0.3 us apart (in step, the first
    # sender's packets would take every slot the port frees, and the others' would all be lost: no
    # packet out of order, no NAK, only timers)
    flows = [{"src": src, "dst": 0, "bytes": 200_000, "start_us": 0.3 * (src - 1)} for src in range(1, 5)]
    config = roce({"npus": 5, "pfc": False, "buffer_kb": 16.0}, {"type": "flows", "flows": flows}, {"rto_us": 100.0})
    prepared = prepare(config)
    prepared.start()
    prepared.simulate()
    rows = prepared.rows(0.0)
    row = rows["runs"][0]
    assert row["status"] == "ok" and row["flows_completed"] == 4
    assert row["drops"] > 0 and row["retransmits"] > 0 and row["pause_frames"] == 0
    assert all(flow["end_s"] is not None for flow in rows["flows"])
    # packets out of order were dropped and drew NAKs, and every NAK that arrived rewound its sender;
    # every byte arrived, in order
    queue_pairs = prepared.sim.queue_pairs
    assert sum(qp.receiver.naks_sent for qp in queue_pairs) >= sum(qp.sender.naks_received for qp in queue_pairs) > 0
    assert sum(qp.receiver.out_of_order_dropped for qp in queue_pairs) > 0
    assert [qp.receiver.rcv_nxt for qp in queue_pairs] == [200_000] * 4


def test_a_lost_tail_is_recovered_by_the_timer() -> None:
    # Two senders into one port through a buffer of 1 KiB: a tail packet lost with no packet behind it
    # draws no NAK, only the retransmission timer (10 us here) sends it again.
    config = roce({"npus": 3, "pfc": False, "buffer_kb": 1.0}, flows((1, 0, 20_000), (2, 0, 20_000)),
                  {"rto_us": 10.0})
    row = run(config)["runs"][0]
    assert row["status"] == "ok" and row["flows_completed"] == 2
    assert row["drops"] > 0 and row["timeouts"] > 0


def _links(prepared) -> dict[str, PausableLink]:
    links = {link.name: link for link in prepared.sim.topology.links}
    assert all(isinstance(link, PausableLink) for link in links.values())
    return links


def test_a_paused_port_backs_up_its_switch_which_pauses_its_own_senders() -> None:
    # A dumbbell: h0, h1, h2 on the left switch, h3, h4, h5 on the right. h4 and h5 send to h3 from the
    # right; h0 and h1 from the left, over the bottleneck. h3's port is the only one oversubscribed
    # (4 senders), yet the PAUSEs it causes stop the bottleneck, whose queue at the left switch grows
    # until the left switch pauses h0 and h1 too: congestion spreading, PFC's known hazard.
    network = {"topology": "dumbbell", "npus": 6}
    prepared = prepare(roce(network, flows((0, 3, 2_000_000), (1, 3, 2_000_000), (4, 3, 2_000_000),
                                           (5, 3, 2_000_000))))
    prepared.start()
    prepared.simulate()
    links = _links(prepared)
    xoff = 15 * 1500
    assert links["swL->swR"].pause_frames > 0 and links["swL->swR"].max_queue_bytes > xoff
    assert links["h0->swL"].pause_frames > 0 and links["h1->swL"].pause_frames > 0
    assert links["h4->swR"].pause_frames > 0
    assert sum(link.drops for link in links.values()) == 0
    end_ps = prepared.sim.eventlist.now_ps
    assert all(0 < links[name].time_paused_ps(end_ps) < end_ps for name in ("h0->swL", "swL->swR"))
    assert links["swR->h3"].pause_frames == 0  # hosts never pause their switch


CHAKRA_TRACE = str(Path(__file__).parent / "chakra_traces" / "DATA" / "4npus_1pass" / "DATA")


@pytest.mark.parametrize(("network", "workload"), [
    ({"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 1}, {"type": "dlrm"}),
    ({"topology": "fat_tree", "npus": 16}, {"type": "collective", "op": "all_to_all", "bytes": 262_144}),
    ({"topology": "hierarchical", "npus": 8, "npus_per_node": 4}, {"type": "collective", "bytes": 262_144}),
    ({"topology": "rail_optimized", "npus": 8, "npus_per_node": 2, "hosts_per_leaf": 2}, {"type": "dlrm"}),
    ({"topology": "full_mesh", "npus": 4}, {"type": "astra", "path": "bundled:astra-sim-1.0/microAllReduce.txt"}),
    ({"topology": "dumbbell", "npus": 4}, {"type": "chakra", "path": CHAKRA_TRACE}),
])
def test_every_workload_type_and_topology_runs_on_roce_without_a_loss(network: dict, workload: dict) -> None:
    rows = run(roce(network, workload))
    row = rows["runs"][0]
    assert (row["status"], row["drops"], row["retransmits"], row["timeouts"]) == ("ok", 0, 0, 0)
    assert row["iteration_time_s"] > 0 and all(flow["end_s"] is not None for flow in rows["flows"])


@pytest.mark.parametrize("backend", ["hybrid"])
def test_the_backends_that_model_tcp_only_refuse_roce_in_one_line(backend: str) -> None:
    config = roce({"npus": 4}, {"type": "collective", "op": "all_reduce", "bytes": 4096})
    config["engine"] = {"backend": backend}
    with pytest.raises(ConfigError, match="engine.backend=.* packet or .* with transport.protocol=roce") as error:
        run(config)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("overrides", "key"), [
    ({"transport": {"protocol": "udp"}}, "transport.protocol"),
    ({"network": {"pfc": True}}, "network.pfc"),  # with tcp
    ({"transport": {"protocol": "roce"}, "roce": {"cc": "hpcc"}}, "roce.cc"),
    ({"transport": {"protocol": "roce"}, "roce": {"payload_bytes": 2048}}, "roce.payload_bytes"),
    ({"transport": {"protocol": "roce"}, "network": {"pfc_xoff_kb": 10.0, "pfc_xon_kb": 10.0}}, "network.pfc_xon_kb"),
    ({"transport": {"protocol": "roce"}, "network": {"pfc_xoff_kb": -1.0}}, "network.pfc_xoff_kb"),
    ({"transport": {"protocol": "roce"}, "network": {"topology": "ring"}}, "network.topology"),
    ({"transport": {"protocol": "roce"}, "roce": {"rto_us": 0.0}}, "roce.rto_us"),
    ({"transport": {"protocol": "roce"}, "roce": {"dcqcn_kmax_kb": 1.0}}, "roce.dcqcn_kmax_kb"),
])
def test_bad_values_are_refused_in_one_line_naming_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(overrides)
    assert error.value.key == key and "\n" not in str(error.value)


def test_pfc_defaults_to_the_transport() -> None:
    assert not load_config({}).pfc_on
    assert load_config({"transport": {"protocol": "roce"}}).pfc_on
    assert not load_config({"transport": {"protocol": "roce"}, "network": {"pfc": False}}).pfc_on
    assert load_config({}).network.pfc_thresholds_bytes() == (15 * 1500, 12 * 1500)  # htsim's main_roce


# DCQCN (Zhu et al., SIGCOMM 2015, section 3.1), computed by hand from the reaction point's equations:
# a CNP: R_T = R_C, R_C = R_C (1 - alpha / 2), alpha = (1 - g) alpha + g; alpha's timer: alpha = (1 - g)
# alpha; an increase event: fast recovery R_C = (R_T + R_C) / 2 for the first F, then R_T += R_AI first.
LINE_BPS = 100e9
G = 1 / 256


def dcqcn(byte_counter_bytes: int = 10 * 1024 * 1024) -> Dcqcn:
    """The paper's constants at 100 Gb/s: g = 1/256, R_AI 40 Mb/s, R_HAI 400 Mb/s, F = 5."""
    return Dcqcn(LINE_BPS, G, 40e6, 400e6, 1e6, 5, byte_counter_bytes)


def test_dcqcn_one_cnp_halves_the_rate_and_keeps_alpha_at_one() -> None:
    rp = dcqcn()
    assert (rp.rate_bps, rp.alpha, rp.limited) == (LINE_BPS, 1.0, False)
    rp.on_cnp()
    # R_C = 100 x (1 - 1/2) = 50 Gb/s, R_T = 100 Gb/s; alpha = (1 - g) x 1 + g = 1
    assert (rp.rate_bps, rp.target_bps, rp.alpha, rp.limited) == (50e9, 100e9, 1.0, True)


def test_dcqcn_alpha_decays_on_its_timer_and_sets_the_next_cut() -> None:
    rp = dcqcn()
    rp.on_cnp()
    rp.on_alpha_timer()
    assert rp.alpha == 255 / 256  # (1 - g) x 1 = 0.99609375
    rp.on_cnp()
    # R_C = 50 x (1 - 0.99609375 / 2) = 25.09765625 Gb/s; alpha = (1 - g) 0.99609375 + g
    assert rp.rate_bps == pytest.approx(25.09765625e9, rel=1e-15)
    assert rp.target_bps == 50e9
    assert rp.alpha == pytest.approx(255 / 256 * 255 / 256 + 1 / 256, rel=1e-15)


def test_dcqcn_fast_recovery_then_additive_then_hyper_increase() -> None:
    rp = dcqcn(byte_counter_bytes=1000)
    rp.on_cnp()
    rp.on_cnp()  # alpha still 1: R_T = 50, R_C = 25 Gb/s
    assert (rp.rate_bps, rp.target_bps) == (25e9, 50e9)
    # F = 5 timer events of fast recovery: R_C halves its distance to R_T = 50 each time
    for expected in (37.5e9, 43.75e9, 46.875e9, 48.4375e9, 49.21875e9):
        rp.on_increase_timer()
        assert (rp.rate_bps, rp.target_bps) == (expected, 50e9)
    rp.on_increase_timer()  # the 6th: additive increase, R_T = 50.04, R_C = (50.04 + 49.21875) / 2
    assert rp.target_bps == pytest.approx(50.04e9, rel=1e-15)
    assert rp.rate_bps == pytest.approx((50.04e9 + 49.21875e9) / 2, rel=1e-15)
    for _ in range(5):  # byte counter events 1..5 (timer count 6 > F): additive, R_T + 5 x 0.04
        rp.on_bytes_sent(1000)
    assert rp.target_bps == pytest.approx(50.24e9, rel=1e-15)
    rate = rp.rate_bps
    rp.on_bytes_sent(1000)  # both counts > F = 5: hyper increase, i = min(6, 6) - 5 = 1: R_T + 0.4
    assert rp.target_bps == pytest.approx(50.64e9, rel=1e-15)
    assert rp.rate_bps == pytest.approx((50.64e9 + rate) / 2, rel=1e-15)


def test_dcqcn_never_exceeds_line_rate_nor_falls_below_its_minimum() -> None:
    rp = dcqcn()
    for _ in range(60):
        rp.on_cnp()
    assert rp.rate_bps == 1e6
    rp = dcqcn()
    rp.on_cnp()
    for _ in range(200):
        rp.on_increase_timer()
    assert rp.rate_bps == rp.target_bps == LINE_BPS and not rp.limited


class _Tap(PacketSink):
    """Keeps the packets it is handed."""

    def __init__(self) -> None:
        self.packets: list[Packet] = []

    def receive_packet(self, pkt: Packet) -> None:
        self.packets.append(pkt)


def test_red_marks_none_below_kmin_and_every_packet_above_kmax() -> None:
    # Ten 1,000-byte ECN-capable packets at once into an idle port with Kmin 2,000 and Kmax 4,000 bytes:
    # packet k finds k x 1,000 bytes ahead of it (the first goes at once): k <= 2 are never marked,
    # k >= 4 always, k = 3 with probability Pmax x (3,000 - 2,000) / (4,000 - 2,000).
    eventlist = EventList()
    link = PausableLink(eventlist, "port", 100_000_000_000, 0, red=(2000, 4000, 0.5), red_rng=Random(7))
    tap = _Tap()
    for k in range(10):
        link.receive_packet(Packet((link, tap), 1000, 960, k, 0, 0, False, True))
    eventlist.run(10**12)
    marked = [pkt.ce for pkt in sorted(tap.packets, key=lambda pkt: pkt.seq)]
    assert marked[:3] == [False] * 3 and marked[4:] == [True] * 6
    assert link.ecn_marks == sum(marked)


class _Sender(NicSender):
    """A queue pair of `count` packets named `name` + k, its limiter letting them go from `ready_ps`."""

    def __init__(self, name: str, count: int, ready_ps: int = 0) -> None:
        self.name = name
        self.count = count
        self.sent = 0
        self.ready = ready_ps

    def ready_ps(self) -> int:
        return self.ready

    def next_packet(self, now_ps: int) -> Packet | None:
        if self.sent == self.count:
            return None
        self.sent += 1
        pkt = Packet((), 1000, 956, self.sent, 0, now_ps, False, False)
        pkt.sack_blocks = (self.name + str(self.sent),)
        return pkt


def test_a_nic_serves_its_queue_pairs_round_robin() -> None:
    # RoceNic's rule: the active senders in line, one packet each in turn; a sender its limiter holds
    # keeps its place; one with nothing left leaves the line; one activated goes last. Paused, the NIC
    # starts nothing by itself: each next_packet below is one turn.
    nic = RoceNic(EventList(), "nic", 100_000_000_000, LATENCY_PS)
    nic.paused = True
    a, b, c, d = _Sender("a", 2), _Sender("b", 2, ready_ps=100), _Sender("c", 1), _Sender("d", 1)
    for sender in (a, b, c):
        nic.activate(sender)

    def turn(now_ps: int) -> str | None:
        pkt = nic.next_packet(now_ps)
        return None if pkt is None else pkt.sack_blocks[0]

    # line a b c: a1; b held, c1; a2; b held, c and a dry: none ready until 100
    assert [turn(0), turn(0), turn(0), turn(0)] == ["a1", "c1", "a2", None]
    nic.activate(d)  # line b d
    # b1; d1; b2; then d and b dry
    assert [turn(100), turn(100), turn(100), turn(100)] == ["b1", "d1", "b2", None]
    nic.activate(c)  # c alone: served again
    c.count = 2
    assert turn(100) == "c2"


def _incast(cc: str, nbytes: int) -> dict:
    # PFC thresholds of 100 KiB / 80 KiB per ingress port: above DCQCN's Kmin (5 KB), so its marks come first
    return roce({"npus": 9, "pfc_xoff_kb": 100.0, "pfc_xon_kb": 80.0},
                {"type": "flows", "pattern": "incast", "senders": 8, "bytes_per_flow": nbytes}, {"cc": cc})


def test_dcqcn_cuts_the_pauses_of_an_incast_and_sends_a_cnp_at_most_every_interval() -> None:
    without = run(_incast("none", 4_000_000))["runs"][0]
    prepared = prepare(_incast("dcqcn", 4_000_000))
    prepared.start()
    prepared.simulate()
    with_dcqcn = prepared.rows(0.0)["runs"][0]
    assert (without["drops"], with_dcqcn["drops"], without["ecn_marks"]) == (0, 0, 0)
    assert with_dcqcn["ecn_marks"] > 0
    assert with_dcqcn["pause_frames"] < without["pause_frames"] / 4
    interval_ps = 50_000_000  # roce.dcqcn_cnp_interval_us = 50
    end_ps = prepared.sim.eventlist.now_ps
    for queue_pair in prepared.sim.queue_pairs:
        assert 0 < queue_pair.receiver.cnps_sent <= end_ps // interval_ps + 1
        assert queue_pair.sender.cnps_received == queue_pair.receiver.cnps_sent


def test_dcqcn_nic_rule_keeps_the_target_over_cuts_in_a_row() -> None:
    # ConnectX's default (roce.dcqcn_clamp_target_rate=false): a CNP sets R_T = R_C only when an increase
    # event came since the last cut. Two cuts in a row: R_T stays at the first CNP's 100 Gb/s while R_C
    # goes 100 -> 50 -> 25 (alpha = 1); one fast-recovery step, R_C = (100 + 25) / 2 = 62.5; the next CNP
    # then sets R_T = 62.5 and R_C = 62.5 x (1 - 1/2 x alpha) with alpha = 255/256 after no decay
    # (alpha = (1 - g) 1 + g = 1 at each CNP).
    rp = Dcqcn(LINE_BPS, G, 40e6, 200e6, 1e6, 5, 10 * 1024 * 1024, clamp_target_rate=False)
    rp.on_cnp()
    rp.on_cnp()
    assert (rp.rate_bps, rp.target_bps, rp.alpha) == (25e9, 100e9, 1.0)
    rp.on_increase_timer()
    assert (rp.rate_bps, rp.target_bps) == (62.5e9, 100e9)
    rp.on_cnp()
    assert (rp.rate_bps, rp.target_bps) == (31.25e9, 62.5e9)
    # the paper's rule (equation 1, the default) ratchets R_T down with every cut: 100, then 50
    paper = dcqcn()
    paper.on_cnp()
    paper.on_cnp()
    assert (paper.rate_bps, paper.target_bps) == (25e9, 50e9)


def test_a_rate_rise_re_times_the_packet_the_limiter_holds_back() -> None:
    # One 100 KB flow h1 -> h0 (100 Gb/s). At t0 = 2 us 17 CNPs cut it from 100 Gb/s by half each (alpha
    # stays 1) to 100/2^17 = 0.76 Mb/s, held at the 1 Mb/s minimum: the next 1,068-byte packet would wait
    # 1,068 x 8 / 1e6 s = 8.544 ms. With the NIC rule R_T stays 100 Gb/s, so the first fast-recovery step,
    # 55 us after the last CNP, sets R_C = (100e9 + 1e6) / 2 = 50.0005 Gb/s: the packet is due 170.9 ns
    # after the last one started, long past, and goes at once, at t0 + 55 us.
    config = roce({"npus": 2}, flows((1, 0, 100_000)), {"cc": "dcqcn", "dcqcn_clamp_target_rate": False})
    prepared = prepare(config)
    prepared.start()
    eventlist = prepared.sim.eventlist
    t0_ps = 2_000_000
    seen: dict[str, float] = {}

    class Probe(EventSource):
        def do_next_event(self) -> None:
            sender = prepared.sim.queue_pairs[0].sender  # made when the flow starts
            if eventlist.now_ps == t0_ps:
                for _ in range(17):
                    sender.receive_packet(Packet((sender,), ROCE_CNP_BYTES, 0, CNP, 0, t0_ps, False, False))
                seen["rate_bps"] = sender.dcqcn.rate_bps
                seen["last_sent_ps"] = sender.last_sent_ps
            else:
                seen["after_ps"] = sender.last_sent_ps

    eventlist.schedule(Probe(), t0_ps)
    eventlist.schedule(Probe(), t0_ps + 55_000_000 + 1)
    prepared.simulate()
    assert seen["rate_bps"] == 1e6 and 0 < seen["last_sent_ps"] < t0_ps
    assert seen["after_ps"] == t0_ps + 55_000_000
    assert prepared.rows(0.0)["runs"][0]["max_fct_s"] < 1e-3  # not 8.5 ms


def _jain(values: list[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2), 1 when all are equal."""
    return sum(values) ** 2 / (len(values) * sum(value * value for value in values))


@pytest.mark.parametrize("senders", [4, 8])
def test_dcqcn_flows_share_a_port_fairly_with_the_queue_between_kmin_and_kmax(senders: int) -> None:
    # N DCQCN flows into one 40 Gb/s port (the paper's link rate, its constants), PFC thresholds above
    # Kmin (100 KiB / 80 KiB per ingress port) so marks come first. The line-rate start overloads the
    # port N-fold and cuts every flow several times; by 10 ms the rates have recovered (fast recovery,
    # then R_AI = 40 Mb/s each 55 us). Over the steady state from 10 to 20 ms the port delivers its
    # payload rate, 40 x 1024 / 1068 = 38.35 Gb/s, to within 2 %; each flow gets its share, Jain's
    # index >= 0.95 over the bytes each receiver took in the window; and the queue, sampled every 10 us
    # (its time average: the bytes an arriving packet would find), stays between Kmin (5 KiB) and Kmax
    # (200 KiB), where RED marks.
    gbps, start_ps, end_ps, step_ps = 40, 10_000_000_000, 20_000_000_000, 10_000_000
    bytes_per_flow = int(gbps / 8 * 1e9 * 0.030 / senders)  # lasts past the window at a fair share
    config = roce({"npus": senders + 1, "link_gbps": gbps, "pfc_xoff_kb": 100.0, "pfc_xon_kb": 80.0},
                  {"type": "flows", "pattern": "incast", "senders": senders, "bytes_per_flow": bytes_per_flow},
                  {"cc": "dcqcn"})
    prepared = prepare(config)
    prepared.start()
    eventlist = prepared.sim.eventlist
    port = _links(prepared)["sw->h0"]
    delivered: dict[int, list[int]] = {}
    queue_samples: list[int] = []

    class Sampler(EventSource):
        def do_next_event(self) -> None:
            now = eventlist.now_ps
            queue_samples.append(port.queue_bytes)
            if now in (start_ps, end_ps):
                delivered[now] = [queue_pair.receiver.rcv_nxt for queue_pair in prepared.sim.queue_pairs]
            if now < end_ps:
                eventlist.schedule(self, now + step_ps)

    eventlist.schedule(Sampler(), start_ps)
    eventlist.run(end_ps + 1)
    window_s = (end_ps - start_ps) * 1e-12
    rates_gbps = [(after - before) * 8 / window_s / 1e9
                  for before, after in zip(delivered[start_ps], delivered[end_ps], strict=True)]
    assert len(rates_gbps) == senders
    assert sum(rates_gbps) == pytest.approx(gbps * 1024 / 1068, rel=0.02)
    assert _jain(rates_gbps) >= 0.95
    mean_queue_bytes = sum(queue_samples) / len(queue_samples)
    assert 5 * 1024 < mean_queue_bytes < 200 * 1024
