"""Linux's loss recovery, as state a `TcpSender` owns when it is turned on: RACK-TLP (RFC 8985) and
Proportional Rate Reduction (RFC 6937, PRR-SSRB).

RACK detects losses by time instead of by counting duplicate ACKs: once a segment sent *after*
another has been delivered (cumulatively ACKed or SACKed), the earlier one is lost when it has been
out for longer than the round-trip time of that delivery plus a reordering window. A retransmission
is a new transmission, so a lost retransmission is detected the same way. The tail loss probe
(TLP) covers the case where nothing after the loss is delivered: after a probe timeout (PTO) of
about two smoothed RTTs with no ACK, the sender sends one segment to elicit the ACK (with SACK
blocks) that lets RACK or fast recovery repair the tail, instead of waiting for the RTO.

PRR spreads the window reduction of a fast recovery over the ACKs of that recovery, so that the
amount in flight reaches ssthresh as recovery ends, without bursts: each ACK may send in
proportion (ssthresh / RecoverFS) to what it reports delivered while in flight is above ssthresh,
and at most the delivered data plus one MSS (slow-start reduction bound, SSRB) below it.

The sender calls these only when the options are on (`tcp.rack_tlp`, `tcp.prr`).
"""

from __future__ import annotations

import bisect
from typing import Any, Final

from mypy_extensions import mypyc_attr

from .sack import SackScoreboard

_NONE: Final = -1  # a sequence number or time that is not set

DUPTHRESH_SEGMENTS: Final = 3  # RFC 8985 6.2: SACKed segments beyond which reo_wnd is 0 (no reordering seen)


class SentSegment:
    """One transmission RACK tracks: bytes [start, end) last sent at `xmit_ps`, the `send_number`-th
    transmission of its sender (its place in the transmission order)."""

    __slots__ = ("start", "end", "xmit_ps", "retransmitted", "lost", "send_number")

    def __init__(self, start: int, end: int, xmit_ps: int, retransmitted: bool, send_number: int) -> None:
        self.start = start
        self.end = end
        self.xmit_ps = xmit_ps
        self.retransmitted = retransmitted
        self.lost = False
        self.send_number = send_number


def _send_number(segment: SentSegment) -> int:
    return segment.send_number


def sent_after(t1_ps: int, end1: int, t2_ps: int, end2: int) -> bool:
    """RACK_sent_after (RFC 8985 6.2): was (t1, end1) sent after (t2, end2)? Ties go by sequence."""
    return t1_ps > t2_ps or (t1_ps == t2_ps and end1 > end2)


