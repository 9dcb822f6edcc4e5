"""Linux's loss recovery and slow-start exit against their RFCs: RACK-TLP (RFC 8985), PRR-SSRB
(RFC 6937), HyStart++ (RFC 9406), and Linux's delayed-ACK rules. Expected values are computed here
from the RFCs' formulas and the packets the taps saw, never taken from the engine's own output."""

from __future__ import annotations

import math

import pytest
from scenario import build_path, drop_segment_and_its_first_retransmission

from engine.transport.cc import HyStartPlusPlus, NewReno
from engine.transport.recovery import ProportionalRateReduction, RackState
from engine.transport.sack import SackScoreboard
from engine.units import PS_PER_MS

MSS = 1460


def _srtt_rttvar_ps(samples_ps: list[int]) -> tuple[int, int]:
    """RFC 6298 SRTT and RTTVAR in integer picoseconds: SRTT = R, RTTVAR = R/2, then
    RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'| and SRTT = 7/8 SRTT + 1/8 R'."""
    srtt, rttvar = samples_ps[0], samples_ps[0] // 2
    for sample in samples_ps[1:]:
        rttvar = (3 * rttvar + abs(srtt - sample)) // 4
        srtt = (7 * srtt + sample) // 8
    return srtt, rttvar


def _rtt_samples_ps(path) -> list[tuple[int, int]]:
    """(ACK arrival, RTT sample) for every ACK of new data echoing a segment sent once (Karn)."""
    samples = []
    highest_ack = 0
    for (time_ps, _, ack, _, is_retransmit), echoed_ps in zip(path.ack_tap.seen, path.ack_tap.sent_ps):
        if ack > highest_ack:
            highest_ack = ack
            if not is_retransmit:
                samples.append((time_ps, time_ps - echoed_ps))
    return samples


def _drop_first_copies(seqs: set[int]):
    """A dropper that loses the first transmission of each segment starting at one of `seqs`."""
    def drop(index, pkt):
        if pkt.seq in seqs and not pkt.is_retransmit:
            seqs.discard(pkt.seq)
            return True
        return False
    return drop


