"""TCP features on a real (small) network through the Simulation API: receive window, delayed ACKs,
restart after idle. Expected values are computed by hand from the link parameters and the RFCs.

Topology for all: one switch, host -> switch -> host, every link 100 Gb/s. Serialisation at
100 Gb/s is 80 ps per byte: a full 1500 B packet (1460 B MSS + 40 B IPv4/TCP headers) takes 120 ns,
a 40 B ACK 3.2 ns. TCP timestamps are off (`tcp.timestamps=false`, the RFC 6298 form) unless a test
says otherwise, so that headers are 40 bytes.
"""

from __future__ import annotations

import pytest

from engine import load_config
from engine.simulation import Simulation
from engine.units import PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US

MSS = 1460


def simulation(tcp: dict | None = None, latency_us: float = 1.0, max_sim_time_s: float = 10.0) -> Simulation:
    config = load_config({
        "engine": {"max_sim_time_s": max_sim_time_s},
        "network": {"topology": "switch", "npus": 2, "link_gbps": 100, "link_latency_us": latency_us},
        "host": {"tx_jitter_ns": 0},  # exact transmit timing: the expected times are computed to the picosecond
        "tcp": {"timestamps": False, **(tcp or {})},
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 1}]},  # unused: we drive it
    })
    return Simulation(config, models_host_stack=True)


# --------------------------------------------------------------------------------------------
# receive window
# --------------------------------------------------------------------------------------------

