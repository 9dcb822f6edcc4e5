"""RoCEv2 reliable connections (`transport.protocol=roce`) as an RDMA NIC runs them.

A message (an RDMA write) goes in packets of at most the path MTU of payload (`roce.payload_bytes`),
never spanning two messages, each with `ROCE_HEADER_BYTES` of headers; the host's `RoceNic` takes them
one at a time when its link is free, so a connection is paced at line rate (its share of it with
others on the NIC) and a PFC pause stops it. Sequence numbers count bytes, as TCP's do (a packet's
PSN is its place in that stream).

Reliability is the IB specification's go-back-N (section 9.7): the responder accepts only the packet
it expects, ACKs each one, and answers the first packet out of order with a NAK (a sequence error)
naming the one it expects, once, until that one arrives; it drops every packet out of order. The
requester, on a NAK or when its retransmission timer (`roce.rto_us`, IB's local ACK timeout: fixed,
no backoff, restarted by every ACK of new data) expires with packets unacknowledged, sends again
everything from the first unacknowledged byte. Retries are not limited (a NIC would fail the queue
pair after 7). Congestion control: none (`roce.cc=none`, htsim's RoCE: line rate, stopped only by PFC)
or DCQCN (`Dcqcn`, Zhu et al., SIGCOMM 2015): switches mark ECN-capable packets RED-like at egress
(`PausableLink`), the responder answers a marked packet with a CNP at most once per
`roce.dcqcn_cnp_interval_us`, and the requester's rate limiter, which the NIC obeys, follows the
paper's reaction point.

A kernel module (engine/kernel.py): every packet runs through it.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Final

from ..config import RoceConfig
from ..eventlist import EventList
from ..links import (
    ROCE_ACK_BYTES,
    ROCE_CNP_BYTES,
    ROCE_HEADER_BYTES,
    NicSender,
    Packet,
    PacketSink,
    RoceNic,
    RouteDealer,
    route_dealer,
)
from ..units import BITS_PER_BYTE, PS_PER_S, us_to_ps

# The AETH syndrome an ACK packet carries, in its `seq` field (data packets carry their sequence
# number there; an ACK has none): an ACK, or a NAK for a sequence error (IB spec 9.7.5.2.4).
ACK: Final = 0
NAK: Final = 1
CNP: Final = 2  # a congestion notification packet (its own opcode in IB; here on the ACK route)
_NO_TIMER: Final = -1  # `timer_event_ps` with no wake-up in the heap
# a message end with no message: above any sequence number, below 2**62 (a native integer compiled)
_NO_MESSAGE: Final = 1 << 61


class Dcqcn:
    """DCQCN's reaction point (Zhu et al., SIGCOMM 2015, section 3.1): the current rate R_C, the target
    rate R_T and alpha, the estimate of congestion, under named hooks (unit-testable without the
    event loop; rates in bit/s, floats).

    - A CNP (`on_cnp`): R_T = R_C, R_C = R_C (1 - alpha / 2), then alpha = (1 - g) alpha + g; the rate
      increase counters restart. With `clamp_target_rate` False (the NICs' default: clamp_tgt_rate = 0
      with clamp_tgt_rate_after_time_inc = 1) R_T = R_C only when an increase event came since the last
      cut, so that cuts in a row keep the target of the first.
    - No CNP for the alpha timer's K (`on_alpha_timer`): alpha = (1 - g) alpha.
    - A rate increase event, when the increase timer T expires (`on_increase_timer`) or the byte
      counter passes B bytes sent (`on_bytes_sent`): while both counts are at most F, fast recovery,
      R_C = (R_T + R_C) / 2; once one is above F, additive increase, R_T += R_AI first; once both are,
      hyper increase, R_T += i R_HAI with i = min(counts) - F (the paper's i-th hyper step: our reading).
      R_T and R_C never exceed the line rate; R_C never falls below the minimum rate.
    Alpha starts at 1 (the paper's initial value). While the rate is below line rate the limiter is on
    and both timers run (`limited`); back at line rate it is released (as NICs do) and they stop.
    """

    __slots__ = ("line_rate_bps", "rate_bps", "target_bps", "alpha", "g", "ai_bps", "hai_bps", "min_rate_bps",
                 "fast_recovery_steps", "byte_counter_bytes", "clamp_target_rate", "timer_count", "byte_count",
                 "bytes_counted")

    def __init__(self, line_rate_bps: float, g: float, ai_bps: float, hai_bps: float, min_rate_bps: float,
                 fast_recovery_steps: int, byte_counter_bytes: int, clamp_target_rate: bool = True) -> None:
        self.line_rate_bps = line_rate_bps
        self.rate_bps = line_rate_bps
        self.target_bps = line_rate_bps
        self.alpha = 1.0
        self.g = g
        self.ai_bps = ai_bps
        self.hai_bps = hai_bps
        self.min_rate_bps = min_rate_bps
        self.fast_recovery_steps = fast_recovery_steps
        self.byte_counter_bytes = byte_counter_bytes
        self.clamp_target_rate = clamp_target_rate
        self.timer_count = 0
        self.byte_count = 0
        self.bytes_counted = 0

    @property
    def limited(self) -> bool:
        """Whether the rate limiter is on (the rate below line rate)."""
        return self.rate_bps < self.line_rate_bps

    def on_cnp(self) -> None:
        """A congestion notification: cut the rate by alpha / 2, then raise alpha."""
        if self.clamp_target_rate or self.timer_count or self.byte_count:
            self.target_bps = self.rate_bps
        self.rate_bps = max(self.min_rate_bps, self.rate_bps * (1 - self.alpha / 2))
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.timer_count = 0
        self.byte_count = 0
        self.bytes_counted = 0

    def on_alpha_timer(self) -> None:
        """K went by without a CNP: alpha decays."""
        self.alpha = (1 - self.g) * self.alpha

    def on_increase_timer(self) -> None:
        """The rate increase timer expired: one increase event."""
        self.timer_count += 1
        self._increase()

    def on_bytes_sent(self, size_bytes: int) -> None:
        """`size_bytes` more were sent while limited: an increase event each time they pass B."""
        self.bytes_counted += size_bytes
        if self.bytes_counted >= self.byte_counter_bytes:
            self.bytes_counted -= self.byte_counter_bytes
            self.byte_count += 1
            self._increase()

    def _increase(self) -> None:
        steps = self.fast_recovery_steps
        if self.timer_count > steps and self.byte_count > steps:
            self.target_bps += (min(self.timer_count, self.byte_count) - steps) * self.hai_bps
        elif self.timer_count > steps or self.byte_count > steps:
            self.target_bps += self.ai_bps
        self.target_bps = min(self.target_bps, self.line_rate_bps)
        self.rate_bps = min((self.target_bps + self.rate_bps) / 2, self.line_rate_bps)


class RoceSender(NicSender):
    """The requester of a queue pair: what is written, sent, acknowledged; its timer.

    [snd_una, snd_max) is sent and unacknowledged, snd_nxt the next byte to send (below snd_max after a
    rewind), stream_end the end of what was written; `message_ends` the ends of the messages not yet
    acknowledged in full (a packet stops at one), `next_end_index` the first of them above snd_nxt.
    `first_end_seq` and `next_end_seq` are `message_ends[0]` and `message_ends[next_end_index]` (a
    deque's items are read by a generic call compiled: these are read at every packet and ACK).
    """

    __slots__ = (
        "eventlist", "nic", "data_route", "spray", "payload_bytes", "rto_ps", "snd_una", "snd_nxt", "snd_max",
        "stream_end", "message_ends", "next_end_index", "first_end_seq", "next_end_seq", "active", "rto_deadline_ps",
        "timer_event_ps",
        "dcqcn", "alpha_timer_ps", "increase_timer_ps", "alpha_deadline_ps", "increase_deadline_ps", "next_send_ps",
        "last_sent_ps", "last_sent_bytes", "pace_deadline_ps", "spare",
        "packets_sent", "bytes_sent", "retransmits", "timeouts", "naks_received", "cnps_received", "loss_probes",
        "rack_lost_segments",
    )

    def __init__(self, eventlist: EventList, nic: RoceNic, payload_bytes: int, rto_ps: int,
                 dcqcn: Dcqcn | None = None, alpha_timer_ps: int = 0, increase_timer_ps: int = 0) -> None:
        self.eventlist = eventlist
        self.nic = nic
        self.data_route: tuple[PacketSink, ...] = ()
        self.spray: RouteDealer | None = None  # network.load_balancing=spray: its data packets' routes
        self.payload_bytes = payload_bytes
        self.rto_ps = rto_ps
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0
        self.stream_end = 0
        self.message_ends: deque[int] = deque()
        self.next_end_index = 0
        self.first_end_seq = _NO_MESSAGE  # none written
        self.next_end_seq = 0  # 0: to be read again from message_ends
        self.active = False  # in the NIC's line of senders
        self.rto_deadline_ps = 0  # 0: timer not armed
        self.timer_event_ps = _NO_TIMER  # when its one live timer entry comes (later ones are stale)
        self.dcqcn = dcqcn  # None: roce.cc=none, line rate
        self.alpha_timer_ps = alpha_timer_ps
        self.increase_timer_ps = increase_timer_ps
        self.alpha_deadline_ps = 0  # 0: not armed (DCQCN's timers run while its limiter is on)
        self.increase_deadline_ps = 0
        self.next_send_ps = 0  # when the rate limiter lets the next packet go
        self.last_sent_ps = 0  # when the last packet started, and its size: the limiter's reference
        self.last_sent_bytes = 0
        self.pace_deadline_ps = 0  # 0: none; else a rate rise moved next_send_ps earlier: wake the NIC then
        self.spare: Packet | None = None  # the last ACK received, to be renewed as the next packet sent
        self.packets_sent = 0
        self.bytes_sent = 0  # on the wire, headers included (as TCP's)
        self.retransmits = 0  # packets sent again
        self.timeouts = 0
        self.naks_received = 0
        self.cnps_received = 0
        # the runs row sums these over every sender; RoCE has no tail loss probe nor RACK
        self.loss_probes = 0
        self.rack_lost_segments = 0

    def write(self, nbytes: int) -> None:
        """A message of `nbytes` to send after those written before."""
        self.nic.catch_up()
        self.stream_end += nbytes
        self.message_ends.append(self.stream_end)
        if len(self.message_ends) == 1:
            self.first_end_seq = self.stream_end
        self._activate()

    def _activate(self) -> None:
        if not self.active and self.snd_nxt < self.stream_end:
            self.active = True
            self.nic.activate(self)

    def next_packet(self, now_ps: int) -> Packet | None:
        """The NIC's link is free at `now_ps`: the next packet (go-back-N resends from snd_nxt), or None."""
        seq = self.snd_nxt
        if seq >= self.stream_end:
            self.active = False
            return None
        end = self.next_end_seq
        if end <= seq:  # the packet is in a later message than the last one sent (or read again)
            ends = self.message_ends
            index = self.next_end_index
            while ends[index] <= seq:
                index += 1
            self.next_end_index = index
            end = self.next_end_seq = ends[index]
        length = min(self.payload_bytes, end - seq)
        retransmit = seq < self.snd_max
        dcqcn = self.dcqcn
        spray = self.spray
        route = self.data_route if spray is None else spray.next_route()
        pkt = self.spare
        if pkt is None:
            pkt = Packet(route, length + ROCE_HEADER_BYTES, length, seq, 0, now_ps, retransmit, dcqcn is not None)
        else:
            self.spare = None
            pkt.renew(route, length + ROCE_HEADER_BYTES, length, seq, 0, now_ps, retransmit, dcqcn is not None)
        if dcqcn is not None:
            self.last_sent_ps = now_ps
            self.last_sent_bytes = pkt.size_bytes
            if dcqcn.limited:  # the byte counter counts it; the next packet waits its time at the rate then
                dcqcn.on_bytes_sent(pkt.size_bytes)
                self.next_send_ps = now_ps + int(pkt.size_bytes * BITS_PER_BYTE * PS_PER_S / dcqcn.rate_bps)
        self.snd_nxt = seq + length
        if self.snd_nxt > self.snd_max:
            self.snd_max = self.snd_nxt
        self.packets_sent += 1
        self.bytes_sent += pkt.size_bytes
        if retransmit:
            self.retransmits += 1
        if not self.rto_deadline_ps:
            self._arm_timer(now_ps)
        return pkt

    def ready_ps(self) -> int:
        """When the rate limiter lets the next packet go (DCQCN's; else at once)."""
        return self.next_send_ps

    def receive_packet(self, pkt: Packet) -> None:
        """An ACK or NAK: everything below `pkt.ack` has arrived; a NAK also asks for all from there.
        A CNP: DCQCN cuts the rate. At the end of its route nothing else holds `pkt`: once done with it
        the sender keeps it as its next packet, unless everything written is acknowledged."""
        self.nic.catch_up()
        now = self.eventlist.now_ps
        if pkt.seq == CNP:
            self._on_cnp(now)
        else:
            self._on_ack(pkt)
        self.spare = pkt if self.snd_una < self.stream_end else None

    def _on_ack(self, pkt: Packet) -> None:
        """An ACK or NAK."""
        now = self.eventlist.now_ps
        ack = pkt.ack
        if ack > self.snd_una:
            self.snd_una = ack
            if ack >= self.first_end_seq:  # messages acknowledged in full
                ends = self.message_ends
                while ends and ends[0] <= ack:
                    ends.popleft()
                    self.next_end_index -= 1
                if self.next_end_index < 0:
                    self.next_end_index = 0
                self.first_end_seq = ends[0] if ends else _NO_MESSAGE
                self.next_end_seq = 0
            if self.snd_nxt < ack:
                self.snd_nxt = ack
            if ack >= self.snd_max:
                self.rto_deadline_ps = 0  # all acknowledged: the timer stops
            else:
                self._arm_timer(now)
        if pkt.seq == NAK and ack == self.snd_una:
            self.naks_received += 1
            self._go_back(ack)

    def _go_back(self, seq: int) -> None:
        """Send everything again from `seq` (the first unacknowledged byte)."""
        self.snd_nxt = seq
        self.next_end_index = 0
        self.next_end_seq = 0
        self._activate()

    def _on_cnp(self, now_ps: int) -> None:
        dcqcn = self.dcqcn
        if dcqcn is None:  # CNPs come only with roce.cc=dcqcn
            return
        self.cnps_received += 1
        dcqcn.on_cnp()
        self._pace(dcqcn, now_ps)
        self.alpha_deadline_ps = now_ps + self.alpha_timer_ps
        self.increase_deadline_ps = now_ps + self.increase_timer_ps
        self._wake_at(min(self.alpha_deadline_ps, self.increase_deadline_ps))

    def _pace(self, dcqcn: Dcqcn, now_ps: int) -> None:
        """The rate has changed: the next packet goes the last one's size over the new rate after the
        last one started (as a NIC's rate limiter meters it), earlier after a rise, later after a cut.
        Earlier, the NIC is woken then (it sleeps until the time it was given)."""
        ready_ps = self.last_sent_ps + int(self.last_sent_bytes * BITS_PER_BYTE * PS_PER_S / dcqcn.rate_bps)
        earlier = ready_ps < self.next_send_ps
        self.next_send_ps = ready_ps
        if earlier and self.active:
            if ready_ps <= now_ps:
                self.nic.wake()
            else:
                self.pace_deadline_ps = ready_ps
                self._wake_at(ready_ps)

    def _arm_timer(self, now_ps: int) -> None:
        deadline = now_ps + self.rto_ps
        self.rto_deadline_ps = deadline
        self._wake_at(deadline)

    def _wake_at(self, deadline_ps: int) -> None:
        """Make sure the sender's timer entry fires no later than `deadline_ps`."""
        if self.timer_event_ps == _NO_TIMER or self.timer_event_ps > deadline_ps:
            self.timer_event_ps = deadline_ps
            self.eventlist.schedule_timer(self, deadline_ps)

    def do_next_event(self) -> None:
        """A timer wake-up: fire whichever deadline has come (the retransmission timer: go back to
        snd_una if data is unacknowledged; DCQCN's alpha and rate increase timers), then sleep until
        the earliest one still armed. A deadline moved later leaves its entry to fire for nothing."""
        now = self.eventlist.now_ps
        if self.timer_event_ps != now:
            return  # an older wake-up superseded by an earlier one
        self.nic.catch_up()
        self.timer_event_ps = _NO_TIMER
        if self.rto_deadline_ps and self.rto_deadline_ps <= now:
            self.timeouts += 1
            self.rto_deadline_ps = now + self.rto_ps
            self._go_back(self.snd_una)
        dcqcn = self.dcqcn
        if dcqcn is not None:
            if self.alpha_deadline_ps and self.alpha_deadline_ps <= now:
                dcqcn.on_alpha_timer()
                self.alpha_deadline_ps = now + self.alpha_timer_ps
            if self.increase_deadline_ps and self.increase_deadline_ps <= now:
                dcqcn.on_increase_timer()
                self.increase_deadline_ps = now + self.increase_timer_ps
                self._pace(dcqcn, now)
            if not dcqcn.limited:  # back at line rate: the limiter is released, its timers stop
                self.alpha_deadline_ps = self.increase_deadline_ps = 0
            if self.pace_deadline_ps and self.pace_deadline_ps <= now:
                self.pace_deadline_ps = 0
                self.nic.wake()
        for deadline in (self.rto_deadline_ps, self.alpha_deadline_ps, self.increase_deadline_ps,
                         self.pace_deadline_ps):
            if deadline:
                self._wake_at(deadline)

class RoceReceiver(PacketSink):
    """The responder of a queue pair: accepts the packet it expects, ACKs every packet, NAKs the
    first out of order once; calls each message's callback when its last byte is in. With DCQCN
    (`cnp_interval_ps`) it answers a CE-marked packet with a CNP, at most one per interval."""

    __slots__ = ("eventlist", "ack_route", "rcv_nxt", "nak_sent", "messages", "first_end_seq", "cnp_interval_ps",
                 "last_cnp_ps",
                 "ce_received", "acks_sent", "naks_sent", "cnps_sent", "out_of_order_dropped")

    def __init__(self, eventlist: EventList, cnp_interval_ps: int = 0) -> None:
        self.eventlist = eventlist
        self.cnp_interval_ps = cnp_interval_ps  # 0: sends no CNPs (roce.cc=none)
        self.last_cnp_ps = -1  # -1: none sent yet
        self.ack_route: tuple[PacketSink, ...] = ()
        self.rcv_nxt = 0
        self.nak_sent = False  # a NAK for rcv_nxt is out: packets out of order are dropped silently
        self.messages: deque[tuple[int, Callable[[], None]]] = deque()  # (end_seq, on_delivered), in order
        self.first_end_seq = _NO_MESSAGE  # the first message's end_seq (read at every packet)
        self.ce_received = 0
        self.acks_sent = 0
        self.naks_sent = 0
        self.cnps_sent = 0
        self.out_of_order_dropped = 0

    def expect_message_end(self, end_seq: int, on_delivered: Callable[[], None]) -> None:
        """Call `on_delivered` once every byte below `end_seq` has arrived."""
        self.messages.append((end_seq, on_delivered))
        if len(self.messages) == 1:
            self.first_end_seq = end_seq

    def receive_packet(self, pkt: Packet) -> None:
        """A data packet arrives."""
        if pkt.ce:
            self.ce_received += 1
            if self.cnp_interval_ps:
                now = self.eventlist.now_ps
                if self.last_cnp_ps < 0 or now - self.last_cnp_ps >= self.cnp_interval_ps:
                    self.last_cnp_ps = now
                    self.cnps_sent += 1
                    self.ack_route[0].receive_packet(
                        Packet(self.ack_route, ROCE_CNP_BYTES, 0, CNP, self.rcv_nxt, now, False, False))
        seq = pkt.seq
        if seq == self.rcv_nxt:
            self.rcv_nxt = rcv_nxt = seq + pkt.payload_bytes
            self.nak_sent = False
            self._send(pkt, ACK)
            if rcv_nxt >= self.first_end_seq:
                messages = self.messages
                while messages and messages[0][0] <= rcv_nxt:
                    messages.popleft()[1]()
                self.first_end_seq = messages[0][0] if messages else _NO_MESSAGE
        elif seq > self.rcv_nxt:
            self.out_of_order_dropped += 1
            if not self.nak_sent:
                self.nak_sent = True
                self.naks_sent += 1
                self._send(pkt, NAK)
        else:
            self._send(pkt, ACK)  # a duplicate: say again where we are

    def _send(self, pkt: Packet, syndrome: int) -> None:
        """Answer the data packet `pkt` with an ACK or NAK: `pkt` itself, renewed (at the end of its
        route nothing else holds it)."""
        pkt.renew(self.ack_route, ROCE_ACK_BYTES, 0, syndrome, self.rcv_nxt, self.eventlist.now_ps, False, False)
        if syndrome == ACK:
            self.acks_sent += 1
        pkt.route[0].receive_packet(pkt)


class RoceConnection:
    """A queue pair from host `src` to host `dst`: requester and responder joined by a data route and
    an ACK route (tuples of links), each starting at its host's `RoceNic`; with `spray_links`
    (`Topology.spray_routes`) its data packets are dealt over those routes instead, its ACKs, NAKs and
    CNPs keeping the one ACK route. Persistent: messages written one after another go in order."""

    __slots__ = ("flow_id", "src", "dst", "sender", "receiver")

    def __init__(self, eventlist: EventList, roce: RoceConfig, payload_bytes: int, flow_id: int, src: int,
                 dst: int, data_links: tuple[PacketSink, ...], ack_links: tuple[PacketSink, ...],
                 spray_links: tuple[tuple[PacketSink, ...], ...] = ()) -> None:
        nic = data_links[0]
        if not isinstance(nic, RoceNic):
            raise TypeError(f"a RoCE connection starts at its host's RoceNic, not at {type(nic).__name__}")
        self.flow_id = flow_id
        self.src = src
        self.dst = dst
        dcqcn = None
        cnp_interval_ps = 0
        if roce.cc == "dcqcn":
            dcqcn = Dcqcn(float(nic.rate_bps), roce.dcqcn_g, roce.dcqcn_ai_mbps * 1e6, roce.dcqcn_hai_mbps * 1e6,
                          roce.dcqcn_min_rate_mbps * 1e6, roce.dcqcn_fast_recovery_steps,
                          roce.dcqcn_byte_counter_bytes, roce.dcqcn_clamp_target_rate)
            cnp_interval_ps = us_to_ps(roce.dcqcn_cnp_interval_us)
            # DCQCN's paced gaps make the order of events at an instant depend on when each end of
            # serialisation was scheduled: its NICs keep an event at each (links.RoceNic)
            nic.end_events = True
            ack_nic = ack_links[0]
            if isinstance(ack_nic, RoceNic):
                ack_nic.end_events = True
        self.sender = RoceSender(eventlist, nic, payload_bytes, us_to_ps(roce.rto_us), dcqcn,
                                 us_to_ps(roce.dcqcn_alpha_timer_us), us_to_ps(roce.dcqcn_increase_timer_us))
        self.receiver = RoceReceiver(eventlist, cnp_interval_ps)
        self.sender.data_route = tuple(data_links) + (self.receiver,)
        self.sender.spray = route_dealer(spray_links, self.receiver)
        self.receiver.ack_route = tuple(ack_links) + (self.sender,)

    def send_message(self, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Write a message of `nbytes`; `on_delivered` runs when the responder has all of it."""
        if nbytes <= 0:
            raise ValueError(f"message size must be positive, got {nbytes} bytes")
        self.receiver.expect_message_end(self.sender.stream_end + nbytes, on_delivered)
        self.sender.write(nbytes)
