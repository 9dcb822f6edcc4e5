"""What the system layer sends messages over: the packet network (persistent TCP connections), or
the analytical backend (alpha-beta costs with links shared fairly among concurrent messages).

Both offer `send(src, dst, nbytes, on_delivered)` and record one `MessageRecord` per message for
the `flows` table.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Callable

from ..eventlist import EventList, EventSource
from ..network import TCP_IP_HEADER_BYTES, Link
from ..topology import Topology
from ..transport import TcpConnection
from ..units import BITS_PER_BYTE, PS_PER_S, goodput_gbps, ps_to_s


@dataclass
class MessageRecord:
    """One point-to-point message and what happened to it (a `flows` table row)."""

    flow_id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: int
    end_ps: int = -1
    retransmits: int = 0
    timeouts: int = 0
    ecn_marks: int = 0

    def row(self) -> dict:
        """The `flows` table row (DESIGN.md); times in seconds."""
        done = self.end_ps >= 0
        fct_ps = self.end_ps - self.start_ps if done else None
        return {
            "flow_id": self.flow_id, "src": self.src, "dst": self.dst, "bytes": self.size_bytes,
            "start_s": ps_to_s(self.start_ps),
            "end_s": ps_to_s(self.end_ps) if done else None,
            "fct_s": ps_to_s(fct_ps) if fct_ps is not None else None,
            "goodput_gbps": goodput_gbps(self.size_bytes, fct_ps) if fct_ps else None,
            "retransmits": self.retransmits, "timeouts": self.timeouts, "ecn_marks": self.ecn_marks,
        }


class PacketTransport:
    """Messages over persistent TCP connections, one per ordered NPU pair, opened on first use.

    `open_connection(src, dst)` is the simulation's factory; congestion state (cwnd, RTT estimate)
    carries over from one message to the next on the same pair.
    """

    def __init__(self, eventlist: EventList, open_connection: Callable[[int, int], TcpConnection]) -> None:
        self.eventlist = eventlist
        self._open_connection = open_connection
        self._connections: dict[tuple[int, int], TcpConnection] = {}
        self.records: list[MessageRecord] = []

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None],
             new_connection: bool = False) -> None:
        """Send `nbytes` from NPU `src` to NPU `dst`; `on_delivered` runs when all have arrived.
        `new_connection` opens a connection of its own (a fresh TCP flow) instead of the pair's."""
        connection = None if new_connection else self._connections.get((src, dst))
        if connection is None:
            connection = self._open_connection(src, dst)
            if not new_connection:
                self._connections[(src, dst)] = connection
        sender, receiver = connection.sender, connection.receiver
        record = MessageRecord(len(self.records), src, dst, nbytes, self.eventlist.now_ps)
        self.records.append(record)
        base_retransmits, base_timeouts, base_marks = sender.retransmits, sender.timeouts, receiver.ce_received

        def delivered() -> None:
            record.end_ps = self.eventlist.now_ps
            record.retransmits = sender.retransmits - base_retransmits
            record.timeouts = sender.timeouts - base_timeouts
            record.ecn_marks = receiver.ce_received - base_marks
            on_delivered()

        connection.send_message(nbytes, delivered)


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
        self.records: list[MessageRecord] = []
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
        record = MessageRecord(len(self.records), src, dst, nbytes, self.eventlist.now_ps)
        self.records.append(record)
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
            message.record.end_ps = self.eventlist.now_ps
            message.on_delivered()
        return deliver
