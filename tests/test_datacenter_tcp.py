"""DCTCP's queue control (RFC 8257; Alizadeh et al. 2010) and TCP incast collapse
(Phanishayee et al. 2008; Vasudevan et al. 2009) against their published models."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
from scenario import HAND_BUILT_SETTINGS, Wire

import engine
from engine.eventlist import EventList
from engine.links import Packet
from engine.transport import Dctcp, TcpSender
from engine.units import PS_PER_S, PS_PER_US

WIRE = 1500


def _queue_samples(cc: str, k_packets: int, flows: int, duration_s: float = 0.1):
    prepared = engine.prepare({
        "network": {"topology": "dumbbell", "npus": 2 * flows, "link_gbps": 40, "link_latency_us": 20,
                    "bottleneck_gbps": 10, "bottleneck_latency_us": 10, "buffer_kb": 1000,
                    "ecn_threshold_kb": k_packets * WIRE / 1024},
        "tcp": {"cc": cc, "mss_bytes": 1460, "timestamps": False},  # full segments of WIRE bytes
        "workload": {"type": "flows", "flows": [{"src": i, "dst": flows + i, "bytes": 10**10} for i in range(flows)]},
    })
    prepared.start()
    sim = prepared.sim
    eventlist, port = sim.eventlist, sim.topology.left_to_right
    eventlist.run(PS_PER_S // 10)  # past slow start and alpha's convergence
    before = [c.receiver.rcv_nxt for c in sim.connections]
    samples, now = [], eventlist.now_ps
    for _ in range(round(duration_s * 1e6 / 5)):
        now += 5 * PS_PER_US
        eventlist.run(now)
        backlog_ps = max(0, port.busy_until_ps - now)
        samples.append(backlog_ps * port.rate_bps / (8 * PS_PER_S) / WIRE)  # ps -> bytes -> packets
    delivered = sum(c.receiver.rcv_nxt - b for c, b in zip(sim.connections, before))
    utilisation = delivered * 8 / duration_s / 10e9 / (1460 / WIRE)
    return samples, utilisation, port.drops


def test_dctcp_holds_the_queue_near_k_with_full_utilisation_and_no_drops():
    # 10 Gb/s = 833,333 packets/s; RTT = 2 x (20 + 10 + 20) us = 100 us, so C x RTT = 83 packets.
    # K = 65 packets (Linux's suggestion at 10 Gb/s) > C x RTT / 7 = 12: full utilisation expected.
    # Alizadeh et al.: with N synchronised flows the queue peaks near K + N and swings by
    # A = 1/2 sqrt(2 N (C RTT + K)) = 1/2 sqrt(4 x 148) = 12.2 packets below that peak.
    k, n = 65, 2
    amplitude = 0.5 * math.sqrt(2 * n * (83 + k))
    samples, utilisation, drops = _queue_samples("dctcp", k, n)
    assert drops == 0
    assert utilisation > 0.99
    assert max(samples) <= k + n + 2  # one segment of rounding either way
    assert min(samples) >= k + n - 2 * amplitude  # the model's amplitude, with a factor 2 of slack
    assert abs(statistics.mean(samples) - k) < amplitude


def test_reno_on_the_same_port_fills_the_buffer_and_drops():
    # Without ECN the same two flows follow the drop-tail sawtooth
    # (docs/theory.md#one-reno-flow-and-a-drop-tail-buffer): the windows' sum
    # cycles between Wmax = BDP + B and beta Wmax (beta = 1/2, both flows halving at the overflow),
    # so the queue swings between B and beta Wmax - BDP and, as beta Wmax >= BDP, the link never
    # idles (U = 1). RTT = 100 us of propagation plus 1.8 us of serialisation (0.3 + 1.2 + 0.3 us for
    # a full packet on the 40, 10 and 40 Gb/s hops): BDP = 833,333 packets/s x 101.8 us = 84.8
    # packets; B = 1,024,000 / 1500 = 682.7 packets; Wmax = 767.5, so the queue's low point is
    # 383.7 - 84.8 = 298.9 packets: the contrast that makes DCTCP's short queue (near K = 65) a
    # property of its control law, not of the scenario.
    samples, utilisation, drops = _queue_samples("newreno", 65, 2)
    bdp = 10e9 / (8 * WIRE) * 101.8e-6
    buffer = 1000 * 1024 / WIRE
    w_max = bdp + buffer
    assert drops > 0
    assert buffer - 1 <= max(samples) <= buffer + 1  # full: an arrival is taken while B or less waits
    # the model's windows are fluid; allow 1 % of Wmax (7.7 packets) for whole segments and the
    # two flows' separate halvings
    assert min(samples) == pytest.approx(0.5 * w_max - bdp, abs=0.01 * w_max)
    assert utilisation > 0.99


def _incast(min_rto_ms: float) -> dict:
    return engine.run({
        "network": {"topology": "switch", "npus": 17, "link_gbps": 10, "link_latency_us": 5, "buffer_kb": 64},
        "tcp": {"min_rto_ms": min_rto_ms},
        "engine": {"max_sim_time_s": 30},
        "workload": {"type": "flows", "pattern": "incast", "senders": 16, "bytes_per_flow": 64 * 1024, "rounds": 10},
    })


def test_incast_collapses_with_200ms_min_rto_but_not_with_1ms():
    # 16 synchronised senders x 64 KiB into one port with a 64 KiB buffer lose whole windows; a flow
    # that loses its tail waits for the RTO, so a round with a timeout lasts at least RTO_min
    # (Phanishayee et al.; docs/theory.md#incast: goodput <= S_block / (S_block / C + n_timeouts RTO_min)).
    # Summed over the run: sim_time >= k x RTO_min for k rounds with a timeout.
    senders, rounds, block_bits = 16, 10, 16 * 64 * 1024 * 8
    slow = _incast(200)
    run = slow["runs"][0]
    assert run["status"] == "ok"
    # a round is 16 consecutive flow rows (one message per sender)
    timeouts_per_round = [sum(flow["timeouts"] for flow in slow["flows"][r * senders:(r + 1) * senders])
                          for r in range(rounds)]
    rounds_with_timeout = sum(1 for count in timeouts_per_round if count)
    # rounds collapse: 16 windows (the first round's initial ones: 10 segments, 234 KiB) meet a 64 KiB
    # buffer; which rounds lose a tail depends on the windows the earlier ones left and on the hosts'
    # transmit jitter (7 of 10 rounds time out here; 4 with exact timing, the first among them)
    assert rounds_with_timeout > 0
    assert run["sim_time_s"] >= rounds_with_timeout * 0.2
    slow_goodput = rounds * block_bits / run["sim_time_s"]
    assert slow_goodput <= rounds * block_bits / (rounds_with_timeout * (block_bits / 10e9 + 0.2)) * 1.01
    assert slow_goodput < 0.05 * 10e9  # collapse: a few percent of the link (docs/theory.md#incast)
    fast_run = _incast(1)["runs"][0]
    fast_goodput = rounds * block_bits / fast_run["sim_time_s"]
    # with RTO_min ~ RTT the same losses cost about a millisecond: no collapse
    assert fast_goodput > 0.3 * 10e9
    assert fast_goodput > 50 * slow_goodput


def _ack(ack_bytes: int, ece: bool) -> Packet:
    pkt = Packet((), 40, 0, 0, ack_bytes, 0, False, False)
    pkt.ece = ece
    return pkt


def _dctcp_sender_after_a_marked_first_ack(mss: int) -> TcpSender:
    """IW 10 segments sent, then ACK 1 with ECE: alpha = 1 (its first window ends with it, F = 1),
    cwnd = ssthresh = 10 (1 - 1/2) = 5 segments, the reduction covering SND.MAX = 10 segments."""
    wire = Wire()
    sender = TcpSender(EventList(), replace(HAND_BUILT_SETTINGS, mss_bytes=mss, ecn=True, dctcp_echo=True),
                       Dctcp(mss, 10))
    sender.data_route = (wire,)
    sender.write(30 * mss)
    assert len(wire.packets) == 10
    sender.receive_packet(_ack(1 * mss, True))
    assert sender.cc.cwnd_bytes == 5 * mss
    return sender


def test_dctcp_window_does_not_grow_until_the_reduced_window_is_acknowledged():
    """RFC 3168 6.1.2 / RFC 8257 3.3: one reduction per window of data; Linux (tcp_enter_cwr, CWR
    state) and ns-3 (CA_CWR) do not grow cwnd while that window is outstanding, the ACK that
    started the reduction included, and both end CWR only when something above its SND.MAX is
    acknowledged (Linux's tcp_fastretrans_alert: SND.UNA != high_seq; ns-3: ackNumber > m_recover).

    After the marked ACK 1 (cwnd 5 segments, reduction over SND.MAX = 10 segments), ACKs 2..10
    (unmarked) each free a segment but leave cwnd at 5 (in slow start before the reduction, each
    would have added one), ACK 10 (SND.UNA = SND.MAX of the reduction) included. ACK 11 ends CWR:
    congestion avoidance adds MSS^2 / cwnd = 1000 / 5 = 200 bytes -> 5,200.
    """
    mss = 1000
    sender = _dctcp_sender_after_a_marked_first_ack(mss)
    for j in range(2, 11):
        sender.receive_packet(_ack(j * mss, False))
        assert sender.cc.cwnd_bytes == 5 * mss
    # the window allows snd_una + cwnd: 10,000 + 5,000 -> segments up to 15,000 sent
    assert sender.snd_nxt == 15 * mss
    sender.receive_packet(_ack(11 * mss, False))
    assert sender.cc.cwnd_bytes == pytest.approx(5200)
    assert sender.snd_nxt == 16 * mss  # 11,000 + 5,200: one more full segment


def test_dctcp_next_reduction_waits_for_an_ack_above_the_reduced_window():
    """Linux's CWR state (and ns-3's CA_CWR) ends only when SND.UNA passes SND.MAX of the
    reduction, and only then may ECE cut the window again (RFC 3168 6.1.2: once per window).

    After the marked ACK 1 (cwnd 5,000, reduction over SND.MAX = 10,000; alpha's next window ends
    at SND.NXT = 10,000): ACKs 2..9 unmarked; ACK 10 (SND.UNA = 10,000) carries ECE but is still
    in CWR: no cut, cwnd 5,000. ACK 11 carries ECE, CWR is over: alpha's window ends first
    (SND.UNA = 11,000 > 10,000): 10,000 bytes acknowledged since ACK 1, 2,000 of them marked (ACKs
    10, 11), F = 0.2, alpha = (1 - 1/16) 1 + 0.2 / 16 = 0.95; then cwnd = 5,000 (1 - 0.95 / 2) =
    2,625.
    """
    mss = 1000
    sender = _dctcp_sender_after_a_marked_first_ack(mss)
    for j in range(2, 10):
        sender.receive_packet(_ack(j * mss, False))
    sender.receive_packet(_ack(10 * mss, True))
    assert sender.cc.cwnd_bytes == 5 * mss
    sender.receive_packet(_ack(11 * mss, True))
    assert sender.cc.alpha == pytest.approx(0.95)
    assert sender.cc.cwnd_bytes == pytest.approx(2625)
