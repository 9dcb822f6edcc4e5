"""Small hand-built networks for the TCP scenario tests: one connection over a chain of links,
with optional droppers and taps that record what passes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from engine.eventlist import EventList
from engine.links import Link, Packet, PacketSink
from engine.transport import DEFAULT_TCP_SETTINGS, TcpConnection, make_congestion_control
from engine.units import PS_PER_S, gbps_to_bps, us_to_ps

# The config's defaults, but the hand computations of these tests count RFC 5681's 1,460-byte segments
# with 40-byte headers: no timestamp option unless a test asks for it.
HAND_BUILT_SETTINGS = replace(DEFAULT_TCP_SETTINGS, mss_bytes=1460, timestamps=False)


class Tap(PacketSink):
    """A route sink that records (time_ps, seq, ack, payload, is_retransmit) of each packet, in
    `sent_ps` the packet's send time (for an ACK: that of the segment it echoes), in `size_bytes` its
    size on the wire and in `ts_echo_ps` its TSecr (timestamps), and passes it on unchanged."""

    def __init__(self, eventlist: EventList) -> None:
        self.eventlist = eventlist
        self.seen: list[tuple[int, int, int, int, bool]] = []
        self.sent_ps: list[int] = []
        self.size_bytes: list[int] = []
        self.ts_echo_ps: list[int] = []

    def receive_packet(self, pkt: Packet) -> None:
        self.seen.append((self.eventlist.now_ps, pkt.seq, pkt.ack, pkt.payload_bytes, pkt.is_retransmit))
        self.sent_ps.append(pkt.sent_ps)
        self.size_bytes.append(pkt.size_bytes)
        self.ts_echo_ps.append(pkt.ts_echo_ps)
        pkt.hop += 1
        pkt.route[pkt.hop].receive_packet(pkt)


class PacketDropper(PacketSink):
    """A sink placed in a route that drops chosen data packets.

    `should_drop(index, pkt)` is asked for every data packet (payload > 0), `index` counting them
    from 0 in arrival order; ACKs always pass.
    """

    __slots__ = ("should_drop", "data_seen", "drops")

    def __init__(self, should_drop: Callable[[int, Packet], bool]) -> None:
        self.should_drop = should_drop
        self.data_seen = 0
        self.drops = 0

    def receive_packet(self, pkt: Packet) -> None:
        if pkt.payload_bytes:
            index = self.data_seen
            self.data_seen += 1
            if self.should_drop(index, pkt):
                self.drops += 1
                return
        hop = pkt.hop + 1
        pkt.hop = hop
        pkt.route[hop].receive_packet(pkt)


class Wire(PacketSink):
    """A sender's first hop in tests that drive a `TcpSender` without a network: keeps what it is
    given (a PacketSink, as the compiled sender requires)."""

    def __init__(self) -> None:
        self.packets: list[Packet] = []

    def receive_packet(self, pkt: Packet) -> None:
        self.packets.append(pkt)


@dataclass
class Path:
    """One TCP connection from a sender host over a NIC link and a bottleneck link to a receiver.

    Data: sender -> data_tap -> NIC (nic_gbps, latency_us) -> [dropper] -> bottleneck (gbps, buffer)
    -> receiver. ACKs: receiver -> reverse link (latency_us, nic_gbps) -> ack_tap -> sender.
    The round-trip propagation is 2 * latency_us (the bottleneck link adds no propagation).
    """

    eventlist: EventList
    connection: TcpConnection
    nic: Link
    bottleneck: Link
    data_tap: Tap
    ack_tap: Tap
    dropper: PacketDropper | None
    delivered_ps: list[int] = field(default_factory=list)

    @property
    def sender(self):
        return self.connection.sender

    @property
    def receiver(self):
        return self.connection.receiver

    def send(self, nbytes: int) -> None:
        self.connection.send_message(nbytes, lambda: self.delivered_ps.append(self.eventlist.now_ps))

    def run_s(self, seconds: float) -> None:
        self.eventlist.run(round(seconds * PS_PER_S))


def drop_segment_and_its_first_retransmission(seq: int) -> Callable[[int, Packet], bool]:
    """A `should_drop` that loses the segment starting at `seq` once as sent first and once as
    retransmitted, then lets it through."""
    dropped = {"original": False, "retransmission": False}

    def drop(index: int, pkt: Packet) -> bool:
        if pkt.seq != seq:
            return False
        kind = "retransmission" if pkt.is_retransmit else "original"
        if dropped[kind]:
            return False
        dropped[kind] = True
        return True

    return drop


def build_path(
    *,
    cc: str = "newreno",
    bottleneck_gbps: float = 10.0,
    nic_gbps: float | None = None,
    latency_us: float = 10.0,
    buffer_bytes: int | None = None,
    ecn_threshold_bytes: int | None = None,
    should_drop: Callable[[int, Packet], bool] | None = None,
    **settings,
) -> Path:
    """Build a `Path`; `settings` replace those of `HAND_BUILT_SETTINGS` (mss_bytes, delayed_ack, sack,
    min_rto_ps...)."""
    eventlist = EventList()
    nic_gbps = bottleneck_gbps if nic_gbps is None else nic_gbps
    nic = Link(eventlist, "nic", gbps_to_bps(nic_gbps), us_to_ps(latency_us))
    bottleneck = Link(eventlist, "bottleneck", gbps_to_bps(bottleneck_gbps), 0,
                      buffer_bytes=buffer_bytes, ecn_threshold_bytes=ecn_threshold_bytes)
    reverse = Link(eventlist, "reverse", gbps_to_bps(nic_gbps), us_to_ps(latency_us))
    tcp = replace(HAND_BUILT_SETTINGS, **settings)
    if cc == "dctcp":
        tcp = replace(tcp, ecn=True, dctcp_echo=True)
    data_tap, ack_tap = Tap(eventlist), Tap(eventlist)
    dropper = PacketDropper(should_drop) if should_drop else None
    data_links = (data_tap, nic) + ((dropper,) if dropper else ()) + (bottleneck,)
    connection = TcpConnection(eventlist, tcp, make_congestion_control(cc, tcp.mss_bytes, tcp.init_cwnd_pkts),
                               0, 0, 1, data_links, (reverse, ack_tap))
    return Path(eventlist, connection, nic, bottleneck, data_tap, ack_tap, dropper)