class RackState:
    """RFC 8985 state of one sender.

    `outstanding` holds every segment sent and not yet delivered, in the order of their (latest)
    transmission: a retransmission moves its segment to the end. No two of them start at the same
    sequence number (a retransmission from a segment's start is that segment sent again), so
    `by_start` finds each by its start and `starts`, sorted, finds those in a range of sequence
    numbers: an ACK reads the segments it can deliver, not every segment out. `retransmitted_count`
    counts the retransmitted ones out: with none, `outstanding` is in sequence order as well (new
    data is sent in order). `xmit_ps`, `end_seq` and `rtt_ps`
    describe the most recently sent delivered segment (RACK.xmit_ts, RACK.end_seq, RACK.rtt);
    `fack` is the highest sequence delivered. `lost_bytes` counts segments marked lost and not
    yet retransmitted. Deadlines are absolute picoseconds, 0 when not armed.
    """

    __slots__ = ("outstanding", "by_start", "starts", "sends", "retransmitted_count", "xmit_ps", "end_seq",
                 "rtt_ps", "min_rtt_ps", "fack", "reordering_seen", "lost_bytes", "reorder_deadline_ps",
                 "probe_deadline_ps", "probe_end_seq", "probe_sent_ps", "probe_retransmitted",
                 "probe_flight_bytes", "after_timeout")

    def __init__(self) -> None:
        self.outstanding: list[SentSegment] = []
        self.by_start: dict[int, SentSegment] = {}
        self.starts: list[int] = []
        self.sends = 0
        self.retransmitted_count = 0
        self.xmit_ps = _NONE
        self.end_seq = 0
        self.rtt_ps = 0
        self.min_rtt_ps = _NONE
        self.fack = 0
        self.reordering_seen = False
        self.lost_bytes = 0
        self.reorder_deadline_ps = 0
        self.probe_deadline_ps = 0
        self.probe_end_seq = _NONE  # TLP.end_seq: a probe episode is in progress until ACKed
        self.probe_sent_ps = 0
        self.probe_retransmitted = False
        self.probe_flight_bytes = 0  # snd_max - snd_una when the probe went: the loss response's FlightSize
        self.after_timeout = False  # the recovery in progress follows an RTO (no PRR, slow start)

    def on_transmit(self, start: int, end: int, now_ps: int, is_retransmit: bool) -> None:
        """Record a transmission; a retransmission moves its segment to the end of the order."""
        self.sends += 1
        segment = self.by_start.get(start) if is_retransmit else None
        if segment is not None:
            self.outstanding.remove(segment)
            if segment.lost:
                segment.lost = False
                self.lost_bytes -= segment.end - segment.start
            if not segment.retransmitted:
                segment.retransmitted = True
                self.retransmitted_count += 1
            segment.xmit_ps = now_ps
            segment.send_number = self.sends
            self.outstanding.append(segment)
            return
        segment = SentSegment(start, end, now_ps, is_retransmit, self.sends)
        if is_retransmit:
            self.retransmitted_count += 1
        self.outstanding.append(segment)
        self.by_start[start] = segment
        starts = self.starts
        if not starts or start > starts[-1]:  # new data: above everything out
            starts.append(start)
        else:
            starts.insert(bisect.bisect_left(starts, start), start)

    def on_delivery(self, snd_una: int, sacked: SackScoreboard | None, now_ps: int, echoed_sent_ps: int) -> int:
        """RACK_update (RFC 8985 6.2 steps 1-3) for the segments this ACK shows delivered
        (cumulatively acknowledged, or inside a SACK block), which leave `outstanding`, taken in
        their order there; `echoed_sent_ps` is the send time the ACK echoes (the engine's
        counterpart of the timestamp option's TSecr, which Linux enables by default). Returns the
        bytes newly delivered (PRR's DeliveredData)."""
        starts = self.starts
        by_start = self.by_start
        count = len(starts)
        delivered_indices: list[int] = []  # into `starts`
        index = 0
        while index < count and starts[index] < snd_una:  # the segments that start below snd_una
            segment = by_start[starts[index]]
            if segment.end <= snd_una or (sacked is not None and sacked.covers(segment.start, segment.end)):
                delivered_indices.append(index)
            index += 1
        if sacked is not None:
            above_snd_una = index
            for block_start, block_end in sacked.blocks:  # the segments inside each block (disjoint blocks)
                index = bisect.bisect_left(starts, block_start, above_snd_una)
                while index < count and starts[index] < block_end:
                    if by_start[starts[index]].end <= block_end:
                        delivered_indices.append(index)
                    index += 1
        if not delivered_indices:
            return 0
        delivered_indices.sort()
        segments = [by_start[starts[index]] for index in delivered_indices]
        # with no retransmission out, sequence order is transmission order: `outstanding` holds the
        # segments at the same positions as `starts`
        in_sequence_order = self.retransmitted_count == 0
        if not in_sequence_order:
            segments.sort(key=_send_number)  # RFC 8985 reads them in transmission order
        delivered = 0
        for segment in segments:
            delivered += self._deliver(segment, now_ps, echoed_sent_ps)
            del by_start[segment.start]
        _delete_positions(starts, delivered_indices)
        if in_sequence_order:
            _delete_positions(self.outstanding, delivered_indices)
        else:
            for segment in segments:
                self.outstanding.remove(segment)
        return delivered

    def _deliver(self, segment: SentSegment, now_ps: int, echoed_sent_ps: int) -> int:
        """RACK_update for one delivered segment; its length."""
        length = segment.end - segment.start
        if segment.lost:
            self.lost_bytes -= length
        if segment.retransmitted:
            self.retransmitted_count -= 1
            if echoed_sent_ps < segment.xmit_ps:
                return length  # the ACK may be for an earlier transmission (TSecr < xmit_ts): no RTT to learn
        rtt_ps = now_ps - segment.xmit_ps
        if self.min_rtt_ps == _NONE or rtt_ps < self.min_rtt_ps:
            self.min_rtt_ps = rtt_ps
        if not segment.retransmitted and segment.end < self.fack:
            self.reordering_seen = True  # delivered below something delivered earlier
        if segment.end > self.fack:
            self.fack = segment.end
        if sent_after(segment.xmit_ps, segment.end, self.xmit_ps, self.end_seq):
            self.rtt_ps = rtt_ps
            self.xmit_ps = segment.xmit_ps
            self.end_seq = segment.end
        return length

    def reordering_window_ps(self, in_recovery: bool, sacked_bytes: int, mss_bytes: int, srtt_ps: int) -> int:
        """RACK.reo_wnd (RFC 8985 6.2 step 4, without DSACK: the multiplier stays 1): zero when no
        reordering has been seen and the sender is in recovery or DupThresh segments are SACKed,
        else min(min_RTT / 4, SRTT)."""
        if not self.reordering_seen and (in_recovery or sacked_bytes >= DUPTHRESH_SEGMENTS * mss_bytes):
            return 0
        quarter_ps = self.min_rtt_ps // 4
        return quarter_ps if quarter_ps < srtt_ps else srtt_ps

    def detect_losses(self, now_ps: int, reorder_window_ps: int) -> tuple[int, int]:
        """RACK_detect_loss (RFC 8985 6.2 step 5): mark lost every outstanding segment sent before
        the most recently sent delivered one and out for longer than RACK.rtt + reo_wnd. Returns
        (segments newly marked lost, picoseconds until the next one could be; 0 for none)."""
        if self.xmit_ps == _NONE:
            return 0, 0
        newly_lost = 0
        wait_ps = 0
        deadline_offset_ps = self.rtt_ps + reorder_window_ps
        rack_xmit_ps = self.xmit_ps
        rack_end_seq = self.end_seq
        # `outstanding` is in transmission order, and with no retransmission in it also in sequence
        # order: past the first segment not sent before the latest delivered one, none is
        in_sequence_order = self.retransmitted_count == 0
        for segment in self.outstanding:
            if not sent_after(rack_xmit_ps, rack_end_seq, segment.xmit_ps, segment.end):
                if in_sequence_order or segment.xmit_ps > rack_xmit_ps:
                    break
                continue
            if segment.lost:
                continue
            remaining_ps = segment.xmit_ps + deadline_offset_ps - now_ps
            if remaining_ps <= 0:
                segment.lost = True
                self.lost_bytes += segment.end - segment.start
                newly_lost += 1
            elif remaining_ps > wait_ps:
                wait_ps = remaining_ps
        return newly_lost, wait_ps

    def mark_lost_on_timeout(self, snd_una: int, now_ps: int, reorder_window_ps: int) -> int:
        """RFC 8985 6.3: on an RTO, the first unacknowledged segment and every segment out for
        longer than RACK.rtt + reo_wnd are lost. Returns how many were newly marked."""
        newly_lost = 0
        for segment in self.outstanding:
            if segment.lost:
                continue
            if segment.start <= snd_una or segment.xmit_ps + self.rtt_ps + reorder_window_ps <= now_ps:
                segment.lost = True
                self.lost_bytes += segment.end - segment.start
                newly_lost += 1
        return newly_lost

    def first_lost(self) -> SentSegment | None:
        """The lost segment with the lowest sequence number (retransmitted first), if any."""
        if self.lost_bytes:
            by_start = self.by_start
            for start in self.starts:
                segment = by_start[start]
                if segment.lost:
                    return segment
        return None

    def last_sent_segment(self) -> SentSegment | None:
        """The outstanding segment with the highest sequence number (what a probe resends)."""
        last: SentSegment | None = None
        for segment in self.outstanding:
            if last is None or segment.end > last.end:
                last = segment
        return last


