"""Topologies: the links of a network and the route between any two hosts.

Hosts are numbered 0..npus-1. A host's own packets are never dropped at their first hop, as a host qdisc
backs up into TCP rather than dropping: a host's NIC (its first link; on hierarchical, its scale-up link
too) is a `HostNic` when the run models Linux's transmit path (`host.*`: TCP Small Queues and a qdisc
that stops the sender when full), else a link with an unlimited buffer; on a ring, where an NPU's links
also forward others' packets, each link's `RingPort` keeps the NPU's own packets in an unlimited queue
and serves them and the forwarded ones round-robin. Every switch egress port, and every ring link for
the packets it forwards, has `network.buffer_kb` of drop-tail buffer and marks CE above
`network.ecn_threshold_kb`. Where several equal-cost paths exist (leaf_spine, fat_tree, the two
directions of an even ring), a flow hash picks one per flow (ECMP). Sizes in `_kb` are KiB (1024 bytes).

Every link is named `src->dst` after the nodes it joins (hosts `h<i>`, `n<i>` on a ring, `npu<i>`
on hierarchical; switches `sw`, `swL`/`swR`, `leaf<l>`, `spine<s>`, `edge<e>`, `agg<a>`, `core<c>`,
`node<n>`) and has a kind (`LINK_KINDS`): what the `links` table reports it as.

Routes come in a few classes (`route_class`): all routes of one class cross links of the same rates
and latencies, so the alpha_beta backend costs a class once instead of every pair of hosts.
"""

from __future__ import annotations

from collections import Counter
from random import Random
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .config import (
    DumbbellNetwork,
    FatTreeNetwork,
    FullMeshNetwork,
    HostConfig,
    LeafSpineNetwork,
    NetworkConfig,
    NodesNetwork,
    RailOptimizedNetwork,
    RingNetwork,
    RoceConfig,
    SwitchNetwork,
)
from .eventlist import EventList
from .links import HostNic, Link, PacketSink, PausableLink, RingPort, RoceNic
from .units import BYTES_PER_KB, gbps_to_bps, ns_to_ps, us_to_ps

# What sits at the hosts' interfaces: Linux's transmit path below TCP, RDMA NICs (RoCE), or bare links
HostModel = HostConfig | RoceConfig | None
_JITTER_RNG_SALT = 0x7177  # a host interface's jitter draws: a stream apart from its loss draws
_RED_RNG_SALT = 0x3ED  # a switch port's RED marking draws (DCQCN)