@pytest.mark.parametrize("slack_ms", [0, 2], ids=["rfc8985", "linux"])
def test_a_tail_loss_is_repaired_by_a_probe_two_srtts_and_the_slack_after_the_last_ack(slack_ms):
    # 10 segments; the last two are lost. Nothing after them can raise duplicate ACKs, so without
    # TLP only the 200 ms RTO repairs them. RFC 8985 7.2: after the ACK of segment 7 two segments
    # are out, so PTO = 2 * SRTT (no delayed-ACK allowance: FlightSize > 1 segment), plus Linux's
    # TCP_TIMEOUT_MIN_US (2 ms, tcp_schedule_loss_probe) when the slack is on; far below the RTO
    # (200 ms), so not capped. 7.3: no new data, so the probe resends the last segment (9). Its
    # SACK lets RACK mark segment 8 lost (sent before 9's probe and out longer than RACK.rtt),
    # repaired in fast recovery: no RTO at all.
    slack_ps = slack_ms * PS_PER_MS
    path = build_path(latency_us=10, rack_tlp=True, pto_slack_ps=slack_ps,
                      should_drop=_drop_first_copies({8 * MSS, 9 * MSS}))
    path.send(10 * MSS)
    path.run_s(1)
    assert path.delivered_ps and path.delivered_ps[0] < 10 * PS_PER_MS  # far below the 200 ms RTO
    sender = path.sender
    assert sender.timeouts == 0
    assert sender.loss_probes == 1
    assert sender.rack_lost_segments == 1  # segment 8
    samples = _rtt_samples_ps(path)
    # the ACK of segment 7 is the last ACK of new data before the probe
    acks_before_probe = [(t, r) for t, r in samples if t <= path.ack_tap.seen[7][0]]
    last_ack_ps = acks_before_probe[-1][0]
    srtt_ps, _ = _srtt_rttvar_ps([r for _, r in acks_before_probe])
    expected_probe_ps = last_ack_ps + 2 * srtt_ps + slack_ps
    retransmissions = [(t, seq) for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert retransmissions[0] == (expected_probe_ps, 9 * MSS)
    assert retransmissions[1][1] == 8 * MSS and len(retransmissions) == 2


def test_linux_slack_never_takes_the_probe_past_the_rto_deadline():
    # The same two tail losses with a 1 ms minimum RTO. After the ACK of segment 7 the RTO runs
    # from that ACK (RFC 6298 5.3) for max(SRTT + 4 RTTVAR, 1 ms) = 1 ms (RTT ~ 22 us), while
    # 2 SRTT + 2 ms of slack ends later: the PTO takes the RTO's time (RFC 8985 7.2; Linux's
    # min(timeout, tcp_rto_delta_us)), and goes as a probe in the RTO's place: no timeout.
    min_rto_ps = 1 * PS_PER_MS
    path = build_path(latency_us=10, rack_tlp=True, pto_slack_ps=2 * PS_PER_MS, min_rto_ps=min_rto_ps,
                      should_drop=_drop_first_copies({8 * MSS, 9 * MSS}))
    path.send(10 * MSS)
    path.run_s(1)
    assert path.delivered_ps
    assert (path.sender.timeouts, path.sender.loss_probes) == (0, 1)
    samples = [(t, r) for t, r in _rtt_samples_ps(path) if t <= path.ack_tap.seen[7][0]]
    last_ack_ps = samples[-1][0]
    srtt_ps, rttvar_ps = _srtt_rttvar_ps([r for _, r in samples])
    rto_ps = max(srtt_ps + max(1_000_000, 4 * rttvar_ps), min_rto_ps)  # G = 1 us
    assert rto_ps == min_rto_ps < 2 * srtt_ps + 2 * PS_PER_MS  # the cap binds
    retransmissions = [(t, seq) for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert retransmissions[0] == (last_ack_ps + rto_ps, 9 * MSS)


def test_with_one_segment_out_the_probe_adds_the_delayed_ack_allowance_instead_of_the_slack():
    # Two segments; the second is lost. After the ACK of the first (one RTT sample R) one segment
    # is out: RFC 8985 7.2 and Linux add the worst-case delayed ACK (WCDelAckT, the minimum RTO in
    # Linux: 10 us here) to 2 SRTT, and not the 2 ms slack. A 10 us minimum RTO keeps this below
    # the RTO, 3 R after the ACK (SRTT = R, RTTVAR = R / 2): PTO = 2 R + 10 us.
    min_rto_ps = 10_000_000  # 10 us
    path = build_path(latency_us=10, rack_tlp=True, pto_slack_ps=2 * PS_PER_MS, min_rto_ps=min_rto_ps,
                      should_drop=_drop_first_copies({MSS}))
    path.send(2 * MSS)
    path.run_s(1)
    assert path.delivered_ps
    assert (path.sender.timeouts, path.sender.loss_probes) == (0, 1)
    (ack_ps, rtt_ps), *_ = _rtt_samples_ps(path)
    expected_pto_ps = 2 * rtt_ps + min_rto_ps
    assert expected_pto_ps < 3 * rtt_ps  # below the RTO: not capped
    retransmissions = [(t, seq) for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert retransmissions == [(ack_ps + expected_pto_ps, MSS)]


def test_two_short_segments_out_are_two_segments_for_the_probe_timeout():
    # One full segment gives one RTT sample R (SRTT = R); then two 500-byte writes go out at once,
    # both lost: 1,000 bytes, less than an MSS, but two segments (Linux's packets_out = 2), so
    # PTO = 2 SRTT + the 2 ms slack, not 2 SRTT + WCDelAckT (the 200 ms minimum RTO, which the
    # RTO 200 ms after the writes would cap). The probe resends the last segment.
    slack_ps = 2 * PS_PER_MS
    path = build_path(latency_us=10, rack_tlp=True, pto_slack_ps=slack_ps,
                      should_drop=_drop_first_copies({MSS, MSS + 500}))
    path.send(MSS)
    path.run_s(0.001)
    path.send(500)
    path.send(500)
    path.run_s(1)
    assert len(path.delivered_ps) == 3
    assert (path.sender.timeouts, path.sender.loss_probes) == (0, 1)
    (_, rtt_ps), = _rtt_samples_ps(path)[:1]
    writes_ps = [t for t, seq, *_ in path.data_tap.seen if seq == MSS + 500][0]
    retransmissions = [(t, seq) for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert retransmissions[0] == (writes_ps + 2 * rtt_ps + slack_ps, MSS + 500)


def test_a_probe_for_one_segment_in_flight_waits_for_the_delayed_ack_allowance_capped_by_the_rto():
    # Only the last segment is lost: after the ACK of segment 8 one segment is out, so RFC 8985
    # adds the worst-case delayed ACK (WCDelAckT: the minimum RTO, 10 ms here, as Linux) to
    # 2 * SRTT, and caps the PTO at the RTO's expiry: PTO = min(2 SRTT + 10 ms, RTO) with
    # RTO = max(SRTT + 4 RTTVAR, 10 ms) = 10 ms (RTT ~ 22 us). The probe goes exactly one RTO after
    # the last ACK, as a probe: no timeout, no window collapse.
    path = build_path(latency_us=10, rack_tlp=True, min_rto_ps=10 * PS_PER_MS,
                      should_drop=_drop_first_copies({9 * MSS}))
    path.send(10 * MSS)
    path.run_s(1)
    assert path.delivered_ps
    assert (path.sender.timeouts, path.sender.loss_probes) == (0, 1)
    last_ack_ps = max(t for t, _, ack, _, _ in path.ack_tap.seen if ack == 9 * MSS)
    retransmissions = [(t, seq) for t, seq, _, _, rtx in path.data_tap.seen if rtx]
    assert retransmissions == [(last_ack_ps + 10 * PS_PER_MS, 9 * MSS)]


def test_without_rack_tlp_the_same_tail_loss_waits_for_the_rto():
    # the control: the options are off by default, and the tail then costs the 200 ms RTO
    path = build_path(latency_us=10, should_drop=_drop_first_copies({8 * MSS, 9 * MSS}))
    path.send(10 * MSS)
    path.run_s(1)
    assert path.sender.timeouts == 1 and path.sender.loss_probes == 0
    assert path.delivered_ps[0] > 200 * PS_PER_MS


def test_rack_detects_a_lost_retransmission_when_a_later_transmission_is_delivered():
    # Segment 300 and its first retransmission are lost. RFC 8985 6.2: a retransmission is a new
    # transmission with its own time; once a segment sent after it is delivered and
    # xmit_ts(retransmission) + RACK.rtt + reo_wnd <= now (reo_wnd = 0 in recovery without
    # reordering; RACK.rtt = now - xmit_ts(delivered segment), so this holds at once), the
    # retransmission is lost and is sent again: at the arrival of the first ACK echoing a segment
    # sent after the first retransmission. Two detections, two retransmissions, no RTO.
    lost_seq = 300 * MSS
    drop = drop_segment_and_its_first_retransmission(lost_seq)

    path = build_path(latency_us=50, rack_tlp=True, should_drop=drop)
    path.send(2000 * MSS)
    path.run_s(2)
    assert path.delivered_ps
    sender = path.sender
    assert sender.timeouts == 0
    assert sender.retransmits == 2
    assert sender.rack_lost_segments == 2
    resends = [t for t, seq, *_, rtx in path.data_tap.seen if rtx and seq == lost_seq]
    first_resend_ps = resends[0]
    expected_ps = min(t for (t, *_), echoed_ps in zip(path.ack_tap.seen, path.ack_tap.sent_ps)
                      if echoed_ps > first_resend_ps)
    assert resends[1] == expected_ps


@pytest.mark.parametrize("retransmission_out", [False, True])
def test_rack_update_and_detect_loss_by_hand(retransmission_out: bool) -> None:
    # RFC 8985 6.2 through the module alone. In MSS units (1,000 bytes) and microseconds: S0..S9
    # sent at t = 0..9 us. Then one ACK at 30 us: cumulative up to S3, SACK [S5, S7). RACK_update
    # (steps 1-3) takes the delivered segments S0, S1, S2, S5, S6 in transmission order: 5,000 bytes
    # delivered; RACK.xmit_ts = 6 us (S6, sent last among them), RACK.end_seq = 7,000, RACK.rtt =
    # 30 - 6 = 24 us, fack = 7,000, min RTT = 30 - 6 = 24 us (S6's is the smallest). RACK_detect_loss
    # (step 5) with reo_wnd = 0: S3 and S4 were sent before S6 and are out for 27 and 26 us >= 24:
    # both lost; S7..S9 were sent after: not. With S8 retransmitted at 20 us before the ACK (it moves
    # to the end of the transmission order), the delivered set and the losses are the same: S8 is
    # not delivered, and was (re)sent after S6 (and the segments out keep their transmission order).
    us = 1_000_000  # ps
    rack = RackState()
    for index in range(10):
        rack.on_transmit(index * 1000, (index + 1) * 1000, index * us, False)
    if retransmission_out:
        rack.on_transmit(8000, 9000, 20 * us, True)
    sacked = SackScoreboard()
    sacked.add(5000, 7000)
    delivered = rack.on_delivery(3000, sacked, 30 * us, 30 * us)
    assert delivered == 5000
    assert ((rack.xmit_ps, rack.end_seq, rack.rtt_ps, rack.fack, rack.min_rtt_ps)
            == (6 * us, 7000, 24 * us, 7000, 24 * us))
    left = [3, 4, 7, 9, 8] if retransmission_out else [3, 4, 7, 8, 9]
    assert [segment.start // 1000 for segment in rack.outstanding] == left
    assert rack.detect_losses(30 * us, 0) == (2, 0)
    assert [segment.start // 1000 for segment in rack.outstanding if segment.lost] == [3, 4]
    assert rack.lost_bytes == 2000
    # A later ACK at 40 us covering everything, echoing the send time of the last segment sent: all
    # five delivered (S3, S4, S7, then S9, S8 in transmission order). Without the retransmission the
    # latest sent is S9 (9 us): RACK.rtt = 31 us. With it, S8's retransmission at 20 us, echoed (so
    # its RTT counts, RFC 8985 6.2 step 2): RACK.xmit_ts = 20 us, RACK.rtt = min RTT = 20 us.
    echoed_us = 20 if retransmission_out else 9
    assert rack.on_delivery(10_000, None, 40 * us, echoed_us * us) == 5000
    assert rack.outstanding == [] and rack.lost_bytes == 0 and rack.fack == 10_000
    expected = (20, 20, 20) if retransmission_out else (9, 31, 24)
    assert (rack.xmit_ps, rack.rtt_ps, rack.min_rtt_ps) == tuple(value * us for value in expected)


def test_prr_ssrb_sends_the_rfc6937_sequence_for_two_loss_bursts_in_one_window():
    # A scripted recovery through the module alone (no event loop). In MSS units: S0..S19 in
    # flight, so RecoverFS = 20; ssthresh = 10 (Reno's half). S0..S3 and S10..S15 are lost; ACKs
    # come for S4..S9 and S16..S19 in order. The two duplicate ACKs SACKing S4 and S5 come before
    # recovery, which starts at the one SACKing S6 (three SACKed: S0..S3 marked lost, as RACK or
    # RFC 6675 with DupThresh 3 would); S10..S15 are marked lost at the ACK of S16, the first
    # delivery sent after them. The sender sends whole segments while cwnd - pipe >= 1 MSS (lost
    # ones first, in order, then new data S20, ...); pipe counts segments sent and neither
    # delivered nor marked lost. RFC 6937 section 3 with PRR-SSRB, in bytes, on every ACK:
    #   prr_delivered += DeliveredData
    #   pipe > ssthresh: sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out
    #   else:            sndcnt = MIN(ssthresh - pipe, MAX(prr_delivered - prr_out, DeliveredData) + MSS)
    # so above ssthresh sndcnt = prr_delivered / 2 - prr_out: 730 bytes (no whole segment) on odd
    # ACKs. By hand (prr_delivered, prr_out and sndcnt in MSS; pipe after the ACK, before its sends):
    #   ACK of  newly lost  prr_delivered  prr_out  pipe  sndcnt                               sends
    #   S6      S0..S3      1              0        13    1 / 2 - 0 = 0.5                      -
    #   S7                  2              0        12    2 / 2 - 0 = 1                        S0
    #   S8                  3              1        12    3 / 2 - 1 = 0.5                      -
    #   S9                  4              1        11    4 / 2 - 1 = 1                        S1
    #   S16     S10..S15    5              2        5     MIN(10 - 5, MAX(5 - 2, 1) + 1) = 4   S2 S3 S10 S11
    #   S17                 6              6        8     MIN(10 - 8, MAX(6 - 6, 1) + 1) = 2   S12 S13
    #   S18                 7              8        9     MIN(10 - 9, MAX(7 - 8, 1) + 1) = 1   S14
    #   S19                 8              9        9     MIN(10 - 9, 2) = 1                   S15
    # then the ACKs of the nine retransmissions S0..S3, S10..S14 (one segment delivered by each):
    # pipe is 9 before each, so MIN(10 - 9, ...) = 1 new segment per ACK (S20..S28). The S16 row is
    # where PRR-SSRB's MAX(prr_delivered - prr_out, ...) pays back what the proportional part held
    # back (4 segments, not slow start's DeliveredData + 1 = 2); the S17 row is the DeliveredData +
    # MSS bound, the S18 row ssthresh - pipe. (Linux counts in whole segments, rounding the S6 row
    # up to 1: it sends one ACK earlier in the proportional part.)
    delivered_and_lost = [(1, 4), (1, 0), (1, 0), (1, 0), (1, 6), (1, 0), (1, 0), (1, 0)] + [(1, 0)] * 9
    prr = ProportionalRateReduction()
    prr.start(20 * MSS)
    pipe = 18  # S4 and S5 SACKed before recovery
    sends = []
    for delivered, newly_lost in delivered_and_lost:
        pipe -= delivered + newly_lost
        cwnd = prr.cwnd_bytes(delivered * MSS, pipe * MSS, 10.0 * MSS, MSS)
        count = int(cwnd - pipe * MSS) // MSS
        prr.out_bytes += count * MSS  # the caller counts what it sends (TcpSender does)
        pipe += count
        sends.append(count)
    assert sends == [0, 1, 0, 1, 4, 2, 1, 1] + [1] * 9
    assert pipe == 10  # as recovery ends, what is in flight has come down to ssthresh, without a burst


def test_prr_recovery_ends_at_ssthresh():
    # Three losses in one window of a transfer with RACK and PRR: one fast recovery, three
    # retransmissions, no RTO; RFC 6937 ends recovery with cwnd = ssthresh. It ends at the first
    # ACK reaching recover_seq, the highest byte sent before the first retransmission; the same
    # (deterministic) run again, stopped right after that ACK.
    def lossy_path():
        return build_path(latency_us=50, rack_tlp=True, prr=True, mss_bytes=MSS, timestamps=False,
                          should_drop=_drop_first_copies({300 * MSS, 303 * MSS, 306 * MSS}))

    path = lossy_path()
    path.send(2000 * MSS)
    path.run_s(2)
    assert path.delivered_ps
    sender = path.sender
    assert sender.timeouts == 0 and sender.fast_retransmits == 1 and sender.retransmits == 3
    first_retransmission_ps = min(t for t, *_, rtx in path.data_tap.seen if rtx)
    recover_seq = max(seq + length for t, seq, _, length, _ in path.data_tap.seen if t < first_retransmission_ps)
    exit_ps = min(t for t, _, ack, _, _ in path.ack_tap.seen if ack >= recover_seq)
    again = lossy_path()
    again.send(2000 * MSS)
    again.eventlist.run(exit_ps)
    cc = again.sender.cc
    assert not again.sender.in_recovery
    assert cc.cwnd_bytes == cc.ssthresh_bytes


# -- HyStart++ (RFC 9406) ------------------------------------------------------------------------

def _hystart_round(hystart, cc, rtt_ps, acks, snd_una, snd_nxt):
    """One round of `acks` ACKs of one MSS each, every one with RTT sample `rtt_ps`; the first
    ACK's snd_una reaches the previous round's end, so it starts the round."""
    for index in range(acks):
        hystart.on_ack(cc, MSS, rtt_ps, snd_una + index * MSS, snd_nxt)
    return snd_una + acks * MSS


def test_hystart_leaves_slow_start_when_the_rtt_rises_by_the_rfc_threshold():
    # RFC 9406 4.2: RttThresh = max(MIN_RTT_THRESH = 4 ms, min(lastRoundMinRTT / 8, MAX_RTT_THRESH =
    # 16 ms)). With lastRoundMinRTT = 10 ms: max(4, min(1.25, 16)) = 4 ms. After N_RTT_SAMPLE = 8
    # samples of the next round, currentRoundMinRTT = 13.999 ms stays in slow start, 14 ms enters
    # CSS. In slow start cwnd grows by min(N, L * SMSS) = 1 MSS per ACK of 1 MSS.
    for rise_ps, enters_css in ((4 * PS_PER_MS - 1, False), (4 * PS_PER_MS, True)):
        cc = NewReno(MSS, 10)
        hystart = HyStartPlusPlus()
        seq = _hystart_round(hystart, cc, 10 * PS_PER_MS, 10, 0, 10 * MSS)
        _hystart_round(hystart, cc, 10 * PS_PER_MS + rise_ps, 8, seq, 30 * MSS)
        assert hystart.in_css is enters_css
        assert cc.cwnd_bytes == (10 + 18) * MSS  # 18 ACKs of slow start, 1 MSS each
        assert cc.ssthresh_bytes == math.inf


def test_hystart_threshold_is_clamped_to_16_ms_and_css_lasts_five_rounds():
    # lastRoundMinRTT = 200 ms: 200 / 8 = 25 ms, clamped to MAX_RTT_THRESH = 16 ms; a 216 ms round
    # enters CSS. In CSS cwnd grows by min(N, L SMSS) / CSS_GROWTH_DIVISOR = MSS / 4 per ACK. The
    # entry's partial round counts as the first of CSS_ROUNDS = 5; at the start of the sixth round
    # boundary after entry (5 rounds done) ssthresh = cwnd: congestion avoidance.
    for rise_ps, enters_css in ((16 * PS_PER_MS - 1, False), (16 * PS_PER_MS, True)):
        cc = NewReno(MSS, 10)
        hystart = HyStartPlusPlus()
        seq = _hystart_round(hystart, cc, 200 * PS_PER_MS, 10, 0, 10 * MSS)
        seq = _hystart_round(hystart, cc, 200 * PS_PER_MS + rise_ps, 8, seq, 18 * MSS)
        assert hystart.in_css is enters_css
    cwnd_at_css = cc.cwnd_bytes
    assert cwnd_at_css == (10 + 18) * MSS
    # four more rounds of 8 ACKs at the same RTT (not below the baseline: no return to slow start)
    for _ in range(4):
        seq = _hystart_round(hystart, cc, 216 * PS_PER_MS, 8, seq, seq + 8 * MSS)
        assert cc.ssthresh_bytes == math.inf
    assert cc.cwnd_bytes == cwnd_at_css + 4 * 8 * MSS / 4
    hystart.on_ack(cc, MSS, 216 * PS_PER_MS, seq, seq + 8 * MSS)  # the fifth CSS round is complete
    assert cc.ssthresh_bytes == cc.cwnd_bytes == cwnd_at_css + 8 * MSS


def test_hystart_returns_to_slow_start_when_css_was_spurious():
    # RFC 9406 4.2: in CSS, a round whose minimum RTT (after 8 samples) falls below
    # cssBaselineMinRtt means the exit was spurious: slow start resumes (1 MSS per ACK again).
    cc = NewReno(MSS, 10)
    hystart = HyStartPlusPlus()
    seq = _hystart_round(hystart, cc, 10 * PS_PER_MS, 8, 0, 8 * MSS)
    seq = _hystart_round(hystart, cc, 14 * PS_PER_MS, 8, seq, 16 * MSS)
    assert hystart.in_css
    seq = _hystart_round(hystart, cc, 13 * PS_PER_MS, 8, seq, 24 * MSS)
    assert not hystart.in_css
    before = cc.cwnd_bytes
    hystart.on_ack(cc, MSS, 13 * PS_PER_MS, seq, seq + MSS)
    assert cc.cwnd_bytes == before + MSS


def test_hystart_is_used_in_the_initial_slow_start_of_a_connection():
    # With tcp.hystart the sender's slow start follows RFC 9406's growth: an ACK covering two
    # segments (delayed ACKs) adds min(N, 8 SMSS) = 2 MSS, where RFC 5681's rule adds 1 MSS. From
    # IW 10 with an ACK per two segments and no loss, the first round (5 ACKs) reaches 20 MSS.
    path = build_path(latency_us=1000, bottleneck_gbps=100, hystart=True, delayed_ack=True)
    path.send(20 * MSS)
    path.run_s(0.003)  # one RTT (2 ms) and a little
    assert path.sender.cc.cwnd_bytes == 20 * MSS


# -- Linux's delayed ACKs ------------------------------------------------------------------------

def test_linux_delayed_ack_quick_acks_then_one_ack_per_two_full_segments_and_the_short_tail_at_once():
    # 36 full segments and a 100-byte tail. Linux: the first 16 segments are ACKed one by one
    # (quick-ACK mode, TCP_MAX_QUICKACKS), the next 20 full ones in pairs (10 ACKs), and the short
    # tail at once (it is the end of a write, read at once): 16 + 10 + 1 = 27 ACKs, none of them
    # from the 40 ms delayed-ACK timer (the transfer ends within a millisecond).
    path = build_path(latency_us=10, delayed_ack=True, linux_delayed_ack=True)
    path.send(36 * MSS + 100)
    path.run_s(1)
    assert path.delivered_ps and path.delivered_ps[0] < PS_PER_MS
    assert path.receiver.acks_sent == 27
    # without Linux's rules the tail waits for the 40 ms timer (the 37th segment is alone)
    plain = build_path(latency_us=10, delayed_ack=True)
    plain.send(36 * MSS + 100)
    plain.run_s(1)
    assert plain.receiver.acks_sent == 19
    assert plain.delivered_ps[0] < PS_PER_MS  # delivery itself does not wait for the ACK
    assert max(t for t, *_ in plain.ack_tap.seen) > 40 * PS_PER_MS
    assert max(t for t, *_ in path.ack_tap.seen) < PS_PER_MS