def _delete_positions(items: list[Any], positions: list[int]) -> None:
    """Delete the items at `positions` (ascending) from `items`, a slice per run of consecutive ones."""
    stop = len(positions)
    while stop:
        first = stop - 1
        while first and positions[first - 1] == positions[first] - 1:
            first -= 1
        del items[positions[first]:positions[stop - 1] + 1]
        stop = first


@mypyc_attr(allow_interpreted_subclasses=True)  # tests record its inputs; called only in recovery
class ProportionalRateReduction:
    """RFC 6937 with the slow-start reduction bound (PRR-SSRB, Linux's choice), in bytes.

    At the start of recovery: prr_delivered = prr_out = 0, RecoverFS = the FlightSize
    (snd.nxt - snd.una). On every ACK in recovery, with DeliveredData the bytes it newly
    acknowledged or SACKed:
        prr_delivered += DeliveredData
        if pipe > ssthresh:  sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out
        else:                sndcnt = MIN(ssthresh - pipe, MAX(prr_delivered - prr_out, DeliveredData) + MSS)
        cwnd = pipe + MAX(sndcnt, 0)
    and every byte sent in recovery adds to prr_out.
    """

    __slots__ = ("delivered_bytes", "out_bytes", "recover_fs_bytes")

    def __init__(self) -> None:
        self.delivered_bytes = 0
        self.out_bytes = 0
        self.recover_fs_bytes = 0

    def start(self, flight_bytes: int) -> None:
        """Recovery begins with `flight_bytes` = snd.nxt - snd.una outstanding."""
        self.delivered_bytes = 0
        self.out_bytes = 0
        self.recover_fs_bytes = flight_bytes if flight_bytes > 0 else 1

    def cwnd_bytes(self, delivered_bytes: int, pipe_bytes: int, ssthresh_bytes: float, mss_bytes: int) -> float:
        """The congestion window after an ACK that reports `delivered_bytes` delivered."""
        self.delivered_bytes += delivered_bytes
        ssthresh = int(ssthresh_bytes)
        if pipe_bytes > ssthresh:
            # CEIL(a / b) for positive integers: -(-a // b)
            send_bytes = -(-self.delivered_bytes * ssthresh // self.recover_fs_bytes) - self.out_bytes
        else:
            allowance = self.delivered_bytes - self.out_bytes
            if allowance < delivered_bytes:
                allowance = delivered_bytes
            send_bytes = allowance + mss_bytes
            if send_bytes > ssthresh - pipe_bytes:
                send_bytes = ssthresh - pipe_bytes
        if send_bytes < 0:
            send_bytes = 0
        return float(pipe_bytes + send_bytes)
