"""`engine.backend=packet`: the packet-level TCP/IP engine (`engine.links`, `engine.transport`).

Every message of the system layer (or flow of the `flows` workload) goes over a TCP connection of
the `Simulation`, packet by packet through NIC queues, links and switches: slow start, losses,
retransmissions, ECN marks and queues are all simulated. The reference the other backends are
checked against; its cost grows with the packets sent (docs/backends.md).

A kernel module (engine/kernel.py): `TcpMessages` runs once per message.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from ..config import SimConfig
from ..eventlist import EventList
from ..links import PausableLink
from ..linkstats import packet_link_rows
from ..memory import estimate_messages, process_bytes
from ..simulation import Simulation
from ..system.collectives import SystemLayer
from ..system.messages import MessageLog
from ..transport import TcpConnection
from ..transport.roce import RoceConnection
from .base import EVENT_RATE_COLUMNS, MESSAGE_COLUMNS, PACKET_COLUMNS, NetworkBackend, message_system_layer

# a persistent TCP connection (1,016 bytes idle with the host stack), its routes and timers
BYTES_PER_CONNECTION = 1_536


class PacketBackend(NetworkBackend):
    """Messages over persistent TCP connections, one per ordered pair of NPUs that talk."""

    DESCRIPTION: ClassVar[str] = "packet-level TCP/IP: queues, losses, retransmissions, ECN"
    FILLS: ClassVar[frozenset[str]] = frozenset(PACKET_COLUMNS + MESSAGE_COLUMNS + EVENT_RATE_COLUMNS)
    CARRIES_FLOWS: ClassVar[bool] = True
    CARRIES_ROCE: ClassVar[bool] = True
    SPRAYS: ClassVar[bool] = True
    MODELS_HOST_STACK: ClassVar[bool] = True
    FAST_FORWARDS: ClassVar[bool] = True
    FIDELITY_RANK: ClassVar[int] = 4

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(config, sim)
        opener = sim.open_queue_pair if sim.roce else sim.open_connection
        self.messages = TcpMessages(sim.eventlist, opener, config.network.npus)

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """The engine's share (`engine.memory`), and a connection per ordered pair that talks."""
        messages = estimate_messages(config)
        npus = config.network.npus
        return process_bytes(config, messages) + min(npus * (npus - 1), messages) * BYTES_PER_CONNECTION

    def system_layer(self) -> SystemLayer:
        """The collectives' messages over the pairs' TCP connections."""
        return message_system_layer(self.config, self.sim, self.messages)

    def flow_sender(self) -> TcpMessages:
        """The `flows` workload's flows over the same connections (or fresh ones)."""
        return self.messages

    def message_log(self) -> MessageLog:
        """Every message or flow sent."""
        return self.messages.records

    def counters(self) -> dict[str, Any]:
        """With RoCE, the PAUSE frames the switches sent (zero with network.pfc=false); none with TCP, whose
        runs leave the column null (PFC under TCP is not modelled)."""
        if not self.sim.roce:
            return {}
        return {"pause_frames": sum(link.pause_frames for link in self.sim.topology.links
                                    if isinstance(link, PausableLink))}

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """From the counters every link keeps anyway (`linkstats.packet_link_rows`)."""
        return packet_link_rows(self.sim.topology, link_stats, end_ps)


# What carries a pair's messages: a TCP connection, or a RoCE queue pair (transport.protocol=roce)
Connection = TcpConnection | RoceConnection


class TcpMessages:
    """Messages over persistent connections (TCP's, or RoCE's queue pairs), one per ordered NPU pair
    of the `npus`, opened on first use.

    `open_connection(src, dst)` is the simulation's factory; congestion state (cwnd, RTT estimate)
    carries over from one message to the next on the same pair.
    """

    def __init__(self, eventlist: EventList, open_connection: Callable[[int, int], Connection],
                 npus: int) -> None:
        self.eventlist = eventlist
        self._open_connection = open_connection
        self._npus = npus
        # the pair's connection at src * npus + dst, None until its first message: one list index a
        # message (8 bytes a pair), where a dict of dicts took two hash probes into scattered tables
        self._connections: list[Connection | None] = [None] * (npus * npus)
        self.records = MessageLog()

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None],
             new_connection: bool = False) -> None:
        """Send `nbytes` from NPU `src` to NPU `dst`; `on_delivered` runs when all have arrived.
        `new_connection` opens a connection of its own (a fresh TCP flow) instead of the pair's."""
        if new_connection:
            connection = self._open_connection(src, dst)
        else:
            pair = src * self._npus + dst
            pair_connection = self._connections[pair]
            if pair_connection is None:
                pair_connection = self._connections[pair] = self._open_connection(src, dst)
            connection = pair_connection
        flow_id = self.records.add(src, dst, nbytes, self.eventlist.now_ps)
        connection.send_message(nbytes, _MessageDelivered(self, flow_id, connection, on_delivered))


class _MessageDelivered:
    """Runs when a message's last byte has arrived: logs it, then calls the sender's `on_delivered`.
    (An object, not a closure: a few dozen bytes a message in flight instead of a few hundred.)"""

    __slots__ = ("messages", "flow_id", "connection", "base_retransmits", "base_timeouts", "base_marks",
                 "on_delivered")

    def __init__(self, messages: TcpMessages, flow_id: int, connection: Connection,
                 on_delivered: Callable[[], None]) -> None:
        self.messages = messages
        self.flow_id = flow_id
        self.connection = connection
        # the connection's counts so far: the message's own are the growth until its delivery
        self.base_retransmits = connection.sender.retransmits
        self.base_timeouts = connection.sender.timeouts
        self.base_marks = connection.receiver.ce_received
        self.on_delivered = on_delivered

    def __call__(self) -> None:
        sender, receiver = self.connection.sender, self.connection.receiver
        self.messages.records.finish(self.flow_id, self.messages.eventlist.now_ps,
                                     sender.retransmits - self.base_retransmits,
                                     sender.timeouts - self.base_timeouts,
                                     receiver.ce_received - self.base_marks)
        self.on_delivered()


BACKEND = PacketBackend
