"""Connection establishment (`tcp.handshake`): the SYN/SYN-ACK round trip seeds the RTO before the
first message, outside the workload's timing, as a training job's connections are opened at start-up.

Expected values are computed by hand below from the link parameters, RFC 6298 and Linux's rules.
Network for all but the last (a leaf-spine training job): one switch, host -> switch -> host, every link
100 Gb/s (80 ps per byte) with 1 us of propagation, so a packet of S bytes crosses one link in S * 80 ps + 1 us.

SYN and SYN-ACK with Linux's options (`engine.links.syn_bytes`): 40 bytes of IPv4 + TCP headers plus
MSS (4), NOP NOP SACK-permitted (4), NOP window scale (4) = 52 bytes; with timestamps MSS (4),
SACK-permitted (2), timestamps (10), NOP window scale (4) = 60 bytes. Handshake RTT: two links out and
two back, R = 4 * (S * 80 ps + 1 us).
"""

from __future__ import annotations

import pytest
from scenario import PacketDropper

import engine
from engine import check_backend, load_config
from engine.config import ConfigError
from engine.simulation import SYN_RETRIES, HandshakeFailed, Simulation, syn_retransmits
from engine.units import PS_PER_MS, PS_PER_S, PS_PER_US

LINK_US = 1.0
PS_PER_BYTE = 80  # 100 Gb/s
MESSAGE_BYTES = 1000  # one segment


def simulation(tcp: dict | None = None, loss_rate: float = 0.0, npus: int = 2, seed: int = 0) -> Simulation:
    config = load_config({
        "seed": seed,
        "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": LINK_US,
                    "loss_rate": loss_rate},
        "host": {"tx_jitter_ns": 0},  # exact transmit timing: the expected times are computed to the picosecond
        "tcp": tcp or {},
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 1}]},  # unused: we drive it
    })
    return Simulation(config, models_host_stack=True)


def one_way_ps(packet_bytes: int) -> int:
    """Two links (host -> switch -> host), store and forward: 2 * (serialisation + 1 us)."""
    return 2 * (packet_bytes * PS_PER_BYTE + round(LINK_US * PS_PER_US))