def test_receive_window_caps_goodput_at_rwnd_per_rtt():
    """A single flow limited by tcp.rcv_wnd_kb = 64 over a 1 ms path sends one window per RTT.

    RTT (no queue: the sender's rate is far below 100 Gb/s):
      data:  2 links x (120 ns serialisation + 250 us)        = 500.240 us
      ACK:   2 links x (3.2 ns serialisation + 250 us)        = 500.0064 us
      RTT                                                     = 1000.2464 us
    Window: rwnd = 64 KiB = 65,536 B. The sender sends whole segments only (sender-side silly window
    avoidance, RFC 1122 4.2.3.4), so floor(65536 / 1460) = 44 segments = 64,240 B are in flight.
    Goodput = 64,240 B * 8 / 1000.2464 us = 513.79 Mb/s, measured over 100 RTTs after a 20 ms
    warm-up (slow start reaches 44 segments in 3 RTTs); tolerance 1 % (the ACK clock keeps the
    segments spaced, so no queueing adds to the RTT; rcv_nxt moves in whole segments: < 0.02 %).
    The simpler estimate rwnd / RTT = 65,536 * 8 / 1000.2464 us = 524.16 Mb/s is 2 % above: within 3 %.
    """
    sim = simulation({"rcv_wnd_kb": 64}, latency_us=250.0, max_sim_time_s=0.2)
    connection = sim.open_connection(0, 1)
    connection.send_message(50_000_000, lambda: None)
    samples = {}

    def sample(name):
        samples[name] = (sim.eventlist.now_ps, connection.receiver.rcv_nxt)

    sim.eventlist.call_at(20 * PS_PER_MS, lambda: sample("start"))
    sim.eventlist.call_at(120 * PS_PER_MS, lambda: sample("end"))
    sim.run()
    (t0, b0), (t1, b1) = samples["start"], samples["end"]
    goodput_bps = (b1 - b0) * 8 / ((t1 - t0) / PS_PER_S)

    rtt_ps = 2 * (120 * PS_PER_NS + 250 * PS_PER_US) + 2 * (3_200 + 250 * PS_PER_US)
    assert rtt_ps == 1_000_246_400
    window_bytes = (64 * 1024 // MSS) * MSS
    assert window_bytes == 64_240
    expected_bps = window_bytes * 8 / (rtt_ps / PS_PER_S)
    assert goodput_bps == pytest.approx(expected_bps, rel=0.01)
    assert goodput_bps == pytest.approx(64 * 1024 * 8 / (rtt_ps / PS_PER_S), rel=0.03)
    # and the window, not the congestion window, was the limit: nothing in flight beyond rwnd
    sender = connection.sender
    assert sender.snd_max - sender.snd_una <= 64 * 1024
    assert sender.cc.cwnd_bytes > 64 * 1024
    assert sender.retransmits == 0


# --------------------------------------------------------------------------------------------
# delayed ACK
# --------------------------------------------------------------------------------------------

SEGMENTS = 2000  # an even number: the last segment completes a pair


@pytest.mark.parametrize("delayed_ack", [False, True])
def test_ack_count_with_and_without_delayed_ack(delayed_ack):
    """RFC 1122 4.2.3.2 / RFC 5681 4.2: with delayed ACKs an ACK is sent for at least every second
    full-sized segment, so a loss-free transfer of N segments gets about N / 2 ACKs (the delayed-ACK
    timer can add one for a final odd segment; N is even here). Without delayed ACKs: one ACK per
    segment, exactly N."""
    sim = simulation({"delayed_ack": delayed_ack})
    connection = sim.open_connection(0, 1)
    done = []
    connection.send_message(SEGMENTS * MSS, lambda: done.append(sim.eventlist.now_ps))
    sim.run()
    assert not sim.time_limit_reached
    sender, receiver = connection.sender, connection.receiver
    assert done and receiver.rcv_nxt == SEGMENTS * MSS
    assert sender.retransmits == 0 and sender.packets_sent == SEGMENTS
    assert receiver.segments_received == SEGMENTS
    assert sender.acks_received == receiver.acks_sent  # no loss on the way back either
    if delayed_ack:
        assert SEGMENTS / 2 <= receiver.acks_sent <= SEGMENTS / 2 + 2
    else:
        assert receiver.acks_sent == SEGMENTS


def test_delayed_ack_timer_acks_a_lone_segment_after_the_timeout():
    """One 1000-byte segment (1040 B on the wire) with delayed ACKs and a 40 ms timer:
      arrival at the receiver: 2 x (1040 B x 80 ps + 1 us) = 2 x 1.0832 us = 2.1664 us
      the ACK waits for the timer:                          + 40 ms
      ACK path: 2 x (40 B x 80 ps + 1 us) = 2.0064 us
    so the sender sees it at 40 ms + 4.1728 us and not a picosecond before."""
    sim = simulation({"delayed_ack": True, "delayed_ack_timeout_ms": 40})
    connection = sim.open_connection(0, 1)
    delivered = []
    connection.send_message(1000, lambda: delivered.append(sim.eventlist.now_ps))
    arrival_ps = 2 * (1040 * 80 + PS_PER_US)
    ack_seen_ps = arrival_ps + 40 * PS_PER_MS + 2 * (40 * 80 + PS_PER_US)
    snd_una = {}
    sim.eventlist.call_at(ack_seen_ps - 1, lambda: snd_una.__setitem__("before", connection.sender.snd_una))
    # (a probe scheduled now for exactly ack_seen_ps would run before the ACK's own event of the same
    # time, which is scheduled later: ties run in scheduling order; so look 1 ps later)
    sim.eventlist.call_at(ack_seen_ps + 1, lambda: snd_una.__setitem__("at", connection.sender.snd_una))
    sim.run()
    assert not sim.time_limit_reached
    assert delivered == [arrival_ps]  # the application gets the data at once; only the ACK waits
    assert snd_una == {"before": 0, "at": 1000}
    assert connection.receiver.acks_sent == 1


# --------------------------------------------------------------------------------------------
# restart after idle (RFC 5681 section 4.1)
# --------------------------------------------------------------------------------------------

FIRST_SEGMENTS = 100


def _two_messages(slow_start_after_idle: bool, second_at_ms: float):
    """Message 1: 100 segments from t = 0. With no loss and an ACK per segment, slow start adds one MSS
    per ACK (RFC 5681 eq. 2): cwnd = (10 + 100) MSS = 110 MSS when it is acknowledged (a few us).
    Message 2 (100 segments) is written at `second_at_ms`. The RTO is the 200 ms minimum (the RTT is
    about 4.5 us). Returns (cwnd before the write, cwnd right after it, segments sent by the write)."""
    sim = simulation({"slow_start_after_idle": slow_start_after_idle, "min_rto_ms": 200})
    connection = sim.open_connection(0, 1)
    sender = connection.sender
    connection.send_message(FIRST_SEGMENTS * MSS, lambda: None)
    seen = {}

    def second_write():
        seen["rto_ps"] = sender.rtt.rto_ps
        seen["before"] = sender.cc.cwnd_bytes
        sent_before = sender.packets_sent
        connection.send_message(FIRST_SEGMENTS * MSS, lambda: None)
        seen["after"] = sender.cc.cwnd_bytes
        seen["burst"] = sender.packets_sent - sent_before

    sim.eventlist.call_at(round(second_at_ms * PS_PER_MS), second_write)
    sim.run()
    assert not sim.time_limit_reached
    assert connection.receiver.rcv_nxt == 2 * FIRST_SEGMENTS * MSS
    assert seen["rto_ps"] == 200 * PS_PER_MS
    return seen


def test_cwnd_restarts_from_initial_window_after_idle_longer_than_rto():
    # idle ~300 ms > RTO 200 ms: cwnd = RW = min(IW, cwnd) = 10 MSS, and the write sends 10 segments
    seen = _two_messages(slow_start_after_idle=True, second_at_ms=300)
    assert seen["before"] == (10 + FIRST_SEGMENTS) * MSS
    assert seen["after"] == 10 * MSS
    assert seen["burst"] == 10


def test_cwnd_kept_after_short_idle():
    # idle ~100 ms < RTO 200 ms: no restart, the grown window (110 MSS) sends all 100 segments at once
    seen = _two_messages(slow_start_after_idle=True, second_at_ms=100)
    assert seen["after"] == (10 + FIRST_SEGMENTS) * MSS
    assert seen["burst"] == FIRST_SEGMENTS


def test_cwnd_kept_when_slow_start_after_idle_disabled():
    # tcp.slow_start_after_idle = false (Linux net.ipv4.tcp_slow_start_after_idle = 0): window kept
    seen = _two_messages(slow_start_after_idle=False, second_at_ms=300)
    assert seen["before"] == (10 + FIRST_SEGMENTS) * MSS
    assert seen["after"] == (10 + FIRST_SEGMENTS) * MSS
    assert seen["burst"] == FIRST_SEGMENTS


# --------------------------------------------------------------------------------------------
# CUBIC after an idle period (RFC 9438 section 5.8)
# --------------------------------------------------------------------------------------------

def _cubic_growth_over_one_window(idle_s: float):
    """A CUBIC connection with slow_start_after_idle = false (so the window survives the idle time).

    ssthresh is preset to 20 MSS so that message 1 (200 segments) slow-starts 10 -> 20 segments and
    spends ~10 RTTs in congestion avoidance: the CUBIC epoch starts there with W_max = cwnd = 20
    (K = 0) and W_est grows 0.53 segment per RTT. Message 2 (2000 segments) is written `idle_s`
    after message 1 was acknowledged. Returns (W1 = cwnd in segments at the write, ACKs processed in
    the first window, cwnd growth in segments over that window).

    Path RTT: data 2 x (120 ns + 1 us) + ACK 2 x (3.2 ns + 1 us) = 4.2464 us. The write sends W1
    (about 25) segments back to back, taking W1 x 120 ns = 3 us on the NIC; their ACKs arrive between
    4.25 and 7.2 us after the write, and the segments they release cannot be acknowledged before
    2 RTT = 8.5 us. At write + 8 us the sender has processed exactly the first window of ACKs."""
    sim = simulation({"cc": "cubic", "slow_start_after_idle": False}, max_sim_time_s=60)
    connection = sim.open_connection(0, 1)
    sender = connection.sender
    sender.cc.ssthresh_bytes = 20 * MSS
    done = []
    connection.send_message(200 * MSS, lambda: done.append(sim.eventlist.now_ps))
    sim.eventlist.run(1 * PS_PER_MS)
    assert done and sender.snd_una == 200 * MSS and sender.retransmits == 0
    t2 = sim.eventlist.now_ps + round(idle_s * PS_PER_S)
    seen = {}

    def write():
        seen["w1"] = sender.cc.cwnd_bytes / MSS
        seen["acks"] = sender.acks_received
        connection.send_message(2000 * MSS, lambda: None)

    def sample():
        seen["w2"] = sender.cc.cwnd_bytes / MSS
        seen["acks"] = sender.acks_received - seen["acks"]

    sim.eventlist.call_at(t2, write)
    sim.eventlist.call_at(t2 + 8 * PS_PER_US, sample)
    sim.eventlist.run(t2 + 8 * PS_PER_US)
    return seen["w1"], seen["acks"], seen["w2"] - seen["w1"]


def test_cubic_growth_over_one_window_without_idle():
    # control: written 1 us after message 1: RFC 9438 growth in one window is W_est's 0.53 segment
    # (W_cubic(t) = 0.4 t^3 + 20 is flat at t ~ 50 us), so well under 2 segments
    w1, acks, growth = _cubic_growth_over_one_window(idle_s=1e-6)
    assert 20 < w1 < 30
    assert acks == int(w1)
    assert 0 <= growth < 2


def test_cubic_window_does_not_jump_after_idle():
    """RFC 9438 section 5.8 (behaviour for application-limited flows; section 4.2 defines t): CUBIC
    does not grow the window while the flow is application-limited, and the time of such a period
    (here: 10 s with nothing to send) is not to be counted in t of W_cubic(t). Linux does this by
    shifting the epoch start on the first send after idle (tcp_cubic.c bictcp_cwnd_event, "tcp_cubic:
    better follow cubic curve after idle period", 2015). So after 10 s of idle, the first window of
    message 2 grows as in the control case: < 2 segments. Counting the idle time instead gives
    W_cubic(10 s) = 0.4 * 1000 + 20 = 420 segments, a target clamped at 1.5 cwnd, i.e. + cwnd / 2
    (about 12 segments) in one window and x1.5 per RTT after that."""
    w1, acks, growth = _cubic_growth_over_one_window(idle_s=10.0)
    assert 20 < w1 < 30
    assert acks == int(w1)
    assert 0 <= growth < 2, f"cwnd grew by {growth:.1f} segments in the first RTT after idle (W1 = {w1:.1f})"
