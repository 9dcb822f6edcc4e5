"""Packets, links and the packet-sink interface of the hot path.

A route is an immutable tuple of sinks (links, then the receiving endpoint). A packet carries its
route and the index of the hop it is at, and each link hands it on to `route[hop + 1]`.

A `Link` is an egress port: a FIFO drop-tail queue, the serialiser at the link rate and the wire's
propagation delay, in one component. Because the queue is FIFO and work-conserving, a packet's
departure time is known when it is enqueued (`busy_until_ps`), so the link needs no event per
departure: it keeps the packets on the wire in arrival order (a list linked through the packets,
`next_on_wire`: no container to grow, no method call per hop) and holds at most one pending event,
for the head's arrival at the next hop.

A host's own interface is a `HostNic`: the link with, above it, Linux's transmit path below TCP: the
qdisc (pfifo_fast, a FIFO for traffic of one priority) bounded to `qdisc_bytes`, and TCP Small
Queues' per-connection limit (`tsq_bytes`, read by the sender). A full qdisc does not drop: it stops
the sender that finds it full and wakes it when a packet leaves (`HostSender`).

On a ring, where a port carries both an NPU's own packets and those it forwards, a `RingPort` in
front of the link serves the two round-robin: the buffer limits forwarded packets only, and the NPU's
own packets wait without limit.
"""

from __future__ import annotations

from collections import deque
from random import Random
from typing import Final

from mypy_extensions import mypyc_attr

from .eventlist import EventEntry, EventList, EventSource
from .units import BITS_PER_BYTE, PS_PER_S, bytes_in_duration, serialisation_ps

# IPv4 (20 bytes) + TCP (20 bytes) headers, no options; the overhead a full segment carries on the wire.
TCP_IP_HEADER_BYTES: Final = 40
# The timestamp option (RFC 7323: kind, length, TSval, TSecr = 10 bytes) and the two NOPs that align
# it, as Linux sends it on every segment: with `tcp.timestamps` a header is 52 bytes, and a full
# segment carries 12 bytes less payload (MSS 1460 at MTU 1500: 1448 bytes per segment).
TCP_TIMESTAMP_OPTION_BYTES: Final = 12
# The options of Linux's SYN and SYN-ACK (tcp_syn_options / tcp_synack_options), padded to 4 bytes:
# MSS (4) and window scale (3, after a NOP) always; SACK-permitted (2) with SACK, as two NOPs and the
# option without timestamps; with timestamps the 10-byte option and SACK-permitted share 12 bytes.
SYN_OPTION_BYTES_TIMESTAMPS: Final = 20  # MSS, SACK-permitted (or 2 NOPs), timestamps, NOP + window scale
SYN_OPTION_BYTES_SACK: Final = 12  # MSS, NOP NOP SACK-permitted, NOP + window scale
SYN_OPTION_BYTES_PLAIN: Final = 8  # MSS, NOP + window scale
# RoCEv2 (InfiniBand Architecture Specification, Annex A17): an IB transport packet in UDP (port 4791)
# over IPv4: IPv4 header 20, UDP 8, Base Transport Header 12, invariant CRC 4 bytes around the payload.
# Counted as TCP's packets are, from the IP header on: network.mtu_bytes is the IP packet, and the
# Ethernet header (14) and FCS (4) are counted on neither transport (htsim's RoCE adds 64 bytes to
# each payload: these 44 and Ethernet's 18, rounded up).
ROCE_HEADER_BYTES: Final = 20 + 8 + 12 + 4
# An ACK or NAK: the headers and the ACK Extended Transport Header (AETH, 4 bytes: syndrome and MSN).
ROCE_ACK_BYTES: Final = ROCE_HEADER_BYTES + 4
# A congestion notification packet (RoCEv2 CNP, IB spec Annex A17.9.3): the headers and 16 reserved bytes.
ROCE_CNP_BYTES: Final = ROCE_HEADER_BYTES + 16
# InfiniBand's path MTUs, the payload a RoCE packet may carry (IB spec 7.7.1; a RoCE NIC takes the
# largest whose packet fits the Ethernet MTU: 1024 at 1500, 4096 at 9000)
ROCE_PATH_MTUS: Final = (256, 512, 1024, 2048, 4096)


def syn_bytes(timestamps: bool, sack: bool) -> int:
    """Size on the wire of a SYN (and of its SYN-ACK, which carries the same options) with the
    options Linux sends: 60 bytes with timestamps, 52 with SACK alone, 48 with neither."""
    if timestamps:
        options = SYN_OPTION_BYTES_TIMESTAMPS
    elif sack:
        options = SYN_OPTION_BYTES_SACK
    else:
        options = SYN_OPTION_BYTES_PLAIN
    return TCP_IP_HEADER_BYTES + options