@pytest.mark.parametrize("timestamps, syn_size", [(False, 52), (True, 60)])
def test_handshake_rtt_seeds_srtt_rttvar_and_the_first_rto(timestamps, syn_size):
    """RFC 6298 2.2 with the SYN/SYN-ACK sample R: SRTT = R, RTTVAR = R / 2,
    RTO = max(min RTO, SRTT + max(G, 4 RTTVAR)) = max(min RTO, 3 R) since 4 RTTVAR = 2 R > G = 1 us.
      without timestamps: R = 4 * (52 * 80 + 1,000,000) = 4 * 1,004,160 = 4,016,640 ps
      with timestamps:    R = 4 * (60 * 80 + 1,000,000) = 4 * 1,004,800 = 4,019,200 ps
    With a minimum RTO of 1 us the first RTO is 3 R (12,049,920 or 12,057,600 ps); with Linux's
    200 ms it is 200 ms; without the handshake it is the initial 1 s (RFC 6298 2.1)."""
    rtt_ps = 4 * (syn_size * PS_PER_BYTE + PS_PER_US)
    assert rtt_ps == {52: 4_016_640, 60: 4_019_200}[syn_size]

    rtt = simulation({"timestamps": timestamps, "min_rto_ms": 0.001}).open_connection(0, 1).sender.rtt
    assert (rtt.samples, rtt.srtt_ps, rtt.rttvar_ps) == (1, rtt_ps, rtt_ps // 2)
    assert rtt.rto_ps == 3 * rtt_ps

    assert simulation({"timestamps": timestamps}).open_connection(0, 1).sender.rtt.rto_ps == 200 * PS_PER_MS
    unseeded = simulation({"timestamps": timestamps, "handshake": False}).open_connection(0, 1).sender.rtt
    assert (unseeded.samples, unseeded.rto_ps) == (0, 1 * PS_PER_S)


def run_messages(tcp: dict, drop_indices: set[int], second_message_at_ps: int | None = None) -> list[int]:
    """One-segment messages on one connection (the second, if any, written at `second_message_at_ps`),
    losing the data packets counted in `drop_indices`; returns each message's delivery time."""
    sim = simulation(tcp)
    connection = sim.open_connection(0, 1)
    dropper = PacketDropper(lambda index, pkt: index in drop_indices)
    connection.sender.data_route = (dropper,) + connection.sender.data_route
    delivered: list[int] = []

    def send() -> None:
        connection.send_message(MESSAGE_BYTES, lambda: delivered.append(sim.eventlist.now_ps))

    send()
    if second_message_at_ps is not None:
        sim.eventlist.call_at(second_message_at_ps, send)
    sim.run()
    assert dropper.drops == len(drop_indices)
    return delivered


@pytest.mark.parametrize("handshake, rto_ps", [(True, 200 * PS_PER_MS), (False, 1 * PS_PER_S)])
def test_a_lost_first_packet_waits_the_handshake_rto_not_the_initial_one(handshake, rto_ps):
    """The message's only segment is lost: its retransmission leaves when the RTO armed at t = 0
    expires, then crosses the two links: 1040 bytes (1000 + 40 of headers, timestamps off) take
    2 * (1040 * 80 + 1,000,000) = 2,166,400 ps. With the handshake the RTO is max(200 ms, 3 R) = 200 ms
    (R = 4.01664 us, above); without it the initial RTO of 1 s (what ns-3 and Linux never wait here)."""
    assert one_way_ps(1040) == 2_166_400
    delivered = run_messages({"timestamps": False, "handshake": handshake}, {0})
    assert delivered == [rto_ps + 2_166_400]


@pytest.mark.parametrize("timestamps, header_bytes, second_rto_ps", [
    (False, 40, 400 * PS_PER_MS),  # Karn: the backed-off RTO carries over to the next message
    (True, 52, 200 * PS_PER_MS),   # RFC 7323: the retransmission's ACK is a sample, the backoff ends
])
def test_backoff_carries_over_without_timestamps_and_ends_with_them(timestamps, header_bytes, second_rto_ps):
    """Two one-segment messages, each losing its first transmission. The first waits the 200 ms RTO
    (seeded by the handshake), which then doubles to 400 ms (RFC 6298 5.5). Its retransmission's ACK
    is no sample without timestamps (Karn's rule, RFC 6298 3): the second message, written at 1 s,
    waits 400 ms. With timestamps the ACK echoes the retransmission's TSval (RFC 7323 4): a sample
    of about 4.2 us recomputes the RTO, max(200 ms, SRTT + 4 RTTVAR) = 200 ms, and the second waits
    200 ms. One way: 2 * ((1000 + headers) * 80 ps + 1 us) = 2,166,400 ps (40-byte headers) or
    2,168,320 ps (52 with timestamps)."""
    transit_ps = one_way_ps(MESSAGE_BYTES + header_bytes)
    assert transit_ps == {40: 2_166_400, 52: 2_168_320}[header_bytes]
    second_at_ps = 1 * PS_PER_S
    delivered = run_messages({"timestamps": timestamps}, {0, 2}, second_message_at_ps=second_at_ps)
    assert delivered == [200 * PS_PER_MS + transit_ps, second_at_ps + second_rto_ps + transit_ps]


class ScriptedRandom:
    """Stands for `random.Random`: `random()` returns the scripted values in order."""

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def test_syn_retransmissions_count_attempts_until_syn_and_syn_ack_both_pass():
    """Each packet is lost at each link it reaches with probability p (here 0.1: a draw below it
    loses it). A SYN lost on the first of its two links reaches no further link (one draw), a SYN-ACK
    lost on its last link after three draws; the attempt after each passes all four links."""
    sim = simulation()
    links = sim.topology.routes(0, 1, 0)
    assert syn_retransmits(*links, 0.1, ScriptedRandom([0.5] * 4)) == 0
    assert syn_retransmits(*links, 0.1, ScriptedRandom([0.05] + [0.5] * 4)) == 1  # SYN lost at once
    assert syn_retransmits(*links, 0.1, ScriptedRandom([0.5, 0.5, 0.5, 0.05] + [0.5] * 4)) == 1  # SYN-ACK lost
    assert syn_retransmits(*links, 0.1, ScriptedRandom([0.05, 0.05] + [0.5] * 4)) == 2
    # Linux gives up after tcp_syn_retries = 6 retransmissions: seven SYNs lost
    with pytest.raises(HandshakeFailed, match="network.loss_rate=0.1"):
        syn_retransmits(*links, 0.1, ScriptedRandom([0.05] * (SYN_RETRIES + 1)))


@pytest.mark.parametrize("retransmits", [1, 2])
def test_after_a_syn_loss_only_timestamps_give_a_sample(retransmits):
    """RFC 6298 5.7 and Linux (tcp_init_metrics): a SYN retransmitted and no valid sample (Karn's
    rule without timestamps) -> RTO 3 s when data starts, SRTT unset, so the first data ACK is the
    first sample. With timestamps the SYN-ACK echoes the TSval of the SYN it answers: a sample R,
    as after no loss. More than one retransmission cuts the initial window to one segment (Linux
    tcp_init_transfer), else it stays 10 segments."""
    rtt_ps = 4_016_640
    for timestamps, expected in ((False, (0, 0, 3 * PS_PER_S)), (True, (1, rtt_ps, 200 * PS_PER_MS))):
        sender = simulation({"timestamps": timestamps, "handshake": False}).open_connection(0, 1).sender
        sender.open_after_handshake(rtt_ps, retransmits)
        assert (sender.rtt.samples, sender.rtt.srtt_ps, sender.rtt.rto_ps) == expected
        mss = sender.mss_bytes
        assert sender.cc.cwnd_bytes == (mss if retransmits > 1 else 10 * mss)


def test_syn_losses_are_drawn_per_connection_from_the_seed():
    """With random loss each connection draws its handshake from its own seeded stream: the same
    seed opens the same connections alike (deterministic runs), and without timestamps exactly the
    connections whose SYN was resent start with the 3 s fallback and no sample. At p = 0.1 over four
    link crossings an attempt passes with probability 0.9^4 = 0.656: of the 20 connections among 5
    hosts some are resent (about 6.9 expected; none resent has probability 0.656^20 = 2e-4)."""
    def opened(seed: int, timestamps: bool) -> list[tuple[int, int]]:
        sim = simulation({"timestamps": timestamps}, loss_rate=0.1, npus=5, seed=seed)
        senders = [sim.open_connection(src, dst).sender for src in range(5) for dst in range(5) if src != dst]
        return [(sender.rtt.samples, sender.rtt.rto_ps) for sender in senders]

    plain = opened(3, False)
    assert plain == opened(3, False)
    assert set(plain) == {(1, 200 * PS_PER_MS), (0, 3 * PS_PER_S)}
    assert set(opened(3, True)) == {(1, 200 * PS_PER_MS)}


def test_ns3_backend_refuses_to_skip_the_handshake():
    with pytest.raises(ConfigError, match="tcp.handshake"):
        check_backend(load_config({"engine": {"backend": "ns3"}, "tcp": {"handshake": False},
                                   "workload": {"type": "collective"}}))


@pytest.mark.slow
@pytest.mark.parametrize("timestamps, rto_waits_ms", [
    (True, [200, 200, 200, 200]),  # every all-to-all waits one minimum RTO, as in ns-3 and Linux
    (False, [200, 400, 800, 1600]),  # Karn: the backed-off RTO carries over and doubles each time
])
def test_timeout_bound_all_to_alls_of_a_training_job(timestamps, rto_waits_ms):
    """Issue 21's case, at 32 NPUs: ASTRA-sim's DLRM, two iterations, on two leaves of 16 hosts under
    one spine (512 KiB buffers): the 16 hosts of a leaf open their windows into its one uplink at once
    and flows lose their whole first window (incast). Each of the four all-to-alls then lasts one RTO
    wait plus well under 1 ms of transfer (about 40 us loss-free). With the handshake the first RTO
    is the 200 ms minimum (not RFC 6298's initial 1 s). With timestamps each retransmission's ACK is
    a sample that ends the backoff, so every later all-to-all waits 200 ms again; without them no
    ACK after an RTO is a sample (only retransmissions are acknowledged), the doubled RTO carries over
    to the next message and doubles at its next timeout (RFC 6298 5.5): 200, 400, 800, 1600 ms."""
    rows = engine.run({
        "network": {"topology": "leaf_spine", "npus": 32, "hosts_per_leaf": 16, "spines": 1, "uplink_gbps": 100,
                    "link_gbps": 100, "link_latency_us": 1, "buffer_kb": 512},
        "host": {"tx_jitter_ns": 0},  # exact transmit timing: every incast loses its first windows alike
        "tcp": {"timestamps": timestamps},
        "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 2},
    })
    assert rows["runs"][0]["status"] == "ok" and rows["runs"][0]["timeouts"] > 0
    durations_ms = [row["duration_s"] * 1e3 for row in rows["collectives"] if row["op"] == "all_to_all"]
    assert len(durations_ms) == 4
    for duration_ms, wait_ms in zip(durations_ms, rto_waits_ms):
        assert wait_ms <= duration_ms < wait_ms + 1
