"""`tcp.timestamps`: the RFC 7323 timestamp option, as Linux sends it on every segment.

Expected values come from RFC 7323 and RFC 6298 and hand counts written below, never from the
engine's own output:
- wire (RFC 7323 section 3.2; Linux pads it with two NOPs): the option takes 10 bytes + 2 of padding,
  so every segment and pure ACK has 52 bytes of headers; the MSS stays mtu - 40 = 1460 and a full
  segment carries 1460 - 12 = 1448 bytes, in a 1500-byte packet;
- RTTM (RFC 7323 section 4): every ACK that acknowledges new data gives an RTT sample, now - TSecr,
  the ACK of a retransmission included (Karn's rule is for measurements that cannot tell which
  transmission is acknowledged); the sample updates the RTO by RFC 6298 (2.3), ending any backoff;
- TS.Recent (RFC 7323 section 4.3): the receiver keeps the TSval of a segment with
  SEG.SEQ <= Last.ACK.sent and echoes it: on a delayed ACK the earliest segment's (case A), while a
  hole is open the segment that last advanced the window (case B), after a retransmission fills the
  hole that retransmission's (case C).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import engine
from engine import ConfigError, load_config
from engine.eventlist import EventList
from engine.links import Packet, PacketSink, wire_bytes
from engine.transport import TcpReceiver, TcpSettings
from engine.units import PS_PER_MS, PS_PER_US
from tests.scenario import HAND_BUILT_SETTINGS, build_path

MTU = 1500
SEGMENT_WITH_TIMESTAMPS = 1448  # 1500 - 20 (IPv4) - 20 (TCP) - 12 (timestamp option and 2 NOPs)
TRANSFER = 1_000_000


# -- wire arithmetic -----------------------------------------------------------------------------

def test_the_option_costs_twelve_bytes_of_payload_per_segment():
    config = load_config({"tcp": {"timestamps": True}})
    assert config.mss_bytes == MTU - 40  # the MSS a host announces does not change
    assert config.header_bytes == 52
    assert config.segment_bytes == SEGMENT_WITH_TIMESTAMPS
    assert TcpSettings.from_config(config).mss_bytes == SEGMENT_WITH_TIMESTAMPS  # SMSS: what a segment carries
    explicit = load_config({"tcp": {"timestamps": True, "mss_bytes": 1000}})
    assert explicit.segment_bytes == 1000 - 12
    # on by default, as in Linux (net.ipv4.tcp_timestamps=1) and ns-3 (TcpSocketBase "Timestamp")
    default = load_config({})
    assert (default.header_bytes, default.segment_bytes) == (52, SEGMENT_WITH_TIMESTAMPS)
    rfc_6298 = load_config({"tcp": {"timestamps": False}})
    assert (rfc_6298.header_bytes, rfc_6298.segment_bytes) == (40, MTU - 40)


def test_an_mss_with_no_room_beside_the_option_is_refused():
    with pytest.raises(ConfigError) as error:
        load_config({"tcp": {"timestamps": True, "mss_bytes": 12}})
    assert error.value.key == "tcp.timestamps"


def test_a_megabyte_takes_ceil_1e6_over_1448_full_size_packets():
    """ceil(1,000,000 / 1448) = 691 segments (690 of 1448 B and one of 880 B: 690 x 1448 = 999,120),
    each with 52 B of headers: 1,000,000 + 691 x 52 = 1,035,932 B on the sender's link, at most
    1500 B a packet; payload efficiency of a full segment 1448 / 1500 = 0.9653."""
    segments = math.ceil(TRANSFER / 1448)
    assert segments == 691 and TRANSFER - 690 * 1448 == 880
    expected_wire = TRANSFER + 691 * 52
    assert expected_wire == 1_035_932
    result = engine.run({
        "engine": {"link_stats": "all"},
        "network": {"topology": "switch", "npus": 2},
        "tcp": {"timestamps": True},
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": TRANSFER}]},
    })
    row = result["runs"][0]
    assert row["packets_sent"] == segments and row["retransmits"] == 0
    assert row["bytes_sent"] == expected_wire
    uplink = next(link for link in result["links"] if link["link"] == "h0->sw")
    assert uplink["bytes"] == expected_wire and uplink["packets"] == segments
    assert uplink["bytes"] / uplink["packets"] <= MTU
    assert 1448 / (1448 + 52) == pytest.approx(0.9653, abs=1e-4)


def test_every_data_packet_fits_the_mtu_and_every_ack_carries_the_option():
    path = build_path(timestamps=True, mss_bytes=SEGMENT_WITH_TIMESTAMPS)
    path.send(10 * SEGMENT_WITH_TIMESTAMPS + 100)
    path.run_s(0.01)
    assert path.delivered_ps
    assert path.data_tap.size_bytes == [1500] * 10 + [152]
    assert set(path.ack_tap.size_bytes) == {52}


@pytest.mark.parametrize("backend", ["analytical", "alpha_beta"])
def test_the_fluid_backends_count_the_same_headers(backend):
    """A direct all-to-all of 2 MB on 2 NPUs sends 1 MB each way: 1,035,932 B on each host link,
    as the packet backend puts on it (previous test), headers of 52 B per 1448 B segment."""
    result = engine.run({
        "engine": {"backend": backend, "link_stats": "all"},
        "network": {"topology": "switch", "npus": 2},
        "tcp": {"timestamps": True},
        "workload": {"type": "collective", "op": "all_to_all", "bytes": 2 * TRANSFER},
    })
    assert {link["link"]: link["bytes"] for link in result["links"]}["h0->sw"] == 1_035_932
    assert wire_bytes(TRANSFER, 1448, 52) == 1_035_932


# -- RTT measurement after an RTO ----------------------------------------------------------------

def _rto_after_a_lost_segment(timestamps: bool):
    """Two one-segment messages of 1000 B over the scenario path (10 Gb/s, 10 us each way), the
    second sent at 1 ms and its first transmission lost; G = 1 us, minimum RTO 1 us (so the RTO
    formula shows, not the floor). Returns the sender's estimator once all is acknowledged and the
    RTO it had just before the timeout."""
    path = build_path(timestamps=timestamps, min_rto_ps=1 * PS_PER_US, clock_granularity_ps=1 * PS_PER_US,
                      should_drop=lambda index, pkt: pkt.seq == 1000 and not pkt.is_retransmit)
    path.send(1000)
    path.run_s(0.001)
    rto_before_ps = path.sender.rtt.rto_ps
    path.send(1000)
    path.run_s(0.01)
    assert path.receiver.rcv_nxt == 2000 and path.sender.timeouts == 1 and path.sender.retransmits == 1
    return path.sender.rtt, rto_before_ps


def test_the_ack_of_a_retransmission_gives_a_sample_and_ends_the_backoff():
    """RTT of a 1000 B segment with timestamps: data 1052 B serialised twice at 10 Gb/s
    (2 x 841.6 ns), ACK 52 B once (41.6 ns), 2 x 10 us of propagation: R = 21,724,800 ps.
    First sample: SRTT = R, RTTVAR = R/2, RTO = R + max(G, 2R) = 3R = 65,174,400 ps. The timeout
    doubles it to 6R; the retransmission travels the same idle path, so its ACK measures R again:
    RTTVAR = 3/4 (R/2) + 1/4 |R - R| = 3R/8 = 8,146,800 ps, SRTT = R, RTO = R + 4 (3R/8) = 2.5R =
    54,312,000 ps (RFC 6298 2.3)."""
    rtt_ps = 2 * 841_600 + 41_600 + 20 * PS_PER_US
    assert rtt_ps == 21_724_800
    rtt, rto_before_ps = _rto_after_a_lost_segment(timestamps=True)
    assert rto_before_ps == 3 * rtt_ps == 65_174_400
    assert rtt.samples == 2
    assert (rtt.srtt_ps, rtt.rttvar_ps) == (rtt_ps, 8_146_800)
    assert rtt.rto_ps == 54_312_000


def test_without_timestamps_the_rto_stays_backed_off():
    """Control, Karn's rule: R = 2 x 832 ns (1040 B) + 32 ns (40 B ACK) + 20 us = 21,696,000 ps,
    RTO 3R = 65,088,000 ps; the ACK of the retransmission gives no sample, so the doubled RTO,
    6R = 130,176,000 ps, stays until the next segment sent once is acknowledged."""
    rtt, rto_before_ps = _rto_after_a_lost_segment(timestamps=False)
    assert rto_before_ps == 65_088_000
    assert rtt.samples == 1
    assert rtt.rto_ps == 130_176_000


def test_a_delayed_ack_echoes_the_earlier_segment_and_samples_from_it():
    """Two 1000 B messages, at 0 and at 5 us, with delayed ACKs: the receiver holds the first and
    ACKs both when the second arrives. The ACK echoes TSval 0 (case A), not 5 us, and the sender's
    sample is its arrival time: 5 us + R (R = 21,724,800 ps as above) = 26,724,800 ps."""
    path = build_path(timestamps=True, delayed_ack=True)
    path.send(1000)
    path.eventlist.call_at(5 * PS_PER_US, lambda: path.send(1000))
    path.run_s(0.001)
    assert [seen[2] for seen in path.ack_tap.seen] == [2000]
    assert path.ack_tap.ts_echo_ps == [0]
    assert path.ack_tap.sent_ps == [5 * PS_PER_US]  # the segment that triggered it (RACK's input)
    assert path.sender.rtt.srtt_ps == 5 * PS_PER_US + 21_724_800


# -- TS.Recent at the receiver (RFC 7323 section 4.3) ----------------------------------------------

class AckCollector(PacketSink):
    """The end of an ACK route: keeps (ack, TSecr) of every ACK."""

    def __init__(self) -> None:
        self.acks: list[tuple[int, int]] = []

    def receive_packet(self, pkt: Packet) -> None:
        self.acks.append((pkt.ack, pkt.ts_echo_ps))


def _receiver(delayed_ack: bool) -> tuple[TcpReceiver, AckCollector]:
    receiver = TcpReceiver(EventList(), replace(HAND_BUILT_SETTINGS, timestamps=True, delayed_ack=delayed_ack))
    collector = AckCollector()
    receiver.ack_route = (collector,)
    return receiver, collector


def _segment(receiver: TcpReceiver, seq: int, tsval_ps: int, retransmit: bool = False) -> None:
    receiver.receive_packet(Packet((receiver,), 1052, 1000, seq, 0, tsval_ps, retransmit, False))


def test_ts_recent_with_delayed_acks_is_the_earliest_unacknowledged_segment():
    """Case A: segments with TSval 100, 200, 300, 400; the ACKs (of 2000 and 4000) echo 100 and 300."""
    receiver, collector = _receiver(delayed_ack=True)
    for index, tsval in enumerate((100, 200, 300, 400)):
        _segment(receiver, index * 1000, tsval)
    assert collector.acks == [(2000, 100), (4000, 300)]


def test_ts_recent_while_a_hole_is_open_then_filled():
    """Cases B and C, an ACK per segment: [0, 1000) TSval 100 is ACKed echoing 100; [1000, 2000) is
    lost; [2000, 3000) TSval 300 and [3000, 4000) TSval 400 lie above Last.ACK.sent = 1000, so their
    duplicate ACKs echo 100, the segment that last advanced the window; the retransmission of
    [1000, 2000), TSval 500, starts at Last.ACK.sent: its ACK of 4000 echoes 500."""
    receiver, collector = _receiver(delayed_ack=False)
    _segment(receiver, 0, 100)
    _segment(receiver, 2000, 300)
    _segment(receiver, 3000, 400)
    _segment(receiver, 1000, 500, retransmit=True)
    assert collector.acks == [(1000, 100), (1000, 100), (1000, 100), (4000, 500)]


def test_timestamps_off_leaves_acks_without_the_option():
    path = build_path(mss_bytes=1460)
    path.send(2 * 1460)
    path.run_s(0.001)
    assert path.data_tap.size_bytes == [1500, 1500]
    assert path.ack_tap.size_bytes == [40, 40] and path.ack_tap.ts_echo_ps == [0, 0]
    assert path.sender.rtt.rto_ps == 200 * PS_PER_MS  # the floor: 3 x ~21.7 us is far below it
