"""What the system layer sends messages over: the packet network (persistent TCP connections), or
the analytical backend (alpha-beta costs with links shared fairly among concurrent messages).

Both offer `send(src, dst, nbytes, on_delivered)` and record one `MessageRecord` per message for
the `flows` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from math import inf
from typing import Callable, Final

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


RATE_TOLERANCE: Final = 1e-9  # relative float slack when comparing a rate with the level of a change


class _FluidLink:
    """A link as the analytical backend sees it: its capacity and the messages crossing it.

    `messages` is a dict used as an insertion-ordered set, so every walk over it (and so every
    float sum) runs in the same order on every run. `mark` and `slot` are scratch space of one
    re-sharing: the epoch that last visited the link and its index in that epoch's tables."""

    __slots__ = ("capacity_bps", "messages", "mark", "slot")

    def __init__(self, capacity_bps: float) -> None:
        self.capacity_bps = capacity_bps
        self.messages: dict[_FluidMessage, None] = {}
        self.mark = 0
        self.slot = 0


class _FluidMessage(EventSource):
    """A message in the analytical backend: its links, its rate since `updated_ps`, the wire bits
    left at `updated_ps`, and its completion time at that rate (the key of its valid entry in the
    transport's completion heap, `heap_seq` naming that entry). As an event source it is the
    delivery of its last bit, `latency_ps` after the completion."""

    __slots__ = ("record", "links", "remaining_bits", "rate_bps", "updated_ps", "finish_ps", "heap_seq",
                 "latency_ps", "on_delivered", "next_in_pair", "mark", "eventlist")

    def __init__(self, eventlist: EventList, record: MessageRecord, links: tuple[_FluidLink, ...],
                 wire_bytes: int, latency_ps: int, on_delivered: Callable[[], None]) -> None:
        self.eventlist = eventlist
        self.record = record
        self.links = links
        self.remaining_bits = float(wire_bytes * BITS_PER_BYTE)
        self.rate_bps = 0.0
        self.updated_ps = 0
        self.finish_ps = -1
        self.heap_seq = -1
        self.latency_ps = latency_ps
        self.on_delivered = on_delivered
        self.next_in_pair: _FluidMessage | None = None  # the pair's next message, sent after this one
        self.mark = 0  # epoch of the last re-sharing that included it

    def do_next_event(self) -> None:
        """The last bit has arrived."""
        self.record.end_ps = self.eventlist.now_ps
        self.on_delivered()


