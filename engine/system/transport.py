"""What the system layer sends messages over: the packet network (persistent TCP connections), or
the analytical backend (alpha-beta costs with links shared fairly among concurrent messages).

Both offer `send(src, dst, nbytes, on_delivered)` and log every message in a `MessageLog` (the
`flows` table).
"""

from __future__ import annotations

from collections import deque
from heapq import heapify, heappop, heappush
from typing import Callable

from ..eventlist import EventList, EventSource
from ..network import TCP_IP_HEADER_BYTES, Link
from ..topology import Topology
from ..transport import TcpConnection
from ..units import BITS_PER_BYTE, PS_PER_S
from .messages import MessageLog, MessageRecord


class PacketTransport:
    """Messages over persistent TCP connections, one per ordered NPU pair, opened on first use.

    `open_connection(src, dst)` is the simulation's factory; congestion state (cwnd, RTT estimate)
    carries over from one message to the next on the same pair.
    """

    def __init__(self, eventlist: EventList, open_connection: Callable[[int, int], TcpConnection]) -> None:
        self.eventlist = eventlist
        self._open_connection = open_connection
        # src -> dst -> connection: int keys the NPU groups already hold, no (src, dst) tuple a pair
        self._connections: dict[int, dict[int, TcpConnection]] = {}
        self.records = MessageLog()

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None],
             new_connection: bool = False) -> None:
        """Send `nbytes` from NPU `src` to NPU `dst`; `on_delivered` runs when all have arrived.
        `new_connection` opens a connection of its own (a fresh TCP flow) instead of the pair's."""
        if new_connection:
            connection = self._open_connection(src, dst)
        else:
            by_dst = self._connections.get(src)
            if by_dst is None:
                by_dst = self._connections[src] = {}
            pair_connection = by_dst.get(dst)
            if pair_connection is None:
                pair_connection = by_dst[dst] = self._open_connection(src, dst)
            connection = pair_connection
        flow_id = self.records.add(src, dst, nbytes, self.eventlist.now_ps)
        connection.send_message(nbytes, _Delivery(self, flow_id, connection, on_delivered))


class _Delivery:
    """Runs when a message's last byte has arrived: logs it, then calls the sender's `on_delivered`.
    (An object, not a closure: a few dozen bytes a message in flight instead of a few hundred.)"""

    __slots__ = ("transport", "flow_id", "connection", "base_retransmits", "base_timeouts", "base_marks",
                 "on_delivered")

    def __init__(self, transport: PacketTransport, flow_id: int, connection: TcpConnection,
                 on_delivered: Callable[[], None]) -> None:
        self.transport = transport
        self.flow_id = flow_id
        self.connection = connection
        # the connection's counts so far: the message's own are the growth until its delivery
        self.base_retransmits = connection.sender.retransmits
        self.base_timeouts = connection.sender.timeouts
        self.base_marks = connection.receiver.ce_received
        self.on_delivered = on_delivered

    def __call__(self) -> None:
        sender, receiver = self.connection.sender, self.connection.receiver
        self.transport.records.finish(self.flow_id, self.transport.eventlist.now_ps,
                                      sender.retransmits - self.base_retransmits,
                                      sender.timeouts - self.base_timeouts,
                                      receiver.ce_received - self.base_marks)
        self.on_delivered()


class _FluidMessage:
    """A message in the analytical backend: wire bytes left, its links and its current rate."""

    __slots__ = ("record", "links", "remaining_bits", "rate_bps", "latency_ps", "on_delivered")

    def __init__(self, record: MessageRecord, links: tuple[Link, ...], wire_bytes: int, latency_ps: int,
                 on_delivered: Callable[[], None]) -> None:
        self.record = record
        self.links = links
        self.remaining_bits = float(wire_bytes * BITS_PER_BYTE)
        self.rate_bps = 0.0
        self.latency_ps = latency_ps
        self.on_delivered = on_delivered


