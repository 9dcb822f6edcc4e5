"""The hybrid backend's packet episodes against hand arithmetic on one switch port (issue 28, "What it
must show"): N synchronised senders each send one message of exactly one initial window to rank 0,
through the switch's egress port to host 0, as a gather `Program` replayed by `replay_phase` on the
whole switch (`Reduction(config, None)`).

Expected values come from the port's drop-tail rule as `engine.links.Link` implements it and from
RFC 6298's arithmetic (docs/theory.md#retransmission-timeout-rfc-6298; the collapse it explains:
docs/theory.md#incast), never from the simulator's output:

- Every link runs at 100 Gb/s, 80 ps a byte: a full packet (1,460 bytes of payload and 40 of IPv4 + TCP
  headers, without the timestamp option) is the 1,500-byte MTU and takes S = 120,000 ps on any link, a
  pure ACK (40 bytes) A = 3,200 ps, a SYN or SYN-ACK (52 bytes with SACK-permitted) Y = 4,160 ps.
  Every link adds L = 1 us of propagation.
- `network.buffer_kb` counts KiB: B x 1,500 / 1,024 KiB is exactly B x 1,500 bytes (a binary fraction).
  `Link.admit` drops a packet when the bytes still to serialise ahead of it, the unsent part of the
  packet on the wire included, exceed the buffer. At the instant a packet has just finished, q packets
  ahead are q x S of backlog: one more is admitted iff q <= B, so the port holds B + 1 packets with
  the one on the wire, and a packet dropped leaves the backlog as it was (every later arrival at the
  same instant is dropped too).
- Arrivals at one instant are served in the order their events were scheduled (`EventList`: ties by
  seq). The ranks issue in rank order, so each host link schedules its first packet's arrival in rank
  order, and reschedules for its next packet when it hands one on: at every instant the senders'
  packets reach the port in rank order. RTO timers armed at one instant fire in the order armed.
- Nothing else moves the packets: no timestamps, RACK-TLP off (no tail loss probe before the RTO), no
  delayed ACKs, no endpoint delay, and no TCP Small Queues or qdisc at the hosts (each NIC a plain link).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from engine.backends.hybrid import HybridBackend
from engine.backends.reduction import PacketEpisodes, Reduction, replay_phase
from engine.config import SimConfig, load_config
from engine.system.algorithms import Program, Send, Step
from engine.transport.tcp import TcpSender

PS_PER_BYTE = 80  # 100 Gb/s: 8 bits a byte / 1e11 bits a second = 80e-12 s
SEGMENT_BYTES = 1_460  # the MSS, MTU - 40: every segment of these messages is full
PACKET_PS = 1_500 * PS_PER_BYTE  # S: a full segment and its 40 header bytes, the 1,500-byte MTU
ACK_PS = 40 * PS_PER_BYTE  # A: a pure ACK, headers only (no SACK blocks: nothing arrives out of order)
SYN_PS = 52 * PS_PER_BYTE  # Y: a SYN or SYN-ACK, 40 bytes of headers and 12 of options (SACK, no timestamps)
LATENCY_PS = 1_000_000  # L: network.link_latency_us = 1 on every link
GRANULARITY_PS = 1_000_000  # G: tcp.clock_granularity_us = 1 (the default)
START_PS = 1_000_000  # when the gather starts (the reduced clock jumps there)
# the handshake's RTT sample: a SYN and its SYN-ACK, each across a host link and a switch port
HANDSHAKE_RTT_PS = 2 * (2 * (SYN_PS + LATENCY_PS))  # 4,016,640 ps
# a lone segment's round trip on the idle switch: it crosses two links, its ACK two back
LONE_SEGMENT_RTT_PS = 2 * (PACKET_PS + LATENCY_PS) + 2 * (ACK_PS + LATENCY_PS)  # 4,246,400 ps

# tcp.min_rto_ms: Linux's 200 ms floor, which the RTO takes (the RFC's terms are microseconds here), and a
# microsecond timer (Vasudevan et al. 2009), under which RFC 6298's SRTT + 4 RTTVAR sets it
MIN_RTO_MS = pytest.mark.parametrize("min_rto_ms", [200.0, 0.001], ids=["min_rto_200ms", "min_rto_1us"])


def switch_incast(senders: int, buffer_packets: int, window_segments: int, min_rto_ms: float) -> SimConfig:
    """One switch, host 0 the receiver and hosts 1..senders the senders, a drop-tail buffer of
    `buffer_packets` full packets per port, an initial window of `window_segments`."""
    return load_config({
        "engine": {"backend": "hybrid"},
        "network": {"topology": "switch", "npus": senders + 1, "link_gbps": 100, "link_latency_us": 1,
                    "buffer_kb": buffer_packets * 1_500 / 1_024, "mtu_bytes": 1_500},
        "tcp": {"timestamps": False, "rack_tlp": False, "delayed_ack": False, "sack": True,
                "init_cwnd_pkts": window_segments, "min_rto_ms": min_rto_ms},
        # exact transmit timing: the arithmetic below counts arrivals to the picosecond
        "host": {"tsq_bytes": None, "qdisc_packets": None, "tx_jitter_ns": 0},
        "system": {"endpoint_delay_ns": 0},
    })


def run_gather(config: SimConfig, message_bytes: int) -> tuple[PacketEpisodes, int, int]:
    """Replay a gather (ranks 1..p-1 each send `message_bytes` to rank 0 in one step; rank 0's one
    step waits for all) on the whole switch from `START_PS`; returns the episodes, the instant of the last
    delivery and the packets dropped."""
    npus = config.network.npus
    # rank r's peer is rank 0: (r + npus - r) mod npus, consumed by rank 0's step 0
    program: Program = [[Step((), npus - 1)]] + [[Step((Send(npus - rank, message_bytes, 0),), 0)]
                                                 for rank in range(1, npus)]
    episodes = PacketEpisodes(config, Reduction(config, None), HybridBackend.MODELS_HOST_STACK)
    eventlist = episodes.sim.eventlist
    finished_ps: list[int] = []

    def flow_ids(senders: list[int], peers: list[int]) -> list[int]:
        return senders  # each sender's connection to rank 0 has its rank as flow id

    replay = replay_phase(episodes, (tuple(range(npus)),), [program], None, flow_ids, 0,
                          lambda: finished_ps.append(eventlist.now_ps))
    eventlist.call_at(START_PS, replay.start)
    assert eventlist.run(START_PS + 10 * 10**12)  # every timer done well within 10 s
    (finished,) = finished_ps
    for connection in episodes.sim.connections:
        assert connection.receiver.rcv_nxt == message_bytes  # every message delivered whole
    return episodes, finished, episodes.drops()


def senders_by_rank(episodes: PacketEpisodes) -> list[TcpSender]:
    """The senders of ranks 1..p-1, in rank order."""
    by_rank = {connection.src: connection.sender for connection in episodes.sim.connections}
    return [by_rank[rank] for rank in sorted(by_rank)]


def drops_by_link(episodes: PacketEpisodes) -> dict[str, int]:
    """The links that dropped packets, by name, and how many each."""
    return {link.name: link.drops for link in episodes.sim.topology.links if link.drops}


def rfc6298_rto_ps(min_rto_ms: float, rtt_samples_ps: list[int]) -> Fraction:
    """RFC 6298's RTO after `rtt_samples_ps`, in exact arithmetic: the first sample R gives SRTT = R,
    RTTVAR = R / 2 (2.2); each later R' gives RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|, then SRTT =
    7/8 SRTT + 1/8 R' (2.3); RTO = max(min_rto, SRTT + max(G, 4 RTTVAR)). The samples of these tests
    make every division exact, so the engine's integer picoseconds must equal it."""
    srtt_ps, rttvar_ps = Fraction(rtt_samples_ps[0]), Fraction(rtt_samples_ps[0], 2)
    for rtt_ps in rtt_samples_ps[1:]:
        rttvar_ps = Fraction(3, 4) * rttvar_ps + Fraction(1, 4) * abs(srtt_ps - rtt_ps)
        srtt_ps = Fraction(7, 8) * srtt_ps + Fraction(1, 8) * rtt_ps
    min_rto_ps = round(min_rto_ms * 1_000_000_000)  # 1e9 ps a millisecond
    return max(Fraction(min_rto_ps), srtt_ps + max(Fraction(GRANULARITY_PS), 4 * rttvar_ps))


