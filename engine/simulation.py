"""One packet-level simulation: the event list, the topology and the TCP connections on it."""

from __future__ import annotations

from random import Random

from .config import SimConfig
from .eventlist import EventList
from .fastforward import FastForward
from .links import Link, PacketSink, idle_transit_ps, syn_bytes
from .topology import Topology, build_topology, flow_hash
from .transport import TcpConnection, TcpSettings, make_congestion_control
from .transport.roce import RoceConnection
from .units import s_to_ps

EVENTS_PER_SLICE = 1 << 16  # about 20 ms of the compiled kernel's work
SYN_RETRIES = 6  # Linux net.ipv4.tcp_syn_retries (ns-3's ConnCount is 6 too): SYNs after the first
_HANDSHAKE_RNG_SALT = 0x5111  # the handshake's own random stream: it leaves the links' draws as they were


class HandshakeFailed(RuntimeError):
    """Every SYN of a connection's handshake, or its SYN-ACK, was lost (`network.loss_rate`)."""


def handshake_rtt_ps(data_links: tuple[Link, ...], ack_links: tuple[Link, ...], syn_size_bytes: int) -> int:
    """The round trip of a SYN along `data_links` and its SYN-ACK (of the same size) back along
    `ack_links` on the idle network: serialisation and propagation at every hop, both ways."""
    return idle_transit_ps(data_links, syn_size_bytes) + idle_transit_ps(ack_links, syn_size_bytes)


def syn_retransmits(data_links: tuple[Link, ...], ack_links: tuple[Link, ...], loss_rate: float,
                    rng: Random) -> int:
    """How many times the SYN is sent again before one and its SYN-ACK both cross every link, each
    lost at each link with probability `loss_rate` (as data packets are). The server's own SYN-ACK
    retransmissions are left out: its timer starts one way later than the client's and fires about
    when the client's retransmitted SYN arrives. Raises `HandshakeFailed` after `SYN_RETRIES`."""
    retransmits = 0
    while any(rng.random() < loss_rate for _ in data_links + ack_links):
        retransmits += 1
        if retransmits > SYN_RETRIES:
            raise HandshakeFailed(f"a connection's handshake failed: its SYN was sent {SYN_RETRIES + 1} times "
                                  f"(Linux tcp_syn_retries = {SYN_RETRIES}) and lost with its SYN-ACK at "
                                  f"network.loss_rate={loss_rate}")
    return retransmits


