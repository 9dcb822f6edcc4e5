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

from typing import Final

from mypy_extensions import mypyc_attr

_NONE: Final = -1  # a sequence number or time that is not set

DUPTHRESH_SEGMENTS: Final = 3  # RFC 8985 6.2: SACKed segments beyond which reo_wnd is 0 (no reordering seen)


class SentSegment:
    """One transmission RACK tracks: bytes [start, end) last sent at `xmit_ps`."""

    __slots__ = ("start", "end", "xmit_ps", "retransmitted", "lost")

    def __init__(self, start: int, end: int, xmit_ps: int, retransmitted: bool) -> None:
        self.start = start
        self.end = end
        self.xmit_ps = xmit_ps
        self.retransmitted = retransmitted
        self.lost = False


def sent_after(t1_ps: int, end1: int, t2_ps: int, end2: int) -> bool:
    """RACK_sent_after (RFC 8985 6.2): was (t1, end1) sent after (t2, end2)? Ties go by sequence."""
    return t1_ps > t2_ps or (t1_ps == t2_ps and end1 > end2)


class RackState:
    """RFC 8985 state of one sender.

    `outstanding` holds every segment sent and not yet delivered, in the order of their (latest)
    transmission: a retransmission moves its segment to the end. `retransmitted_count` counts the
    retransmitted ones among them: with none, `outstanding` is also in sequence order (new data is
    sent in order), which lets an ACK find what it delivers without reading every segment out.
    `xmit_ps`, `end_seq` and `rtt_ps`
    describe the most recently sent delivered segment (RACK.xmit_ts, RACK.end_seq, RACK.rtt);
    `fack` is the highest sequence delivered. `lost_bytes` counts segments marked lost and not
    yet retransmitted. Deadlines are absolute picoseconds, 0 when not armed.
    """

    __slots__ = ("outstanding", "retransmitted_count", "xmit_ps", "end_seq", "rtt_ps", "min_rtt_ps", "fack", "reordering_seen",
                 "lost_bytes", "reorder_deadline_ps", "probe_deadline_ps", "probe_end_seq", "probe_sent_ps",
                 "probe_retransmitted", "probe_flight_bytes", "after_timeout")

    def __init__(self) -> None:
        self.outstanding: list[SentSegment] = []
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
        outstanding = self.outstanding
        if is_retransmit:
            for index in range(len(outstanding)):
                segment = outstanding[index]
                if segment.start == start:
                    del outstanding[index]
                    if segment.lost:
                        segment.lost = False
                        self.lost_bytes -= segment.end - segment.start
                    if not segment.retransmitted:
                        segment.retransmitted = True
                        self.retransmitted_count += 1
                    segment.xmit_ps = now_ps
                    outstanding.append(segment)
                    return
            self.retransmitted_count += 1
        outstanding.append(SentSegment(start, end, now_ps, is_retransmit))

    def on_delivery(self, snd_una: int, sacked: list[list[int]] | None, now_ps: int, echoed_sent_ps: int) -> int:
        """RACK_update (RFC 8985 6.2 steps 1-3) for the segments this ACK shows delivered
        (cumulatively acknowledged, or inside a SACK block), which leave `outstanding`, taken in
        their order there; `echoed_sent_ps` is the send time the ACK echoes (the engine's
        counterpart of the timestamp option's TSecr, which Linux enables by default). Returns the
        bytes newly delivered (PRR's DeliveredData)."""
        outstanding = self.outstanding
        delivered = 0
        if self.retransmitted_count == 0:
            # In sequence order and without overlaps: the delivered segments are the prefix that
            # ends at or below snd_una, and within each SACK block a run of consecutive segments.
            runs = self._delivered_runs(snd_una, sacked)
            for first, stop in runs:
                for index in range(first, stop):
                    delivered += self._deliver(outstanding[index], now_ps, echoed_sent_ps)
            for first, stop in reversed(runs):
                del outstanding[first:stop]
            return delivered
        kept: list[SentSegment] = []
        for segment in outstanding:
            if segment.end > snd_una and not _covered(segment.start, segment.end, sacked):
                kept.append(segment)
            else:
                delivered += self._deliver(segment, now_ps, echoed_sent_ps)
        if delivered:
            self.outstanding = kept
        return delivered

    def _delivered_runs(self, snd_una: int, sacked: list[list[int]] | None) -> list[tuple[int, int]]:
        """With `outstanding` in sequence order: the index ranges [first, stop) of the segments at
        or below `snd_una` and of those inside each SACK block, in index order, none overlapping."""
        outstanding = self.outstanding
        count = len(outstanding)
        prefix_stop = 0
        while prefix_stop < count and outstanding[prefix_stop].end <= snd_una:
            prefix_stop += 1
        runs: list[tuple[int, int]] = [(0, prefix_stop)] if prefix_stop else []
        if sacked is not None:
            block_runs: list[tuple[int, int]] = []
            for block_start, block_end in sacked:
                low = prefix_stop  # the first segment starting at or above block_start
                high = count
                while low < high:
                    middle = (low + high) // 2
                    if outstanding[middle].start < block_start:
                        low = middle + 1
                    else:
                        high = middle
                stop = low
                while stop < count and outstanding[stop].end <= block_end:
                    stop += 1
                if stop > low:
                    block_runs.append((low, stop))
            block_runs.sort()
            runs.extend(block_runs)
        return runs

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
        first: SentSegment | None = None
        if self.lost_bytes:
            for segment in self.outstanding:
                if segment.lost and (first is None or segment.start < first.start):
                    first = segment
        return first

    def last_sent_segment(self) -> SentSegment | None:
        """The outstanding segment with the highest sequence number (what a probe resends)."""
        last: SentSegment | None = None
        for segment in self.outstanding:
            if last is None or segment.end > last.end:
                last = segment
        return last


def _covered(start: int, end: int, sacked: list[list[int]] | None) -> bool:
    """Is [start, end) inside one SACK block?"""
    if sacked is not None:
        for block_start, block_end in sacked:
            if block_start <= start and end <= block_end:
                return True
    return False


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
