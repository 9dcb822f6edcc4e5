"""The ns3 backend's messages: ns-3's TCP/IP driven over a pipe, behind netsweep's own system layer.

The workload, the collective algorithms and the chunking stay netsweep's (the same `send(src, dst,
nbytes, on_delivered)` interface the packet and analytical backends offer); only the network is
ns-3's: a helper program built against the `ns3` wheel (`netsweep_ns3.cc` beside this module, see
`build.py`) that `Ns3Messages` drives over a pipe.

Keeping the two clocks in step: the Python event list holds the workload's and the system layer's
events, ns-3 the packets. Before the Python side runs its next event (at time T), it asks ns-3 to run
until T; ns-3 stops at its first message delivery t <= T and reports it, so the delivery's callback
runs at t and any message it sends starts at t. ns-3 never runs past the time the Python side has
reached, and the Python side never runs past a delivery it has not seen.

The topology is netsweep's own (`engine.topology`): the same links, rates, latencies, buffers and
ECN thresholds, and every connection's data and ACKs take the links `Topology.path` gives them,
with the flow number the packet backend would use, so ECMP picks the same spines.
"""

from __future__ import annotations

import subprocess
from typing import Callable, Sequence

from ...config import SimConfig
from ...eventlist import EventList
from ...links import Link
from ...system.messages import MessageLog
from ...topology import Topology
from ...units import ms_to_ps, us_to_ps
from .build import helper_path

DuplexLink = tuple[int, int, Link, Link]  # node a, node b, the link a -> b, the link b -> a
# The `tcp.*` keys `tcp_setting_lines` maps to ns-3; any other must hold its default (`Ns3Backend.check_config`)
NS3_TCP_KEYS = frozenset({"cc", "mss_bytes", "timestamps", "init_cwnd_pkts", "min_rto_ms", "clock_granularity_us",
                          "sack", "delayed_ack", "delayed_ack_timeout_ms", "ecn", "slow_start_after_idle", "dctcp_g",
                          "cubic_c", "cubic_beta", "rcv_wnd_kb"})


def network_graph(topology: Topology) -> tuple[int, list[DuplexLink]]:
    """The topology as nodes and duplex links: hosts are nodes 0..npus-1, switches follow (grouped by
    the prefix of their names, in order of first appearance, each group in the order of its numbers).
    Returns the number of nodes and the links (every one of `topology.links` exactly once, each duplex
    link where its first direction is in `links`)."""
    hosts = {topology.host_name(host): host for host in range(topology.npus)}
    switches = dict.fromkeys(name for role in topology.link_roles for name in (role.src, role.dst)
                             if name not in hosts)
    prefixes = list(dict.fromkeys(name.rstrip("0123456789") for name in switches))

    def order(name: str) -> tuple[int, int]:
        prefix = name.rstrip("0123456789")
        return prefixes.index(prefix), int(name[len(prefix):] or 0)

    node_of = {**hosts, **{name: len(hosts) + index for index, name in enumerate(sorted(switches, key=order))}}
    by_ends = {(role.src, role.dst): link for link, role in zip(topology.links, topology.link_roles)}
    duplex: list[DuplexLink] = []
    paired: set[int] = set()
    for link, role in zip(topology.links, topology.link_roles):
        if id(link) in paired:
            continue
        back = by_ends.get((role.dst, role.src))
        if back is None:
            raise ValueError(f"the ns3 backend lays out duplex links: {role.src}->{role.dst} has no way back")
        paired.update((id(link), id(back)))
        duplex.append((node_of[role.src], node_of[role.dst], link, back))
    assert len(paired) == len(topology.links) == 2 * len(duplex), "every link exactly once"
    return len(node_of), duplex