class AnalyticalTransport(EventSource):
    """Alpha-beta messages with max-min fair sharing of links (a fluid, flow-level model).

    A message of n payload bytes puts n + 40 bytes of IPv4/TCP headers per MSS segment on the wire;
    messages between one pair of NPUs are sent one after another (as on a TCP stream); each is
    transmitted at its max-min fair share of every link it crosses (recomputed whenever a
    message starts or finishes), then arrives after the path's propagation delay plus the
    store-and-forward serialisation of one full packet per hop after the first. No TCP dynamics:
    no slow start, no losses, no queues. That is where it parts from the packet backend.

    The shares are re-computed incrementally (`_reshare`): only for the messages a change can
    affect, all the starts and completions of one instant at once. A message's progress is
    brought up to date only when its rate changes, and completions wait in a heap.
    """

    def __init__(self, eventlist: EventList, topology: Topology, mss_bytes: int) -> None:
        self.eventlist = eventlist
        self.topology = topology
        self.mss_bytes = mss_bytes
        self.records: list[MessageRecord] = []
        self._fluid_links: dict[Link, _FluidLink] = {}
        self._pair_tails: dict[int, _FluidMessage] = {}  # src * npus + dst -> the pair's last message
        self._starting: list[_FluidMessage] = []  # messages to start sharing at the next wake-up
        self._completions: list[tuple[int, int, _FluidMessage]] = []  # heap of (finish_ps, seq, message)
        self._heap_seq = 0
        self._epoch = 0
        self._next_wake_ps = -1  # time of the pending wake-up, -1 if none

    def wire_bytes(self, nbytes: int) -> int:
        """Payload plus one IPv4+TCP header per MSS-sized segment."""
        segments = -(-nbytes // self.mss_bytes)
        return nbytes + segments * TCP_IP_HEADER_BYTES

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Start a message; `on_delivered` runs when its last byte has arrived."""
        links = self.topology.path(src, dst, len(self.records))
        now = self.eventlist.now_ps
        record = MessageRecord(len(self.records), src, dst, nbytes, now)
        self.records.append(record)
        packet_bytes = min(self.mss_bytes, nbytes) + TCP_IP_HEADER_BYTES
        # propagation of every hop + one packet's serialisation at each hop after the first
        latency_ps = sum(link.latency_ps for link in links) + sum(
            packet_bytes * BITS_PER_BYTE * PS_PER_S // link.rate_bps for link in links[1:])
        fluid_links = tuple(self._fluid_link(link) for link in links)
        message = _FluidMessage(self.eventlist, record, fluid_links, self.wire_bytes(nbytes), latency_ps,
                                on_delivered)
        pair = src * self.topology.npus + dst
        tail = self._pair_tails.get(pair)
        self._pair_tails[pair] = message
        if tail is not None:  # messages of one pair go one after another, as on one TCP stream
            tail.next_in_pair = message
            return
        self._starting.append(message)
        # many messages start at the same instant (a collective step): share the links once for all
        self._wake_at(now)

    def _fluid_link(self, link: Link) -> _FluidLink:
        fluid = self._fluid_links.get(link)
        if fluid is None:
            fluid = self._fluid_links[link] = _FluidLink(float(link.rate_bps))
        return fluid

    def _wake_at(self, time_ps: int) -> None:
        if self._next_wake_ps == -1 or time_ps < self._next_wake_ps:
            self._next_wake_ps = time_ps
            self.eventlist.schedule(self, time_ps)

    def do_next_event(self) -> None:
        """Finish the messages whose last bit has left, start the ones waiting, re-share the
        links they change, then sleep until the next completion."""
        now = self.eventlist.now_ps
        if now != self._next_wake_ps:
            return  # superseded by an earlier wake-up
        self._next_wake_ps = -1
        completions = self._completions
        finished: list[_FluidMessage] = []
        while completions and completions[0][0] <= now:
            _, seq, message = heappop(completions)
            if seq == message.heap_seq:  # else stale: the message's rate changed since
                finished.append(message)
        for message in finished:
            self.eventlist.schedule(message, now + message.latency_ps)
            for link in message.links:
                del link.messages[message]
            following = message.next_in_pair
            if following is None:
                record = message.record
                del self._pair_tails[record.src * self.topology.npus + record.dst]
            else:
                self._starting.append(following)
        starting, self._starting = self._starting, []
        for message in starting:
            message.updated_ps = now
            for link in message.links:
                link.messages[message] = None
        self._reshare(finished, starting)
        while completions and completions[0][1] != completions[0][2].heap_seq:
            heappop(completions)  # stale entries at the top
        if completions:
            self._wake_at(completions[0][0])

    def _reshare(self, finished: list[_FluidMessage], starting: list[_FluidMessage]) -> None:
        """Max-min fair rates after `finished` left and `starting` joined, re-computed only where
        they can change.

        Progressive filling raises every rate together and fixes a link's messages when the link
        fills. A change cannot alter that process below the first level at which it makes some
        link fill differently (`level`): a finished message's rate, or for a link a message joins,
        the level at which it would now fill, at least capacity / messages on it. So every
        message whose rate is below `level` keeps it, and with those fixed, the rest splits into
        independent groups joined by links; only the groups holding a change need filling again.
        This walks them from the changed links, over messages at or above `level`, and fills
        them with every other message's rate taken off the link capacities: the same allocation
        as filling everything again, at the cost of the part that changes.

        The filling itself: repeatedly, the link offering the smallest equal share to its unfixed
        messages fixes them at that share and leaves its capacity to the rest. A heap of (share,
        version, slot) with stale entries skipped keeps this O((messages x hops + links) log links).
        """
        level = inf
        for message in finished:
            level = min(level, message.rate_bps)
        for message in starting:
            for link in message.links:
                level = min(level, link.capacity_bps / len(link.messages))
        cutoff = level * (1.0 - RATE_TOLERANCE)  # a rate within rounding of the level counts as at it
        self._epoch += 1
        epoch = self._epoch
        changing: list[_FluidMessage] = []  # the messages whose rates are filled again
        old_rates: list[float] = []
        for message in starting:
            message.mark = epoch
            changing.append(message)
            old_rates.append(message.rate_bps)
        to_scan: list[_FluidLink] = []  # links reached and not yet scanned
        for message in finished + starting:
            for link in message.links:
                if link.mark != epoch:
                    link.mark = epoch
                    to_scan.append(link)
        capacity: list[float] = []  # per slot: capacity left for the messages filled again
        users: list[list[_FluidMessage]] = []  # per slot: those messages
        while to_scan:
            link = to_scan.pop()
            link.slot = len(capacity)
            left = link.capacity_bps
            link_users: list[_FluidMessage] = []
            for message in link.messages:
                if message.mark != epoch:
                    if message.rate_bps < cutoff:
                        left -= message.rate_bps  # keeps its rate: fixed below the level
                        continue
                    message.mark = epoch
                    changing.append(message)
                    old_rates.append(message.rate_bps)
                    for other in message.links:
                        if other.mark != epoch:
                            other.mark = epoch
                            to_scan.append(other)
                link_users.append(message)
            capacity.append(left)
            users.append(link_users)
        _fill(capacity, users, changing)
        now = self.eventlist.now_ps
        for index, message in enumerate(changing):
            old_rate = old_rates[index]
            if message.rate_bps == old_rate:
                continue
            # progress at the old rate up to now (ps -> s for bit rates), then the new completion time
            message.remaining_bits -= old_rate * ((now - message.updated_ps) / PS_PER_S)
            message.updated_ps = now
            # at least 1 ps ahead, so float rounding can never spin at one instant
            message.finish_ps = now + max(1, round(message.remaining_bits / message.rate_bps * PS_PER_S))
            self._heap_seq += 1
            message.heap_seq = self._heap_seq
            heappush(self._completions, (message.finish_ps, self._heap_seq, message))


def _fill(capacity: list[float], users: list[list[_FluidMessage]], messages: list[_FluidMessage]) -> None:
    """Progressive filling: set the max-min fair `rate_bps` of `messages`, given per link slot the
    capacity left for them and the ones crossing it (every link of theirs has a slot).

    Repeatedly, the link offering the smallest equal share to its unfixed messages fixes them at
    that share and leaves its capacity to the rest. A heap of (share, version, slot) with stale
    entries skipped keeps this O((messages x hops + links) log links) instead of a scan of all
    links per round; ties go to the lower slot."""
    for message in messages:
        message.rate_bps = -1.0  # not fixed yet
    unfixed = [len(link_users) for link_users in users]
    version = [0] * len(capacity)
    heap = [(max(capacity[slot], 0.0) / unfixed[slot], 0, slot) for slot in range(len(capacity)) if unfixed[slot]]
    heapify(heap)
    while heap:
        share, link_version, bottleneck = heappop(heap)
        if link_version != version[bottleneck] or not unfixed[bottleneck]:
            continue  # stale: the link's share changed since this entry was pushed
        for message in users[bottleneck]:
            if message.rate_bps >= 0:
                continue
            message.rate_bps = share
            for link in message.links:
                slot = link.slot
                capacity[slot] -= share
                unfixed[slot] -= 1
                version[slot] += 1
                if unfixed[slot] and slot != bottleneck:
                    heappush(heap, (max(capacity[slot], 0.0) / unfixed[slot], version[slot], slot))