def flow_hash(*values: int) -> int:
    """A deterministic 64-bit mix (splitmix64) of integers; Python's hash() of ints is not mixed."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 31
    return state


_SPLITMIX_START = 0x9E3779B97F4A7C15
_SPLITMIX_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_SPLITMIX_MUL2 = np.uint64(0x94D049BB133111EB)


def flow_hash_array(*values: np.ndarray | int) -> np.ndarray:
    """`flow_hash` of many tuples at once: element i mixes the i-th entries (or the scalar) of
    `values`, with the same splitmix64 steps, in uint64 arithmetic that wraps as the `& mask` does."""
    with np.errstate(over="ignore"):
        state = np.asarray(_SPLITMIX_START, dtype=np.uint64)
        for value in values:
            state = (state ^ np.asarray(value).astype(np.uint64)) * _SPLITMIX_MUL1
            state = (state ^ (state >> np.uint64(27))) * _SPLITMIX_MUL2
            state = state ^ (state >> np.uint64(31))
    return np.asarray(state)


# What a link is (the `kind` column of the `links` table), by where it sits.
LINK_KINDS = {
    "host_nic": "a host's link to its switch (hierarchical, rail_optimized: an NPU's NIC to its scale-out switch)",
    "switch_port": "a switch's egress port to a host",
    "bottleneck": "dumbbell: the link from one switch to the other",
    "ring": "ring: the link from an NPU to its neighbour",
    "leaf_uplink": "leaf_spine: leaf to spine",
    "spine_downlink": "leaf_spine: spine to leaf",
    "edge_uplink": "fat_tree: edge to aggregation switch",
    "agg_downlink": "fat_tree: aggregation to edge switch",
    "core_uplink": "fat_tree: aggregation to core switch",
    "core_downlink": "fat_tree: core to aggregation switch",
    "scaleup_nic": "hierarchical, rail_optimized: an NPU's link to its node's scale-up switch",
    "scaleup_port": "hierarchical, rail_optimized: the scale-up switch's port to an NPU",
    "mesh": "full_mesh: an NPU's own link to one other NPU",
}
# Kinds whose traffic is fixed by the two hosts a message joins (its first or last link), whatever
# equal-cost path it takes.
HOST_LINK_KINDS = ("host_nic", "switch_port", "scaleup_nic", "scaleup_port", "mesh")
# Kinds of a host's own interfaces, where its TCP's packets start (a `HostNic` with `host.*`).
HOST_INTERFACE_KINDS = ("host_nic", "scaleup_nic", "mesh")
# Kinds of link whose far end is a host, not a switch (PFC: a host never pauses its switch).
HOST_FACING_KINDS = ("switch_port", "scaleup_port", "mesh")


class LinkRole(NamedTuple):
    """Where a link sits: its kind (`LINK_KINDS`), the nodes it joins and whether it is a switch
    egress port (with the configured buffer)."""

    kind: str
    src: str
    dst: str
    switch_port: bool


class Topology:
    """Links of one network and routing between hosts; built by `build_topology`.

    A topology owns what depends on its shape: its links, `path` (and `path_for_hash`, `vector_path`:
    the same routes for a given ECMP hash, and many at once), its collective dimensions and its route
    classes. Built with `parent`, it is a part of a larger one (the scale-out network of
    `NodesTopology`): its links go into the parent's lists, its hosts are named `host_names`."""

    ECMP = False  # whether its routes depend on a flow's hash (equal-cost paths)
    HOST_PREFIX = "h"  # its hosts' node names: `h<i>`

    def __init__(self, eventlist: EventList, net: NetworkConfig, seed: int, host: HostModel = None,
                 parent: Topology | None = None, host_names: Sequence[str] | None = None) -> None:
        self.eventlist = eventlist
        # Linux's transmit path at each host interface, if `host` asks for any of it
        self.host = host if isinstance(host, HostConfig) and (
            host.tsq_bytes or host.qdisc_packets or host.tx_jitter_ns) else None
        # RoCE: RDMA NICs at the host interfaces (`RoceNic`), pausable ports (paused with PFC: null = on)
        self.host_model = host
        self._pfc_bytes = net.pfc_thresholds_bytes() if isinstance(host, RoceConfig) and net.pfc is not False else None
        self.config = net
        self.npus = net.npus
        # what each link of `links` is, at the same index; a part's links are its parent's
        self.links: list[Link] = [] if parent is None else parent.links
        self.link_roles: list[LinkRole] = [] if parent is None else parent.link_roles
        self.switch_ports: list[Link] = [] if parent is None else parent.switch_ports
        self._host_names = list(host_names) if host_names is not None else None
        self._seed = seed
        self._buffer_bytes = None if net.buffer_kb is None else int(net.buffer_kb * BYTES_PER_KB)
        self._ecn_bytes = None if net.ecn_threshold_kb is None else int(net.ecn_threshold_kb * BYTES_PER_KB)
        self._link_index: dict[int, int] = {}  # id(link) -> its index in `links`, made on first use
        self._index_arrays: dict[str, np.ndarray] = {}  # `indices`' arrays by name

    def host_name(self, host: int) -> str:
        """The node name of host `host` in its links' names."""
        return f"{self.HOST_PREFIX}{host}" if self._host_names is None else self._host_names[host]

    def indices(self, name: str, links: Callable[[], Sequence[Link]]) -> np.ndarray:
        """The indices in `links` (of the whole network) of the links `links()` lists, as an int64 array
        made on first use and kept under `name` (the vectorised routes' lookup tables)."""
        array = self._index_arrays.get(name)
        if array is None:
            if len(self._link_index) != len(self.links):
                self._link_index = {id(link): index for index, link in enumerate(self.links)}
            index = self._link_index
            array = self._index_arrays[name] = np.array([index[id(link)] for link in links()], dtype=np.int64)
        return array

    def add_link(self, src: str, dst: str, kind: str, rate_gbps: float, latency_us: float,
                 switch_port: bool) -> Link:
        """Create the link from node `src` to node `dst`, named `src->dst`, of `kind` (one of
        `LINK_KINDS`); switch ports get the configured buffer and ECN threshold, a host's own
        interfaces the modelled transmit path (`HostNic`), if any."""
        net = self.config
        rng = Random(flow_hash(self._seed, len(self.links), 0x1055)) if net.loss_rate > 0 else None
        name, rate_bps, latency_ps = f"{src}->{dst}", gbps_to_bps(rate_gbps), us_to_ps(latency_us)
        link: Link
        if isinstance(self.host_model, RoceConfig):
            # a port whose far end is a switch counts its ingress bytes (hosts never pause their switch)
            xoff, xon = (0, 0) if self._pfc_bytes is None or kind in HOST_FACING_KINDS else self._pfc_bytes
            if kind in HOST_INTERFACE_KINDS:
                link = RoceNic(self.eventlist, name, rate_bps, latency_ps, xoff, xon)
            else:
                # DCQCN's RED marking at every switch egress port; without PFC, drop-tail buffers
                roce = self.host_model
                red = (int(roce.dcqcn_kmin_kb * BYTES_PER_KB), int(roce.dcqcn_kmax_kb * BYTES_PER_KB),
                       roce.dcqcn_pmax) if roce.cc == "dcqcn" and switch_port else None
                red_rng = Random(flow_hash(self._seed, len(self.links), _RED_RNG_SALT)) if red is not None else None
                buffer_bytes = self._buffer_bytes if switch_port and self._pfc_bytes is None else None
                link = PausableLink(self.eventlist, name, rate_bps, latency_ps, xoff, xon, buffer_bytes, red, red_rng)
        elif self.host is not None and kind in HOST_INTERFACE_KINDS:
            jitter_ps = ns_to_ps(self.host.tx_jitter_ns)
            jitter_rng = Random(flow_hash(self._seed, len(self.links), _JITTER_RNG_SALT)) if jitter_ps else None
            qdisc_packets = self.host.qdisc_packets
            qdisc_bytes = None if qdisc_packets is None else qdisc_packets * net.mtu_bytes  # full-size packets
            link = HostNic(self.eventlist, name, rate_bps, latency_ps, qdisc_bytes=qdisc_bytes,
                           tsq_bytes=self.host.tsq_bytes or 0, loss_rate=net.loss_rate, rng=rng,
                           jitter_ps=jitter_ps, jitter_rng=jitter_rng)
        else:
            link = Link(
                self.eventlist, name, rate_bps, latency_ps,
                buffer_bytes=self._buffer_bytes if switch_port else None,
                ecn_threshold_bytes=self._ecn_bytes if switch_port else None,
                loss_rate=net.loss_rate, rng=rng,
            )
        self.links.append(link)
        self.link_roles.append(LinkRole(kind, src, dst, switch_port))
        if switch_port:
            self.switch_ports.append(link)
        return link

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        """The links a packet of flow `flow_id` crosses from host `src` to host `dst`."""
        raise NotImplementedError

    def ecmp_hash(self, src: int, dst: int, flow_id: int) -> int:
        """The hash that picks a connection's equal-cost path: of the seed, its unordered pair of hosts and
        its flow id, so that both directions (data and ACKs) take the same switches."""
        return flow_hash(self._seed, min(src, dst), max(src, dst), flow_id)

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        """The path `path` gives a connection whose `ecmp_hash` is this: a reduced network routes a pair of
        the full run as the full run's hash routes it (engine/backends/reduction.py)."""
        return self.path(src, dst, 0)

    def routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], tuple[PacketSink, ...]]:
        """The packet routes of the connection `flow_id`: `path` from src to dst (data) and from dst
        to src (ACKs)."""
        return self.path(src, dst, flow_id), self.path(dst, src, flow_id)

    def equal_cost_paths(self, src: int, dst: int) -> int:
        """How many equal-cost paths join `src` to `dst`: `path_for_hash` gives path i for every hash
        congruent to i modulo this count (1 where the route does not depend on the hash)."""
        return 1

    def spray_routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], ...]:
        """The data routes the connection `flow_id` deals its packets over with `network.load_balancing=spray`
        (`RouteDealer`): every equal-cost path once, from the one ECMP gives it (its hash modulo the count)
        on in order of hash; empty where one path joins the hosts (spraying changes nothing there)."""
        count = self.equal_cost_paths(src, dst)
        if count == 1:
            return ()
        first = self.ecmp_hash(src, dst, flow_id) % count
        return tuple(self.path_for_hash(src, dst, (first + turn) % count) for turn in range(count))

    def vector_path(self, src: np.ndarray, dst: np.ndarray, flow_ids: np.ndarray) -> list[np.ndarray] | None:
        """`path` of many connections at once: per hop a row of link indices (into `links`), a route's first
        link in the first row and its last in the last, -1 where a route is shorter; None where this
        topology is routed message by message (not one simulated at thousands of NPUs)."""
        if not self.ECMP:
            return self.vector_path_for_hash(src, dst, np.zeros(0, dtype=np.uint64))
        hashes = flow_hash_array(self._seed, np.minimum(src, dst), np.maximum(src, dst), flow_ids)
        return self.vector_path_for_hash(src, dst, hashes)

    def vector_path_for_hash(self, src: np.ndarray, dst: np.ndarray, ecmp_hash: np.ndarray) -> list[np.ndarray] | None:
        """`vector_path` for given ECMP hashes (ignored, and possibly empty, where `ECMP` is false)."""
        return None

    def group_uplinks(self, hosts: int) -> list[list[Link]]:
        """Each group of `hosts` consecutive hosts' links towards the rest of the fabric (one of its
        config's `reduced_groups`), whose overflow a hybrid reduction must keep."""
        raise NotImplementedError(f"{type(self).__name__} is not reduced in groups")

    def dimensions(self) -> list[tuple[tuple[int, ...], ...]]:
        """The network's dimensions for collectives, each a tuple of disjoint NPU groups; a flat
        network has one dimension holding every NPU."""
        return [(tuple(range(self.npus)),)]

    def locality(self, host: int) -> tuple[int, ...]:
        """The nested domains holding `host`, outermost first (fat_tree: its pod, then its edge
        switch; one switch: none). Two hosts whose domains agree on the first L entries and differ
        on the next are joined by routes of class L; hosts agreeing on all share the innermost."""
        return ()

    def route_class(self, src: int, dst: int) -> int:
        """The kind of route from `src` to `dst`: every route of one class crosses links of the same
        rates and latencies in the same order and leaves its host by the same one of the host's
        links, whichever hosts it joins and whichever equal-cost path it takes."""
        src_domains, dst_domains = self.locality(src), self.locality(dst)
        common = 0
        while common < len(src_domains) and src_domains[common] == dst_domains[common]:
            common += 1
        return common

    def peer_class_counts(self, group: Sequence[int]) -> set[tuple[tuple[int, int], ...]]:
        """How the members of `group` see the others: for each member, the sorted (route class,
        number of other members it reaches by that class) pairs; the distinct ones (a handful).
        Counts members per domain prefix, so it takes O(len(group)), not a pass over every pair."""
        domains = [self.locality(host) for host in group]
        depth = len(domains[0])
        sharing = [Counter(host_domains[:level] for host_domains in domains) for level in range(depth + 1)]
        seen: set[tuple[tuple[int, int], ...]] = set()
        for host_domains in domains:
            # members sharing the first `level` domains with this one (itself included), non-increasing
            within = [sharing[level][host_domains[:level]] for level in range(depth + 1)] + [1]
            seen.add(tuple((level, within[level] - within[level + 1]) for level in range(depth + 1)
                           if within[level] > within[level + 1]))
        return seen


