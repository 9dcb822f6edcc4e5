"""`engine.backend=analytical`: every message a fluid flow, links shared max-min fairly.

The exact fluid reference: congestion-aware (messages that share a link share its rate), with no
TCP dynamics (no slow start, losses or queues), so its time never drops below `alpha_beta`'s and
parts from `packet`'s where TCP's dynamics matter; where they would, it reports cheap signals
(`screen_risks`). Its cost grows with the messages in flight at once: practical up to a few hundred
NPUs (docs/backends.md).

A kernel module (engine/kernel.py): `FluidMessages` runs a few times per message.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any, Callable, ClassVar, Final, cast

from ..config import SimConfig
from ..eventlist import EventList, EventSource
from ..links import TCP_IP_HEADER_BYTES, Link, unloaded_latency_ps, wire_bytes
from ..linkstats import fluid_link_rows
from ..memory import estimate_messages, process_bytes
from ..simulation import Simulation
from ..system.collectives import SystemLayer
from ..system.maxmin import FluidFlow, MaxMinSharing, SharedLink
from ..system.messages import MessageLog, MessageRecord
from ..topology import Topology
from ..transport.cc import slow_start_dominates
from ..units import BITS_PER_BYTE, PS_PER_S, utilisation
from .base import EVENT_RATE_COLUMNS, MESSAGE_COLUMNS, NetworkBackend, message_system_layer

STALE_ENTRIES_KEPT: Final = 1024  # completion-heap entries left stale before the heap is compacted


class _FluidMessage(FluidFlow):
    """A message in the analytical backend: a flow with the wire bits it had left at
    `updated_ps` (its rate has not changed since); `heap_seq` names its one valid entry in the
    completion heap of `FluidMessages`, the others being stale."""

    __slots__ = ("record", "wire_bytes", "remaining_bits", "updated_ps", "heap_seq", "latency_ps",
                 "on_delivered", "next_in_pair")

    def __init__(self, links: tuple[SharedLink, ...], record: MessageRecord, wire_bytes: int, latency_ps: int,
                 on_delivered: Callable[[], None]) -> None:
        super().__init__(links)
        self.record = record
        self.wire_bytes = wire_bytes
        self.remaining_bits = float(wire_bytes * BITS_PER_BYTE)
        self.updated_ps = 0
        self.heap_seq = -1
        self.latency_ps = latency_ps
        self.on_delivered = on_delivered
        self.next_in_pair: _FluidMessage | None = None  # the pair's next message, sent after this one


class _Delivery(EventSource):
    """The arrival of a message's last bit."""

    __slots__ = ("message", "eventlist", "records")

    def __init__(self, eventlist: EventList, records: MessageLog, message: _FluidMessage) -> None:
        self.eventlist = eventlist
        self.records = records
        self.message = message

    def do_next_event(self) -> None:
        message = self.message
        for shared in message.links:
            shared.delivered_bytes += message.wire_bytes
        self.records.finish(message.record.flow_id, self.eventlist.now_ps)
        self.message.on_delivered()


