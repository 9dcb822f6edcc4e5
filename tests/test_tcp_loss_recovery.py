"""Slow start, fast retransmit, RTO backoff and SACK recovery against RFC 5681, 6582, 6298, 6675."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scenario import HAND_BUILT_SETTINGS, Wire, build_path, drop_segment_and_its_first_retransmission

from engine.eventlist import EventList
from engine.links import Packet
from engine.transport import TcpSender, make_congestion_control
from engine.units import PS_PER_MS, PS_PER_US

MSS = 1460


def test_slow_start_doubles_cwnd_every_rtt():
    # RFC 5681: with an ACK per segment and no loss, cwnd += 1 MSS per ACK, so the segments sent
    # in round k are init_cwnd * 2^k. A 1 ms one-way delay at 100 Gb/s makes every round's burst
    # (at most 160 segments * 120 ns = 19 us) far shorter than the 2 ms RTT, so rounds are distinct.
    path = build_path(bottleneck_gbps=100, latency_us=1000, init_cwnd_pkts=10)
    path.send(1000 * MSS)
    path.run_s(0.02)
    rtt_ps = 2 * 1000 * PS_PER_US
    first_send = path.data_tap.seen[0][0]
    per_round = [0] * 5
    for time_ps, *_ in path.data_tap.seen:
        round_index = (time_ps - first_send) // rtt_ps
        if round_index < 5:
            per_round[round_index] += 1
    assert per_round == [10, 20, 40, 80, 160]


def test_one_drop_gives_three_dupacks_one_retransmission_no_rto():
    # RFC 5681 3.2: the third duplicate ACK triggers exactly one fast retransmission; no timeout.
    dropped_index = 100
    path = build_path(latency_us=10, should_drop=lambda i, pkt: i == dropped_index)
    path.send(2000 * MSS)
    path.run_s(1)
    assert path.delivered_ps, "transfer did not finish"
    sender = path.sender
    assert sender.retransmits == 1
    assert sender.fast_retransmits == 1
    assert sender.timeouts == 0
    lost_seq = dropped_index * MSS
    retransmission = [t for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert len(retransmission) == 1
    dupacks = [t for t, _, ack, _, _ in path.ack_tap.seen if ack == lost_seq]
    # the first ACK for lost_seq is the normal one for the segment before it; then the duplicates
    assert len(dupacks) >= 1 + 3
    third_dupack_ps = dupacks[3]
    assert retransmission[0] == third_dupack_ps  # sent the moment the third duplicate arrives


@pytest.mark.parametrize("sack", [True, False])
def test_fast_retransmit_waits_for_dupthresh_duplicate_acks(sack: bool) -> None:
    # RFC 5681 3.2 with DupThresh = 5 (tcp.dupthresh; Linux's tcp_reordering): one drop is resent
    # the moment the fifth duplicate ACK arrives, once, without a timeout. With SACK, RFC 6675's
    # IsLost agrees: the fifth duplicate ACK is the first with more than (5 - 1) segments SACKed.
    dropped_index = 100
    path = build_path(latency_us=10, sack=sack, dupthresh=5, should_drop=lambda i, pkt: i == dropped_index)
    path.send(2000 * MSS)
    path.run_s(1)
    assert path.delivered_ps, "transfer did not finish"
    assert (path.sender.retransmits, path.sender.fast_retransmits, path.sender.timeouts) == (1, 1, 0)
    retransmission = [t for t, _, _, _, rtx in path.data_tap.seen if rtx]
    dupacks = [t for t, _, ack, _, _ in path.ack_tap.seen if ack == dropped_index * MSS]
    assert retransmission[0] == dupacks[5]  # dupacks[0] is the ACK of the segment before the drop


def test_a_dupthresh_beyond_the_duplicate_acks_leaves_the_loss_to_the_rto() -> None:
    # The last 5 segments of a transfer, one lost: 4 duplicate ACKs, fewer than DupThresh = 5 and
    # fewer than 5 SACKed segments: no fast retransmit; the RTO resends it (RFC 6298 5.4).
    segments = 30
    path = build_path(latency_us=10, dupthresh=5, should_drop=lambda i, pkt: i == segments - 5)
    path.send(segments * MSS)
    path.run_s(2)
    assert path.delivered_ps, "transfer did not finish"
    assert (path.sender.fast_retransmits, path.sender.timeouts) == (0, 1)


def test_rto_backs_off_exponentially_and_respects_min_rto():
    # The last segment of a 10-segment window has no later segments to raise duplicate ACKs, so
    # only the timer can repair it. Dropping its first four transmissions gives four expiries:
    # RFC 6298 5.5 doubles the RTO each time. With a 200 ms minimum RTO and RTT ~ 40 us the first
    # RTO is exactly 200 ms (the floor), then 400, 800 and 1600 ms between transmissions.
    last_index = 9
    drops = {"left": 4}

    def drop_last(index, pkt):
        if pkt.seq == last_index * MSS and drops["left"]:
            drops["left"] -= 1
            return True
        return False

    min_rto_ps = 200 * PS_PER_MS
    path = build_path(latency_us=10, should_drop=drop_last, min_rto_ps=min_rto_ps)
    path.send(10 * MSS)
    path.run_s(10)
    assert path.delivered_ps
    assert path.sender.timeouts == 4
    sends = [t for t, seq, *_ in path.data_tap.seen if seq == last_index * MSS]
    assert len(sends) == 5
    last_new_ack = max(t for t, _, ack, _, _ in path.ack_tap.seen if ack == last_index * MSS)
    # the timer restarts on the last ACK of new data (RFC 6298 5.3), then expires after one RTO
    assert sends[1] - last_new_ack == min_rto_ps
    gaps = [later - earlier for earlier, later in zip(sends[1:], sends[2:])]
    assert gaps == [2 * min_rto_ps, 4 * min_rto_ps, 8 * min_rto_ps]


def _recovery_span_ps(sack: bool, drops: set[int]) -> tuple[int, object]:
    # A receive window of 50 segments, below the 85-segment BDP (10 Gb/s x 100 us), keeps queues
    # empty so the RTT stays 100 us and the window at the losses is exactly 50 segments.
    path = build_path(latency_us=50, sack=sack, rcv_wnd_bytes=50 * MSS,
                      should_drop=lambda i, pkt: i in drops and not pkt.is_retransmit)
    path.send(3000 * MSS)
    path.run_s(2)
    assert path.delivered_ps
    retransmissions = [t for t, *_, rtx in path.data_tap.seen if rtx]
    return retransmissions[-1] - retransmissions[0], path.sender


def test_sack_repairs_several_losses_in_one_window_in_about_one_rtt():
    # RFC 6675: with SACK the sender learns all holes from the duplicate ACKs and retransmits them
    # within the first round trip of recovery: once pipe has fallen from ~50 to cwnd = 25 segments,
    # i.e. after ~25 duplicate ACKs, which arrive within one RTT (ACK-clocked bursts, with the
    # window-limited idle gap in between). NewReno without SACK (RFC 6582) repairs one hole per
    # partial ACK, i.e. one per RTT: three losses take about two RTTs between first and last repair.
    rtt_ps = 2 * 50 * PS_PER_US
    drops = {300, 303, 306}
    sack_span, sack_sender = _recovery_span_ps(True, drops)
    assert sack_sender.timeouts == 0
    assert sack_sender.retransmits == 3
    assert sack_span < rtt_ps  # all three holes go out in the same round trip
    newreno_span, newreno_sender = _recovery_span_ps(False, drops)
    assert newreno_sender.timeouts == 0
    assert newreno_sender.retransmits == 3
    assert 1.8 * rtt_ps <= newreno_span <= 2.5 * rtt_ps


def test_a_lost_retransmission_is_resent_without_waiting_for_the_rto():
    # RFC 6675 alone repairs a hole once; if that retransmission is lost too, only the RTO is left.
    # Our paths keep a flow's packets in order, so once a segment sent *after* the retransmission
    # is SACKed the retransmission must have been lost (RACK's reasoning, RFC 8985): it is sent
    # again at once. Drop segment 300 and its first retransmission: two retransmissions, no RTO.
    lost_seq = 300 * MSS
    drop = drop_segment_and_its_first_retransmission(lost_seq)

    # (no receive-window cap: recovery must be able to send new segments after the retransmission,
    # since only their arrival can tell that it was lost)
    path = build_path(latency_us=50, should_drop=drop)
    path.send(2000 * MSS)
    path.run_s(2)
    assert path.delivered_ps
    assert path.sender.timeouts == 0
    assert path.sender.retransmits == 2
    # the second retransmission follows the first after about one RTT (here ~0.37 ms: 100 us of
    # propagation plus the slow-start queue at the sender's NIC), far below the 200 ms minimum RTO
    resends = [t for t, seq, *_, rtx in path.data_tap.seen if rtx and seq == lost_seq]
    assert len(resends) == 2 and resends[1] - resends[0] < PS_PER_MS


# -- an RTO with a SACK scoreboard (tcp.sack_after_rto) ------------------------------------------
# A window of W = 10 segments under a 10-segment receive window; k = 4 of them, 0, 2, 4 and 6, are
# lost each time they are sent in the first 100 ms. Segments 1, 3, 5, 7, 8 and 9 arrive and are
# SACKed. The third duplicate ACK (after 1, 3, 5) starts a fast recovery with 6-9 in flight:
# ssthresh = cwnd = max(4 / 2, 2) = 2 MSS; it resends 0 at once and, once 7-9 are SACKed (pipe =
# 1), 2. Both are lost, and the receive window (snd_una stays at 0) lets nothing new out whose
# delivery could show it, so the RTO fires at the initial 200 ms, with the scoreboard {1, 3, 5,
# 7-9}, the holes {0, 2, 4, 6} and 2 segments (0, 2) in flight: ssthresh = max(2 / 2, 2) = 2 MSS,
# cwnd = 1 MSS (RFC 5681 (4), FlightSize as ns-3 and Linux count it: what is not SACKed). Slow
# start to 2 segments, then congestion avoidance, cwnd += MSS * MSS / cwnd per ACK. After the RTO
# every copy arrives. The RTT is 2 x 50 us plus 1.2 us per segment at 10 Gb/s.

RTO_HOLES = (0, 2, 4, 6)
RTO_WINDOW = 10
RTO_PS = 200 * PS_PER_MS
LOSSY_UNTIL_PS = 100 * PS_PER_MS


def _rto_with_a_scoreboard(keep: bool, until_ps: int | None = None):
    holes = {index * MSS for index in RTO_HOLES}
    path = build_path(latency_us=50, rcv_wnd_bytes=RTO_WINDOW * MSS, initial_rto_ps=RTO_PS,
                      min_rto_ps=100 * PS_PER_US, keep_sack_after_rto=keep,
                      should_drop=lambda index, pkt: pkt.seq in holes and pkt.sent_ps < LOSSY_UNTIL_PS)
    path.send(30 * MSS)
    if until_ps is None:
        path.run_s(1)
        assert path.delivered_ps
    else:
        path.eventlist.run(until_ps)
    return path


def _resent_after_the_rto(path) -> list[int]:
    """Segment numbers sent again after the RTO, of the window the RTO found (0..9), in order."""
    return [seq // MSS for t, seq, *_ in path.data_tap.seen if t >= RTO_PS and seq < RTO_WINDOW * MSS]


def test_an_rto_that_keeps_the_scoreboard_resends_exactly_the_holes():
    # RFC 6675 5.1 with erratum 1610, Linux's tcp_timeout_mark_lost, ns-3's ReTxTimeout: what the
    # scoreboard does not hold is lost, and only that is resent, in order, as the window opens:
    # cwnd 1: 0; ACK 2 (slow start, cwnd 2, pipe 0): 2 and 4; ACK 4 (cwnd 2.5, pipe 1): 6. Exactly
    # the k = 4 holes of the W = 10 segments, none of the 6 SACKed ones, each once; then new data.
    path = _rto_with_a_scoreboard(keep=True)
    assert path.sender.timeouts == 1
    assert _resent_after_the_rto(path) == list(RTO_HOLES)


def test_an_rto_that_discards_the_scoreboard_resends_sacked_data_too():
    # The control, RFC 2018's expunge: go-back-N from snd_una within cwnd. cwnd 1: 0; ACK 2 (it
    # covers 1; cwnd 2): 2, 3; ACK 4 (cwnd 2.5, up to snd_una + 2.5 = 6.5): 4, 5; ACK 6 (cwnd 2.9):
    # 6, 7; then ACK 10 (the receiver holds 7-9), so 8 and 9 are not resent. Besides the 4 holes it
    # resends 3 segments the receiver held and had SACKed: 3, 5 and 7.
    path = _rto_with_a_scoreboard(keep=False)
    assert path.sender.timeouts == 1
    assert _resent_after_the_rto(path) == [0, 2, 3, 4, 5, 6, 7]


def _first_sample_after_the_rto(path) -> tuple[int, int]:
    """(time, RTT) of the first ACK after the RTO that acknowledges new data and echoes a segment
    sent once: the first RTT sample Karn's rule allows."""
    highest_ack = 0
    for (time_ps, _, ack, _, is_retransmit), echoed_ps in zip(path.ack_tap.seen, path.ack_tap.sent_ps):
        if ack > highest_ack:
            highest_ack = ack
            if time_ps > RTO_PS and not is_retransmit:
                return time_ps, time_ps - echoed_ps
    raise AssertionError("no RTT sample after the RTO")


