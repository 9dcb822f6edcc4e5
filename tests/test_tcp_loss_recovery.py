"""Slow start, fast retransmit, RTO backoff and SACK recovery against RFC 5681, 6582, 6298, 6675."""

from __future__ import annotations

from scenario import build_path, drop_segment_and_its_first_retransmission

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