def tcp_setting_lines(config: SimConfig) -> list[str]:
    """The `tcp.*` settings as the helper's `tcp <key> <value>` lines (ms and us in ps; KiB in bytes)."""
    tcp = config.tcp
    mss = config.segment_bytes  # ns-3's SegmentSize is the payload; it adds the options on top
    settings: list[tuple[str, object]] = [
        ("cc", tcp.cc),
        ("mss_bytes", mss),
        ("timestamps", int(tcp.timestamps)),
        ("header_bytes", config.header_bytes),
        ("init_cwnd_pkts", tcp.init_cwnd_pkts),
        ("init_cwnd_bytes", tcp.init_cwnd_pkts * mss),
        ("min_rto_ps", ms_to_ps(tcp.min_rto_ms)),
        ("clock_granularity_ps", us_to_ps(tcp.clock_granularity_us)),
        ("sack", int(tcp.sack)),
        ("delayed_ack", int(tcp.delayed_ack)),
        ("delayed_ack_timeout_ps", ms_to_ps(tcp.delayed_ack_timeout_ms)),
        ("ecn", int(tcp.ecn or tcp.cc == "dctcp")),
        ("slow_start_after_idle", int(tcp.slow_start_after_idle)),
        *((key, repr(value)) for key, value in tcp.cc_constants().items()),
    ]
    if tcp.rcv_wnd_kb is not None:
        settings.append(("rcv_buf_bytes", int(tcp.rcv_wnd_kb * 1024)))  # KiB -> bytes
    return [f"tcp {key} {value}" for key, value in settings]


class Ns3Error(RuntimeError):
    """The ns-3 helper reported an error or ended unexpectedly."""


