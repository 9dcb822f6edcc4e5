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
pair after 7). No congestion control yet (`roce.cc=none`, htsim's RoCE).

A kernel module (engine/kernel.py): every packet runs through it.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Final

from ..eventlist import EventList
from ..links import ROCE_ACK_BYTES, ROCE_HEADER_BYTES, NicSender, Packet, PacketSink, RoceNic

# The AETH syndrome an ACK packet carries, in its `seq` field (data packets carry their sequence
# number there; an ACK has none): an ACK, or a NAK for a sequence error (IB spec 9.7.5.2.4).
ACK: Final = 0
NAK: Final = 1
_NO_TIMER: Final = -1  # `timer_event_ps` with no wake-up in the heap


class RoceSender(NicSender):
    """The requester of a queue pair: what is written, sent, acknowledged; its timer.

    [snd_una, snd_max) is sent and unacknowledged, snd_nxt the next byte to send (below snd_max after a
    rewind), stream_end the end of what was written; `message_ends` the ends of the messages not yet
    acknowledged in full (a packet stops at one), `next_end_index` the first of them above snd_nxt.
    """

    __slots__ = (
        "eventlist", "nic", "data_route", "payload_bytes", "rto_ps", "snd_una", "snd_nxt", "snd_max",
        "stream_end", "message_ends", "next_end_index", "active", "rto_deadline_ps", "timer_event_ps",
        "packets_sent", "bytes_sent", "retransmits", "timeouts", "naks_received", "loss_probes",
        "rack_lost_segments",
    )

    def __init__(self, eventlist: EventList, nic: RoceNic, payload_bytes: int, rto_ps: int) -> None:
        self.eventlist = eventlist
        self.nic = nic
        self.data_route: tuple[PacketSink, ...] = ()
        self.payload_bytes = payload_bytes
        self.rto_ps = rto_ps
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0
        self.stream_end = 0
        self.message_ends: deque[int] = deque()
        self.next_end_index = 0
        self.active = False  # in the NIC's line of senders
        self.rto_deadline_ps = 0  # 0: timer not armed
        self.timer_event_ps = _NO_TIMER
        self.packets_sent = 0
        self.bytes_sent = 0  # on the wire, headers included (as TCP's)
        self.retransmits = 0  # packets sent again
        self.timeouts = 0
        self.naks_received = 0
        # the runs row sums these over every sender; RoCE has no tail loss probe nor RACK
        self.loss_probes = 0
        self.rack_lost_segments = 0

    def write(self, nbytes: int) -> None:
        """A message of `nbytes` to send after those written before."""
        self.stream_end += nbytes
        self.message_ends.append(self.stream_end)
        self._activate()

    def _activate(self) -> None:
        if not self.active and self.snd_nxt < self.stream_end:
            self.active = True
            self.nic.activate(self)

    def next_packet(self) -> Packet | None:
        """The NIC's link is free: the next packet (go-back-N resends from snd_nxt), or None."""
        seq = self.snd_nxt
        if seq >= self.stream_end:
            self.active = False
            return None
        ends = self.message_ends
        index = self.next_end_index
        while ends[index] <= seq:
            index += 1
        self.next_end_index = index
        length = min(self.payload_bytes, ends[index] - seq)
        now = self.eventlist.now_ps
        retransmit = seq < self.snd_max
        pkt = Packet(self.data_route, length + ROCE_HEADER_BYTES, length, seq, 0, now, retransmit, False)
        self.snd_nxt = seq + length
        if self.snd_nxt > self.snd_max:
            self.snd_max = self.snd_nxt
        self.packets_sent += 1
        self.bytes_sent += pkt.size_bytes
        if retransmit:
            self.retransmits += 1
        if not self.rto_deadline_ps:
            self._arm_timer(now)
        return pkt

    def receive_packet(self, pkt: Packet) -> None:
        """An ACK or NAK: everything below `pkt.ack` has arrived; a NAK also asks for all from there."""
        ack = pkt.ack
        now = self.eventlist.now_ps
        if ack > self.snd_una:
            self.snd_una = ack
            ends = self.message_ends
            while ends and ends[0] <= ack:
                ends.popleft()
                self.next_end_index -= 1
            if self.next_end_index < 0:
                self.next_end_index = 0
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
        self._activate()

    def _arm_timer(self, now_ps: int) -> None:
        deadline = now_ps + self.rto_ps
        self.rto_deadline_ps = deadline
        if self.timer_event_ps == _NO_TIMER:
            self.timer_event_ps = deadline
            self.eventlist.schedule_timer(self, deadline)

    def do_next_event(self) -> None:
        """The timer's wake-up: on expiry with data unacknowledged, go back to snd_una; a deadline
        moved later since the wake-up was set sleeps on to it (one entry at a time)."""
        now = self.eventlist.now_ps
        self.timer_event_ps = _NO_TIMER
        deadline = self.rto_deadline_ps
        if not deadline:
            return
        if deadline > now:
            self.timer_event_ps = deadline
            self.eventlist.schedule_timer(self, deadline)
            return
        self.timeouts += 1
        self._arm_timer(now)
        self._go_back(self.snd_una)


class RoceReceiver(PacketSink):
    """The responder of a queue pair: accepts the packet it expects, ACKs every packet, NAKs the
    first out of order once; calls each message's callback when its last byte is in."""

    __slots__ = ("eventlist", "ack_route", "rcv_nxt", "nak_sent", "messages", "ce_received", "acks_sent",
                 "naks_sent", "out_of_order_dropped")

    def __init__(self, eventlist: EventList) -> None:
        self.eventlist = eventlist
        self.ack_route: tuple[PacketSink, ...] = ()
        self.rcv_nxt = 0
        self.nak_sent = False  # a NAK for rcv_nxt is out: packets out of order are dropped silently
        self.messages: deque[tuple[int, Callable[[], None]]] = deque()  # (end_seq, on_delivered), in order
        self.ce_received = 0
        self.acks_sent = 0
        self.naks_sent = 0
        self.out_of_order_dropped = 0

    def expect_message_end(self, end_seq: int, on_delivered: Callable[[], None]) -> None:
        """Call `on_delivered` once every byte below `end_seq` has arrived."""
        self.messages.append((end_seq, on_delivered))

    def receive_packet(self, pkt: Packet) -> None:
        """A data packet arrives."""
        if pkt.ce:
            self.ce_received += 1
        seq = pkt.seq
        if seq == self.rcv_nxt:
            self.rcv_nxt = rcv_nxt = seq + pkt.payload_bytes
            self.nak_sent = False
            self._send(ACK)
            messages = self.messages
            while messages and messages[0][0] <= rcv_nxt:
                messages.popleft()[1]()
        elif seq > self.rcv_nxt:
            self.out_of_order_dropped += 1
            if not self.nak_sent:
                self.nak_sent = True
                self.naks_sent += 1
                self._send(NAK)
        else:
            self._send(ACK)  # a duplicate: say again where we are

    def _send(self, syndrome: int) -> None:
        pkt = Packet(self.ack_route, ROCE_ACK_BYTES, 0, syndrome, self.rcv_nxt, self.eventlist.now_ps, False, False)
        if syndrome == ACK:
            self.acks_sent += 1
        pkt.route[0].receive_packet(pkt)


class RoceConnection:
    """A queue pair from host `src` to host `dst`: requester and responder joined by a data route and
    an ACK route (tuples of links), each starting at its host's `RoceNic`. Persistent: messages
    written one after another go in order."""

    __slots__ = ("flow_id", "src", "dst", "sender", "receiver")

    def __init__(self, eventlist: EventList, payload_bytes: int, rto_ps: int, flow_id: int, src: int, dst: int,
                 data_links: tuple[PacketSink, ...], ack_links: tuple[PacketSink, ...]) -> None:
        nic = data_links[0]
        if not isinstance(nic, RoceNic):
            raise TypeError(f"a RoCE connection starts at its host's RoceNic, not at {type(nic).__name__}")
        self.flow_id = flow_id
        self.src = src
        self.dst = dst
        self.sender = RoceSender(eventlist, nic, payload_bytes, rto_ps)
        self.receiver = RoceReceiver(eventlist)
        self.sender.data_route = tuple(data_links) + (self.receiver,)
        self.receiver.ack_route = tuple(ack_links) + (self.sender,)

    def send_message(self, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Write a message of `nbytes`; `on_delivered` runs when the responder has all of it."""
        if nbytes <= 0:
            raise ValueError(f"message size must be positive, got {nbytes} bytes")
        self.receiver.expect_message_end(self.sender.stream_end + nbytes, on_delivered)
        self.sender.write(nbytes)