class Simulation:
    """Holds everything of one run; workloads open connections through it (TCP's, or with
    `transport.protocol=roce` RoCE's queue pairs, whose hosts have RDMA NICs). `models_host_stack`: the hosts send
    through Linux's transmit path below TCP (`host.*`), as the backends whose class says
    `MODELS_HOST_STACK` do; else straight onto their links."""

    def __init__(self, config: SimConfig, models_host_stack: bool) -> None:
        self.config = config
        self.eventlist = EventList()
        self.roce = config.transport.protocol == "roce"
        host = config.roce if self.roce else config.host if models_host_stack else None
        self.topology: Topology = build_topology(self.eventlist, config.network, config.seed, host)
        self.settings = TcpSettings.from_config(config)
        self.connections: list[TcpConnection] = []
        self.queue_pairs: list[RoceConnection] = []  # RoCE's, in place of the TCP connections
        self.spray = config.network.load_balancing == "spray"  # data packets dealt over equal-cost paths
        self.time_limit_reached = False
        # engine.fast_forward: the run loop that skips repeating periods
        self.fast_forward = FastForward(self) if config.engine.fast_forward else None

    def open_connection(self, src: int, dst: int, flow_id: int | None = None) -> TcpConnection:
        """A new TCP connection from host `src` to host `dst`, with a fresh congestion state, on the
        topology's routes for `flow_id` (None: the next, its number among the connections)."""
        if flow_id is None:
            flow_id = len(self.connections)
        data_links, ack_links = self.topology.routes(src, dst, flow_id)
        connection = self._connection(src, dst, flow_id, data_links, ack_links, self._spray_routes(src, dst, flow_id))
        if self.config.tcp.handshake:
            # opened lazily, but as a training job opens its connections: at start-up, on the idle
            # network, long before the first message (outside the workload's timing)
            # (the links themselves: a ring's routes go through ports that stand for them)
            self._handshake(connection, self.topology.path(src, dst, flow_id), self.topology.path(dst, src, flow_id))
        self.connections.append(connection)
        return connection

    def open_queue_pair(self, src: int, dst: int, flow_id: int | None = None) -> RoceConnection:
        """A new RoCE queue pair from host `src` to host `dst` (transport.protocol=roce), on the
        topology's routes for `flow_id` (None: the next, its number among the connections)."""
        if flow_id is None:
            flow_id = len(self.queue_pairs)
        data_links, ack_links = self.topology.routes(src, dst, flow_id)
        roce = self.config.roce
        queue_pair = RoceConnection(self.eventlist, roce, roce.path_mtu_bytes(self.config.network), flow_id, src, dst,
                                    data_links, ack_links, self._spray_routes(src, dst, flow_id))
        self.queue_pairs.append(queue_pair)
        return queue_pair

    def _spray_routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], ...]:
        """With `network.load_balancing=spray`, the routes a connection deals its data packets over
        (`Topology.spray_routes`); else none (its one ECMP route)."""
        return self.topology.spray_routes(src, dst, flow_id) if self.spray else ()

    def open_routed_connection(self, src: int, dst: int, flow_id: int, data_links: tuple[Link, ...],
                               ack_links: tuple[Link, ...]) -> TcpConnection:
        """A new TCP connection from host `src` to host `dst` on routes the caller chose, under the
        flow id it gives (a reduced network standing for a larger one: the hybrid backend); its
        handshake, if any, goes along the same links."""
        connection = self._connection(src, dst, flow_id, data_links, ack_links)
        if self.config.tcp.handshake:
            self._handshake(connection, data_links, ack_links)
        self.connections.append(connection)
        return connection

    def _connection(self, src: int, dst: int, flow_id: int, data_links: tuple[PacketSink, ...],
                    ack_links: tuple[PacketSink, ...],
                    spray_links: tuple[tuple[PacketSink, ...], ...] = ()) -> TcpConnection:
        """A connection with a fresh congestion state, not yet opened (its data dealt over `spray_links`, if any)."""
        tcp = self.config.tcp
        cc = make_congestion_control(tcp.cc, self.settings.mss_bytes, tcp.init_cwnd_pkts, **tcp.cc_constants())
        return TcpConnection(self.eventlist, self.settings, cc, flow_id, src, dst, data_links, ack_links, spray_links)

    def _handshake(self, connection: TcpConnection, syn_links: tuple[Link, ...],
                   syn_ack_links: tuple[Link, ...]) -> None:
        """Open `connection` after a handshake on the idle network along `syn_links` and back along
        `syn_ack_links` (its SYN RTT seeds the RTT estimate; SYNs lost at `network.loss_rate` are sent again)."""
        tcp = self.config.tcp
        loss_rate = self.config.network.loss_rate
        retransmits = 0
        if loss_rate > 0:
            rng = Random(flow_hash(self.config.seed, connection.flow_id, _HANDSHAKE_RNG_SALT))
            retransmits = syn_retransmits(syn_links, syn_ack_links, loss_rate, rng)
        rtt_ps = handshake_rtt_ps(syn_links, syn_ack_links, syn_bytes(tcp.timestamps, tcp.sack))
        connection.sender.open_after_handshake(rtt_ps, retransmits)

    def run(self) -> None:
        """Run until no event is left or `engine.max_sim_time_s` (then `time_limit_reached`)."""
        until_ps = s_to_ps(self.config.engine.max_sim_time_s)
        if self.fast_forward is not None:
            self.fast_forward.run(until_ps)
            return
        eventlist = self.eventlist
        # In slices: the compiled kernel runs no bytecode, and Python runs signal handlers (Ctrl-C, a
        # sweep's wall-time budget) only between bytecodes, so each return here lets them fire.
        while not eventlist.run(until_ps, EVENTS_PER_SLICE):
            if eventlist.next_time_ps() > until_ps:
                self.time_limit_reached = True
                return
