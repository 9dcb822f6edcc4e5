"""Throughput of long TCP flows against the sawtooth model, Mathis' square-root law, Jain's
fairness index and the header-overhead ceiling (docs/theory.md)."""

from __future__ import annotations

import math

import pytest
from scenario import build_path

import engine
from engine.units import PS_PER_S, PS_PER_US

MSS = 1460
WIRE = MSS + 40  # a full segment on the wire: IPv4 + TCP headers


def _delivered_between(path, start_s: float, end_s: float) -> int:
    path.run_s(start_s)
    before = path.receiver.rcv_nxt
    path.run_s(end_s)
    return path.receiver.rcv_nxt - before


# docs/theory.md#one-reno-flow-and-a-drop-tail-buffer: the fluid sawtooth for one Reno flow (beta = 1/2)
# against a drop-tail buffer B, in units
# of BDP = 1: the window cycles between Wmin = beta (1 + B) and Wmax = 1 + B, the link idles while
# W < 1; U = 1 when Wmin >= 1, else U = (A1 + A2) / ((1 - Wmin) + A2) with
# A1 = (Wmin + 1)(1 - Wmin) / 2 and A2 = (1 + Wmax)(Wmax - 1) / 2. Its table gives U for
# B = 0.1, 0.25, 0.5 and 1 BDP. 2 packets (B = 3,000 / 150,000 = 0.02 BDP) is the smallest buffer
# that holds the two back-to-back segments an ACK releases when the window grows, the packet-level
# counterpart of B = 0; by hand: Wmax = 1.02, Wmin = 0.51, A1 = 1.51 x 0.49 / 2 = 0.369975,
# A2 = 2.02 x 0.02 / 2 = 0.0202, U = 0.390175 / 0.5102 = 0.765.
@pytest.mark.parametrize("buffer_bytes, expected_utilisation", [
    (2 * WIRE, 0.765), (15_000, 0.818), (37_500, 0.893), (75_000, 0.964), (150_000, 1.0),
])
def test_reno_utilisation_follows_the_sawtooth_model(buffer_bytes, expected_utilisation):
    # 1 Gb/s bottleneck, 1.2 ms RTT: BDP = 1e9 b/s * 1.2e-3 s / 8 = 150,000 bytes = 100 packets.
    path = build_path(bottleneck_gbps=1, nic_gbps=2, latency_us=600, buffer_bytes=buffer_bytes, mss_bytes=MSS,
                      timestamps=False)
    path.send(10**10)
    delivered = _delivered_between(path, 0.5, 2.5)  # skip slow start, then ~10 sawtooth cycles
    payload_capacity = 2.0 * 1e9 / 8 * MSS / WIRE  # bytes of payload the link can carry in 2 s
    utilisation = delivered / payload_capacity
    # the fluid model ignores the discreteness of packets: allow 0.02
    assert utilisation == pytest.approx(expected_utilisation, abs=0.02)
    assert path.sender.timeouts == 0


def _periodic_loss_rate_bps(loss_probability: float, delayed_ack: bool) -> float:
    period = round(1 / loss_probability)
    path = build_path(bottleneck_gbps=10, latency_us=500, delayed_ack=delayed_ack, mss_bytes=MSS, timestamps=False,
                      should_drop=lambda index, pkt: index % period == period - 1)
    path.send(10**11)
    return _delivered_between(path, 0.5, 3.0) * 8 / 2.5


@pytest.mark.parametrize("delayed_ack, constant", [(False, math.sqrt(3 / 2)), (True, math.sqrt(3 / 4))])
def test_mathis_square_root_law_under_periodic_loss(delayed_ack, constant):
    # Mathis et al. 1997: rate = (MSS / RTT) * sqrt(3 / (2b)) / sqrt(p); b = 1 with an ACK per
    # segment (C = 1.22), b = 2 with delayed ACKs (C = 0.87). RTT = 1 ms propagation plus two
    # 1.2 us serialisations; the 10 Gb/s link is never the bottleneck (rate ~ 0.45 Gb/s).
    loss = 1e-3
    rtt_s = 1e-3 + 2 * WIRE * 8 / 10e9
    expected_bps = MSS * 8 / rtt_s * constant / math.sqrt(loss)
    measured = _periodic_loss_rate_bps(loss, delayed_ack)
    # the model neglects the RTT spent in fast recovery per loss: measured sits up to ~8 % below
    assert 0.88 * expected_bps <= measured <= 1.02 * expected_bps


def test_throughput_scales_as_one_over_sqrt_loss():
    # rate(p) / rate(p / 10) = 1 / sqrt(10) by the square-root law
    ratio = _periodic_loss_rate_bps(1e-3, False) / _periodic_loss_rate_bps(1e-4, False)
    assert ratio == pytest.approx(1 / math.sqrt(10), rel=0.08)


