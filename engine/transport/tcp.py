"""TCP over the packet network: byte sequence numbers, cumulative ACKs with SACK, NewReno fast
retransmit and recovery (RFC 6582; RFC 6675-style with SACK), RFC 6298 retransmission timer with
Karn's rule and exponential backoff (or, with the timestamp option, RFC 7323 RTT measurement from
every ACK of new data, retransmissions included), delayed ACKs, a receive window, restart after
idle, and ECN (RFC 3168 ECE/CWR, or DCTCP's per-segment echo).

A `TcpConnection` is one sender and one receiver joined by two routes. The application writes
messages into the byte stream (`send_message`); the receiver calls back when the last byte of a
message has been delivered in order.

Timers are deadlines, not heap entries: each endpoint keeps at most one pending wake-up and, when
it fires, re-arms itself if the deadline has moved later (lazy cancellation).

Idle connections are lean: a DLRM all-to-all keeps n(n - 1) of them open. What only a busy
connection needs -- the SACK scoreboard, the retransmissions of a recovery, the receiver's
out-of-order blocks and its messages awaiting delivery -- is None until needed and None again once
emptied, so an idle connection holds scalars, its two routes and its congestion state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Final

from ..config import SimConfig
from ..eventlist import EventList
from ..links import (
    TCP_IP_HEADER_BYTES,
    TCP_TIMESTAMP_OPTION_BYTES,
    HostNic,
    HostSender,
    Packet,
    PacketSink,
    RouteDealer,
    route_dealer,
)
from ..units import BYTES_PER_KB, PS_PER_S, ms_to_ps, s_to_ps, us_to_ps
from .cc import UNSET_SSTHRESH, CongestionControl, HyStartPlusPlus
from .recovery import ProportionalRateReduction, RackState
from .sack import SackScoreboard

_NO_EVENT: Final = -1  # `timer_event_ps` when the endpoint has no wake-up in the heap
# `rwnd_bytes` without a receive window: far above any window, and below 2**62 so that compiled code
# keeps it unboxed (a larger int would be an object of its own in every sender)
_NO_RWND_LIMIT: Final = 1 << 61
_NO_PROBE: Final = -1  # `RackState.probe_end_seq` with no tail loss probe episode in progress
_NO_SEQ: Final = -1  # a sequence number that is not set
_QUICK_ACKS: Final = 16  # Linux TCP_MAX_QUICKACKS: segments ACKed at once in quick-ACK mode
# RFC 6298 5.7 (Linux TCP_TIMEOUT_FALLBACK): the RTO when data starts after a handshake that gave no sample
RTO_FALLBACK_PS: Final = 3 * PS_PER_S
# TCP Small Queues (net/ipv4/tcp_output.c, tcp_small_queue_check): a connection may have below it
# about 1 ms of data at its pacing rate, pacing_rate >> sk_pacing_shift (10: 1/1024 s), and at
# least two packets; without fq's pacing at most net.ipv4.tcp_limit_output_bytes (`HostNic.tsq_bytes`)
TSQ_PACING_SHIFT: Final = 10
# tcp_update_pacing_rate: the pacing rate is this percentage of cwnd / SRTT in slow start (cwnd below
# half ssthresh; net.ipv4.tcp_pacing_ss_ratio) and after it (tcp_pacing_ca_ratio)
PACING_SS_RATIO_PCT: Final = 200
PACING_CA_RATIO_PCT: Final = 120
# Linux hands the device 64 KiB GSO segments (GSO_LEGACY_MAX_SIZE), so a connection held back by TSQ
# goes on when a whole one has left it: what a throttled sender waits to see sent before it resumes
TSQ_RESUME_BYTES: Final = 65_536


def tsq_limit_bytes(cwnd_bytes: float, in_flight_bytes: int, ssthresh_bytes: float, srtt_ps: int,
                    packet_bytes: int, cap_bytes: int) -> int:
    """TCP Small Queues' limit on the bytes a connection has below TCP (in the qdisc and on the
    device), as Linux's tcp_small_queue_check computes it without fq: max(2 packets, pacing_rate >>
    10), at most `cap_bytes` (tcp_limit_output_bytes). The pacing rate is tcp_update_pacing_rate's:
    200 % (slow start, cwnd < ssthresh / 2) or 120 % of max(cwnd, in flight) per SRTT; before any RTT
    sample it is unlimited (Linux starts it at ~0), so the cap applies. `packet_bytes` is a full
    segment on the wire, standing for Linux's skb->truesize."""
    limit = cap_bytes
    if srtt_ps > 0:
        ratio_pct = PACING_SS_RATIO_PCT if cwnd_bytes < ssthresh_bytes / 2 else PACING_CA_RATIO_PCT
        window_bytes = cwnd_bytes if cwnd_bytes > in_flight_bytes else float(in_flight_bytes)
        # pacing rate (bytes/s) >> 10, in floats: the integer product would pass 2**63, which compiled
        # code turns into an object whose arithmetic a pending signal can interrupt
        pacing_bytes = ratio_pct * window_bytes * (PS_PER_S / (100 << TSQ_PACING_SHIFT)) / srtt_ps
        if pacing_bytes < cap_bytes:
            limit = int(pacing_bytes)
    return limit if limit > 2 * packet_bytes else 2 * packet_bytes


@dataclass(frozen=True, slots=True)
class TcpSettings:
    """Per-connection TCP parameters, all times in picoseconds, sizes in bytes: the `tcp.*` keys of a
    validated config translated (`from_config`). They have no defaults of their own: the config's
    dataclasses are the one home of every default, and `DEFAULT_TCP_SETTINGS` is the default config's
    (`dataclasses.replace` it for a hand-built connection). `mss_bytes` is the payload of a full
    segment (RFC 5681's SMSS): with `timestamps`, 12 bytes below the MSS a host announces, since every
    segment carries the option."""

    mss_bytes: int
    init_cwnd_pkts: int
    min_rto_ps: int
    max_rto_ps: int  # RFC 6298 allows a cap >= 60 s
    initial_rto_ps: int  # before any RTT sample (RFC 6298: 1 s)
    clock_granularity_ps: int  # G of RFC 6298
    delayed_ack: bool
    delayed_ack_timeout_ps: int
    linux_delayed_ack: bool  # quick ACKs, sub-MSS segments ACKed at once (TcpReceiver)
    sack: bool
    # RFC 7323 timestamps: 12 more header bytes per segment and ACK; an RTT sample (RFC 7323 section
    # 4) from every ACK of new data, from the timestamp it echoes, retransmissions included
    timestamps: bool
    # At an RTO keep the SACK scoreboard and resend only what it does not hold (Linux, ns-3; RFC 6675
    # with erratum 1610), or discard it and resend everything from snd_una (RFC 2018). With RACK-TLP
    # the scoreboard is always kept (RFC 8985).
    keep_sack_after_rto: bool
    rcv_wnd_bytes: int | None
    slow_start_after_idle: bool
    ecn: bool  # ECN-capable transport; DCTCP forces it on
    dctcp_echo: bool  # receiver echoes CE per segment (DCTCP) instead of latching ECE
    rack_tlp: bool  # RFC 8985 loss detection and tail loss probes (needs sack)
    # Added to the probe timeout 2 SRTT when more than one segment is out: Linux's TCP_TIMEOUT_MIN_US
    # (2 ms; 2 jiffies before October 2023); 0 is RFC 8985's PTO
    pto_slack_ps: int
    prr: bool  # RFC 6937 proportional rate reduction in SACK recovery
    hystart: bool  # RFC 9406 HyStart++ in the initial slow start
    dupthresh: int  # RFC 5681 DupThresh: duplicate ACKs that start fast retransmit

    @staticmethod
    def from_config(config: SimConfig) -> TcpSettings:
        """Translate `tcp.*` (milliseconds, KiB) into the transport's picosecond/byte settings."""
        tcp = config.tcp
        return TcpSettings(
            mss_bytes=config.segment_bytes,  # the payload of a full segment: the MSS less the options
            init_cwnd_pkts=tcp.init_cwnd_pkts,
            min_rto_ps=ms_to_ps(tcp.min_rto_ms),
            max_rto_ps=s_to_ps(tcp.max_rto_s),
            initial_rto_ps=ms_to_ps(tcp.initial_rto_ms),
            clock_granularity_ps=us_to_ps(tcp.clock_granularity_us),
            delayed_ack=tcp.delayed_ack,
            delayed_ack_timeout_ps=ms_to_ps(tcp.delayed_ack_timeout_ms),
            linux_delayed_ack=tcp.linux_delayed_ack,
            sack=tcp.sack,
            timestamps=tcp.timestamps,
            keep_sack_after_rto=tcp.sack_after_rto == "keep",
            rcv_wnd_bytes=None if tcp.rcv_wnd_kb is None else int(tcp.rcv_wnd_kb * BYTES_PER_KB),
            slow_start_after_idle=tcp.slow_start_after_idle,
            ecn=tcp.ecn or tcp.cc == "dctcp",
            dctcp_echo=tcp.cc == "dctcp",
            rack_tlp=tcp.rack_tlp,
            pto_slack_ps=ms_to_ps(tcp.pto_slack_ms),
            prr=tcp.prr,
            hystart=tcp.hystart,
            dupthresh=tcp.dupthresh,
        )