def wire_bytes(payload_bytes: int, segment_bytes: int, header_bytes: int = TCP_IP_HEADER_BYTES) -> int:
    """What a message of `payload_bytes` puts on the wire: one header of `header_bytes` (IPv4 + TCP
    and its options) per segment of at most `segment_bytes` of payload."""
    segments = -(-payload_bytes // segment_bytes)
    return payload_bytes + segments * header_bytes


def unloaded_latency_ps(route: tuple[Link, ...], payload_bytes: int, segment_bytes: int,
                        header_bytes: int = TCP_IP_HEADER_BYTES) -> int:
    """A message's latency on an idle route, before its own serialisation: the propagation of every
    hop and the store-and-forward of one packet (min(segment, payload) + headers) at each hop after
    the first. The fluid backends (analytical, alpha_beta) charge it to every message."""
    packet_bytes = min(segment_bytes, payload_bytes) + header_bytes
    return idle_transit_ps(route, packet_bytes) - serialisation_ps(packet_bytes, route[0].rate_bps)


def idle_transit_ps(route: tuple[Link, ...], packet_bytes: int) -> int:
    """From the first bit of a packet of `packet_bytes` leaving to its last bit arriving at the end of
    an idle route: its serialisation and the propagation at every hop (store and forward)."""
    return sum(serialisation_ps(packet_bytes, link.rate_bps) + link.latency_ps for link in route)


@mypyc_attr(allow_interpreted_subclasses=True)
class PacketSink(EventSource):
    """Base of anything a packet can be handed to (links, TCP endpoints, test taps)."""

    __slots__ = ()

    def receive_packet(self, pkt: Packet) -> None:
        """Take `pkt`: queue it, consume it or hand it on to `pkt.route[pkt.hop + 1]`."""
        raise NotImplementedError


class Packet:
    """One IP packet: a TCP data segment or a pure ACK.

    `seq` and `ack` are byte sequence numbers; `size_bytes` is the size on the wire (headers
    included); `payload_bytes` the TCP payload. On an ACK, `sent_ps` and `is_retransmit` echo the data
    segment that triggered it (RTT samples under Karn's rule: none from a retransmitted segment; RACK
    and the detection of lost retransmissions); `ts_echo_ps` is the TSecr of the timestamp option
    (RFC 7323; only with `tcp.timestamps`, whose TSval is the send time). `arrival_ps` and
    `next_on_wire` are set by the link carrying the packet: when it reaches the next hop, and the
    packet behind it on that link's wire (or in a `PausableLink`'s queue, where it waits on no wire).
    `below_end_ps` and `next_below` are its sender's (TCP Small Queues): when its host interface will
    have sent it, and the sender's next packet handed down.
    """

    # Compiled, attributes lie in the object in this order: what every hop reads (route, hop, the
    # wire's links, the size) comes first, within the cache line of the object's header, since a
    # packet queued behind many others is cold when its link hands it on.
    __slots__ = (
        "route", "hop", "next_on_wire", "arrival_ps", "size_bytes", "payload_bytes", "seq", "ack",
        "sent_ps", "ts_echo_ps", "sack_blocks", "is_retransmit", "ecn_capable", "ce", "ece", "cwr",
        "below_end_ps", "next_below",
    )

    route: tuple[PacketSink, ...]
    hop: int
    next_on_wire: Packet | None
    arrival_ps: int
    size_bytes: int
    payload_bytes: int
    seq: int
    ack: int
    sent_ps: int
    ts_echo_ps: int
    sack_blocks: tuple
    is_retransmit: bool
    ecn_capable: bool
    ce: bool
    ece: bool
    cwr: bool
    below_end_ps: int
    next_below: Packet | None

    def __init__(
        self,
        route: tuple[PacketSink, ...],
        size_bytes: int,
        payload_bytes: int,
        seq: int,
        ack: int,
        sent_ps: int,
        is_retransmit: bool,
        ecn_capable: bool,
    ) -> None:
        self.renew(route, size_bytes, payload_bytes, seq, ack, sent_ps, is_retransmit, ecn_capable)

    def renew(self, route: tuple[PacketSink, ...], size_bytes: int, payload_bytes: int, seq: int, ack: int,
              sent_ps: int, is_retransmit: bool, ecn_capable: bool) -> None:
        """Make this a new packet, as the constructor's arguments say: every attribute set afresh. TCP's
        endpoints reuse so the packet they last received, once done with it, for the next they send
        (`TcpSender.spare`, `TcpReceiver.spare`): a packet less to allocate and free."""
        self.route = route
        self.hop = 0
        self.next_on_wire = None
        self.arrival_ps = 0
        self.size_bytes = size_bytes
        self.payload_bytes = payload_bytes
        self.seq = seq
        self.ack = ack
        self.sent_ps = sent_ps
        self.ts_echo_ps = 0
        self.sack_blocks = ()
        self.is_retransmit = is_retransmit
        self.ecn_capable = ecn_capable
        self.ce = False
        self.ece = False
        self.cwr = False
        self.below_end_ps = 0
        self.next_below = None


class RouteDealer:
    """A connection's data routes over its equal-cost paths with `network.load_balancing=spray`, dealt
    round robin: its k-th data packet (a retransmission too) takes `routes[k % len(routes)]`. Route 0 is the
    path ECMP would give the whole connection (`Topology.spray_routes`): connections start spread as ECMP
    spreads them."""

    __slots__ = ("routes", "_turn")

    def __init__(self, routes: tuple[tuple[PacketSink, ...], ...]) -> None:
        self.routes = routes
        self._turn = 0  # the route of the next packet

    def next_route(self) -> tuple[PacketSink, ...]:
        """The route of the next data packet."""
        turn = self._turn
        route = self.routes[turn]
        turn += 1
        self._turn = 0 if turn == len(self.routes) else turn
        return route


def route_dealer(spray_links: tuple[tuple[PacketSink, ...], ...], receiver: PacketSink) -> RouteDealer | None:
    """The `RouteDealer` of a connection whose data may take the routes `spray_links` to `receiver`
    (None where it has none: one path, or per-flow ECMP)."""
    return RouteDealer(tuple(tuple(links) + (receiver,) for links in spray_links)) if spray_links else None


class Link(PacketSink):
    """An egress port: drop-tail FIFO of `buffer_bytes`, serialisation at `rate_bps`, then
    `latency_ps` of propagation to the next sink of each packet's route.

    Queue occupancy seen by an arriving packet is the number of bytes still to be serialised ahead
    of it (the unsent part of the packet on the wire included). A packet is dropped when that
    occupancy exceeds `buffer_bytes` (so a zero buffer still accepts a packet on an idle port) and
    CE-marked, if ECN-capable, when it exceeds `ecn_threshold_bytes`. Both comparisons are done in
    picoseconds of backlog, which is exact for a FIFO and needs no per-packet conversion.

    With `jitter_ps` a packet reaches the next hop a random time in [0, jitter) later than the
    propagation alone gives, in order (a host's transmit timing, `host.tx_jitter_ns`): it costs the
    link no throughput, since the serialiser is not held.
    """

    __slots__ = (
        "name", "eventlist", "rate_bps", "latency_ps", "buffer_bytes", "ecn_threshold_bytes",
        "_buffer_ps", "_ecn_threshold_ps", "_ps_per_byte_num", "_ps_per_byte", "busy_until_ps",
        "_wire_head", "_wire_tail", "_loss_rate", "_rng", "_jitter_ps", "_jitter_rng", "_event", "packets_sent",
        "bytes_sent", "drops",
        "ecn_marks", "max_backlog_ps",
    )

    def __init__(
        self,
        eventlist: EventList,
        name: str,
        rate_bps: int,
        latency_ps: int,
        buffer_bytes: int | None = None,
        ecn_threshold_bytes: int | None = None,
        loss_rate: float = 0.0,
        rng: Random | None = None,
        jitter_ps: int = 0,
        jitter_rng: Random | None = None,
    ) -> None:
        if rate_bps <= 0:
            raise ValueError(f"link {name}: rate_bps must be positive, got {rate_bps}")
        self.name = name
        self.eventlist = eventlist
        self.rate_bps = rate_bps
        self.latency_ps = latency_ps
        self.buffer_bytes = buffer_bytes
        self.ecn_threshold_bytes = ecn_threshold_bytes
        # bytes * 8 bits/byte * 1e12 ps/s / rate = picoseconds; the numerator factor is precomputed.
        self._ps_per_byte_num = BITS_PER_BYTE * PS_PER_S
        exact = self._ps_per_byte_num % rate_bps == 0
        self._ps_per_byte = self._ps_per_byte_num // rate_bps if exact else 0  # 0: use the division
        # larger than any simulated time, so the comparison never triggers; below 2**62, so that compiled
        # code keeps it a native integer (1 << 62 was an object, and every comparison with it boxed the
        # backlog and called Python's rich comparison: 4 % of a bulk transfer's time)
        no_limit = 1 << 61
        self._buffer_ps = no_limit if buffer_bytes is None else serialisation_ps(buffer_bytes, rate_bps)
        self._ecn_threshold_ps = (
            no_limit if ecn_threshold_bytes is None else serialisation_ps(ecn_threshold_bytes, rate_bps)
        )
        self.busy_until_ps = 0
        # the packets on the wire, in order of arrival_ps: the first, and the last (None if none)
        self._wire_head: Packet | None = None
        self._wire_tail: Packet | None = None
        self._event = EventEntry(self)  # its one pending event (the head's arrival), scheduled again and again
        if loss_rate > 0.0 and rng is None:
            raise ValueError(f"link {name}: random loss needs a seeded rng")
        self._loss_rate = loss_rate
        self._rng = rng if loss_rate > 0.0 else None  # None: no random loss, no draw per packet
        if jitter_ps > 0 and jitter_rng is None:
            raise ValueError(f"link {name}: jitter needs a seeded rng")
        self._jitter_ps = jitter_ps
        self._jitter_rng = jitter_rng if jitter_ps > 0 else None  # None: no jitter, no draw per packet
        self.packets_sent = 0
        self.bytes_sent = 0
        self.drops = 0
        self.ecn_marks = 0
        self.max_backlog_ps = 0

    def receive_packet(self, pkt: Packet) -> None:
        """Enqueue `pkt` (or drop it), fixing its departure and its arrival at the next hop."""
        eventlist = self.eventlist
        now = eventlist.now_ps
        busy_until = self.busy_until_ps
        if busy_until > now:  # a backlog: the buffer and ECN checks apply
            if not self.admit(pkt, busy_until - now):
                return
        else:
            busy_until = now
        if self._rng is not None and self._rng.random() < self._loss_rate:
            self.drops += 1
            return
        size = pkt.size_bytes
        ps_per_byte = self._ps_per_byte
        # units.serialisation_ps, inlined: exact integer ps per byte where the rate allows (10/25/100/400 Gb/s)
        busy_until += size * ps_per_byte if ps_per_byte else size * self._ps_per_byte_num // self.rate_bps
        self.busy_until_ps = busy_until
        self.packets_sent += 1
        self.bytes_sent += size
        arrival_ps = busy_until + self.latency_ps
        tail = self._wire_tail
        jitter_rng = self._jitter_rng
        if jitter_rng is not None:
            # a random delay in [0, jitter) before the next hop, never overtaking the packet ahead
            arrival_ps += int(jitter_rng.random() * self._jitter_ps)
            if tail is not None and arrival_ps < tail.arrival_ps:
                arrival_ps = tail.arrival_ps
        pkt.arrival_ps = arrival_ps
        self._wire_tail = pkt
        if tail is None:
            self._wire_head = pkt
            eventlist.schedule_entry(self._event, arrival_ps)
        else:
            tail.next_on_wire = pkt

    def serialisation_of_ps(self, size_bytes: int) -> int:
        """`units.serialisation_ps` at this link's rate: exact integer ps per byte where the rate allows."""
        ps_per_byte = self._ps_per_byte
        return size_bytes * ps_per_byte if ps_per_byte else size_bytes * self._ps_per_byte_num // self.rate_bps

    def admit(self, pkt: Packet, backlog_ps: int) -> bool:
        """The drop-tail and ECN rules for `pkt` arriving behind `backlog_ps` of queued work: False
        (a drop, counted) above the buffer; else CE-marks it above the threshold, records the backlog
        and returns True."""
        if backlog_ps > self._buffer_ps:
            self.drops += 1
            return False
        if backlog_ps > self._ecn_threshold_ps and pkt.ecn_capable:
            pkt.ce = True
            self.ecn_marks += 1
        if backlog_ps > self.max_backlog_ps:
            self.max_backlog_ps = backlog_ps
        return True

    def do_next_event(self) -> None:
        """The head packet reaches the next hop; schedule the next head, if any."""
        pkt = self._wire_head
        assert pkt is not None  # the link's event is pending only while packets are on the wire
        following = pkt.next_on_wire
        self._wire_head = following
        if following is None:
            self._wire_tail = None
        else:
            pkt.next_on_wire = None
            self.eventlist.schedule_entry(self._event, following.arrival_ps)
        hop = pkt.hop + 1
        pkt.hop = hop
        pkt.route[hop].receive_packet(pkt)

    @property
    def max_queue_bytes(self) -> int:
        """Largest backlog an arriving packet saw, in bytes."""
        return bytes_in_duration(self.max_backlog_ps, self.rate_bps)


@mypyc_attr(allow_interpreted_subclasses=True)
class HostSender(PacketSink):
    """Base of a sender a `HostNic` can stop and wake (TCP's sending half)."""

    __slots__ = ()

    def on_qdisc_room(self) -> None:
        """The qdisc that stopped this sender has room again: send what the windows allow."""
        raise NotImplementedError


class HostNic(Link):
    """A host's egress interface: the qdisc above the device, then the link.

    The qdisc is pfifo_fast (Linux's default root qdisc, net/sched/sch_generic.c): three priority
    bands, and all of TCP's traffic here is in one, so a FIFO; with the link it is one work-conserving
    FIFO, so a packet's end of serialisation is known when it is queued, and the link's arithmetic
    serves both. Its limit, `qdisc_bytes`, is `host.qdisc_packets` full-size packets (txqueuelen,
    1,000) counted in bytes: the interface holds no more than that, the packet being sent included
    (a bulk transfer's segments are full-size, so this is Linux's packet count; a small packet counts
    for its share). Where Linux's pfifo_fast would drop a segment at a full queue (TCP keeps it and
    tries again later), here the sender asks first (`has_room`) and, if the queue is full, waits in
    line (`wait_for_room`) to be woken, in order, as the queue drains: TCP is held back, nothing is
    dropped inside a host. Pure ACKs and segments sent one at a time go in regardless (a packet or
    two over the limit at most).

    `tsq_bytes` is TCP Small Queues' cap (net.ipv4.tcp_limit_output_bytes; 0: no TSQ), which every
    sender on this host applies to its own bytes below TCP (`TcpSender`).
    """

    __slots__ = ("tsq_bytes", "_limit_ps", "_waiting", "_woken", "_wakeup", "_wakeup_pending",
                 "sender_stops")

    def __init__(self, eventlist: EventList, name: str, rate_bps: int, latency_ps: int,
                 qdisc_bytes: int | None, tsq_bytes: int, loss_rate: float = 0.0,
                 rng: Random | None = None, jitter_ps: int = 0, jitter_rng: Random | None = None) -> None:
        super().__init__(eventlist, name, rate_bps, latency_ps, loss_rate=loss_rate, rng=rng, jitter_ps=jitter_ps,
                         jitter_rng=jitter_rng)
        self.tsq_bytes = tsq_bytes
        # the limit as a backlog (exact for a FIFO, as the switch ports' buffers); 0: no limit
        self._limit_ps = 0 if qdisc_bytes is None else serialisation_ps(qdisc_bytes, rate_bps)
        self._waiting: deque[HostSender] = deque()  # senders stopped by a full qdisc, in order
        self._woken: HostSender | None = None  # the sender being woken, which goes before those waiting
        self._wakeup = EventEntry(_QdiscWakeup(self))
        self._wakeup_pending = False
        self.sender_stops = 0  # times a sender found the qdisc full

    def has_room(self, sender: HostSender, now_ps: int) -> bool:
        """May `sender` queue one more data segment now? Not while the interface holds its limit,
        nor while other senders wait for room (they go first), unless it is the one being woken."""
        limit_ps = self._limit_ps
        if not limit_ps:
            return True
        if self._waiting and sender is not self._woken:
            return False
        return self.busy_until_ps - now_ps < limit_ps

    def wait_for_room(self, sender: HostSender) -> None:
        """Stop `sender` until the qdisc has room for it (woken in the order they stopped)."""
        self.sender_stops += 1
        self._waiting.append(sender)
        self._schedule_wakeup()

    def _schedule_wakeup(self) -> None:
        """Wake when the backlog has fallen below the limit (once: the entry is scheduled at most once)."""
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self.eventlist.schedule_entry(self._wakeup, self.busy_until_ps - self._limit_ps + 1)

    def wake_senders(self) -> None:
        """The queue has drained below its limit: wake waiting senders, first come first, while it
        has room (a woken sender that fills it again waits at the back)."""
        self._wakeup_pending = False
        waiting = self._waiting
        now = self.eventlist.now_ps
        while waiting and self.busy_until_ps - now < self._limit_ps:
            sender = waiting.popleft()
            self._woken = sender
            sender.on_qdisc_room()
        self._woken = None
        if waiting:
            self._schedule_wakeup()


class _QdiscWakeup(EventSource):
    """The event source of a `HostNic`'s wake-ups (the link's own entry carries its wire)."""

    __slots__ = ("nic",)

    def __init__(self, nic: HostNic) -> None:
        self.nic = nic

    def do_next_event(self) -> None:
        """Wake the senders the qdisc stopped."""
        self.nic.wake_senders()


class RingPort(PacketSink):
    """A ring NPU's egress port to a neighbour. It stands for its `link` in routes and serves two
    inputs round-robin, packet by packet, as a router's output arbiter serves its input ports: the
    NPU's own packets (those at the first hop of their route), in an unlimited queue as a host NIC's
    (a host qdisc backs up into TCP rather than dropping), and the packets it forwards, under the
    link's drop-tail buffer and ECN threshold (`Link.admit`, with the backlog counted as the
    forwarded packets waiting plus the unsent part of the packet on the link).

    The link serialises and propagates: the port hands it a packet only when it is idle, so the
    link's own queue stays empty, and the port's drops, marks and backlog land in the link's
    counters (the `links` table reads them there). Holds at most one pending event: the link's end
    of serialisation, while packets wait.
    """

    __slots__ = ("link", "eventlist", "_own", "_forwarded", "_forwarded_ps", "_own_turn", "_event")

    def __init__(self, eventlist: EventList, link: Link) -> None:
        self.link = link
        self.eventlist = eventlist
        self._own: deque[Packet] = deque()
        self._forwarded: deque[Packet] = deque()
        self._forwarded_ps = 0  # serialisation time of the forwarded packets waiting
        self._own_turn = True  # whose packet goes next when both inputs have one waiting
        self._event = EventEntry(self)

    def receive_packet(self, pkt: Packet) -> None:
        """Hand `pkt` to an idle link with nothing waiting; else queue it (a forwarded packet only
        if the buffer has room)."""
        link = self.link
        now = self.eventlist.now_ps
        idle = link.busy_until_ps <= now
        waiting = bool(self._own) or bool(self._forwarded)
        if idle and not waiting:
            link.receive_packet(pkt)
            return
        if pkt.hop == 0:
            self._own.append(pkt)
        else:
            serialising_ps = link.busy_until_ps - now if not idle else 0
            if not link.admit(pkt, serialising_ps + self._forwarded_ps):
                return
            self._forwarded.append(pkt)
            self._forwarded_ps += serialisation_ps(pkt.size_bytes, link.rate_bps)
        if not waiting:
            self.eventlist.schedule_entry(self._event, link.busy_until_ps)

    def do_next_event(self) -> None:
        """The link is idle: hand it the next packet, alternating between the inputs with one
        waiting; wake again when it is idle, while packets wait."""
        link, own, forwarded, now = self.link, self._own, self._forwarded, self.eventlist.now_ps
        while (own or forwarded) and link.busy_until_ps <= now:  # a random loss leaves the link idle
            if own and (self._own_turn or not forwarded):
                pkt = own.popleft()
                self._own_turn = False
            else:
                pkt = forwarded.popleft()
                self._forwarded_ps -= serialisation_ps(pkt.size_bytes, link.rate_bps)
                self._own_turn = True
            link.receive_packet(pkt)
        if own or forwarded:
            self.eventlist.schedule_entry(self._event, link.busy_until_ps)


class PausableLink(Link):
    """An egress port that IEEE 802.1Qbb PFC can pause, and the ingress accounting of the port it
    feeds (one class, every packet).

    Unlike `Link`, a packet's departure is not known when it is queued (a pause may come first): the
    port keeps its waiting packets in a FIFO, serialises one at a time and starts none while paused;
    a pause stops it after the packet being sent. Its end of serialisation (the packet goes on the
    wire, its ingress port's count falls, the next packet starts) is an event only where one is
    needed to keep every result and the order of events as they would be with one:
    - a packet that starts cannot be stopped, so it goes on the wire when it starts if a packet
      arriving after its end is on the wire already (its arrival then scheduled as it would be at
      the end); else its end is an event;
    - if a switch's ingress port counts it for PFC, its count may fall when it starts only if no one
      reads the count before the end (no arrival by that port, no RESUME pending: `unobserved_until`),
      the packet starts in an event of its own time and none waits behind it; else its end is an event.
      A packet queued behind such an end later makes it the event it stands for;
    - `end_events` (DCQCN's ports and NICs: their RED draws and paced gaps) keeps an event at every end.
    The port runs the ends that are not events when it is next looked at (`catch_up`), each as of its
    own time: at its wire's next arrival (which comes after that end) and before anything touches the
    port (a packet, a PFC frame; a NIC's senders too). An end due at the very instant of the event at
    hand runs first if it would have as an event: by the seq it would have had (reserved when its
    packet started), or, for a packet started in a catch_up, if it started no later than that event
    was scheduled.

    As the ingress port of the switch it leads to (`pfc_xoff_bytes` set; not into a host: hosts never
    pause their switch), it counts `ingress_bytes`, the bytes that came in by it and have not finished
    leaving the switch: above XOFF (checked when a packet has arrived) its switch sends this link's
    sender a PAUSE, and below XON (checked when a packet finishes leaving) a RESUME. Pause frames are
    not serialised and arrive after the link's propagation delay (as htsim's `lossless_input`: explicit
    pause and resume, one class per port, so ACKs stop too). With PFC its egress queue has no buffer
    limit (`buffer_bytes` None): the pauses bound it, and nothing is dropped; without, it drops as a
    `Link` does. `pause_frames` counts the PAUSEs its sender received, `paused_ps` the time it spent paused.

    With `red` (Kmin, Kmax in bytes, Pmax: DCQCN's switches) an ECN-capable packet is CE-marked with a
    probability rising from 0 at a queue of Kmin bytes to Pmax at Kmax, and always above Kmax, on the
    queue it finds (drawn from `red_rng`).
    """

    __slots__ = ("_queue_head", "_queue_tail", "_queued_ps", "_sending", "_started_ps", "_end_event", "_end_seq",
                 "_left_early", "_early_until_ps", "_serialised", "end_events",
                 "paused", "_paused_since_ps", "paused_ps", "pause_frames", "pfc_xoff_bytes", "pfc_xon_bytes",
                 "ingress_bytes", "_pause_sent", "_red_kmin_ps", "_red_kmax_ps", "_red_pmax", "_red_rng")

    def __init__(self, eventlist: EventList, name: str, rate_bps: int, latency_ps: int,
                 pfc_xoff_bytes: int = 0, pfc_xon_bytes: int = 0, buffer_bytes: int | None = None,
                 red: tuple[int, int, float] | None = None, red_rng: Random | None = None) -> None:
        super().__init__(eventlist, name, rate_bps, latency_ps, buffer_bytes=buffer_bytes)
        if red is not None and red_rng is None:
            raise ValueError(f"link {name}: RED marking needs a seeded rng")
        kmin, kmax, pmax = red if red is not None else (0, 1, 0.0)
        # the thresholds as backlogs, as the buffer's (exact for a FIFO); no rng: no marking, no draw
        self._red_kmin_ps = serialisation_ps(kmin, rate_bps)
        self._red_kmax_ps = serialisation_ps(kmax, rate_bps)
        self._red_pmax = pmax
        self._red_rng = red_rng if red is not None else None
        # the packets waiting, in order, linked through `next_on_wire` (none is on a wire while it
        # waits): the first and the last (None if none); a list of the packets' own, not a deque,
        # whose append and popleft compiled code calls by name
        self._queue_head: Packet | None = None
        self._queue_tail: Packet | None = None
        self._queued_ps = 0  # serialisation time of the packets waiting
        self._sending: Packet | None = None  # the packet being sent (or its end not yet run), done at busy_until_ps
        self._started_ps = 0  # when it started
        self._end_event = False  # whether that end is an event (else `catch_up` runs it)
        self._end_seq = -1  # the seq reserved for that end where it was made lazy in real time
        self._left_early = False  # that end made an event late: on the wire and counted out already
        self._early_until_ps = 0  # as an ingress port: the latest end of a packet counted out early
        self._serialised = EventEntry(_SerialisationEnd(self))
        # True: an event at every end of serialisation (DCQCN's: its RED draws and paced gaps make the
        # order of events at one instant depend on when each end was scheduled)
        self.end_events = red is not None
        self.paused = False
        self._paused_since_ps = 0
        self.paused_ps = 0
        self.pause_frames = 0
        self.pfc_xoff_bytes = pfc_xoff_bytes  # 0: its far end sends no pauses (a host, or PFC off)
        self.pfc_xon_bytes = pfc_xon_bytes
        self.ingress_bytes = 0
        self._pause_sent = False

    def receive_packet(self, pkt: Packet) -> None:
        """Queue `pkt` (or drop it above the buffer; RED may mark it); start it at once if the port is free."""
        self.catch_up()
        now = self.eventlist.now_ps
        backlog_ps = self._queued_ps + (self.busy_until_ps - now if self._sending is not None else 0)
        if backlog_ps > 0 and not self.admit(pkt, backlog_ps):  # with PFC no buffer limit: never a drop
            return
        red_rng = self._red_rng
        if red_rng is not None and pkt.ecn_capable and backlog_ps > self._red_kmin_ps:
            if backlog_ps >= self._red_kmax_ps or red_rng.random() < self._red_pmax * (
                    backlog_ps - self._red_kmin_ps) / (self._red_kmax_ps - self._red_kmin_ps):
                pkt.ce = True
                self.ecn_marks += 1
        if self._sending is None and self._queue_head is None and not self.paused:
            self._start(pkt, now)  # as start_next would take it from the queue, where it would be alone
            return
        tail = self._queue_tail
        self._queue_tail = pkt
        if tail is None:
            self._queue_head = pkt
        else:
            tail.next_on_wire = pkt
        self._queued_ps += self.serialisation_of_ps(pkt.size_bytes)
        if self._sending is None:
            if not self.paused:
                self.start_next(now)
        elif not self._end_event and self._left_early:
            # behind an end made lazy with its ingress port's count lowered early: that end becomes the
            # event it stands for (its seq kept), so the next packet starts on time
            self._end_event = True
            self.eventlist.schedule_entry_seq(self._serialised, self.busy_until_ps, self._end_seq, self._started_ps)

    @property
    def queue_bytes(self) -> int:
        """The queue an arriving packet would find now, in bytes: the packets waiting and the unsent
        part of the one being sent (what RED marks on), its ends of serialisation due by now run first."""
        self.catch_up()
        backlog_ps = self._queued_ps + (self.busy_until_ps - self.eventlist.now_ps if self._sending is not None else 0)
        return bytes_in_duration(backlog_ps, self.rate_bps)

    def next_packet(self, now_ps: int) -> Packet | None:
        """The packet to serialise from `now_ps`, taken from the queue (None: nothing to send)."""
        pkt = self._queue_head
        if pkt is None:
            return None
        following = pkt.next_on_wire
        self._queue_head = following
        if following is None:
            self._queue_tail = None
        else:
            pkt.next_on_wire = None
        self._queued_ps -= self.serialisation_of_ps(pkt.size_bytes)
        return pkt

    def start_next(self, start_ps: int) -> None:
        """Start serialising the next packet, if there is one, at `start_ps` (the port free and not
        paused): it goes on the wire; its end is an event only where one is needed."""
        pkt = self.next_packet(start_ps)
        if pkt is not None:
            self._start(pkt, start_ps)

    def _start(self, pkt: Packet, start_ps: int) -> None:
        """Start serialising `pkt`, the next packet, at `start_ps` (see `start_next`)."""
        size = pkt.size_bytes
        self._sending = pkt
        self._started_ps = start_ps
        end_ps = start_ps + self.serialisation_of_ps(size)
        self.busy_until_ps = end_ps
        self.packets_sent += 1
        self.bytes_sent += size
        tail = self._wire_tail
        lazy = not self.end_events and tail is not None and tail.arrival_ps > end_ps
        self._left_early = False
        hop = pkt.hop
        ingress = pkt.route[hop - 1] if lazy and hop else None  # looked up only where it matters
        if isinstance(ingress, PausableLink) and ingress.pfc_xoff_bytes:
            lazy = start_ps == self.eventlist.now_ps and self._queue_head is None and ingress.unobserved_until(end_ps)
            if lazy:
                ingress.ingress_bytes -= size
                if end_ps > ingress._early_until_ps:
                    ingress._early_until_ps = end_ps
                self._left_early = True
        if lazy:
            self._end_event = False
            # the seq its end would have had as an event, where it starts now (not in a catch_up)
            self._end_seq = self.eventlist.reserve_seq() if start_ps == self.eventlist.now_ps else -1
            self._put_on_wire(pkt)
        else:
            self._end_event = True
            self.eventlist.schedule_entry(self._serialised, end_ps)

    def _put_on_wire(self, pkt: Packet) -> None:
        """`pkt`, done at busy_until_ps, reaches the next hop a latency later, behind those on the wire."""
        pkt.arrival_ps = self.busy_until_ps + self.latency_ps
        tail = self._wire_tail
        self._wire_tail = pkt
        if tail is None:
            self._wire_head = pkt
            self.eventlist.schedule_entry(self._event, pkt.arrival_ps)
        else:
            tail.next_on_wire = pkt

    def catch_up(self) -> None:
        """Run the ends of serialisation that are not events and are due by now, each as of its time: one
        due now only if its packet started no later than the event at hand was scheduled (the order the end,
        as an event scheduled when the packet started, would have taken)."""
        eventlist = self.eventlist
        now = eventlist.now_ps
        while self._sending is not None and not self._end_event:
            end_ps = self.busy_until_ps
            if end_ps > now:
                return
            if end_ps == now:
                end_seq = self._end_seq
                if end_seq >= 0 and end_seq > eventlist.current_seq or (
                        end_seq < 0 and self._started_ps > eventlist.scheduled_ps):
                    return
            self._end(end_ps)

    def serialisation_done(self) -> None:
        """The end of serialisation that is an event: the packet goes on the wire now, and its ingress
        port's count falls (a RESUME below XON)."""
        pkt = self._sending
        assert pkt is not None  # the event is pending only while a packet is being sent
        if not self._left_early:
            self._put_on_wire(pkt)
            hop = pkt.hop
            if hop:  # it came into this switch by the link before it
                ingress = pkt.route[hop - 1]
                if isinstance(ingress, PausableLink) and ingress.pfc_xoff_bytes:
                    ingress.left_switch(pkt.size_bytes)
        self._end(self.eventlist.now_ps)

    def unobserved_until(self, time_ps: int) -> bool:
        """Whether lowering this ingress port's count now, rather than at `time_ps`, changes nothing: no
        RESUME pending (an end compares the count with XON), and every packet arriving by it until then
        (each compares the count with XOFF) finds the count at most XOFF either way. A count lowered
        early before is then still due to fall (`_early_until_ps`): only no arrival at all will do."""
        if self._pause_sent:
            return False
        now = self.eventlist.now_ps
        room = self.pfc_xoff_bytes - self.ingress_bytes if now >= self._early_until_ps else -1
        pkt = self._wire_head
        while pkt is not None and pkt.arrival_ps <= time_ps:
            room -= pkt.size_bytes
            if room < 0:
                return False
            pkt = pkt.next_on_wire
        if pkt is not None:
            return True  # the others on the wire arrive after it
        sending = self._sending
        if sending is not None and self._end_event:  # it reaches the wire at its end
            arrival_ps = self.busy_until_ps + self.latency_ps
            if arrival_ps > time_ps:
                return True
            room -= sending.size_bytes
            if room < 0:
                return False
            return arrival_ps >= time_ps  # the next arrives after it by at least its serialisation
        # the next packet starts no sooner than the one on the wire ends (or now), and arrives after
        start_ps = self.busy_until_ps if sending is not None else now
        return start_ps + self.latency_ps >= time_ps

    def _end(self, end_ps: int) -> None:
        """The packet being sent has left at `end_ps` (on the wire): the next starts unless a pause has come."""
        self._sending = None
        if not self.paused:
            self.start_next(end_ps)

    def do_next_event(self) -> None:
        """The head packet reaches the next hop; a switch counts it on this, its ingress port."""
        self.catch_up()
        pkt = self._wire_head
        assert pkt is not None
        if self.pfc_xoff_bytes and pkt.hop + 2 < len(pkt.route):  # the next hop is a switch's egress port
            self.ingress_bytes += pkt.size_bytes
            if self.ingress_bytes > self.pfc_xoff_bytes and not self._pause_sent:
                self._pause_sent = True
                self.eventlist.schedule(_PfcFrame(self, True), self.eventlist.now_ps + self.latency_ps)
        super().do_next_event()

    def left_switch(self, size_bytes: int) -> None:
        """A packet that came in by this link has finished leaving its switch: RESUME below XON."""
        self.ingress_bytes -= size_bytes
        if self._pause_sent and self.ingress_bytes < self.pfc_xon_bytes:
            self._pause_sent = False
            self.eventlist.schedule(_PfcFrame(self, False), self.eventlist.now_ps + self.latency_ps)

    def pfc_frame(self, pause: bool) -> None:
        """A PAUSE (or RESUME) from the far end reaches this port's sender."""
        self.catch_up()
        now = self.eventlist.now_ps
        if pause:
            self.pause_frames += 1
            if not self.paused:
                self.paused = True
                self._paused_since_ps = now
        elif self.paused:
            self.paused = False
            self.paused_ps += now - self._paused_since_ps
            if self._sending is None:
                self.start_next(now)

    def time_paused_ps(self, end_ps: int) -> int:
        """Time this port has spent paused up to `end_ps` (a pause still in force counted to then)."""
        return self.paused_ps + (max(0, end_ps - self._paused_since_ps) if self.paused else 0)


class _SerialisationEnd(EventSource):
    """The event source of a `PausableLink`'s ends of serialisation (its own entry carries its wire)."""

    __slots__ = ("link",)

    def __init__(self, link: PausableLink) -> None:
        self.link = link

    def do_next_event(self) -> None:
        """The packet being sent has left."""
        self.link.serialisation_done()


class _PfcFrame(EventSource):
    """A PAUSE or RESUME frame on its way to a `PausableLink`'s sender (a few per congestion episode)."""

    __slots__ = ("link", "pause")

    def __init__(self, link: PausableLink, pause: bool) -> None:
        self.link = link
        self.pause = pause

    def do_next_event(self) -> None:
        """It arrives."""
        self.link.pfc_frame(self.pause)


@mypyc_attr(allow_interpreted_subclasses=True)
class NicSender(PacketSink):
    """Base of a sender a `RoceNic` serves (a RoCE queue pair's requester)."""

    __slots__ = ()

    def ready_ps(self) -> int:
        """When its rate limiter lets it send its next packet (at most now: at once)."""
        raise NotImplementedError

    def next_packet(self, now_ps: int) -> Packet | None:
        """Its next packet to send at `now_ps` (the NIC's time for it, which may be before the event
        list's), or None when it has nothing more (the NIC then forgets it until it is `activate`d again)."""
        raise NotImplementedError


class RoceNic(PausableLink):
    """A host's RDMA NIC: its own link, whenever free (and not paused) taking the next packet: first
    from its FIFO (ACKs, NAKs, CNPs and any packet it forwards), else from its active senders in
    turn, one packet each (round robin among queue pairs), skipping a sender its rate limiter holds
    back (DCQCN's); with none ready it wakes when the first is. A sender alone at line rate is paced
    by the link itself. A sender's packets are made when they go, so a go-back-N rewind leaves
    nothing stale queued.

    Its ends of serialisation are run as a `PausableLink`'s, and also before anything touches its
    senders (a write, an ACK, a timer: `catch_up`). The packets it forwards came in by a link into its
    host, which counts no ingress bytes (hosts never pause their switch)."""

    __slots__ = ("_senders", "_turn", "_wakeup", "_wakeup_entry", "_wakeups_pending", "_wakeup_ps")

    def __init__(self, eventlist: EventList, name: str, rate_bps: int, latency_ps: int,
                 pfc_xoff_bytes: int = 0, pfc_xon_bytes: int = 0) -> None:
        super().__init__(eventlist, name, rate_bps, latency_ps, pfc_xoff_bytes, pfc_xon_bytes)
        # the active senders in a ring, `_turn` the index of the next to serve (a list, not a deque,
        # whose popleft and append compiled code calls by name: one each a packet)
        self._senders: list[NicSender] = []
        self._turn = 0
        self._wakeup = _NicWakeup(self)
        # A wake-up is scheduled on this entry when none of the NIC's is in the heap, else (an earlier one
        # supersedes one pending, which stays until it comes) on a new entry: a DCQCN sender paced below
        # line rate needs a wake-up a packet, and an entry less to allocate each time
        self._wakeup_entry = EventEntry(self._wakeup)
        self._wakeups_pending = 0  # the NIC's wake-up entries in the heap
        self._wakeup_ps = -1  # when the earliest pending wake-up comes; -1: none pending

    def activate(self, sender: NicSender) -> None:
        """`sender` has packets to send (call once until it runs dry: the caller keeps the flag, after
        `catch_up`)."""
        turn = self._turn
        self._senders.insert(turn, sender)  # last in line: just before the next to serve
        self._turn = 0 if turn + 1 == len(self._senders) else turn + 1
        if self._sending is None and not self.paused:
            self.start_next(self.eventlist.now_ps)

    def next_packet(self, now_ps: int) -> Packet | None:
        """The packet to send at `now_ps`: from the FIFO, else from the senders in turn (None: nothing)."""
        pkt = super().next_packet(now_ps)
        if pkt is not None:
            return pkt
        senders = self._senders
        turn = self._turn
        first_ready_ps = -1
        for _ in range(len(senders)):  # each sender once at most
            sender = senders[turn]
            ready_ps = sender.ready_ps()
            if ready_ps > now_ps:  # held back by its rate limiter: it keeps its place in line
                turn = 0 if turn + 1 == len(senders) else turn + 1
                if first_ready_ps < 0 or ready_ps < first_ready_ps:
                    first_ready_ps = ready_ps
                continue
            pkt = sender.next_packet(now_ps)
            if pkt is not None:  # back in line, the next one served next
                self._turn = 0 if turn + 1 == len(senders) else turn + 1
                return pkt
            del senders[turn]  # it has run dry: out of line, the next takes its place
            if turn == len(senders):
                turn = 0
        self._turn = turn
        if first_ready_ps >= 0 and not 0 <= self._wakeup_ps <= first_ready_ps:
            self._wakeup_ps = first_ready_ps  # a wake-up no later than any pending (a later one stays, harmless)
            if self._wakeups_pending:
                self.eventlist.schedule(self._wakeup, first_ready_ps)
            else:
                self.eventlist.schedule_entry(self._wakeup_entry, first_ready_ps)
            self._wakeups_pending += 1
        return None

    def wake_up(self) -> None:
        """A wake-up entry has come: one less in the heap; then as `wake`."""
        self._wakeups_pending -= 1
        self.wake()

    def wake(self) -> None:
        """A sender's rate limiter may let it send: start if the port is free."""
        self.catch_up()
        if self._wakeup_ps <= self.eventlist.now_ps:
            self._wakeup_ps = -1
        if self._sending is None and not self.paused:
            self.start_next(self.eventlist.now_ps)


class _NicWakeup(EventSource):
    """The event source of a `RoceNic`'s wake-ups for rate-limited senders."""

    __slots__ = ("nic",)

    def __init__(self, nic: RoceNic) -> None:
        self.nic = nic

    def do_next_event(self) -> None:
        """A sender may be ready."""
        self.nic.wake_up()