def test_after_an_rto_that_keeps_the_scoreboard_a_fresh_sample_ends_the_backoff():
    # RFC 6298 5.5: the RTO doubles at the expiry, 200 -> 400 ms, and stays so through the
    # recovery: the ACKs of the resent holes give no sample (Karn; the engine's ACK echoes the
    # segment that triggered it, so an ACK triggered by a retransmission is never a sample). Keeping
    # the scoreboard, the sender reaches new data (segment 10) after the 4 holes, and the ACK of
    # segment 10 is the connection's first sample R: SRTT = R, RTTVAR = R / 2, RTO = SRTT +
    # max(G, 4 RTTVAR) = 3 R (about 0.3 ms, above the 100 us floor). Discarding the scoreboard,
    # the sender first resends the 5 SACKed segments, so its first sample comes later.
    keep_time_ps, rtt_ps = _first_sample_after_the_rto(_rto_with_a_scoreboard(keep=True))
    assert 2 * 50 * PS_PER_US < rtt_ps < 2 * 50 * PS_PER_US + 10 * PS_PER_US
    just_before = _rto_with_a_scoreboard(keep=True, until_ps=keep_time_ps - 1)
    assert just_before.sender.rtt.samples == 0
    assert just_before.sender.rtt.rto_ps == 2 * RTO_PS
    just_after = _rto_with_a_scoreboard(keep=True, until_ps=keep_time_ps)
    rttvar_ps = rtt_ps // 2
    assert just_after.sender.rtt.samples == 1
    assert just_after.sender.rtt.rto_ps == rtt_ps + max(PS_PER_US, 4 * rttvar_ps)
    discard_time_ps, _ = _first_sample_after_the_rto(_rto_with_a_scoreboard(keep=False))
    assert discard_time_ps > keep_time_ps