@pytest.mark.parametrize("timestamps, segment_bytes", [(False, 1460), (True, 1448)])
def test_goodput_ceiling_of_a_long_transfer_on_an_idle_link(timestamps, segment_bytes):
    # docs/theory.md#payload-efficiency: a full segment carries MSS of MSS + 40 bytes:
    # 1460 / 1500 of 10 Gb/s = 9.733 Gb/s; with timestamps (the default) 1448 / 1500: 9.653 Gb/s.
    # 100 MB takes ~82 ms; start-up (a few 4 us RTTs of slow start) costs well under 0.5 %.
    rows = engine.run({
        "network": {"topology": "switch", "npus": 2, "link_gbps": 10, "link_latency_us": 1},
        "tcp": {"timestamps": timestamps},  # MSS: the default, mtu - 40 = 1460 (less 12 with timestamps)
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 100_000_000}]},
    })
    goodput = rows["flows"][0]["goodput_gbps"]
    ceiling = 10 * segment_bytes / WIRE
    assert 0.995 * ceiling <= goodput <= ceiling


def test_identical_flows_share_a_bottleneck_fairly():
    # Four Reno flows with equal RTTs through one drop-tail bottleneck converge to equal shares:
    # Jain's index J = (sum x)^2 / (N sum x^2) near 1 (1 = perfectly equal, 1/N = one flow takes all).
    prepared = engine.prepare({
        "network": {"topology": "dumbbell", "npus": 8, "link_gbps": 10, "link_latency_us": 50,
                    "bottleneck_gbps": 1, "bottleneck_latency_us": 50, "buffer_kb": 50},
        "tcp": {"mss_bytes": MSS, "timestamps": False},
        "workload": {"type": "flows", "flows": [{"src": i, "dst": 4 + i, "bytes": 10**10} for i in range(4)]},
    })
    prepared.start()
    sim = prepared.sim
    sim.eventlist.run(1 * PS_PER_S)
    before = [c.receiver.rcv_nxt for c in sim.connections]
    sim.eventlist.run(4 * PS_PER_S)
    shares = [c.receiver.rcv_nxt - b for c, b in zip(sim.connections, before)]
    jain = sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
    assert jain > 0.98
    # and together they keep the bottleneck busy (buffer of ~1 BDP: 1 Gb/s x 400 us = 50 KB)
    assert sum(shares) * 8 / 3.0 > 0.95 * 1e9 * MSS / WIRE


def test_loss_free_flows_through_one_fifo_share_it_in_proportion_to_their_windows():
    # Two window-limited flows leave host 0 by its NIC (an unlimited FIFO, 100 Gb/s) for hosts 1
    # and 2; nothing is lost, so nothing evens their shares out. Little's law on the FIFO: flow i
    # has W_i bytes in the system and all of them wait the same sojourn time T, so it delivers
    # W_i / T, and the two together fill the link. With W_A = 128 and W_B = 32 segments, B gets
    # 32 / 160 = 1/5 of the payload rate 100 x 1460 / 1500 = 97.33 Gb/s, A 4/5: the share is set
    # by the windows, not by fairness. (Why a double-binary-tree all-reduce lags the fluid model,
    # docs/topologies.md: a late connection's small window behind an early one's large one.)
    prepared = engine.prepare({
        "network": {"topology": "switch", "npus": 3, "link_gbps": 100, "link_latency_us": 1, "buffer_kb": 16384},
        "tcp": {"timestamps": False},  # 1460-byte segments, 40-byte headers, as computed above
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 2**24},
                                                {"src": 0, "dst": 2, "bytes": 2**24}]},
    })
    prepared.start()
    eventlist = prepared.sim.eventlist
    eventlist.run(0)  # the flows start at time 0: their connections open
    flow_a, flow_b = prepared.sim.connections
    flow_a.sender.rwnd_bytes, flow_b.sender.rwnd_bytes = 128 * MSS, 32 * MSS  # the receivers' windows
    eventlist.run(200 * PS_PER_US)  # both windows reached (slow start from 10 segments: a few 4.25 us round trips)
    before = [flow.receiver.rcv_nxt for flow in (flow_a, flow_b)]
    eventlist.run(1200 * PS_PER_US)  # 1 ms later; A's 16 MiB takes 1.7 ms at 4/5 of the link
    delivered = [flow.receiver.rcv_nxt - start for flow, start in zip((flow_a, flow_b), before)]
    payload_bytes_per_ms = 100e9 * MSS / WIRE / 8 * 1e-3
    assert sum(delivered) == pytest.approx(payload_bytes_per_ms, rel=0.001)
    assert delivered[1] / sum(delivered) == pytest.approx(32 / 160, rel=0.005)