DEFAULT_TCP_SETTINGS: Final = TcpSettings.from_config(SimConfig())


class RttEstimator:
    """RFC 6298 round-trip estimator in integer picoseconds.

    First sample R: SRTT = R, RTTVAR = R / 2. Later: RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, then
    SRTT = 7/8 SRTT + 1/8 R. RTO = SRTT + max(G, 4 RTTVAR), kept within [min_rto, max_rto].
    Each expiry doubles the RTO (`back_off`) until the next valid sample recomputes it.
    """

    __slots__ = ("srtt_ps", "rttvar_ps", "rto_ps", "min_rto_ps", "max_rto_ps", "granularity_ps",
                 "samples")

    def __init__(self, initial_rto_ps: int, min_rto_ps: int, max_rto_ps: int,
                 granularity_ps: int) -> None:
        self.srtt_ps = 0
        self.rttvar_ps = 0
        self.min_rto_ps = min_rto_ps
        self.max_rto_ps = max_rto_ps
        self.granularity_ps = granularity_ps
        self.rto_ps = 0
        self.reset_rto(initial_rto_ps)
        self.samples = 0

    def reset_rto(self, rto_ps: int) -> None:
        """Before any sample: the RTO is `rto_ps`, kept within [min_rto, max_rto]."""
        self.rto_ps = min(max(rto_ps, self.min_rto_ps), self.max_rto_ps)

    def sample(self, rtt_ps: int) -> None:
        """Feed one RTT measurement: never from a retransmitted segment (Karn's rule), unless it was
        measured with timestamps (RFC 7323 section 4). Either way the RTO is recomputed from it, which
        ends any backoff (RFC 6298 5.7; Linux applies RFC 6298 to each sample, without RFC 7323
        Appendix G's scaling of alpha and beta by the samples per window)."""
        if self.samples:
            srtt = self.srtt_ps
            self.rttvar_ps = (3 * self.rttvar_ps + abs(srtt - rtt_ps)) // 4
            self.srtt_ps = (7 * srtt + rtt_ps) // 8
        else:
            self.srtt_ps = rtt_ps
            self.rttvar_ps = rtt_ps // 2
        self.samples += 1
        four_var = 4 * self.rttvar_ps
        rto = self.srtt_ps + (four_var if four_var > self.granularity_ps else self.granularity_ps)
        if rto < self.min_rto_ps:
            rto = self.min_rto_ps
        elif rto > self.max_rto_ps:
            rto = self.max_rto_ps
        self.rto_ps = rto

    def back_off(self) -> None:
        """The timer expired: double the RTO, up to its cap."""
        self.rto_ps = min(2 * self.rto_ps, self.max_rto_ps)