# -- what counts as a duplicate ACK (RFC 6675 section 2 with SACK, RFC 5681 without) ----------------
# The sender is driven without a network: MSS 1,000 bytes, NewReno, an initial window of 10
# segments (0..9, sent at once onto a wire), then scripted ACKs. Segment numbers are in MSS.
SEG = 1000


def _scripted_sender(sack: bool = True, writes: tuple[int, ...] = (30 * SEG,)) -> tuple[TcpSender, Wire]:
    wire = Wire()
    sender = TcpSender(EventList(), replace(HAND_BUILT_SETTINGS, mss_bytes=SEG, sack=sack),
                       make_congestion_control("newreno", SEG, 10))
    sender.data_route = (wire,)
    for nbytes in writes:
        sender.write(nbytes)
    return sender, wire


def _ack(sender: TcpSender, ack_bytes: int, *sacked: tuple[int, int], echoed_sent_ps: int = 0) -> None:
    """Deliver an ACK of `ack_bytes` carrying the SACK blocks `sacked` ([start, end) in bytes), sent
    for the segment sent at `echoed_sent_ps` (the send time the receiver echoes)."""
    pkt = Packet((), 40, 0, 0, ack_bytes, echoed_sent_ps, False, False)
    pkt.sack_blocks = sacked
    sender.receive_packet(pkt)