class SwitchTopology(Topology):
    """Every host on one switch: host -> switch -> host."""

    def __init__(self, eventlist: EventList, net: SwitchNetwork, seed: int, host: HostModel = None,
                 parent: Topology | None = None, host_names: Sequence[str] | None = None) -> None:
        super().__init__(eventlist, net, seed, host, parent, host_names)
        self.up = [self.add_link(self.host_name(i), "sw", "host_nic", net.link_gbps, net.link_latency_us, False)
                   for i in range(net.npus)]
        self.down = [self.add_link("sw", self.host_name(i), "switch_port", net.link_gbps, net.link_latency_us, True)
                     for i in range(net.npus)]

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        return (self.up[src], self.down[dst])

    def vector_path_for_hash(self, src: np.ndarray, dst: np.ndarray, ecmp_hash: np.ndarray) -> list[np.ndarray]:
        return [self.indices("up", lambda: self.up)[src], self.indices("down", lambda: self.down)[dst]]


class DumbbellTopology(Topology):
    """Hosts [0, n/2) on the left switch, [n/2, n) on the right, joined by a bottleneck pair."""

    def __init__(self, eventlist: EventList, net: DumbbellNetwork, seed: int, host: HostModel = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.half = net.npus // 2
        sides = [self.side_switch(i) for i in range(net.npus)]
        self.up = [self.add_link(self.host_name(i), sides[i], "host_nic", net.link_gbps, net.link_latency_us, False)
                   for i in range(net.npus)]
        self.down = [self.add_link(sides[i], self.host_name(i), "switch_port", net.link_gbps, net.link_latency_us, True)
                     for i in range(net.npus)]
        self.left_to_right = self.add_link("swL", "swR", "bottleneck", net.bottleneck_gbps,
                                           net.bottleneck_latency_us, True)
        self.right_to_left = self.add_link("swR", "swL", "bottleneck", net.bottleneck_gbps,
                                           net.bottleneck_latency_us, True)

    def side_switch(self, host: int) -> str:
        """The switch of a host's side: `swL` for the left half, `swR` for the right."""
        return "swL" if host < self.half else "swR"

    def locality(self, host: int) -> tuple[int, ...]:
        """The side: class 0 crosses the bottleneck, class 1 stays on one switch."""
        return (int(host >= self.half),)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        src_left, dst_left = src < self.half, dst < self.half
        if src_left == dst_left:
            return (self.up[src], self.down[dst])
        middle = self.left_to_right if src_left else self.right_to_left
        return (self.up[src], middle, self.down[dst])


class RingTopology(Topology):
    """NPUs in a bidirectional ring, each forwarding for others; the shorter direction is taken
    (a flow hash breaks the tie half-way round)."""

    HOST_PREFIX = "n"

    def __init__(self, eventlist: EventList, net: RingNetwork, seed: int, host: HostModel = None) -> None:
        super().__init__(eventlist, net, seed, host)
        n = net.npus
        name = self.host_name
        self.clockwise = [self.add_link(name(i), name((i + 1) % n), "ring", net.link_gbps, net.link_latency_us, True)
                          for i in range(n)]
        self.counter = [self.add_link(name(i), name((i - 1) % n), "ring", net.link_gbps, net.link_latency_us, True)
                        for i in range(n)]
        # routes cross the ports, which share each link between the NPU's own and forwarded packets
        self.ports = {id(link): RingPort(eventlist, link) for link in self.clockwise + self.counter}

    def route_class(self, src: int, dst: int) -> int:
        """The number of ring links the route crosses (either way round, half-way included)."""
        forward = (dst - src) % self.npus
        return min(forward, self.npus - forward)

    def peer_class_counts(self, group: Sequence[int]) -> set[tuple[tuple[int, int], ...]]:
        """Every NPU sees the whole ring alike; a smaller group is counted pair by pair."""
        members = group if len(group) < self.npus else group[:1]
        return {tuple(sorted(Counter(self.route_class(host, other) for other in group if other != host).items()))
                for host in members}

    def routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], tuple[PacketSink, ...]]:
        """`path` both ways, each link through its `RingPort`."""
        ports = self.ports
        return (tuple(ports[id(link)] for link in self.path(src, dst, flow_id)),
                tuple(ports[id(link)] for link in self.path(dst, src, flow_id)))

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        n = self.npus
        forward = (dst - src) % n
        backward = n - forward
        if forward < backward or (forward == backward and flow_hash(self._seed, src, dst, flow_id) & 1):
            return tuple(self.clockwise[(src + k) % n] for k in range(forward))
        return tuple(self.counter[(src - k) % n] for k in range(backward))

    def spray_routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], ...]:
        """Half-way round, both directions (the one `path` gives first), each link through its port."""
        n = self.npus
        if 2 * ((dst - src) % n) != n:
            return ()
        ports = self.ports
        clockwise = tuple(ports[id(self.clockwise[(src + k) % n])] for k in range(n // 2))
        counter = tuple(ports[id(self.counter[(src - k) % n])] for k in range(n // 2))
        return (clockwise, counter) if flow_hash(self._seed, src, dst, flow_id) & 1 else (counter, clockwise)


class LeafSpineTopology(Topology):
    """Leaves of `hosts_per_leaf` hosts, each leaf joined to every spine by `uplink_gbps` links;
    ECMP over spines by flow hash. Oversubscription = hosts_per_leaf * link_gbps / (spines * uplink_gbps)."""

    ECMP = True

    def __init__(self, eventlist: EventList, net: LeafSpineNetwork, seed: int, host: HostModel = None,
                 parent: Topology | None = None, host_names: Sequence[str] | None = None) -> None:
        super().__init__(eventlist, net, seed, host, parent, host_names)
        self.hosts_per_leaf = net.hosts_per_leaf
        leaves = net.npus // net.hosts_per_leaf
        per_leaf = net.hosts_per_leaf
        name = self.host_name
        self.up = [self.add_link(name(i), f"leaf{i // per_leaf}", "host_nic", net.link_gbps, net.link_latency_us,
                                 False) for i in range(net.npus)]
        self.down = [self.add_link(f"leaf{i // per_leaf}", name(i), "switch_port", net.link_gbps,
                                   net.link_latency_us, True) for i in range(net.npus)]
        self.leaf_up = [[self.add_link(f"leaf{leaf}", f"spine{s}", "leaf_uplink", net.uplink_gbps,
                                       net.link_latency_us, True)
                         for s in range(net.spines)] for leaf in range(leaves)]
        self.spine_down = [[self.add_link(f"spine{s}", f"leaf{leaf}", "spine_downlink", net.uplink_gbps,
                                          net.link_latency_us, True)
                            for leaf in range(leaves)] for s in range(net.spines)]

    def locality(self, host: int) -> tuple[int, ...]:
        """The leaf: class 0 crosses a spine, class 1 stays on one leaf."""
        return (host // self.hosts_per_leaf,)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        if src // self.hosts_per_leaf == dst // self.hosts_per_leaf:
            return (self.up[src], self.down[dst])
        return self._via_spine(src, dst, self.ecmp_hash(src, dst, flow_id) % len(self.spine_down))

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        if src // self.hosts_per_leaf == dst // self.hosts_per_leaf:
            return (self.up[src], self.down[dst])
        return self._via_spine(src, dst, ecmp_hash % len(self.spine_down))

    def equal_cost_paths(self, src: int, dst: int) -> int:
        """One through each spine between leaves; one within a leaf."""
        return 1 if src // self.hosts_per_leaf == dst // self.hosts_per_leaf else len(self.spine_down)

    def routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[Link, ...], tuple[Link, ...]]:
        """As `path` both ways, hashing once: both directions cross the same spine (`ecmp_hash` hashes the
        unordered pair), and the 64-bit hash is most of what setting up a connection costs."""
        if src // self.hosts_per_leaf == dst // self.hosts_per_leaf:
            return (self.up[src], self.down[dst]), (self.up[dst], self.down[src])
        spine = self.ecmp_hash(src, dst, flow_id) % len(self.spine_down)
        return self._via_spine(src, dst, spine), self._via_spine(dst, src, spine)

    def group_uplinks(self, hosts: int) -> list[list[Link]]:
        """A leaf's uplinks."""
        return [list(row) for row in self.leaf_up]

    def _via_spine(self, src: int, dst: int, spine: int) -> tuple[Link, ...]:
        """The four links from `src` to `dst` on another leaf, through `spine`."""
        src_leaf, dst_leaf = src // self.hosts_per_leaf, dst // self.hosts_per_leaf
        return (self.up[src], self.leaf_up[src_leaf][spine], self.spine_down[spine][dst_leaf], self.down[dst])

    def vector_path_for_hash(self, src: np.ndarray, dst: np.ndarray, ecmp_hash: np.ndarray) -> list[np.ndarray]:
        per_leaf, spines, leaves = self.hosts_per_leaf, len(self.spine_down), len(self.leaf_up)
        src_leaf, dst_leaf = src // per_leaf, dst // per_leaf
        cross = src_leaf != dst_leaf
        spine = (ecmp_hash % np.uint64(spines)).astype(np.int64)
        # leaf_up at [leaf * spines + spine], spine_down at [spine * leaves + leaf]
        leaf_up = self.indices("leaf_up", lambda: [link for row in self.leaf_up for link in row])
        spine_down = self.indices("spine_down", lambda: [link for row in self.spine_down for link in row])
        return [self.indices("up", lambda: self.up)[src],
                np.where(cross, leaf_up[src_leaf * spines + spine], -1),
                np.where(cross, spine_down[spine * leaves + dst_leaf], -1),
                self.indices("down", lambda: self.down)[dst]]


class FatTreeTopology(Topology):
    """A k-ary three-tier Clos (Al-Fares et al., SIGCOMM 2008): k pods of k/2 edge and k/2
    aggregation switches, every edge switch joined to every aggregation switch of its pod, and
    aggregation switch j of every pod joined to core switches j*k/2 .. j*k/2 + k/2 - 1 ((k/2)^2 cores).
    Host h sits on edge switch h // (k/2); only the first `npus` of the k^3/4 hosts exist, while every
    switch and switch link is built. Host links run at `link_gbps`, switch links at `uplink_gbps`
    (null: `link_gbps`; lower oversubscribes the fabric), all with `link_latency_us`. ECMP per flow
    at every tier: one flow hash picks the aggregation switch going up and, across pods, the core.

    Links live in flat lists indexed by switch numbers (edge e = pod * k/2 + i, aggregation
    a = pod * k/2 + j, core c = j * k/2 + m): O(k^3) links, no per-pair state."""

    ECMP = True

    def __init__(self, eventlist: EventList, net: FatTreeNetwork, seed: int, host: HostModel = None,
                 parent: Topology | None = None, host_names: Sequence[str] | None = None) -> None:
        super().__init__(eventlist, net, seed, host, parent, host_names)
        self.k = net.k
        half = self.half = self.k // 2
        k = self.k
        uplink_gbps = net.uplink_gbps if net.uplink_gbps is not None else net.link_gbps
        latency_us = net.link_latency_us
        name = self.host_name
        self.host_up = [self.add_link(name(h), f"edge{h // half}", "host_nic", net.link_gbps, latency_us, False)
                        for h in range(net.npus)]
        self.host_down = [self.add_link(f"edge{h // half}", name(h), "switch_port", net.link_gbps, latency_us, True)
                          for h in range(net.npus)]
        switches = k * half  # edge switches, and aggregation switches, in all pods
        # edge e -> aggregation j of its pod, at [e * half + j]; aggregation a -> edge i, at [a * half + i]
        self.edge_up = [self.add_link(f"edge{e}", f"agg{e - e % half + j}", "edge_uplink", uplink_gbps,
                                      latency_us, True)
                        for e in range(switches) for j in range(half)]
        self.agg_down = [self.add_link(f"agg{a}", f"edge{a - a % half + i}", "agg_downlink", uplink_gbps,
                                       latency_us, True)
                         for a in range(switches) for i in range(half)]
        # aggregation a = (pod, j) -> core j * half + m, at [a * half + m];
        # core c -> the aggregation switch of a pod it is joined to, at [c * k + pod]
        self.agg_up = [self.add_link(f"agg{a}", f"core{a % half * half + m}", "core_uplink", uplink_gbps,
                                     latency_us, True)
                       for a in range(switches) for m in range(half)]
        self.core_down = [self.add_link(f"core{c}", f"agg{pod * half + c // half}", "core_downlink", uplink_gbps,
                                        latency_us, True)
                          for c in range(half * half) for pod in range(k)]
        self._edge_of_host = np.arange(net.npus, dtype=np.int64) // half

    def locality(self, host: int) -> tuple[int, ...]:
        """Pod, then edge switch: class 0 crosses the core, class 1 an aggregation switch, class 2
        stays on one edge switch."""
        return (host // (self.half * self.half), host // self.half)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        if src // self.half == dst // self.half:
            return (self.host_up[src], self.host_down[dst])
        return self.path_for_hash(src, dst, self.ecmp_hash(src, dst, flow_id))

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        """One hash picks the aggregation switch going up and, across pods, the core."""
        half = self.half
        src_edge, dst_edge = src // half, dst // half
        if src_edge == dst_edge:
            return (self.host_up[src], self.host_down[dst])
        j = ecmp_hash % half
        src_agg, dst_agg = src_edge - src_edge % half + j, dst_edge - dst_edge % half + j
        up = (self.host_up[src], self.edge_up[src_edge * half + j])
        down = (self.agg_down[dst_agg * half + dst_edge % half], self.host_down[dst])
        if src_agg == dst_agg:  # one pod
            return up + down
        m = ecmp_hash // half % half
        core = j * half + m
        return up + (self.agg_up[src_agg * half + m], self.core_down[core * self.k + dst_edge // half]) + down

    def equal_cost_paths(self, src: int, dst: int) -> int:
        """(k/2)^2 across pods (an aggregation switch, then a core), k/2 within a pod, one on an edge switch."""
        half = self.half
        if src // half == dst // half:
            return 1
        return half if src // (half * half) == dst // (half * half) else half * half

    def group_uplinks(self, hosts: int) -> list[list[Link]]:
        """An edge switch's uplinks (`hosts` = k/2); or a pod's: its edge uplinks and its aggregation
        switches' core uplinks."""
        half = self.half
        groups = -(-self.npus // hosts)
        if hosts == half:  # edge switches
            return [self.edge_up[edge * half:edge * half + half] for edge in range(groups)]
        return [[links[switch * half + port] for links in (self.edge_up, self.agg_up)
                 for switch in range(pod * half, pod * half + half) for port in range(half)] for pod in range(groups)]

    def vector_path_for_hash(self, src: np.ndarray, dst: np.ndarray, ecmp_hash: np.ndarray) -> list[np.ndarray]:
        half, k = self.half, self.k
        src_edge, dst_edge = self._edge_of_host[src], self._edge_of_host[dst]  # lookups: no division
        other_edge = src_edge != dst_edge
        # path_for_hash's hash % half and hash // half % half, from one 64-bit division: with
        # hash = a * half^2 + r, they are r % half and r // half
        r = (ecmp_hash % np.uint64(half * half)).astype(np.int64)
        j, m = r % half, r // half
        src_agg = src_edge - src_edge % half + j
        dst_agg = dst_edge - dst_edge % half + j
        other_pod = other_edge & (src_agg != dst_agg)
        core = j * half + m
        return [self.indices("host_up", lambda: self.host_up)[src],
                np.where(other_edge, self.indices("edge_up", lambda: self.edge_up)[src_edge * half + j], -1),
                np.where(other_pod, self.indices("agg_up", lambda: self.agg_up)[src_agg * half + m], -1),
                np.where(other_pod, self.indices("core_down", lambda: self.core_down)[core * k + dst_edge // half], -1),
                np.where(other_edge, self.indices("agg_down", lambda: self.agg_down)[dst_agg * half + dst_edge % half],
                         -1),
                self.indices("host_down", lambda: self.host_down)[dst]]


class NodesTopology(Topology):
    """Nodes of `npus_per_node` NPUs on a scale-up switch each (`scaleup_gbps`, `scaleup_latency_us`:
    links `npu<i>` <-> `node<n>`); every NPU's NIC of `link_gbps` on the scale-out network
    (`NodesNetwork.scaleout_network`, a flat topology built as a part of this one, its host p being the
    NIC of the NPU at position p: `NodesNetwork.nic_position`). Within a node a message crosses the
    scale-up switch; between nodes it leaves by the NIC of its `relay` (its sender, or on a rail-optimized
    network with PXN the sender's node's NPU on the receiver's rail, reached over the scale-up switch
    first) and crosses the scale-out network to the receiver's NIC. Route classes: the scale-out's
    (through the sender's own NIC), then one within a node, then the scale-out's again through a relay."""

    HOST_PREFIX = "npu"

    def __init__(self, eventlist: EventList, net: NodesNetwork, seed: int, host: HostModel = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.npus_per_node = per_node = net.npus_per_node
        n = net.npus
        self.scaleup_up = [self.add_link(self.host_name(i), f"node{i // per_node}", "scaleup_nic", net.scaleup_gbps,
                                         net.scaleup_latency_us, False) for i in range(n)]
        self.scaleup_down = [self.add_link(f"node{i // per_node}", self.host_name(i), "scaleup_port", net.scaleup_gbps,
                                           net.scaleup_latency_us, True) for i in range(n)]
        self.position = [net.nic_position(i) for i in range(n)]  # each NPU's NIC's host on the scale-out
        self._position_array = np.array(self.position, dtype=np.int64)
        npu_at = [0] * n
        for npu, position in enumerate(self.position):
            npu_at[position] = npu
        scaleout_net = net.scaleout_network()
        self.scaleout = TOPOLOGY_CLASSES[scaleout_net.topology](
            eventlist, scaleout_net, seed, host, self, [self.host_name(npu) for npu in npu_at])
        self.ECMP = self.scaleout.ECMP
        # the scale-out's route classes: 0..depth; within a node: depth + 1; through a relay: depth + 2 on
        self._node_class = len(self.scaleout.locality(0)) + 1

    def relay(self, src: int, dst: int) -> int:
        """The NPU whose NIC a message from `src` to `dst` on another node leaves by: `src` itself."""
        return src

    def dimensions(self) -> list[tuple[tuple[int, ...], ...]]:
        """Scale-up (NPUs of one node), then scale-out (the NPUs of equal local index in every node:
        on a rail-optimized network, one rail)."""
        per_node, nodes = self.npus_per_node, self.npus // self.npus_per_node
        local = tuple(tuple(node * per_node + i for i in range(per_node)) for node in range(nodes))
        across = tuple(tuple(node * per_node + i for node in range(nodes)) for i in range(per_node))
        return [dims for dims in (local, across) if len(dims[0]) > 1] or [local]

    def locality(self, host: int) -> tuple[int, ...]:
        """The node (routes between nodes: `route_class`)."""
        return (host // self.npus_per_node,)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        if src // self.npus_per_node == dst // self.npus_per_node:
            return (self.scaleup_up[src], self.scaleup_down[dst])
        return self.path_for_hash(src, dst, self.ecmp_hash(src, dst, flow_id) if self.ECMP else 0)

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        if src // self.npus_per_node == dst // self.npus_per_node:
            return (self.scaleup_up[src], self.scaleup_down[dst])
        relay = self.relay(src, dst)
        across = self.scaleout.path_for_hash(self.position[relay], self.position[dst], ecmp_hash)
        if relay == src:
            return across
        return (self.scaleup_up[src], self.scaleup_down[relay]) + across

    def equal_cost_paths(self, src: int, dst: int) -> int:
        """The scale-out's between the relay's NIC and the receiver's; one within a node."""
        if src // self.npus_per_node == dst // self.npus_per_node:
            return 1
        return self.scaleout.equal_cost_paths(self.position[self.relay(src, dst)], self.position[dst])

    def route_class(self, src: int, dst: int) -> int:
        if src // self.npus_per_node == dst // self.npus_per_node:
            return self._node_class
        relay = self.relay(src, dst)
        across = self.scaleout.route_class(self.position[relay], self.position[dst])
        return across if relay == src else across + self._node_class + 1

    def peer_class_counts(self, group: Sequence[int]) -> set[tuple[tuple[int, int], ...]]:
        """As `Topology.peer_class_counts`, over the scale-out's domains of the members' NICs, the members
        of one node taken apart (a node's NICs may sit on different leaves)."""
        domains = [self.scaleout.locality(self.position[npu]) for npu in group]
        nodes = [npu // self.npus_per_node for npu in group]
        depth = len(domains[0])
        sharing = [Counter(npu_domains[:level] for npu_domains in domains) for level in range(depth + 1)]
        node_sharing = [Counter((node, npu_domains[:level]) for node, npu_domains in zip(nodes, domains))
                        for level in range(depth + 1)]
        seen: set[tuple[tuple[int, int], ...]] = set()
        for node, npu_domains in zip(nodes, domains):
            # members of other nodes sharing the first `level` domains with this one, non-increasing
            within = [sharing[level][npu_domains[:level]] - node_sharing[level][(node, npu_domains[:level])]
                      for level in range(depth + 1)] + [0]
            counts = [(level, within[level] - within[level + 1]) for level in range(depth + 1)
                      if within[level] > within[level + 1]]
            same_node = node_sharing[0][(node, ())] - 1
            seen.add(tuple(counts + ([(self._node_class, same_node)] if same_node else [])))
        return seen

    def vector_path_for_hash(self, src: np.ndarray, dst: np.ndarray, ecmp_hash: np.ndarray) -> list[np.ndarray] | None:
        per_node = self.npus_per_node
        position = self._position_array
        same_node = src // per_node == dst // per_node
        relay = self.vector_relay(src, dst)
        across = self.scaleout.vector_path_for_hash(position[relay], position[dst], ecmp_hash)
        assert across is not None, "a scale-out network is routed vectorised"
        up = self.indices("scaleup_up", lambda: self.scaleup_up)
        down = self.indices("scaleup_down", lambda: self.scaleup_down)
        relayed = (relay != src) & ~same_node
        first = np.where(same_node | relayed, up[src], across[0])
        last = np.where(same_node, down[dst], across[-1])
        middle = [np.where(same_node, -1, row) for row in across[1:-1]]
        if relayed.any():
            middle = [np.where(relayed, down[relay], -1), np.where(relayed, across[0], -1)] + middle
        return [first, *middle, last]

    def vector_relay(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """`relay` of many messages at once."""
        return src

    def group_uplinks(self, hosts: int) -> list[list[Link]]:
        """The scale-out's, its groups of NICs holding whole nodes (`HierarchicalNetwork.reduced_groups`)."""
        return self.scaleout.group_uplinks(hosts)


class HierarchicalTopology(NodesTopology):
    """Nodes on a scale-up switch each, their NICs on one switch, a leaf-spine or a fat tree
    (`network.scaleout`), a node's NICs on consecutive hosts of it."""


class RailOptimizedTopology(NodesTopology):
    """Nodes on a scale-up switch each, NIC i of every node on rail i (`RailOptimizedNetwork`): rail
    leaves joined by spines. With `pxn` a message to another rail is relayed by its sender's node's NPU
    on the receiver's rail (NCCL's PXN), else it crosses the spines."""

    def __init__(self, eventlist: EventList, net: RailOptimizedNetwork, seed: int,
                 host: HostModel = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.pxn = net.pxn
        self.nodes_per_leaf = net.hosts_per_leaf

    def relay(self, src: int, dst: int) -> int:
        if not self.pxn:
            return src
        per_node = self.npus_per_node
        return src - src % per_node + dst % per_node

    def vector_relay(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if not self.pxn:
            return src
        per_node = self.npus_per_node
        return src - src % per_node + dst % per_node

    def group_uplinks(self, hosts: int) -> list[list[Link]]:
        """A group of nodes' rail leaves' uplinks (`RailOptimizedNetwork.reduced_groups`), every rail's."""
        assert isinstance(self.scaleout, LeafSpineTopology)
        rails = self.npus_per_node
        leaf_up = self.scaleout.leaf_up
        return [[link for leaf in range(group * rails, group * rails + rails) for link in leaf_up[leaf]]
                for group in range(self.npus // hosts)]

    def peer_class_counts(self, group: Sequence[int]) -> set[tuple[tuple[int, int], ...]]:
        """With `pxn`, counted by node, rail and group of nodes (whose rail leaves are the same): a peer
        on the member's rail is reached through the member's NIC (its leaf, or across the spines), one on
        another rail through the relay's (the relay's leaf is the peer's if they are in one group of
        nodes, else across the spines); without, as every node network."""
        if not self.pxn:
            return super().peer_class_counts(group)
        per_node, per_leaf = self.npus_per_node, self.nodes_per_leaf
        keys = [(npu // per_node, npu // per_node // per_leaf, npu % per_node) for npu in group]
        in_node = Counter(node for node, _, _ in keys)
        in_group = Counter(group_ for _, group_, _ in keys)
        on_rail = Counter(rail for _, _, rail in keys)
        on_leaf = Counter((group_, rail) for _, group_, rail in keys)
        across, leaf, node_class = 0, 1, self._node_class
        seen: set[tuple[tuple[int, int], ...]] = set()
        for node, group_, rail in keys:
            same_node = in_node[node] - 1
            same_leaf = on_leaf[(group_, rail)] - 1
            rail_across = on_rail[rail] - on_leaf[(group_, rail)]
            relayed_leaf = in_group[group_] - on_leaf[(group_, rail)] - same_node
            relayed_across = len(keys) - in_group[group_] - rail_across
            counts = ((across, rail_across), (leaf, same_leaf), (node_class, same_node),
                      (node_class + 1 + across, relayed_across), (node_class + 1 + leaf, relayed_leaf))
            seen.add(tuple(pair for pair in counts if pair[1]))
        return seen


class FullMeshTopology(Topology):
    """Every NPU joined to every other by a link of its own each way: a route is that one link."""

    HOST_PREFIX = "n"

    def __init__(self, eventlist: EventList, net: FullMeshNetwork, seed: int, host: HostModel = None) -> None:
        super().__init__(eventlist, net, seed, host)
        n = net.npus
        # the link src -> dst at index src * (n - 1) + (dst if dst < src else dst - 1)
        self.mesh = [self.add_link(self.host_name(src), self.host_name(dst), "mesh", net.link_gbps, net.link_latency_us,
                                   False)
                     for src in range(n) for dst in range(n) if dst != src]

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        return (self.mesh[src * (self.npus - 1) + (dst if dst < src else dst - 1)],)


# A topology's class by `network.topology` (its config's class: `engine.config.TOPOLOGY_CONFIGS`)
TOPOLOGY_CLASSES: dict[str, type[Topology]] = {
    "switch": SwitchTopology,
    "dumbbell": DumbbellTopology,
    "ring": RingTopology,
    "leaf_spine": LeafSpineTopology,
    "fat_tree": FatTreeTopology,
    "hierarchical": HierarchicalTopology,
    "full_mesh": FullMeshTopology,
    "rail_optimized": RailOptimizedTopology,
}


def build_topology(eventlist: EventList, net: NetworkConfig, seed: int,
                   host: HostModel = None) -> Topology:
    """Build the topology named by `net.topology` (already validated); with `host`, its hosts'
    interfaces model Linux's transmit path, or with RoCE's config they are RDMA NICs (`RoceNic`) and,
    with PFC, every port pausable (the packet engine's; fluid backends read routes only)."""
    return TOPOLOGY_CLASSES[net.topology](eventlist, net, seed, host)
