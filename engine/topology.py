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
from typing import NamedTuple, Sequence

from .config import (
    DumbbellNetwork,
    FatTreeNetwork,
    FullMeshNetwork,
    HierarchicalNetwork,
    HostConfig,
    LeafSpineNetwork,
    NetworkConfig,
    RingNetwork,
    SwitchNetwork,
)
from .eventlist import EventList
from .links import HostNic, Link, PacketSink, RingPort
from .units import BYTES_PER_KB, gbps_to_bps, ns_to_ps, us_to_ps

_JITTER_RNG_SALT = 0x7177  # a host interface's jitter draws: a stream apart from its loss draws


def flow_hash(*values: int) -> int:
    """A deterministic 64-bit mix (splitmix64) of integers; Python's hash() of ints is not mixed."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 31
    return state


# What a link is (the `kind` column of the `links` table), by where it sits.
LINK_KINDS = {
    "host_nic": "a host's link to its switch (hierarchical: an NPU's NIC to the scale-out switch)",
    "switch_port": "a switch's egress port to a host",
    "bottleneck": "dumbbell: the link from one switch to the other",
    "ring": "ring: the link from an NPU to its neighbour",
    "leaf_uplink": "leaf_spine: leaf to spine",
    "spine_downlink": "leaf_spine: spine to leaf",
    "edge_uplink": "fat_tree: edge to aggregation switch",
    "agg_downlink": "fat_tree: aggregation to edge switch",
    "core_uplink": "fat_tree: aggregation to core switch",
    "core_downlink": "fat_tree: core to aggregation switch",
    "scaleup_nic": "hierarchical: an NPU's link to its node's scale-up switch",
    "scaleup_port": "hierarchical: the scale-up switch's port to an NPU",
    "mesh": "full_mesh: an NPU's own link to one other NPU",
}
# Kinds whose traffic is fixed by the two hosts a message joins (its first or last link), whatever
# equal-cost path it takes.
HOST_LINK_KINDS = ("host_nic", "switch_port", "scaleup_nic", "scaleup_port", "mesh")
# Kinds of a host's own interfaces, where its TCP's packets start (a `HostNic` with `host.*`).
HOST_INTERFACE_KINDS = ("host_nic", "scaleup_nic", "mesh")


class LinkRole(NamedTuple):
    """Where a link sits: its kind (`LINK_KINDS`), the nodes it joins and whether it is a switch
    egress port (with the configured buffer)."""

    kind: str
    src: str
    dst: str
    switch_port: bool


class Topology:
    """Links of one network and routing between hosts; built by `build_topology`."""

    def __init__(self, eventlist: EventList, net: NetworkConfig, seed: int, host: HostConfig | None = None) -> None:
        self.eventlist = eventlist
        # Linux's transmit path at each host interface, if `host` asks for any of it
        self.host = host if host is not None and (host.tsq_bytes or host.qdisc_packets or host.tx_jitter_ns) else None
        self.config = net
        self.npus = net.npus
        self.links: list[Link] = []
        self.link_roles: list[LinkRole] = []  # what each link of `links` is, at the same index
        self.switch_ports: list[Link] = []
        self._seed = seed
        self._buffer_bytes = None if net.buffer_kb is None else int(net.buffer_kb * BYTES_PER_KB)
        self._ecn_bytes = None if net.ecn_threshold_kb is None else int(net.ecn_threshold_kb * BYTES_PER_KB)

    def add_link(self, src: str, dst: str, kind: str, rate_gbps: float, latency_us: float,
                 switch_port: bool) -> Link:
        """Create the link from node `src` to node `dst`, named `src->dst`, of `kind` (one of
        `LINK_KINDS`); switch ports get the configured buffer and ECN threshold, a host's own
        interfaces the modelled transmit path (`HostNic`), if any."""
        net = self.config
        rng = Random(flow_hash(self._seed, len(self.links), 0x1055)) if net.loss_rate > 0 else None
        name, rate_bps, latency_ps = f"{src}->{dst}", gbps_to_bps(rate_gbps), us_to_ps(latency_us)
        link: Link
        if self.host is not None and kind in HOST_INTERFACE_KINDS:
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

    def routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[PacketSink, ...], tuple[PacketSink, ...]]:
        """The packet routes of the connection `flow_id`: `path` from src to dst (data) and from dst
        to src (ACKs)."""
        return self.path(src, dst, flow_id), self.path(dst, src, flow_id)

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

    def __init__(self, eventlist: EventList, net: SwitchNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.up = [self.add_link(f"h{i}", "sw", "host_nic", net.link_gbps, net.link_latency_us, False)
                   for i in range(net.npus)]
        self.down = [self.add_link("sw", f"h{i}", "switch_port", net.link_gbps, net.link_latency_us, True)
                     for i in range(net.npus)]

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        return (self.up[src], self.down[dst])


class DumbbellTopology(Topology):
    """Hosts [0, n/2) on the left switch, [n/2, n) on the right, joined by a bottleneck pair."""

    def __init__(self, eventlist: EventList, net: DumbbellNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.half = net.npus // 2
        sides = [self.side_switch(i) for i in range(net.npus)]
        self.up = [self.add_link(f"h{i}", sides[i], "host_nic", net.link_gbps, net.link_latency_us, False)
                   for i in range(net.npus)]
        self.down = [self.add_link(sides[i], f"h{i}", "switch_port", net.link_gbps, net.link_latency_us, True)
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

    def __init__(self, eventlist: EventList, net: RingNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        n = net.npus
        self.clockwise = [self.add_link(f"n{i}", f"n{(i + 1) % n}", "ring", net.link_gbps, net.link_latency_us, True)
                          for i in range(n)]
        self.counter = [self.add_link(f"n{i}", f"n{(i - 1) % n}", "ring", net.link_gbps, net.link_latency_us, True)
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


class LeafSpineTopology(Topology):
    """Leaves of `hosts_per_leaf` hosts, each leaf joined to every spine by `uplink_gbps` links;
    ECMP over spines by flow hash. Oversubscription = hosts_per_leaf * link_gbps / (spines * uplink_gbps)."""

    def __init__(self, eventlist: EventList, net: LeafSpineNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.hosts_per_leaf = net.hosts_per_leaf
        leaves = net.npus // net.hosts_per_leaf
        per_leaf = net.hosts_per_leaf
        self.up = [self.add_link(f"h{i}", f"leaf{i // per_leaf}", "host_nic", net.link_gbps, net.link_latency_us,
                                 False) for i in range(net.npus)]
        self.down = [self.add_link(f"leaf{i // per_leaf}", f"h{i}", "switch_port", net.link_gbps,
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
        return self._via_spine(src, dst, self._spine(src, dst, flow_id))

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        """The path `path` gives a connection whose ECMP hash (`flow_hash` of the seed, its unordered
        pair and its flow id) is `ecmp_hash`: a reduced network routes a pair of the full run as the
        full run's hash routes it (engine/backends/hybrid.py)."""
        if src // self.hosts_per_leaf == dst // self.hosts_per_leaf:
            return (self.up[src], self.down[dst])
        return self._via_spine(src, dst, ecmp_hash % len(self.spine_down))

    def routes(self, src: int, dst: int, flow_id: int) -> tuple[tuple[Link, ...], tuple[Link, ...]]:
        """As `path` both ways, hashing once: both directions cross the same spine (`path` hashes the
        unordered pair), and the 64-bit hash is most of what setting up a connection costs."""
        if src // self.hosts_per_leaf == dst // self.hosts_per_leaf:
            return (self.up[src], self.down[dst]), (self.up[dst], self.down[src])
        spine = self._spine(src, dst, flow_id)
        return self._via_spine(src, dst, spine), self._via_spine(dst, src, spine)

    def _spine(self, src: int, dst: int, flow_id: int) -> int:
        """ECMP: both directions of a connection hash the same (unordered) pair, so ACKs share the spine."""
        return flow_hash(self._seed, min(src, dst), max(src, dst), flow_id) % len(self.spine_down)

    def _via_spine(self, src: int, dst: int, spine: int) -> tuple[Link, ...]:
        """The four links from `src` to `dst` on another leaf, through `spine`."""
        src_leaf, dst_leaf = src // self.hosts_per_leaf, dst // self.hosts_per_leaf
        return (self.up[src], self.leaf_up[src_leaf][spine], self.spine_down[spine][dst_leaf], self.down[dst])


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

    def __init__(self, eventlist: EventList, net: FatTreeNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.k = net.k
        half = self.half = self.k // 2
        k = self.k
        uplink_gbps = net.uplink_gbps if net.uplink_gbps is not None else net.link_gbps
        latency_us = net.link_latency_us
        self.host_up = [self.add_link(f"h{h}", f"edge{h // half}", "host_nic", net.link_gbps, latency_us, False)
                        for h in range(net.npus)]
        self.host_down = [self.add_link(f"edge{h // half}", f"h{h}", "switch_port", net.link_gbps, latency_us, True)
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

    def locality(self, host: int) -> tuple[int, ...]:
        """Pod, then edge switch: class 0 crosses the core, class 1 an aggregation switch, class 2
        stays on one edge switch."""
        return (host // (self.half * self.half), host // self.half)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        if src // self.half == dst // self.half:
            return (self.host_up[src], self.host_down[dst])
        # ECMP: both directions of a connection hash the same (unordered) pair, as on leaf_spine
        return self.path_for_hash(src, dst, flow_hash(self._seed, min(src, dst), max(src, dst), flow_id))

    def path_for_hash(self, src: int, dst: int, ecmp_hash: int) -> tuple[Link, ...]:
        """The path `path` gives a connection whose ECMP hash is `ecmp_hash` (as
        `LeafSpineTopology.path_for_hash`): it picks the aggregation switch going up and, across pods,
        the core."""
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


class HierarchicalTopology(Topology):
    """Nodes of `npus_per_node` NPUs on a scale-up switch (`scaleup_gbps`, `scaleup_latency_us`);
    every NPU also has a NIC of `link_gbps` to one scale-out switch joining the nodes."""

    def __init__(self, eventlist: EventList, net: HierarchicalNetwork, seed: int,
                 host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        self.npus_per_node = net.npus_per_node
        n = net.npus
        per_node = net.npus_per_node
        self.scaleup_up = [self.add_link(f"npu{i}", f"node{i // per_node}", "scaleup_nic", net.scaleup_gbps,
                                         net.scaleup_latency_us, False) for i in range(n)]
        self.scaleup_down = [self.add_link(f"node{i // per_node}", f"npu{i}", "scaleup_port", net.scaleup_gbps,
                                           net.scaleup_latency_us, True) for i in range(n)]
        self.nic_up = [self.add_link(f"npu{i}", "sw", "host_nic", net.link_gbps, net.link_latency_us, False)
                       for i in range(n)]
        self.nic_down = [self.add_link("sw", f"npu{i}", "switch_port", net.link_gbps, net.link_latency_us, True)
                         for i in range(n)]

    def dimensions(self) -> list[tuple[tuple[int, ...], ...]]:
        """Scale-up (NPUs of one node), then scale-out (the NPUs of equal local index in every node)."""
        per_node, nodes = self.npus_per_node, self.npus // self.npus_per_node
        local = tuple(tuple(node * per_node + i for i in range(per_node)) for node in range(nodes))
        across = tuple(tuple(node * per_node + i for node in range(nodes)) for i in range(per_node))
        return [dims for dims in (local, across) if len(dims[0]) > 1] or [local]

    def locality(self, host: int) -> tuple[int, ...]:
        """The node: class 0 goes through the NICs, class 1 through the node's scale-up fabric."""
        return (host // self.npus_per_node,)

    def path(self, src: int, dst: int, flow_id: int) -> tuple[Link, ...]:
        if src // self.npus_per_node == dst // self.npus_per_node:
            return (self.scaleup_up[src], self.scaleup_down[dst])
        return (self.nic_up[src], self.nic_down[dst])


class FullMeshTopology(Topology):
    """Every NPU joined to every other by a link of its own each way: a route is that one link."""

    def __init__(self, eventlist: EventList, net: FullMeshNetwork, seed: int, host: HostConfig | None = None) -> None:
        super().__init__(eventlist, net, seed, host)
        n = net.npus
        # the link src -> dst at index src * (n - 1) + (dst if dst < src else dst - 1)
        self.mesh = [self.add_link(f"n{src}", f"n{dst}", "mesh", net.link_gbps, net.link_latency_us, False)
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
}


def build_topology(eventlist: EventList, net: NetworkConfig, seed: int, host: HostConfig | None = None) -> Topology:
    """Build the topology named by `net.topology` (already validated); with `host`, its hosts'
    interfaces model Linux's transmit path (the packet engine's; fluid backends read routes only)."""
    return TOPOLOGY_CLASSES[net.topology](eventlist, net, seed, host)