class Ns3Messages:
    """Messages over ns-3 TCP connections, one per ordered NPU pair, opened before time 0.

    `send` logs a message and hands it to ns-3; `run` advances both simulations together (it
    replaces `Simulation.run` for this backend); `counters` gives what ns-3 counted; `close` ends the
    helper. The flow numbers that pick ECMP paths are given in order of a pair's first message, as
    the packet backend numbers its connections.
    """

    def __init__(self, eventlist: EventList, topology: Topology, config: SimConfig) -> None:
        self.eventlist = eventlist
        self.topology = topology
        self.records = MessageLog()
        self._on_delivered: dict[int, Callable[[], None]] = {}  # flow_id -> callback, while in flight
        self._opened: set[int] = set()  # pairs (src * npus + dst) that have carried a message
        self._commands: list[str] = []  # written to the helper at the next request
        nodes, duplex = network_graph(topology)
        self._port_of = {}  # id(link) -> the helper's port number (2 * duplex index + direction)
        for index, (_, _, forward, backward) in enumerate(duplex):
            self._port_of[id(forward)] = 2 * index
            self._port_of[id(backward)] = 2 * index + 1
        self._process = subprocess.Popen([str(helper_path())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, bufsize=1 << 16)
        mtu = config.network.mtu_bytes
        lines = tcp_setting_lines(config)  # before `nodes`: the TCP stack reads them when installed
        lines.append(f"nodes {nodes} {topology.npus}")
        for a, b, forward, backward in duplex:
            lines.append(f"link {a} {b} {forward.rate_bps} {forward.latency_ps} {mtu} "
                         f"{_or_none(forward.buffer_bytes)} {_or_none(forward.ecn_threshold_bytes)} "
                         f"{_or_none(backward.buffer_bytes)} {_or_none(backward.ecn_threshold_bytes)}")
        npus = topology.npus
        # every pair's handshake takes the path of flow 0; `send` re-routes a pair at its first message
        lines += [self._path_line(src, dst, 0) for src in range(npus) for dst in range(npus) if src != dst]
        self._commands = lines
        self._exchange("start", ("ready",))

    def _path_line(self, src: int, dst: int, flow_id: int) -> str:
        data = [self._port_of[id(link)] for link in self.topology.path(src, dst, flow_id)]
        acks = [self._port_of[id(link)] for link in self.topology.path(dst, src, flow_id)]
        return f"path {src} {dst} {len(data)} {' '.join(map(str, data))} {len(acks)} {' '.join(map(str, acks))}"

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None]) -> None:
        """Send `nbytes` from NPU `src` to NPU `dst` now; `on_delivered` runs when all have arrived."""
        now = self.eventlist.now_ps
        pair = src * self.topology.npus + dst
        if pair not in self._opened:
            # the packet backend's flow number for this pair: connections in order of first use
            if len(self._opened):
                self._commands.append(self._path_line(src, dst, len(self._opened)))
            self._opened.add(pair)
        flow_id = self.records.add(src, dst, nbytes, now)
        self._on_delivered[flow_id] = on_delivered
        self._commands.append(f"send {now} {src} {dst} {nbytes} {flow_id}")

    def _exchange(self, command: str, expected: tuple[str, ...]) -> list[str]:
        """Write the queued commands and `command`; return the helper's one-line reply, whose first
        word must be one of `expected`."""
        self._commands.append(command)
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write("\n".join(self._commands) + "\n")
            stdin.flush()
        except BrokenPipeError:
            pass  # the helper has ended: its last line (or its silence) says why
        self._commands = []
        words = stdout.readline().split()
        if not words and self._process.wait() != 0:
            # it died (an NS_ASSERT or NS_FATAL of ns-3 aborts it): its own message is on stderr
            raise Ns3Error(f"the ns-3 helper ended with exit status {self._process.returncode} before answering "
                           f"{command!r} (ns-3's message, if any, is on stderr above)")
        if not words or words[0] not in expected:
            self.close()
            raise Ns3Error(f"the ns-3 helper answered {' '.join(words) or 'nothing'!r} to {command!r}")
        return words

    def run(self, until_ps: int) -> bool:
        """Run the Python event list and ns-3 together until all work is done (True) or until
        `until_ps` (False: work was left)."""
        eventlist = self.eventlist
        while True:
            python_next_ps = eventlist.next_time_ps() if eventlist.pending() else -1
            if python_next_ps > until_ps:
                python_next_ps = -1  # beyond the time limit: as good as none
            next_ps = until_ps if python_next_ps < 0 else python_next_ps
            if self._on_delivered:
                words = self._exchange(f"run {next_ps}", ("deliver", "at"))
                if words[0] == "deliver":
                    next_ps = self._deliver(words[1:])
                elif python_next_ps < 0:
                    return False  # messages still in flight at the time limit
            elif python_next_ps < 0:
                return not self._commands and eventlist.pending() == 0
            eventlist.run(next_ps)

    def _deliver(self, words: Sequence[str]) -> int:
        """Schedule the reported deliveries at their time (returned) in the Python event list."""
        time_ps, count = int(words[0]), int(words[1])
        for index in range(count):
            flow_id, retransmits, timeouts, marks = (int(word) for word in words[2 + 4 * index: 6 + 4 * index])
            on_delivered = self._on_delivered.pop(flow_id)
            self.eventlist.call_at(time_ps, _Delivered(self.records, flow_id, time_ps, retransmits, timeouts,
                                                       marks, on_delivered))
        return time_ps

    def counters(self) -> dict[str, int]:
        """What ns-3 counted: retransmits, timeouts, drops, ecn_marks, packets_sent, bytes_sent, events."""
        values = self._exchange("stats", ("stats",))[1:]
        names = ("retransmits", "timeouts", "drops", "ecn_marks", "packets_sent", "bytes_sent", "events")
        return dict(zip(names, (int(value) for value in values)))

    def close(self) -> None:
        """End the helper (idempotent)."""
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.write("quit\n")
                self._process.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


class _Delivered:
    """A message's delivery as a Python event: log it with ns-3's counts, then call the sender back."""

    __slots__ = ("records", "flow_id", "time_ps", "counts", "on_delivered")

    def __init__(self, records: MessageLog, flow_id: int, time_ps: int, retransmits: int, timeouts: int,
                 marks: int, on_delivered: Callable[[], None]) -> None:
        self.records = records
        self.flow_id = flow_id
        self.time_ps = time_ps
        self.counts = (retransmits, timeouts, marks)
        self.on_delivered = on_delivered

    def __call__(self) -> None:
        self.records.finish(self.flow_id, self.time_ps, *self.counts)
        self.on_delivered()


def _or_none(value: int | None) -> int:
    """The helper's spelling of 'no limit': -1."""
    return -1 if value is None else value