class TcpSender(HostSender):
    """The sending half of a connection: windows, retransmissions, the RTO timer.

    Sequence space: [snd_una, snd_max) is sent and unacknowledged, snd_nxt the next byte to send
    (below snd_max after a timeout: go-back-N), stream_end the end of what the application wrote.
    `sacked` is the SACK scoreboard, what ACKs reported SACKed above snd_una (None when empty, as
    are the recovery's lists). `rto_recovery` marks the loss recovery that follows an RTO which kept
    the scoreboard (`keep_sack_after_rto`, without RACK): everything sent before the RTO (below
    recover_seq) and not SACKed is lost and resent in order, high_rxt being how far that has gone.

    Below TCP, on a host whose interface is a `HostNic` (`host_nic`), the sender keeps what it has
    handed the interface and not yet seen serialised (its packets from `below_head` to `below_tail`,
    linked through `Packet.next_below`, each with its end of serialisation; `bytes_below_tcp` their
    sizes, an upper bound until `_bytes_below_tcp` drops those gone, as it does before each TSQ check
    and on each ACK of new data, so that an idle connection holds none of its packets) and sends no
    more while TCP Small Queues' limit is exceeded (woken at `tsq_wake_ps`) or the qdisc is full
    (`waiting_for_room`, woken by the NIC).
    Only the segments it sends in a loop (new data, go-back-N, SACK recovery) wait so; those sent one
    at a time (the first fast retransmission, a partial ACK's, limited transmit, a loss probe) go at
    once, as Linux's tcp_retransmit_skb does not ask TSQ.
    """

    __slots__ = (
        "eventlist", "settings", "cc", "rtt", "data_route", "spray", "mss_bytes", "header_bytes", "rwnd_bytes",
        "snd_una", "snd_nxt", "snd_max", "stream_end",
        "in_recovery", "rto_recovery", "recover_seq", "dupacks", "sacked", "high_rxt", "recovery_retransmits",
        "lost_retransmits",
        "ecn_recover_seq", "cwr_pending", "cwr_end_seq",
        "rto_deadline_ps", "timer_event_ps", "last_send_ps",
        "rack", "prr", "hystart",
        "packets_sent", "bytes_sent", "retransmits", "timeouts", "fast_retransmits", "ece_received",
        "acks_received", "loss_probes", "rack_lost_segments",
        "host_nic", "below_head", "below_tail", "bytes_below_tcp", "tsq_wake_ps", "waiting_for_room", "tsq_stops",
        "spare",
    )

    def __init__(self, eventlist: EventList, settings: TcpSettings, cc: CongestionControl) -> None:
        self.eventlist = eventlist
        self.settings = settings
        self.cc = cc
        self.rtt = RttEstimator(settings.initial_rto_ps, settings.min_rto_ps, settings.max_rto_ps,
                                settings.clock_granularity_ps)
        self.data_route: tuple[PacketSink, ...] = ()
        self.spray: RouteDealer | None = None  # network.load_balancing=spray: its data packets' routes
        self.mss_bytes = settings.mss_bytes
        self.header_bytes = TCP_IP_HEADER_BYTES + (TCP_TIMESTAMP_OPTION_BYTES if settings.timestamps else 0)
        self.rwnd_bytes = settings.rcv_wnd_bytes if settings.rcv_wnd_bytes else _NO_RWND_LIMIT
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0
        self.stream_end = 0
        self.in_recovery = False
        self.rto_recovery = False
        self.recover_seq = 0
        self.dupacks = 0
        self.sacked: SackScoreboard | None = None
        self.high_rxt = 0
        # (start, end, sent_ps) of the recovery's retransmissions, in the order sent; and the
        # retransmissions known lost, to resend. Queues: a recovery may hold hundreds of thousands
        self.recovery_retransmits: deque[tuple[int, int, int]] | None = None
        self.lost_retransmits: deque[tuple[int, int]] | None = None
        self.ecn_recover_seq = 0
        self.cwr_pending = False
        self.cwr_end_seq = 0  # SND.MAX at the last ECN reduction: no growth until an ACK passes it
        self.rto_deadline_ps = 0  # 0: timer not armed
        self.timer_event_ps = _NO_EVENT
        self.last_send_ps = -1
        # Linux's loss recovery and slow-start exit, each None unless its option is on
        self.rack: RackState | None = RackState() if settings.rack_tlp else None
        self.prr: ProportionalRateReduction | None = ProportionalRateReduction() if settings.prr else None
        self.hystart: HyStartPlusPlus | None = HyStartPlusPlus() if settings.hystart else None
        self.packets_sent = 0
        self.bytes_sent = 0
        self.retransmits = 0
        self.timeouts = 0
        self.fast_retransmits = 0
        self.ece_received = 0
        self.acks_received = 0
        self.loss_probes = 0  # tail loss probes sent (RFC 8985 section 7)
        self.rack_lost_segments = 0  # segments RACK's time-based detection marked lost
        self.host_nic: HostNic | None = None  # the host's interface, when it models Linux's (set by TcpConnection)
        self.below_head: Packet | None = None  # TSQ: the oldest packet handed down and not yet sent
        self.below_tail: Packet | None = None
        self.bytes_below_tcp = 0
        self.tsq_wake_ps = 0  # 0: not held back by TSQ
        self.waiting_for_room = False  # stopped by a full qdisc, waiting in its line
        self.tsq_stops = 0  # times TSQ held the sender back
        # the last ACK received, done with, to be renewed as the next segment sent (none while idle)
        self.spare: Packet | None = None

    def open_after_handshake(self, rtt_ps: int, syn_retransmits: int) -> None:
        """The connection was opened by a three-way handshake before its first message: the last SYN
        was answered by a SYN-ACK `rtt_ps` later, after `syn_retransmits` retransmissions of the SYN.
        The client's sample from the SYN-ACK (Linux: tcp_ack on the SYN-ACK; ns-3: ProcessSynSent,
        EstimateRtt) seeds SRTT and RTTVAR (RFC 6298 2.2). After a retransmitted SYN only the
        timestamp it echoes gives one (Karn's rule); without timestamps the RTO falls back to 3 s
        when data starts (RFC 6298 5.7, Linux tcp_init_metrics). More than one retransmission cuts
        the initial window to one segment (Linux tcp_init_transfer; RFC 5681 3.1 asks it after one)."""
        if syn_retransmits == 0 or self.settings.timestamps:
            self.rtt.sample(rtt_ps)
        else:
            self.rtt.reset_rto(RTO_FALLBACK_PS)
        if syn_retransmits > 1:
            self.cc.cwnd_bytes = float(self.mss_bytes)

    # -- application side -------------------------------------------------------------------

    def write(self, nbytes: int) -> None:
        """Append `nbytes` to the stream and send what the windows allow."""
        if self.snd_una == self.snd_max and self.last_send_ps >= 0:  # resuming after an idle period
            idle_ps = self.eventlist.now_ps - self.last_send_ps
            self.cc.on_resume_after_idle(idle_ps)
            if self.settings.slow_start_after_idle and idle_ps > self.rtt.rto_ps:
                self.cc.on_idle_restart()
        self.stream_end += nbytes
        self.send_more()
        if self.rack is not None:
            self._schedule_probe(self.eventlist.now_ps)

    # -- sending ----------------------------------------------------------------------------

    def send_more(self) -> None:
        """Send new or go-back-N segments while the congestion and receive windows allow."""
        if self.in_recovery and self.settings.sack:
            self._send_in_sack_recovery()
            return
        window = self.cc.cwnd_bytes
        if window > self.rwnd_bytes:
            window = float(self.rwnd_bytes)  # exact: windows are far below 2**53 bytes
        limit = self.snd_una + window
        mss = self.mss_bytes
        stream_end = self.stream_end
        snd_nxt = self.snd_nxt
        nic = self.host_nic
        while snd_nxt < stream_end:
            length = stream_end - snd_nxt
            if length > mss:
                length = mss
            if snd_nxt + length > limit:
                break
            if nic is not None and not self._host_allows(nic):
                break
            self._transmit(snd_nxt, length)
            snd_nxt += length
            self.snd_nxt = snd_nxt

    def _transmit(self, seq: int, length: int) -> None:
        now = self.eventlist.now_ps
        is_retransmit = seq < self.snd_max
        header_bytes = self.header_bytes
        spray = self.spray
        route = self.data_route if spray is None else spray.next_route()
        pkt = self.spare
        if pkt is None:
            pkt = Packet(route, length + header_bytes, length, seq, 0, now, is_retransmit, self.settings.ecn)
        else:
            self.spare = None
            pkt.renew(route, length + header_bytes, length, seq, 0, now, is_retransmit, self.settings.ecn)
        if self.cwr_pending:
            pkt.cwr = True
            self.cwr_pending = False
        self.packets_sent += 1
        self.bytes_sent += length + header_bytes
        if is_retransmit:
            self.retransmits += 1
        else:
            self.snd_max = seq + length
        self.last_send_ps = now
        if not self.rto_deadline_ps:
            self._arm_rto(now)
        rack = self.rack
        if rack is not None:
            rack.on_transmit(seq, seq + length, now, is_retransmit)
        pkt.route[0].receive_packet(pkt)
        nic = self.host_nic
        if nic is not None and nic.tsq_bytes:
            pkt.below_end_ps = nic.busy_until_ps  # a FIFO: when it will have been sent
            tail = self.below_tail
            if tail is None:
                self.below_head = pkt
            else:
                tail.next_below = pkt
            self.below_tail = pkt
            self.bytes_below_tcp += pkt.size_bytes

    # -- below TCP: TCP Small Queues and the host's qdisc ---------------------------------------

    def _host_allows(self, nic: HostNic) -> bool:
        """May one more segment go down to the host's interface now? Not while TCP Small Queues'
        limit is exceeded (a wake-up is set for when a GSO segment's worth has been sent), unless at
        most one segment is unacknowledged (Linux always sends then); nor while the qdisc is full
        (the sender waits in its line, and the NIC wakes it)."""
        if self.waiting_for_room or self.tsq_wake_ps:
            return False
        now = self.eventlist.now_ps
        # the limit is at least two full packets: below that (even counting what has left since) no
        # need to count or to compute it
        two_packets = 2 * (self.mss_bytes + self.header_bytes)
        if (nic.tsq_bytes and self.bytes_below_tcp > two_packets and self.snd_max - self.snd_una > self.mss_bytes
                and self._bytes_below_tcp(now) > two_packets):
            cc = self.cc
            limit = tsq_limit_bytes(cc.cwnd_bytes, self.snd_max - self.snd_una, cc.ssthresh_bytes,
                                    self.rtt.srtt_ps, self.mss_bytes + self.header_bytes, nic.tsq_bytes)
            if self.bytes_below_tcp > limit:
                self._hold_for_tsq(self.bytes_below_tcp, limit)
                return False
        if not nic.has_room(self, now):
            self.waiting_for_room = True
            nic.wait_for_room(self)
            return False
        return True

    def _bytes_below_tcp(self, now_ps: int) -> int:
        """Bytes handed to the interface and not yet serialised at `now_ps`."""
        head = self.below_head
        while head is not None and head.below_end_ps <= now_ps:
            self.bytes_below_tcp -= head.size_bytes
            following = head.next_below
            head.next_below = None
            head = following
        self.below_head = head
        if head is None:
            self.below_tail = None
        return self.bytes_below_tcp

    def _hold_for_tsq(self, below_bytes: int, limit_bytes: int) -> None:
        """TSQ holds the sender back: resume when `TSQ_RESUME_BYTES` (at most half the limit) of what
        lies below it has been sent."""
        target = limit_bytes - min(TSQ_RESUME_BYTES, limit_bytes // 2)
        pkt = self.below_head
        while pkt is not None:
            below_bytes -= pkt.size_bytes
            if below_bytes <= target:
                self.tsq_wake_ps = pkt.below_end_ps
                break
            pkt = pkt.next_below
        self.tsq_stops += 1
        self._wake_at(self.tsq_wake_ps)

    def on_qdisc_room(self) -> None:
        """The host's qdisc has room again for this sender (`HostNic.wake_senders`)."""
        self.waiting_for_room = False
        self.send_more()

    def _send_in_sack_recovery(self) -> None:
        """RFC 6675-style recovery: while cwnd - pipe >= 1 MSS, retransmit the next hole below the
        highest SACKed byte, else send new data. Holes below the highest SACK count as lost."""
        mss = self.mss_bytes
        cwnd = self.cc.cwnd_bytes
        rack = self.rack
        nic = self.host_nic
        while cwnd - self._pipe_bytes() >= mss:
            if nic is not None and not self._host_allows(nic):
                return
            if rack is not None:  # RACK: what it marked lost, lowest sequence first
                segment = rack.first_lost()
                if segment is not None:
                    self._retransmit(segment.start, segment.end - segment.start)
                    continue
            else:
                lost = self.lost_retransmits
                if lost:  # a retransmission of this recovery found lost (none after an RTO)
                    start, end = lost.popleft()
                    if not lost:
                        self.lost_retransmits = None
                    self._retransmit(start, end - start)
                    continue
                hole_start, hole_end = self._next_hole()
                if hole_start < hole_end:
                    length = min(mss, hole_end - hole_start)
                    if self.rto_recovery:
                        # sent as after any RTO, without watching for its loss (`_retransmit`): as in
                        # ns-3 and RFC 6675, a retransmission lost again waits for the next RTO
                        self._transmit(hole_start, length)
                    else:
                        self._retransmit(hole_start, length)
                    self.high_rxt = hole_start + length
                    continue
            length = min(mss, self.stream_end - self.snd_max)
            if length <= 0 or self.snd_max + length > self.snd_una + self.rwnd_bytes:
                return
            self._transmit(self.snd_max, length)
            self.snd_nxt = self.snd_max
            if self.prr is not None:
                self.prr.out_bytes += length

    def _retransmit(self, start: int, length: int) -> None:
        """Resend [start, start + length) during SACK recovery and remember when, so that a
        retransmission that is itself lost can be detected (`_detect_lost_retransmissions`; with
        RACK, `RackState` tracks every transmission instead)."""
        self._transmit(start, length)
        if self.prr is not None:
            self.prr.out_bytes += length
        if self.rack is not None:
            return
        if self.recovery_retransmits is None:
            self.recovery_retransmits = deque()
        self.recovery_retransmits.append((start, start + length, self.eventlist.now_ps))

    def _detect_lost_retransmissions(self, delivered_sent_ps: int) -> None:
        """A segment sent at `delivered_sent_ps` has reached the receiver. Paths keep each flow's
        packets in order, so a retransmission sent before it that is still missing was lost (the
        idea of RACK, RFC 8985): queue it to be sent again instead of waiting for the RTO.
        Called only while there are recovery retransmissions. Only those sent before
        `delivered_sent_ps` are looked at, the head of the queue, and each leaves it: a later one
        already delivered waits for its turn, so every retransmission is examined once, not on
        every ACK of the recovery."""
        retransmits = self.recovery_retransmits
        assert retransmits is not None
        while retransmits and retransmits[0][2] < delivered_sent_ps:
            start, end, _ = retransmits.popleft()
            if end <= self.snd_una or self._is_sacked(start, end):
                continue  # delivered
            if self.lost_retransmits is None:
                self.lost_retransmits = deque()
            self.lost_retransmits.append((max(start, self.snd_una), end))
        if not retransmits:
            self.recovery_retransmits = None

    def _is_sacked(self, start: int, end: int) -> bool:
        return self.sacked is not None and self.sacked.covers(start, end)

    def _next_hole(self) -> tuple[int, int]:
        """The next hole to resend: the first un-SACKed range at or above max(snd_una, high_rxt) and
        below the highest SACK; in `rto_recovery` below recover_seq (all that the RTO found unSACKed
        is lost, above the highest SACK too). Empty (start == end) if there is none."""
        start = self.high_rxt if self.high_rxt > self.snd_una else self.snd_una
        sacked = self.sacked
        if self.rto_recovery:
            limit = self.recover_seq
        elif sacked is not None:
            limit = sacked.highest
        else:
            return start, start
        if sacked is None:
            return (start, limit) if start < limit else (start, start)
        return sacked.next_hole(start, limit)

    def _unsacked_bytes(self, start: int, end: int) -> int:
        """Bytes of [start, end) that the SACK scoreboard does not hold (0 if end <= start)."""
        if end <= start:
            return 0
        return end - start - (self.sacked.held_in(start, end) if self.sacked is not None else 0)

    def _pipe_bytes(self) -> int:
        """Bytes estimated in the network (RFC 6675 'pipe'): everything sent above the highest SACK,
        plus the holes below it that have been retransmitted (those below high_rxt). Without SACK
        blocks this is the FlightSize, snd_max - snd_una. It is also the FlightSize from which
        ssthresh is set on a loss, as ns-3 and Linux do: data the receiver holds (SACKed) is not in
        flight, and counting it would set ssthresh far above what the path holds after a timeout."""
        if self.rack is not None:  # RACK: what is neither SACKed nor marked lost (RFC 8985, Linux)
            return self.snd_max - self.snd_una - self._sacked_bytes() - self.rack.lost_bytes
        if self.rto_recovery:  # what was resent since the RTO, and new data, neither SACKed
            return (self._unsacked_bytes(self.snd_una, self.high_rxt)
                    + self._unsacked_bytes(self.recover_seq, self.snd_max))
        sacked = self.sacked
        if sacked is None:
            return self.snd_max - self.snd_una
        # above the highest SACK, and the holes below it resent (below high_rxt)
        highest = sacked.highest
        return self.snd_max - highest + self._unsacked_bytes(self.snd_una, min(self.high_rxt, highest))

    def _sacked_bytes(self) -> int:
        """Bytes the SACK scoreboard holds above snd_una."""
        return self.sacked.held_bytes if self.sacked is not None else 0

    # -- receiving ACKs ---------------------------------------------------------------------

    def receive_packet(self, pkt: Packet) -> None:
        """An ACK arrives from the receiver: at the end of its route, nothing else holds it, so once
        done with it the sender keeps it as the next segment it sends, unless all is acknowledged."""
        self._on_ack(pkt)
        self.spare = pkt if self.snd_una < self.stream_end else None

    def _on_ack(self, pkt: Packet) -> None:
        ack = pkt.ack
        snd_una = self.snd_una
        cc = self.cc
        self.acks_received += 1
        if pkt.ece:
            self.ece_received += 1
        if ack > snd_una:
            now = self.eventlist.now_ps
            rtt_sample_ps = -1
            if self.settings.timestamps:  # RFC 7323 4.1: every ACK of new data, from its TSecr
                rtt_sample_ps = now - pkt.ts_echo_ps
                self.rtt.sample(rtt_sample_ps)
            elif not pkt.is_retransmit:  # Karn's rule: only segments sent once give samples
                rtt_sample_ps = now - pkt.sent_ps
                self.rtt.sample(rtt_sample_ps)
            acked = ack - snd_una
            # PRR's DeliveredData counts newly SACKed bytes too (RACK measures it itself)
            sacked_before = self._sacked_bytes() if self.prr is not None else 0
            self.snd_una = ack
            if self.snd_nxt < ack:
                self.snd_nxt = ack
            if self.below_head is not None:
                # what was acknowledged has long been sent: let go of it (and of all sent before it)
                # now, else a connection that falls idle holds its last window's packets for good
                self._bytes_below_tcp(now)
            if self.sacked is not None:
                self._forget_sacked_below(ack)
            newly_sacked = self._merge_sack(pkt.sack_blocks) if pkt.sack_blocks else 0
            if cc.wants_ecn_feedback:
                cc.on_ecn_feedback(acked, pkt.ece, ack, self.snd_nxt)
            if pkt.ece:
                self._react_to_ece(now)
            if self.rack is not None:
                self._rack_on_ack(pkt, now, acked, rtt_sample_ps)
                return
            if self.in_recovery:
                if self.rto_recovery:
                    # after an RTO the window slow-starts through the recovery (as Linux's and
                    # ns-3's loss state), which ends at recover_seq without a fast recovery's deflation
                    if ack >= self.recover_seq:
                        self._end_recovery()
                    self._grow_cwnd(acked, now, rtt_sample_ps)
                elif ack >= self.recover_seq:
                    self._end_recovery()
                    cc.on_recovery_exit()
                elif not self.settings.sack:
                    # RFC 6582 partial ACK: retransmit the next unacknowledged segment and deflate
                    # the window by the amount acknowledged, adding back one MSS.
                    cc.cwnd_bytes = max(cc.cwnd_bytes - acked + self.mss_bytes, float(self.mss_bytes))
                    self._transmit(ack, min(self.mss_bytes, self.snd_max - ack))
                elif self.sacked is None and self.high_rxt <= ack:
                    # With no SACK block above it the scoreboard shows no hole, but a partial ACK
                    # still says the segment at snd_una is lost (RFC 6582's rule; without it a lost
                    # tail segment would wait for the RTO).
                    length = min(self.mss_bytes, self.snd_max - ack)
                    self._retransmit(ack, length)
                    self.high_rxt = ack + length
                elif self.recovery_retransmits:
                    self._detect_lost_retransmissions(pkt.sent_ps)
                if self.in_recovery and self.prr is not None:
                    self._prr_update(acked + self._sacked_bytes() - sacked_before)
            else:
                # RFC 6675 section 5: a cumulative ACK resets DupAcks, and counts as one if it SACKs
                # new data too (section 2), which may show the new snd_una lost (IsLost)
                self.dupacks = 1 if newly_sacked else 0
                if newly_sacked and self.snd_una >= self.recover_seq and self._head_lost():
                    self._enter_fast_recovery(acked + self._sacked_bytes() - sacked_before)
                else:
                    self._grow_cwnd(acked, now, rtt_sample_ps)
            if ack >= self.snd_max:
                self.rto_deadline_ps = 0
            else:
                self._arm_rto(now)  # RFC 6298 (5.3): restart the timer on new data acknowledged
            self.send_more()
        elif ack == snd_una and not pkt.payload_bytes and self.snd_max > snd_una:
            self._on_duplicate_ack(pkt)

    def _grow_cwnd(self, acked_bytes: int, now_ps: int, rtt_sample_ps: int) -> None:
        """New data acknowledged outside fast recovery: HyStart++ during the initial slow start
        (while ssthresh is still unset) if it is on, else the congestion control's own rule. No
        growth while the window of an ECN reduction is outstanding, the ACK that started it included
        (Linux's CWR state, as ns-3's; RFC 3168 6.1.2 reduces once per window of data), the ACK of
        exactly that window too: CWR ends above it."""
        if self.snd_una <= self.cwr_end_seq:
            return
        cc = self.cc
        hystart = self.hystart
        if hystart is not None and cc.ssthresh_bytes == UNSET_SSTHRESH:
            hystart.on_ack(cc, acked_bytes, rtt_sample_ps, self.snd_una, self.snd_nxt)
        else:
            cc.on_ack(acked_bytes, now_ps, self.rtt.srtt_ps)

    def _prr_update(self, delivered_bytes: int) -> None:
        """PRR (RFC 6937): the window for this ACK of fast recovery (`tcp.prr`)."""
        prr = self.prr
        assert prr is not None
        cc = self.cc
        cc.cwnd_bytes = prr.cwnd_bytes(delivered_bytes, self._pipe_bytes(), cc.ssthresh_bytes, self.mss_bytes)

    def _on_duplicate_ack(self, pkt: Packet) -> None:
        """An ACK that acknowledges nothing new while data is out. With SACK it is a duplicate ACK
        only if it SACKs new data (RFC 6675 section 2): one the receiver sent for a segment it
        already held (a spurious retransmission) is not, and must not start a fast recovery.
        Without SACK every such ACK is one (RFC 5681). Outside recovery, DupThresh duplicate
        ACKs, or with SACK a lost snd_una (IsLost), start fast recovery (RFC 6675 section 5)."""
        newly_sacked = self._merge_sack(pkt.sack_blocks) if pkt.sack_blocks else 0
        is_dupack = newly_sacked > 0 or not self.settings.sack
        if is_dupack:
            self.dupacks += 1
        if pkt.ece:
            self._react_to_ece(self.eventlist.now_ps)
        if self.rack is not None:
            self._rack_on_ack(pkt, self.eventlist.now_ps, 0, -1)
            return
        if self.in_recovery:
            if self.recovery_retransmits:
                self._detect_lost_retransmissions(pkt.sent_ps)
            if self.prr is not None and not self.rto_recovery:  # PRR is for fast recovery only
                self._prr_update(newly_sacked)
            if not self.settings.sack:
                self.cc.cwnd_bytes += self.mss_bytes  # RFC 6582: inflate by one MSS per dupACK
            self.send_more()
        elif not is_dupack:
            return
        elif self.snd_una >= self.recover_seq and (self.dupacks >= self.settings.dupthresh or self._head_lost()):
            self._enter_fast_recovery(newly_sacked)
        elif self.dupacks < self.settings.dupthresh:
            self._limited_transmit()

    def _head_lost(self) -> bool:
        """RFC 6675 IsLost(HighACK + 1): is snd_una lost? True when DupThresh discontiguous
        SACKed ranges, or more than (DupThresh - 1) * SMSS SACKed bytes, lie above it. The
        scoreboard holds byte ranges, not segments: its blocks count the discontiguous ranges
        (ns-3 counts SACKed segments, the same for full-size segments through the byte rule)."""
        sacked = self.sacked
        if sacked is None:
            return False
        dupthresh = self.settings.dupthresh
        return len(sacked.blocks) >= dupthresh or sacked.held_bytes > (dupthresh - 1) * self.mss_bytes

    def _limited_transmit(self) -> None:
        """RFC 3042: each of the first two duplicate ACKs may send one new segment, keeping the data
        outstanding within cwnd + 2 MSS, so a small window still earns its third duplicate ACK."""
        length = min(self.mss_bytes, self.stream_end - self.snd_nxt)
        if length <= 0 or self.snd_nxt < self.snd_max:
            return  # nothing new to send (or going back after a timeout)
        allowance = self.cc.cwnd_bytes + self.dupacks * self.mss_bytes
        if self.snd_nxt + length - self.snd_una <= min(allowance, self.rwnd_bytes):
            self._transmit(self.snd_nxt, length)
            self.snd_nxt += length

    def _enter_fast_recovery(self, delivered_bytes: int = 0) -> None:
        """Fast recovery begins (3 duplicate ACKs, or RACK marked a segment lost); the ACK that
        started it reported `delivered_bytes` delivered (PRR counts them)."""
        now = self.eventlist.now_ps
        snd_una = self.snd_una
        self.fast_retransmits += 1
        self.cc.on_loss(self._pipe_bytes(), now)
        self.in_recovery = True
        self.recover_seq = self.snd_max
        self.ecn_recover_seq = self.snd_max  # the loss response covers this window's ECN too
        self.cwr_end_seq = 0  # fast recovery supersedes an ECN reduction (Linux: CWR -> Recovery)
        if self.prr is not None:
            self.prr.start(self.snd_max - snd_una)
            self._prr_update(delivered_bytes)
        rack = self.rack
        if rack is not None:
            rack.probe_end_seq = _NO_PROBE  # this recovery's reduction covers a probe episode
            rack.probe_deadline_ps = 0
            segment = rack.first_lost()
            assert segment is not None
            self._retransmit(segment.start, segment.end - segment.start)  # the first goes at once
            self.send_more()
        elif self.settings.sack:
            length = min(self.mss_bytes, self.snd_max - snd_una)
            self._retransmit(snd_una, length)  # RFC 6675: the first retransmission goes at once
            self.high_rxt = snd_una + length
            self.send_more()
        else:
            self.cc.cwnd_bytes += self.settings.dupthresh * self.mss_bytes
            self._transmit(snd_una, min(self.mss_bytes, self.snd_max - snd_una))

    def _end_recovery(self) -> None:
        self.in_recovery = False
        self.rto_recovery = False
        self.dupacks = 0
        self.recovery_retransmits = None
        self.lost_retransmits = None
        if self.rack is not None:
            self.rack.after_timeout = False

    # -- RACK-TLP (RFC 8985), when `tcp.rack_tlp` is on -------------------------------------

    def _rack_on_ack(self, pkt: Packet, now_ps: int, acked_bytes: int, rtt_sample_ps: int) -> None:
        """An ACK (new data or duplicate; SACK blocks already merged): RACK's loss detection, the
        end of a probe episode, recovery and its window, then sending and the timers."""
        rack = self.rack
        assert rack is not None
        cc = self.cc
        delivered_bytes = rack.on_delivery(self.snd_una, self.sacked, now_ps, pkt.sent_ps)
        if rack.probe_end_seq != _NO_PROBE and self.snd_una >= rack.probe_end_seq:
            # RFC 8985 7.4: the probe episode ends. If the probe was a retransmission and this ACK
            # is its own (the echoed send time plays the part of the timestamp option), the probe
            # repaired a loss: reduce the window as a fast recovery would have.
            if rack.probe_retransmitted and pkt.is_retransmit and pkt.sent_ps == rack.probe_sent_ps:
                cc.on_loss(rack.probe_flight_bytes, now_ps)
            rack.probe_end_seq = _NO_PROBE
        self._rack_detect_losses(now_ps)
        if self.in_recovery:
            if self.snd_una >= self.recover_seq:
                after_timeout = rack.after_timeout
                self._end_recovery()
                if after_timeout:
                    self._grow_cwnd(acked_bytes, now_ps, rtt_sample_ps)
                else:
                    cc.on_recovery_exit()
            elif rack.after_timeout:
                if acked_bytes:
                    self._grow_cwnd(acked_bytes, now_ps, rtt_sample_ps)  # slow start after an RTO
            elif self.prr is not None:
                self._prr_update(delivered_bytes)
        elif rack.lost_bytes:
            self._enter_fast_recovery(delivered_bytes)
        elif acked_bytes:
            self.dupacks = 0
            self._grow_cwnd(acked_bytes, now_ps, rtt_sample_ps)
        elif self.dupacks < self.settings.dupthresh:
            self._limited_transmit()
        if acked_bytes:
            if self.snd_una >= self.snd_max:
                self.rto_deadline_ps = 0
            else:
                self._arm_rto(now_ps)  # RFC 6298 (5.3)
        self.send_more()
        self._schedule_probe(now_ps)

    def _rack_detect_losses(self, now_ps: int) -> None:
        """RACK_detect_loss_and_arm_timer (RFC 8985 6.2 step 5): mark losses, and arm the
        reordering timer for the segments that are not lost yet but will be if nothing comes."""
        rack = self.rack
        assert rack is not None
        window_ps = rack.reordering_window_ps(self.in_recovery, self._sacked_bytes(), self.mss_bytes,
                                              self.rtt.srtt_ps)
        newly_lost, wait_ps = rack.detect_losses(now_ps, window_ps)
        self.rack_lost_segments += newly_lost
        if wait_ps:
            rack.reorder_deadline_ps = now_ps + wait_ps
            self._wake_at(rack.reorder_deadline_ps)
        else:
            rack.reorder_deadline_ps = 0

    def _schedule_probe(self, now_ps: int) -> None:
        """RFC 8985 7.2 as Linux's tcp_schedule_loss_probe arms it: the probe timeout (PTO) runs
        when data is out, the sender is not in recovery, nothing is SACKed and no probe episode is
        in progress. PTO = 2 SRTT plus, with one segment out, the worst-case delayed ACK (WCDelAckT:
        the minimum RTO, as Linux), else `pto_slack_ps` (Linux's 2 ms, RFC 8985's 0); 1 s before
        any RTT sample; never after the RTO's deadline, whose time it then takes."""
        rack = self.rack
        assert rack is not None
        if (self.in_recovery or self.sacked is not None or self.snd_max == self.snd_una
                or rack.probe_end_seq != _NO_PROBE):
            rack.probe_deadline_ps = 0
            return
        if self.rtt.samples:
            timeout_ps = 2 * self.rtt.srtt_ps
            # nothing is SACKed here, so `outstanding` holds every segment out (Linux's packets_out)
            if len(rack.outstanding) == 1:
                timeout_ps += self.settings.min_rto_ps
            else:
                timeout_ps += self.settings.pto_slack_ps
        else:
            timeout_ps = PS_PER_S
        deadline = now_ps + timeout_ps
        if self.rto_deadline_ps and deadline > self.rto_deadline_ps:
            deadline = self.rto_deadline_ps
        rack.probe_deadline_ps = deadline
        self._wake_at(deadline)

    def _send_probe(self, now_ps: int) -> None:
        """RFC 8985 7.3: the PTO fired. Send one new segment if the receive window allows, else
        resend the highest one sent; then re-arm the RTO."""
        rack = self.rack
        assert rack is not None
        flight_bytes = self.snd_max - self.snd_una
        if self.in_recovery or not flight_bytes:
            return
        length = min(self.mss_bytes, self.stream_end - self.snd_max)
        if length > 0 and self.snd_max + length <= self.snd_una + self.rwnd_bytes:
            self._transmit(self.snd_max, length)
            self.snd_nxt = self.snd_max
            rack.probe_retransmitted = False
        else:
            segment = rack.last_sent_segment()
            if segment is None:
                return
            self._transmit(segment.start, segment.end - segment.start)
            rack.probe_retransmitted = True
        rack.probe_end_seq = self.snd_max
        rack.probe_sent_ps = now_ps
        rack.probe_flight_bytes = flight_bytes
        self.loss_probes += 1
        self._arm_rto(now_ps)

    def _on_reorder_timeout(self, now_ps: int) -> None:
        """RACK's reordering timer fired (RFC 8985 6.2): segments still undelivered are lost now."""
        rack = self.rack
        assert rack is not None
        self._rack_detect_losses(now_ps)
        if rack.lost_bytes and not self.in_recovery:
            self._enter_fast_recovery()
        else:
            self.send_more()

    def _react_to_ece(self, now_ps: int) -> None:
        """ECE: reduce once per window of data (RFC 3168), and tell the receiver with CWR. After an
        ECN reduction the next one waits until something above its SND.MAX is acknowledged, as
        Linux's CWR state ends (tcp_fastretrans_alert: held until the CWR flag has surely reached
        the receiver) and ns-3's (ackNumber > m_recover)."""
        snd_una = self.snd_una
        if snd_una >= self.ecn_recover_seq and snd_una != self.cwr_end_seq and not self.in_recovery:
            self.cc.on_ecn_echo(self._pipe_bytes(), now_ps)
            self.ecn_recover_seq = self.snd_max
            self.cwr_end_seq = self.snd_max
            self.cwr_pending = True

    def _merge_sack(self, blocks: tuple) -> int:
        """Add an ACK's SACK blocks to the scoreboard; return how many bytes above snd_una they
        SACK that it did not hold (0: the ACK reports nothing new)."""
        snd_una = self.snd_una
        sacked = self.sacked
        newly_sacked = 0
        for start, end in blocks:
            if end <= snd_una:
                continue
            if sacked is None:
                sacked = self.sacked = SackScoreboard()
            newly_sacked += sacked.add(start if start > snd_una else snd_una, end)
        return newly_sacked

    def _forget_sacked_below(self, ack: int) -> None:
        """Drop what the cumulative ACK `ack` now covers (called while there are SACK blocks)."""
        sacked = self.sacked
        assert sacked is not None
        sacked.trim_below(ack)
        if not sacked.blocks:
            self.sacked = None

    # -- retransmission timer ---------------------------------------------------------------

    def _arm_rto(self, now_ps: int) -> None:
        deadline = now_ps + self.rtt.rto_ps
        self.rto_deadline_ps = deadline
        self._wake_at(deadline)

    def _wake_at(self, deadline_ps: int) -> None:
        """Make sure the sender's single timer entry fires no later than `deadline_ps`."""
        if self.timer_event_ps == _NO_EVENT or self.timer_event_ps > deadline_ps:
            self.timer_event_ps = deadline_ps
            self.eventlist.schedule_timer(self, deadline_ps)

    def do_next_event(self) -> None:
        """A timer wake-up: fire whichever deadline has come (TCP Small Queues' resume, RACK's
        reordering timer, the tail loss probe, the RTO), then sleep until the earliest one still armed."""
        now = self.eventlist.now_ps
        if self.timer_event_ps != now:
            return  # an older wake-up superseded by an earlier one
        self.timer_event_ps = _NO_EVENT
        tsq_wake = self.tsq_wake_ps
        if tsq_wake:
            if tsq_wake <= now:
                self.tsq_wake_ps = 0
                self.send_more()  # may hold the sender back again, setting a new wake-up
            else:
                self._wake_at(tsq_wake)
        rack = self.rack
        if rack is not None:
            if rack.reorder_deadline_ps and rack.reorder_deadline_ps <= now:
                rack.reorder_deadline_ps = 0
                self._on_reorder_timeout(now)
            if rack.probe_deadline_ps and rack.probe_deadline_ps <= now:
                rack.probe_deadline_ps = 0
                self._send_probe(now)
            for deadline in (rack.reorder_deadline_ps, rack.probe_deadline_ps):
                if deadline:
                    self._wake_at(deadline)
        deadline = self.rto_deadline_ps
        if not deadline:
            return
        if now < deadline:
            self._wake_at(deadline)
            return
        self._on_timeout(now)

    def _on_timeout(self, now_ps: int) -> None:
        """RFC 6298 (5.4-5.6) and RFC 5681: back off, collapse cwnd, go back to snd_una."""
        self.timeouts += 1
        self.cc.on_timeout(self._pipe_bytes(), now_ps)
        self.rtt.back_off()
        self.cwr_end_seq = 0  # the timeout's slow start supersedes an ECN reduction (Linux: -> Loss)
        rack = self.rack
        if rack is not None:
            # RFC 8985 6.3: mark what the timeout shows lost and retransmit it in sequence order,
            # keeping the SACK scoreboard (as Linux), in a recovery that slow-starts from 1 MSS
            window_ps = rack.reordering_window_ps(True, 0, self.mss_bytes, self.rtt.srtt_ps)
            rack.mark_lost_on_timeout(self.snd_una, now_ps, window_ps)
            rack.probe_end_seq = _NO_PROBE
            rack.probe_deadline_ps = 0
            rack.reorder_deadline_ps = 0
            self._end_recovery()
            self.in_recovery = True
            rack.after_timeout = True
            self.recover_seq = self.snd_max
            self.rto_deadline_ps = 0
            self.send_more()
            return
        self._end_recovery()
        self.recover_seq = self.snd_max  # RFC 6582 (4.1), RFC 6675 5.1: no fast retransmit for this window
        self.high_rxt = self.snd_una
        self.rto_deadline_ps = 0
        if self.sacked is not None and self.settings.keep_sack_after_rto:
            # Keep the scoreboard, as Linux (tcp_timeout_mark_lost) and ns-3 (ReTxTimeout) do and
            # RFC 6675 5.1 with erratum 1610 allows: what it does not hold is lost and is resent in
            # sequence order as slow start opens the window, SACKed blocks are not sent again.
            # RFC 2018's reason to discard it, a receiver that reneges (drops out-of-order data it
            # SACKed), cannot arise: the engine's receiver never discards what it holds.
            self.in_recovery = True
            self.rto_recovery = True
            self.snd_nxt = self.snd_max  # (below it only after an earlier go-back-N) new data goes there
            self.send_more()
            return
        # RFC 2018: SACK information is discarded after a timeout, and everything from snd_una is
        # sent again (go-back-N). With an empty scoreboard this is also what keeping it does.
        self.sacked = None
        self.snd_nxt = self.snd_una
        self.send_more()


class TcpReceiver(PacketSink):
    """The receiving half: in-order delivery, out-of-order blocks, (delayed) ACKs with SACK and ECE.

    ACKs go at once for out-of-order data, for data that fills a hole, and when the ECN state
    changes (DCTCP); otherwise every second segment, or when the delayed-ACK timer expires. With
    `linux_delayed_ack`, as Linux's receiver also: the first 16 segments of a connection, and again
    after a silence longer than the minimum RTO, are ACKed at once (quick-ACK mode), and so is a
    segment shorter than the MSS (the end of a write: Linux ACKs it once the application has read
    everything, which ours does at once); so only full segments wait, and an ACK covers two.
    `out_of_order` is the data held above rcv_nxt (None when empty), `latest_out_of_order_seq` where
    the latest segment stored there starts (its block is the first SACK block; `_NO_SEQ` once data in
    order has taken the blocks). The oldest message awaiting delivery is held in
    `next_message_end_seq` / `on_next_message` (None: no message), any later ones in
    `later_messages` (None when empty): a message costs no container while it is alone.
    With `timestamps`, the TSecr of each ACK follows RFC 7323 section 4.3: `ts_recent_ps` takes the
    TSval (the send time) of a segment at or below `last_ack_sent` (the ACK field of the last ACK
    sent), so a delayed ACK echoes the earliest segment it covers, an ACK sent while a hole is open
    echoes the segment that last advanced the window, and the one after a retransmission fills the
    hole echoes that retransmission.
    """

    __slots__ = (
        "eventlist", "settings", "ack_route", "rcv_nxt", "out_of_order", "unacked_segments",
        "delack_deadline_ps", "timer_event_ps", "ce_state", "ece_latched", "echo_sent_ps",
        "echo_retransmit", "latest_out_of_order_seq", "next_message_end_seq", "on_next_message", "later_messages",
        "ce_received", "acks_sent",
        "segments_received", "quick_acks_left", "last_data_ps", "ts_recent_ps", "last_ack_sent", "reuses_segments",
        "spare",
    )

    def __init__(self, eventlist: EventList, settings: TcpSettings) -> None:
        self.eventlist = eventlist
        self.settings = settings
        self.ack_route: tuple[PacketSink, ...] = ()
        self.rcv_nxt = 0
        self.out_of_order: SackScoreboard | None = None
        self.unacked_segments = 0
        self.delack_deadline_ps = 0
        self.timer_event_ps = _NO_EVENT
        self.ce_state = False
        self.ece_latched = False
        self.echo_sent_ps = 0
        self.echo_retransmit = False
        self.latest_out_of_order_seq = _NO_SEQ
        self.next_message_end_seq = 0
        self.on_next_message: Callable[[], None] | None = None
        self.later_messages: list[tuple[int, Callable[[], None]]] | None = None  # (end_seq, callback), in order
        self.ce_received = 0
        self.acks_sent = 0
        self.segments_received = 0
        self.quick_acks_left = _QUICK_ACKS  # linux_delayed_ack only
        self.last_data_ps = 0
        self.ts_recent_ps = 0  # timestamps only: RFC 7323 TS.Recent
        self.last_ack_sent = 0  # timestamps only: RFC 7323 Last.ACK.sent
        # Whether a segment received may be renewed as an ACK: not if its sender's host may still
        # hold it in its TCP Small Queues list (set by `TcpConnection`)
        self.reuses_segments = False
        self.spare: Packet | None = None  # the last segment received, to be renewed as the next ACK sent

    def expect_message_end(self, end_seq: int, on_delivered: Callable[[], None]) -> None:
        """Call `on_delivered` once every byte below `end_seq` has arrived in order."""
        if self.on_next_message is None:
            self.next_message_end_seq = end_seq
            self.on_next_message = on_delivered
        else:
            if self.later_messages is None:
                self.later_messages = []
            self.later_messages.append((end_seq, on_delivered))

    def receive_packet(self, pkt: Packet) -> None:
        """A data segment arrives: at the end of its route; once done with it the receiver keeps it
        as its next ACK (`reuses_segments`), unless it expects no more data."""
        self._on_segment(pkt)
        if self.reuses_segments:
            self.spare = pkt if self.on_next_message is not None else None

    def _on_segment(self, pkt: Packet) -> None:
        self.segments_received += 1
        if pkt.ecn_capable:  # only ECN-capable segments can carry CE or CWR
            self._update_ecn_echo(pkt)
        self.echo_sent_ps = pkt.sent_ps
        self.echo_retransmit = pkt.is_retransmit
        seq = pkt.seq
        # RFC 7323 4.3 (2), after any ACK the ECN state change sent for the earlier segments
        if self.settings.timestamps and seq <= self.last_ack_sent and pkt.sent_ps >= self.ts_recent_ps:
            self.ts_recent_ps = pkt.sent_ps
        end = seq + pkt.payload_bytes
        rcv_nxt = self.rcv_nxt
        if seq <= rcv_nxt < end:
            rcv_nxt = end
            immediate = False
            held = self.out_of_order
            if held is not None:
                immediate = True  # RFC 5681: ACK at once when a segment fills (part of) a hole
                rcv_nxt = held.take_from(rcv_nxt)
                if not held.blocks:
                    self.out_of_order = None
                self.latest_out_of_order_seq = _NO_SEQ
            self.rcv_nxt = rcv_nxt
            on_delivered = self.on_next_message
            while on_delivered is not None and self.next_message_end_seq <= rcv_nxt:
                later = self.later_messages  # the next message moves up before the callback runs:
                if later:  # it may write another message on this connection
                    self.next_message_end_seq, self.on_next_message = later.pop(0)
                    if not later:
                        self.later_messages = None
                else:
                    self.on_next_message = None
                on_delivered()
                on_delivered = self.on_next_message
            if immediate or not self.settings.delayed_ack:
                self._send_ack()
                return
            if self.settings.linux_delayed_ack and self._linux_acks_at_once(pkt.payload_bytes):
                self._send_ack()
                return
            self.unacked_segments += 1
            if self.unacked_segments >= 2:
                self._send_ack()
            elif self.unacked_segments == 1:
                self._arm_delack()
        elif seq > rcv_nxt:
            self._store_out_of_order(seq, end)
            self._send_ack()
        else:
            self._send_ack()  # an old duplicate: re-announce where we are

    def _linux_acks_at_once(self, payload_bytes: int) -> bool:
        """Linux's reasons to ACK an in-order segment at once: quick-ACK mode (entered at the first
        segment and after a silence longer than the RTO, which a receiver's handshake sample puts
        at the minimum RTO), or a segment shorter than the MSS."""
        now = self.eventlist.now_ps
        if now - self.last_data_ps > self.settings.min_rto_ps:
            self.quick_acks_left = _QUICK_ACKS
        self.last_data_ps = now
        if self.quick_acks_left:
            self.quick_acks_left -= 1
            return True
        return payload_bytes < self.settings.mss_bytes

    def _update_ecn_echo(self, pkt: Packet) -> None:
        if pkt.ce:
            self.ce_received += 1
        if self.settings.dctcp_echo:
            if pkt.ce != self.ce_state:
                if self.unacked_segments:
                    self._send_ack()  # RFC 8257 3.2: ACK the earlier segments with the old state
                self.ce_state = pkt.ce
        else:
            if pkt.cwr:
                self.ece_latched = False
            if pkt.ce:
                self.ece_latched = True

    def _store_out_of_order(self, start: int, end: int) -> None:
        held = self.out_of_order
        if held is None:
            held = self.out_of_order = SackScoreboard()
        held.add(start, end)
        self.latest_out_of_order_seq = start

    def _send_ack(self) -> None:
        held = self.out_of_order
        sack_blocks = held.announced(self.latest_out_of_order_seq) if (held is not None and self.settings.sack) else ()
        # SACK option: 2 bytes + 8 per block, padded to a multiple of 4 bytes
        option_bytes = (2 + 8 * len(sack_blocks) + 3) // 4 * 4 if sack_blocks else 0
        pkt = self.spare
        if pkt is None:
            pkt = Packet(self.ack_route, TCP_IP_HEADER_BYTES + option_bytes, 0, 0, self.rcv_nxt,
                         self.echo_sent_ps, self.echo_retransmit, False)
        else:
            self.spare = None
            pkt.renew(self.ack_route, TCP_IP_HEADER_BYTES + option_bytes, 0, 0, self.rcv_nxt, self.echo_sent_ps,
                      self.echo_retransmit, False)
        pkt.sack_blocks = sack_blocks
        pkt.ece = self.ce_state if self.settings.dctcp_echo else self.ece_latched
        if self.settings.timestamps:
            pkt.size_bytes += TCP_TIMESTAMP_OPTION_BYTES
            pkt.ts_echo_ps = self.ts_recent_ps
            self.last_ack_sent = self.rcv_nxt
        self.unacked_segments = 0
        self.acks_sent += 1
        pkt.route[0].receive_packet(pkt)

    def _arm_delack(self) -> None:
        deadline = self.eventlist.now_ps + self.settings.delayed_ack_timeout_ps
        self.delack_deadline_ps = deadline
        if self.timer_event_ps == _NO_EVENT:
            self.timer_event_ps = deadline
            self.eventlist.schedule_timer(self, deadline)

    def do_next_event(self) -> None:
        """Delayed-ACK timer wake-up."""
        now = self.eventlist.now_ps
        self.timer_event_ps = _NO_EVENT
        if not self.unacked_segments:
            return
        if now < self.delack_deadline_ps:
            self.timer_event_ps = self.delack_deadline_ps
            self.eventlist.schedule_timer(self, self.delack_deadline_ps)
            return
        self._send_ack()


class TcpConnection:
    """A sender and a receiver joined by a data route and an ACK route (tuples of links); with
    `spray_links` (`Topology.spray_routes`), its data packets are dealt over those routes instead, and
    its ACKs keep the one ACK route (`network.load_balancing=spray`).

    The connection persists: messages written one after another share its window and timers.
    """

    __slots__ = ("flow_id", "src", "dst", "sender", "receiver")

    def __init__(self, eventlist: EventList, settings: TcpSettings, cc: CongestionControl,
                 flow_id: int, src: int, dst: int, data_links: tuple, ack_links: tuple,
                 spray_links: tuple[tuple[PacketSink, ...], ...] = ()) -> None:
        self.flow_id = flow_id
        self.src = src
        self.dst = dst
        self.sender = TcpSender(eventlist, settings, cc)
        self.receiver = TcpReceiver(eventlist, settings)
        self.sender.data_route = tuple(data_links) + (self.receiver,)
        self.sender.spray = route_dealer(spray_links, self.receiver)
        first_hop = data_links[0]
        if isinstance(first_hop, HostNic):
            self.sender.host_nic = first_hop
        self.receiver.reuses_segments = not (isinstance(first_hop, HostNic) and first_hop.tsq_bytes)
        self.receiver.ack_route = tuple(ack_links) + (self.sender,)

    def send_message(self, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Write `nbytes` into the stream; `on_delivered` runs when the receiver has all of them."""
        if nbytes <= 0:
            raise ValueError(f"message size must be positive, got {nbytes} bytes")
        self.receiver.expect_message_end(self.sender.stream_end + nbytes, on_delivered)
        self.sender.write(nbytes)