def _sent(wire: Wire) -> list[int]:
    """Segment numbers put on the wire, in order."""
    return [pkt.seq // SEG for pkt in wire.packets]


def test_with_sack_an_ack_that_sacks_nothing_new_is_not_a_duplicate_ack():
    # Segment 0 is lost, 1 arrives: ACK 0 SACK 1 is duplicate ACK 1, and limited transmit (RFC
    # 3042) sends segment 10 (outstanding 11 <= cwnd 10 + 1). Segment 1 then reaches the receiver
    # three more times (duplicates, as a spurious retransmission makes): each provokes ACK 0 SACK 1
    # again, which SACKs nothing new, so by RFC 6675 section 2 it is not a duplicate ACK: DupAcks
    # stays 1, nothing is sent, no fast retransmit. (Counted by RFC 5681 they would make 4
    # duplicate ACKs and a fast retransmit: the chain of spurious recoveries of docs/validation-ns3.md.)
    sender, wire = _scripted_sender()
    _ack(sender, 0, (1 * SEG, 2 * SEG))
    assert sender.dupacks == 1 and _sent(wire) == list(range(10)) + [10]
    for _ in range(3):
        _ack(sender, 0, (1 * SEG, 2 * SEG))
    assert sender.dupacks == 1
    assert sender.fast_retransmits == 0 and sender.retransmits == 0
    assert _sent(wire) == list(range(10)) + [10]


def test_without_sack_every_ack_of_nothing_new_is_a_duplicate_ack():
    # RFC 5681 / RFC 6582: with no SACK information an ACK that acknowledges nothing new while data
    # is out is a duplicate ACK. Limited transmit sends 10 and 11 (outstanding 11 <= 10 + 1, 12 <=
    # 10 + 2); the third starts fast retransmit of segment 0.
    sender, wire = _scripted_sender(sack=False)
    for _ in range(3):
        _ack(sender, 0)
    assert sender.fast_retransmits == 1
    assert _sent(wire) == list(range(10)) + [10, 11, 0]


def test_three_acks_each_sacking_new_data_start_fast_retransmit():
    # Segment 0 lost; 1, 2, 3 arrive, each ACK SACKing one more segment: three duplicate ACKs
    # (DupThresh, RFC 6675 section 5 step 1). The first two send 10 and 11 by limited transmit; the
    # third retransmits 0 at once. ssthresh = cwnd = max(pipe / 2, 2 MSS) with pipe = SND.MAX -
    # highest SACKed = 12 - 4 = 8 segments (nothing retransmitted yet): 4 segments. After the
    # retransmission pipe = 9 > cwnd: nothing else goes.
    sender, wire = _scripted_sender()
    _ack(sender, 0, (1 * SEG, 2 * SEG))
    _ack(sender, 0, (1 * SEG, 3 * SEG))
    assert sender.fast_retransmits == 0
    _ack(sender, 0, (1 * SEG, 4 * SEG))
    assert sender.fast_retransmits == 1 and sender.in_recovery
    assert sender.cc.ssthresh_bytes == sender.cc.cwnd_bytes == 4 * SEG
    assert _sent(wire) == list(range(10)) + [10, 11, 0]


def test_dupthresh_duplicate_acks_of_small_segments_start_fast_retransmit():
    # RFC 6675 section 5 step 1 covers SACKs of segments smaller than SMSS, which IsLost's byte
    # rule (more than (DupThresh - 1) SMSS = 2,000 bytes SACKed) may not catch. The application
    # writes 500 bytes at a time: 20 segments of 500 bytes fill the 10,000-byte window. Segment
    # [0, 500) is lost; three ACKs SACK [500, 1000), [500, 1500), [500, 2000): 1,500 bytes in one
    # block, IsLost(0) is false, but the third is the third duplicate ACK: fast retransmit from 0.
    sender, wire = _scripted_sender(writes=(500,) * 20)
    assert len(wire.packets) == 20
    _ack(sender, 0, (500, 1000))
    _ack(sender, 0, (500, 1500))
    assert sender.fast_retransmits == 0
    _ack(sender, 0, (500, 2000))
    assert sender.fast_retransmits == 1
    assert wire.packets[-1].seq == 0 and wire.packets[-1].is_retransmit


def test_islost_starts_fast_retransmit_before_three_duplicate_acks():
    # RFC 6675 section 5 step 2: fewer than DupThresh duplicate ACKs, but IsLost(HighACK + 1)
    # (more than (DupThresh - 1) SMSS SACKed above it) starts recovery. Segment 0 is lost; the ACKs
    # of 2 and 3 are lost on the way back, so the sender sees ACK 0 SACK 1 (duplicate ACK 1, limited
    # transmit sends 10), then ACK 0 SACK 1-3: duplicate ACK 2 with 3,000 > 2,000 bytes SACKed.
    # ssthresh = max(pipe / 2, 2 MSS), pipe = 11 - 4 = 7 segments: 3,500 bytes.
    sender, wire = _scripted_sender()
    _ack(sender, 0, (1 * SEG, 2 * SEG))
    assert sender.fast_retransmits == 0
    _ack(sender, 0, (1 * SEG, 4 * SEG))
    assert sender.dupacks == 2 and sender.fast_retransmits == 1
    assert sender.cc.ssthresh_bytes == 3.5 * SEG
    assert _sent(wire) == list(range(10)) + [10, 0]


def test_islost_counts_three_discontiguous_sacked_ranges_of_small_segments():
    # IsLost's other rule: DupThresh discontiguous SACKed sequences above HighACK + 1, whatever their
    # size. 500-byte segments as above; [0, 500) is lost and so are [1000, 1500) and [2000, 2500);
    # the sender sees ACK 0 SACK [500, 1000) (duplicate ACK 1), then, the ACKs between lost, ACK 0
    # with the blocks [500, 1000), [1500, 2000), [2500, 3000): 1,500 bytes SACKed, not above 2 SMSS,
    # but three discontiguous ranges: fast retransmit at the second duplicate ACK.
    sender, wire = _scripted_sender(writes=(500,) * 20)
    _ack(sender, 0, (500, 1000))
    assert sender.fast_retransmits == 0
    _ack(sender, 0, (2500, 3000), (1500, 2000), (500, 1000))
    assert sender.dupacks == 2 and sender.fast_retransmits == 1
    assert wire.packets[-1].seq == 0 and wire.packets[-1].is_retransmit


def test_a_cumulative_ack_that_sacks_new_data_is_a_duplicate_ack_too():
    # RFC 6675 section 5: a cumulative ACK resets DupAcks to 0, and one that also SACKs new data
    # counts as a duplicate ACK (section 2: "regardless of its status as a cumulative
    # acknowledgment"); here IsLost(1) holds at once. Segment 1 is lost, the ACKs of 0, 2 and 3 are
    # lost too: ACK 1 SACK 2-4 arrives first. DupAcks = 1, 3,000 bytes SACKed above SND.UNA = 1:
    # fast retransmit of 1 instead of slow-start growth. ssthresh = max(pipe / 2, 2 MSS) with pipe
    # = 10 - 5 = 5 segments: 2,500 bytes.
    sender, wire = _scripted_sender()
    _ack(sender, 1 * SEG, (2 * SEG, 5 * SEG))
    assert sender.dupacks == 1 and sender.fast_retransmits == 1
    assert sender.cc.ssthresh_bytes == 2.5 * SEG
    assert _sent(wire) == list(range(10)) + [1]


def test_only_retransmissions_sent_before_a_delivered_segment_are_found_lost():
    # Lost-retransmission detection (test_a_lost_retransmission_is_resent_without_waiting_for_the_rto)
    # scripted at microsecond steps, to pin down which retransmissions a delivery condemns: those
    # sent strictly before the delivered segment, and only if still neither ACKed nor SACKed.
    # Segments 0..9 go at t = 0; 0 and 4 are lost.
    # t = 1 us, ACK 0 SACK 1-3: 3,000 > 2 SMSS bytes SACKed above 0 (IsLost): fast recovery,
    #   ssthresh = cwnd = pipe / 2 = (10 - 4) / 2 = 3 segments; 0 is resent at once (pipe 7).
    # t = 2 us, ACK 0 SACK 1-3, 5-9 (echoing t = 0): pipe = 1 (the resent 0), nothing was sent
    #   after t = 0 and delivered, so 0 is not lost yet; cwnd - pipe = 2: resend the hole 4, then
    #   new segment 10 (no hole below the highest SACK is left).
    # t = 3 us, ACK 0 SACK 4 (the copy of 4 sent at t = 2 us arrived; 0's copy from t = 1 us did
    #   not): the copy of 0 was lost; 4's copy, sent at the delivered segment's own time, is not.
    #   0 goes a third time; RFC 6675's pipe counts the hole 0 once (it lies below HighRxt = 5),
    #   lost copy or not: pipe = (11 - 10) for 10 + 1 for 0 = 2 < 3, so new segment 11 follows.
    us = PS_PER_US
    sender, wire = _scripted_sender()
    sender.eventlist.now_ps = 1 * us
    _ack(sender, 0, (1 * SEG, 4 * SEG))
    assert sender.in_recovery and sender.cc.cwnd_bytes == 3 * SEG
    assert _sent(wire) == list(range(10)) + [0]
    sender.eventlist.now_ps = 2 * us
    _ack(sender, 0, (5 * SEG, 10 * SEG), (1 * SEG, 4 * SEG))
    assert _sent(wire) == list(range(10)) + [0, 4, 10]
    sender.eventlist.now_ps = 3 * us
    _ack(sender, 0, (4 * SEG, 5 * SEG), (1 * SEG, 4 * SEG), (5 * SEG, 10 * SEG), echoed_sent_ps=2 * us)
    assert _sent(wire) == list(range(10)) + [0, 4, 10, 0, 11]
    assert [pkt.sent_ps for pkt in wire.packets[10:]] == [1 * us, 2 * us, 2 * us, 3 * us, 3 * us]
    assert sender.retransmits == 3 and sender.timeouts == 0 and sender.in_recovery