@MIN_RTO_MS
def test_senders_that_lose_their_tail_recover_one_rto_after_their_last_ack(min_rto_ms: float) -> None:
    """N = B + 1 senders of a 3-segment window into a port of B = 3 packets: the port drops exactly
    the tails of senders 2..N (2 segments each) and nothing of sender 1; each of them, with no later
    segment to raise duplicate ACKs, times out once, one RFC 6298 RTO (from the handshake's sample and
    its first segment's) after that segment's ACK, and resends its tail in two round trips; the gather
    ends at the last of those deliveries, to the picosecond; the RTO stays backed off (Karn)."""
    buffer_packets, window_segments = 3, 3
    senders = buffer_packets + 1
    config = switch_incast(senders, buffer_packets, window_segments, min_rto_ms)
    episodes, finished_ps, dropped = run_gather(config, window_segments * SEGMENT_BYTES)

    # Every sender puts its window on its NIC at START_PS; segment k of each reaches the port at
    # a_k = START_PS + (k + 1) S + L. At a_0 the N = B + 1 first segments find 0..B packets ahead: all
    # admitted, the port is full. At each a_k after, one packet has just left (B ahead): sender 1's
    # segment k is admitted, the N - 1 others find B + 1 ahead and are dropped.
    assert dropped == (senders - 1) * (window_segments - 1) == 6
    assert drops_by_link(episodes) == {"sw->h0": dropped}  # host 0's port, nothing else
    tcp = senders_by_rank(episodes)
    assert [sender.timeouts for sender in tcp] == [0] + [1] * (senders - 1)
    # go-back-N from the first hole resends exactly what was lost, the two tail segments
    assert [sender.retransmits for sender in tcp] == [0] + [window_segments - 1] * (senders - 1)
    assert episodes.counters() == {"retransmits": dropped, "timeouts": senders - 1, "drops": dropped}

    last_delivery_ps = []
    for rank, sender in enumerate(tcp[1:], start=2):
        # rank r's first segment is the r-th out of the port (it leaves at a_0 + r S) and is ACKed at
        # once; the ACK crosses host 0's NIC and port r. Its RTT sample R_r = (r + 1) S + 4 L + 2 A
        first_ack_ps = START_PS + PACKET_PS + LATENCY_PS + rank * PACKET_PS + LATENCY_PS + 2 * (ACK_PS + LATENCY_PS)
        rto_ps = rfc6298_rto_ps(min_rto_ms, [HANDSHAKE_RTT_PS, first_ack_ps - START_PS])
        # the ACK restarts the timer (RFC 6298 5.3), and nothing comes after it
        timeout_ps = first_ack_ps + rto_ps
        # the timeout resends segment 1 (cwnd 1 MSS), alone at the port (the ranks' timeouts are S or
        # more apart); its ACK opens cwnd to 2, and the last segment goes then: the sender's last send
        assert sender.last_send_ps == timeout_ps + LONE_SEGMENT_RTT_PS
        last_delivery_ps.append(timeout_ps + LONE_SEGMENT_RTT_PS + 2 * (PACKET_PS + LATENCY_PS))
        # backed off at the timeout (5.5); both resent segments' ACKs give no sample (Karn's rule)
        assert sender.rtt.rto_ps == 2 * rto_ps
    # The last delivery is rank N's (R_r and its RTO grow with r): R_N after the start its first ACK,
    # one RTO later its timeout, then a lone segment's round trip and the last segment's way to host 0
    # (microseconds); sender 1's last segment was delivered at a_0 + (N + 2) S + L
    assert finished_ps == last_delivery_ps[-1] == max(last_delivery_ps)