class FluidMessages(EventSource):
    """Alpha-beta messages with max-min fair sharing of links (a fluid, flow-level model).

    A message of n payload bytes puts n + `header_bytes` (IPv4/TCP headers and options: 40, or 52 with
    timestamps) per segment of `mss_bytes` payload on the wire;
    messages between one pair of NPUs are sent one after another (as on a TCP stream); each is
    transmitted at its max-min fair share of every link it crosses (recomputed whenever a
    message starts or finishes), then arrives after the path's propagation delay plus the
    store-and-forward serialisation of one full packet per hop after the first. No TCP dynamics:
    no slow start, no losses, no queues. That is where it parts from the packet backend.

    The shares are updated incrementally (`MaxMinSharing`), for all the starts and completions of
    one instant at once; a message's progress is brought up to date only when its rate changes,
    and completions wait in a heap.

    Where the fluid model is likely to part from TCP, it keeps three cheap signals (`screen_risks`):
    how loaded the busiest link was, the most messages that crossed one switch port at once (each
    would open with `init_cwnd_pkts` segments into the port's buffer) and how many messages are short
    enough that TCP's slow start from that window would take longer than their transmission.
    """

    def __init__(self, eventlist: EventList, topology: Topology, mss_bytes: int, init_cwnd_pkts: float = 10,
                 header_bytes: int = TCP_IP_HEADER_BYTES) -> None:
        self.eventlist = eventlist
        self.topology = topology
        self.mss_bytes = mss_bytes  # payload of a full segment
        self.header_bytes = header_bytes
        self.init_window_bytes = init_cwnd_pkts * mss_bytes
        self.slow_start_messages = 0  # messages whose slow start would outlast their transmission
        self.records = MessageLog()
        self._sharing = MaxMinSharing()
        self._shared_links: dict[Link, SharedLink] = {}
        self._pair_tails: dict[int, _FluidMessage] = {}  # src * npus + dst -> the pair's last message
        self._starting: list[FluidFlow] = []  # messages to start sharing at the next wake-up
        self._completions: list[tuple[int, int, _FluidMessage]] = []  # heap of (finish_ps, seq, message)
        self._heap_seq = 0
        self._sending = 0  # messages started and not finished
        self._next_wake_ps = -1  # time of the pending wake-up, -1 if none

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Start a message; `on_delivered` runs when its last byte has arrived."""
        links = self.topology.path(src, dst, len(self.records))
        now = self.eventlist.now_ps
        record = MessageRecord(self.records.add(src, dst, nbytes, now), src, dst, nbytes, now)
        latency_ps = unloaded_latency_ps(links, nbytes, self.mss_bytes, self.header_bytes)
        shared_links = tuple(self._shared_link(link) for link in links)
        message_wire_bytes = wire_bytes(nbytes, self.mss_bytes, self.header_bytes)
        bottleneck_bps = shared_links[0].capacity_bps
        for shared in shared_links:
            bottleneck_bps = min(bottleneck_bps, shared.capacity_bps)
        transmission_ps = message_wire_bytes * BITS_PER_BYTE / bottleneck_bps * PS_PER_S
        if slow_start_dominates(nbytes, transmission_ps, 2 * latency_ps, bottleneck_bps, self.init_window_bytes):
            self.slow_start_messages += 1
        message = _FluidMessage(shared_links, record, message_wire_bytes, latency_ps, on_delivered)
        pair = src * self.topology.npus + dst
        tail = self._pair_tails.get(pair)
        self._pair_tails[pair] = message
        if tail is not None:  # messages of one pair go one after another, as on one TCP stream
            tail.next_in_pair = message
            return
        self._starting.append(message)
        # many messages start at the same instant (a collective step): share the links once for all
        self._wake_at(now)

    def screen_risks(self, sim_time_ps: int, switch_ports: list[Link]) -> dict[str, float | int | None]:
        """The signals of where TCP would part from this model, for the runs row:
        `max_link_utilisation` (the busiest link's delivered wire bits over its capacity times the
        run's `sim_time_ps`), `max_port_flows` (the most messages that crossed one of `switch_ports` at
        once) and `slow_start_share` (of all messages, those for which `slow_start_dominates`)."""
        busiest = 0.0
        if sim_time_ps > 0:
            for shared in self._shared_links.values():
                busiest = max(busiest, utilisation(shared.delivered_bytes, int(shared.capacity_bps), sim_time_ps))
        port_flows = 0
        for port in switch_ports:
            port_link = self._shared_links.get(port)
            if port_link is not None:
                port_flows = max(port_flows, port_link.peak_flow_count)
        messages = len(self.records)
        return {"max_link_utilisation": busiest, "max_port_flows": port_flows,
                "slow_start_share": self.slow_start_messages / messages if messages else None}

    def link_bytes(self) -> dict[Link, int]:
        """Wire bytes (payload + 40 per MSS segment) of the messages delivered so far, per link of
        their routes (links no message crossed are left out): the `links` table's traffic."""
        return {link: shared.delivered_bytes for link, shared in self._shared_links.items()}

    def _shared_link(self, link: Link) -> SharedLink:
        shared = self._shared_links.get(link)
        if shared is None:
            shared = self._shared_links[link] = SharedLink(float(link.rate_bps))
        return shared

    def _wake_at(self, time_ps: int) -> None:
        if self._next_wake_ps == -1 or time_ps < self._next_wake_ps:
            self._next_wake_ps = time_ps
            self.eventlist.schedule(self, time_ps)

    def do_next_event(self) -> None:
        """Finish the messages whose last bit has left, start the ones waiting, update the shares,
        then sleep until the next completion."""
        now = self.eventlist.now_ps
        if now != self._next_wake_ps:
            return  # superseded by an earlier wake-up
        self._next_wake_ps = -1
        completions = self._completions
        finished: list[FluidFlow] = []
        while completions and completions[0][0] <= now:
            _, seq, message = heappop(completions)
            if seq == message.heap_seq:  # else stale: the message's rate changed since
                finished.append(message)
        for flow in finished:
            message = cast(_FluidMessage, flow)
            self.eventlist.schedule(_Delivery(self.eventlist, self.records, message), now + message.latency_ps)
            following = message.next_in_pair
            if following is None:
                del self._pair_tails[message.record.src * self.topology.npus + message.record.dst]
            else:
                self._starting.append(following)
        starting, self._starting = self._starting, []
        self._sending += len(starting) - len(finished)
        changed, previous_rates = self._sharing.update(finished, starting)
        for index, flow in enumerate(changed):
            message = cast(_FluidMessage, flow)
            # progress at the previous rate up to now (ps -> s for bit rates), then the completion time
            message.remaining_bits -= previous_rates[index] * ((now - message.updated_ps) / PS_PER_S)
            message.updated_ps = now
            # at least 1 ps ahead, so float rounding can never spin at one instant
            finish_ps = now + max(1, round(message.remaining_bits / message.rate_bps * PS_PER_S))
            self._heap_seq += 1
            message.heap_seq = self._heap_seq
            heappush(completions, (finish_ps, self._heap_seq, message))
        if len(completions) > 2 * self._sending + STALE_ENTRIES_KEPT:
            completions[:] = [entry for entry in completions if entry[1] == entry[2].heap_seq]
            heapify(completions)
        while completions and completions[0][1] != completions[0][2].heap_seq:
            heappop(completions)  # stale entries at the top
        if completions:
            self._wake_at(completions[0][0])