class AnalyticalTransport(EventSource):
    """Alpha-beta messages with max-min fair sharing of links (a fluid, flow-level model).

    A message of n payload bytes puts n + 40 bytes of IPv4/TCP headers per MSS segment on the wire;
    messages between one pair of NPUs are sent one after another (as on a TCP stream); each is
    transmitted at its max-min fair share of every link it crosses (recomputed whenever a
    message starts or finishes), then arrives after the path's propagation delay plus the
    store-and-forward serialisation of one full packet per hop after the first. No TCP dynamics:
    no slow start, no losses, no queues. That is where it parts from the packet backend.
    """

    def __init__(self, eventlist: EventList, topology: Topology, mss_bytes: int) -> None:
        self.eventlist = eventlist
        self.topology = topology
        self.mss_bytes = mss_bytes
        self.records = MessageLog()
        self._active: list[_FluidMessage] = []
        self._last_update_ps = 0
        self._next_wake_ps = -1  # time of the pending wake-up, -1 if none
        self._pair_queues: dict[tuple[int, int], deque[_FluidMessage]] = {}

    def wire_bytes(self, nbytes: int) -> int:
        """Payload plus one IPv4+TCP header per MSS-sized segment."""
        segments = -(-nbytes // self.mss_bytes)
        return nbytes + segments * TCP_IP_HEADER_BYTES

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Start a message; `on_delivered` runs when its last byte has arrived."""
        links = self.topology.path(src, dst, len(self.records))
        record = MessageRecord(self.records.add(src, dst, nbytes, self.eventlist.now_ps), src, dst, nbytes,
                               self.eventlist.now_ps)
        packet_bytes = min(self.mss_bytes, nbytes) + TCP_IP_HEADER_BYTES
        # propagation of every hop + one packet's serialisation at each hop after the first
        latency_ps = sum(link.latency_ps for link in links) + sum(
            packet_bytes * BITS_PER_BYTE * PS_PER_S // link.rate_bps for link in links[1:])
        message = _FluidMessage(record, links, self.wire_bytes(nbytes), latency_ps, on_delivered)
        queue = self._pair_queues.setdefault((src, dst), deque())
        queue.append(message)
        if len(queue) == 1:  # messages of one pair go one after another, as on one TCP stream
            self._activate(message)

    def _activate(self, message: _FluidMessage) -> None:
        self._advance()
        self._active.append(message)
        # many messages start at the same instant (a collective step): share the links once for all
        self._wake_at(self.eventlist.now_ps)

    def _advance(self) -> None:
        """Move every active message forward to now at its current rate."""
        now = self.eventlist.now_ps
        elapsed_s = (now - self._last_update_ps) / PS_PER_S  # ps -> s for bit rates
        if elapsed_s > 0:
            for message in self._active:
                message.remaining_bits -= message.rate_bps * elapsed_s
        self._last_update_ps = now

    def _reshare(self) -> None:
        """Max-min fair rates by progressive filling: repeatedly, the link offering the smallest
        equal share to its unfixed messages fixes them at that share and leaves its capacity to
        the rest. A heap of (share, version, link) with stale entries skipped keeps this
        O((messages x hops + links) log links) instead of a scan of all links per round."""
        capacity: dict[Link, float] = {}
        unfixed_count: dict[Link, int] = {}
        users: dict[Link, list[_FluidMessage]] = {}
        for message in self._active:
            message.rate_bps = -1.0  # not fixed yet
            for link in message.links:
                if link not in capacity:
                    capacity[link] = float(link.rate_bps)
                    unfixed_count[link] = 0
                    users[link] = []
                unfixed_count[link] += 1
                users[link].append(message)
        version = dict.fromkeys(capacity, 0)
        heap = [(capacity[link] / unfixed_count[link], 0, index, link) for index, link in enumerate(capacity)]
        heapify(heap)
        order = {link: index for index, link in enumerate(capacity)}  # ties break by a fixed order
        while heap:
            share, link_version, _, bottleneck = heappop(heap)
            if link_version != version[bottleneck] or not unfixed_count[bottleneck]:
                continue  # stale: the link's share changed since this entry was pushed
            for message in users[bottleneck]:
                if message.rate_bps >= 0:
                    continue
                message.rate_bps = share
                for link in message.links:
                    capacity[link] -= share
                    unfixed_count[link] -= 1
                    version[link] += 1
                    if unfixed_count[link] and link is not bottleneck:
                        heappush(heap, (max(capacity[link], 0.0) / unfixed_count[link], version[link],
                                        order[link], link))

    def _wake_at(self, time_ps: int) -> None:
        if self._next_wake_ps == -1 or time_ps < self._next_wake_ps:
            self._next_wake_ps = time_ps
            self.eventlist.schedule(self, time_ps)

    def do_next_event(self) -> None:
        """Finish the messages whose last bit has left, re-share the links among the rest (and
        among messages started since), then sleep until the next completion."""
        now = self.eventlist.now_ps
        if now != self._next_wake_ps:
            return  # superseded by an earlier wake-up
        self._next_wake_ps = -1
        self._advance()
        # a message within one bit of done is done (float rounding of rate x time)
        finished = [m for m in self._active if m.remaining_bits <= 1.0]
        if finished:
            self._active = [m for m in self._active if m.remaining_bits > 1.0]
            for message in finished:
                self.eventlist.call_at(now + message.latency_ps, self._deliverer(message))
                queue = self._pair_queues[(message.record.src, message.record.dst)]
                queue.popleft()
                if queue:
                    self._active.append(queue[0])
        self._reshare()
        if self._active:
            # at least 1 ps ahead, so float rounding can never spin at one instant
            self._wake_at(min(now + max(1, round(m.remaining_bits / m.rate_bps * PS_PER_S))
                              for m in self._active))

    def _deliverer(self, message: _FluidMessage) -> Callable[[], None]:
        def deliver() -> None:
            self.records.finish(message.record.flow_id, self.eventlist.now_ps)
            message.on_delivered()
        return deliver