@MIN_RTO_MS
def test_retransmissions_that_collide_again_wait_twice_the_rto(min_rto_ms: float) -> None:
    """N = 3 (B + 1) senders of a one-segment window (all of it the tail) into a port of B = 2 packets:
    the burst delivers ranks 1..B+1 and drops 2 (B + 1); those senders never had an ACK, so their RTO is
    the handshake's (SRTT = R, RTTVAR = R / 2) and all fire together at RTO_0 after the burst; their
    retransmissions collide at the port and B + 1 are dropped again, which wait the backed-off 2 RTO_0
    (RFC 6298 5.5) and are delivered at 3 RTO_0, where the gather ends (to the picosecond)."""
    buffer_packets, window_segments = 2, 1
    wave_senders = buffer_packets + 1  # what an idle port admits from one instant: B + 1 packets
    senders = 3 * wave_senders
    config = switch_incast(senders, buffer_packets, window_segments, min_rto_ms)
    episodes, finished_ps, dropped = run_gather(config, window_segments * SEGMENT_BYTES)

    # each wave reaches an idle port at one instant (the burst is gone microseconds before the RTO):
    # ranks in order, the first B + 1 admitted. Burst: 3 (B + 1) arrive, 2 (B + 1) dropped; first
    # timeouts: 2 (B + 1) arrive, B + 1 dropped; second timeouts: B + 1 arrive, none dropped
    assert dropped == 2 * wave_senders + wave_senders == 9
    assert drops_by_link(episodes) == {"sw->h0": dropped}
    expected_timeouts = [0] * wave_senders + [1] * wave_senders + [2] * wave_senders
    tcp = senders_by_rank(episodes)
    assert [sender.timeouts for sender in tcp] == expected_timeouts
    assert [sender.retransmits for sender in tcp] == expected_timeouts  # one segment per timeout
    assert episodes.counters() == {"retransmits": dropped, "timeouts": dropped, "drops": dropped}

    # the senders that lost their segment have only the handshake's sample: RTO_0 = R + 4 R / 2 = 3 R =
    # 12,049,920 ps under the 1 us floor, the floor's 200 ms under Linux's
    rto_ps = rfc6298_rto_ps(min_rto_ms, [HANDSHAKE_RTT_PS])
    first_wave_ps = START_PS + rto_ps
    second_wave_ps = first_wave_ps + 2 * rto_ps  # the timer re-armed with the doubled RTO
    assert [sender.last_send_ps for sender in tcp] == \
        [START_PS] * wave_senders + [first_wave_ps] * wave_senders + [second_wave_ps] * wave_senders
    # each doubling stays: the ACK of a retransmitted segment gives no RTT sample (Karn's rule)
    assert [sender.rtt.rto_ps for sender in tcp[wave_senders:]] == \
        [2 * rto_ps] * wave_senders + [4 * rto_ps] * wave_senders
    # the last of the second wave is the (B + 1)-th out of the port
    assert finished_ps == second_wave_ps + PACKET_PS + LATENCY_PS + wave_senders * PACKET_PS + LATENCY_PS