class AnalyticalBackend(NetworkBackend):
    """The system layer's messages as fluid flows (`FluidMessages`)."""

    DESCRIPTION: ClassVar[str] = "no packets, queues or losses"
    FILLS: ClassVar[frozenset[str]] = frozenset(MESSAGE_COLUMNS + EVENT_RATE_COLUMNS + (
        "max_link_utilisation", "max_port_flows", "slow_start_share"))
    FIDELITY_RANK: ClassVar[int] = 1
    CARRIES_ROCE: ClassVar[bool] = True
    ROCE_NEEDS_PFC: ClassVar[bool] = True
    SCREENS: ClassVar[bool] = True
    # The default screen below hybrid's 256 NPUs: it handles every message (4-11 s a 256-NPU DLRM iteration,
    # 186-1,114 s at 1,024, where phase takes 0.02 s and 0.1-0.2 s with the same contention within 0.01 %)
    DEFAULT_SCREEN_FROM_NPUS: ClassVar[int | None] = 2

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(config, sim)
        self.messages = FluidMessages(sim.eventlist, sim.topology, config.packet_payload_bytes,
                                      config.opening_window_pkts, config.packet_header_bytes)

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """The engine's share (`engine.memory`): a message log entry and a fluid flow per message."""
        return process_bytes(config, estimate_messages(config))

    def system_layer(self) -> SystemLayer:
        """The collectives' messages as fluid flows."""
        return message_system_layer(self.config, self.sim, self.messages)

    def message_log(self) -> MessageLog:
        """Every message sent."""
        return self.messages.records

    def counters(self) -> dict[str, Any]:
        """The screen-risk signals (`FluidMessages.screen_risks`)."""
        return self.messages.screen_risks(self.sim.eventlist.now_ps, self.sim.topology.switch_ports)

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """The messages' delivered wire bytes on every link of their routes; packet columns null."""
        return fluid_link_rows(self.sim.topology, link_stats, end_ps, self.messages.link_bytes(),
                               host_links_only=False)


BACKEND = AnalyticalBackend
