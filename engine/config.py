"""The engine's plain, validated configuration.

`load_config(mapping)` turns a nested dict (as Hydra composes it, or as a test writes it) into frozen
dataclasses, refusing anything that cannot run with a `ConfigError` that names the key, the value
and what is allowed. Nothing here knows about Hydra.

A topology, a congestion control and a workload type are each a dataclass of their own over a
shared base (`NetworkConfig`, `TcpConfig`, `WorkloadConfig`): its fields are its keys, its defaults the
values a preset starts from (`sweep.config_bases` registers them as Hydra's bases), its `check` what it
refuses. They are found by name in `TOPOLOGY_CONFIGS`, `TCP_CONFIGS` and `WORKLOAD_CONFIGS`; code that
needs one variant's keys narrows with `isinstance`. A key of another variant of the same section
(`network.spines` on a switch) is accepted and left out: it cannot change the simulation (`engine.keys`).

This module is the floor of the engine: it imports the standard library, the wire constants of
`engine.links` and the backends' names (`engine.backends.names`, which imports nothing), never
a layer that reads it (tests/test_import_graph.py). What lies above it is checked above it, by
callers before any simulation starts: the files a workload names (an ASTRA-sim text file, a Chakra
trace) where they are read, `engine.check_workload_files`, and what the chosen backend can run,
`engine.check_backend`.

Which keys can change a config's simulation, and the run identity that follows, is `engine.keys`
(some of it depends on what the chosen backend models).
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Mapping

from .backends.names import BACKEND_NAMES, DEFAULT_BACKEND
from .links import ROCE_HEADER_BYTES, ROCE_PATH_MTUS, TCP_IP_HEADER_BYTES, TCP_TIMESTAMP_OPTION_BYTES

# What the sender does with its SACK scoreboard at an RTO: keep it and resend only the holes (Linux,
# ns-3, RFC 6675 with erratum 1610) or discard it and resend everything from snd_una (RFC 2018).
SACK_AFTER_RTO = ("keep", "discard")
# Which links get a row in the `links` table: none, the switches' egress ports, or every link.
LINK_STATS = ("none", "switch_ports", "all")
# what the hybrid backend reduces a fat tree to: pairs of pods or of edge switches, or pods while they fit
HYBRID_FAT_TREE_GROUPS = ("auto", "pod", "edge")
HYBRID_RAILS = ("auto", "every", "one")
# dlrm: how the bottom MLP's output meets the embeddings: pairwise dot products (DLRM 2019) or DCNv2's
# low-rank cross layers (MLPerf Training's DLRM-DCNv2).
INTERACTIONS = ("dot", "dcn")
DURATION_UNITS = ("us", "ns", "cycles")  # chakra: the unit of a compute node's duration_micros
COLLECTIVE_OPS = ("all_reduce", "all_to_all", "all_gather", "reduce_scatter")
SYSTEM_ALGORITHMS = {
    "all_reduce": ("ring", "halving_doubling", "double_binary_tree", "direct"),
    "all_to_all": ("direct", "ring"),
    "all_gather": ("ring", "halving_doubling", "direct"),
    "reduce_scatter": ("ring", "halving_doubling", "direct"),
}
FLOW_PATTERNS = ("incast", "permutation", "all_to_all")
# The transport every message and flow goes over (`transport.protocol`, Hydra's `transport` group).
TRANSPORTS = ("tcp", "roce")
# RoCE's congestion control: none (line rate, stopped only by PFC pauses: htsim's RoCE) or DCQCN.
ROCE_CCS = ("none", "dcqcn")
# Where each packet goes among a route's equal-cost paths: per flow (a hash of the flow: ECMP) or per packet
# (`spray`: each connection deals its data packets round robin over its paths; engine/topology.py)
LOAD_BALANCING = ("ecmp", "spray")
# PFC thresholds when network.pfc_xoff_kb / pfc_xon_kb are null, in full packets of network.mtu_bytes: the counts of
# htsim's main_roce.cpp (high_pfc = 15, low_pfc = 12), which multiplies them by its payload (-mtu), not by the full
# packet (docs/roce.md, "Side by side with htsim", sets both sides to htsim's bytes)
PFC_XOFF_PACKETS = 15
PFC_XON_PACKETS = 12
# A host's qdisc: pfifo_fast, Linux's default root qdisc (one FIFO for traffic of one priority).
QDISCS = ("pfifo_fast",)
# network.npus at most: the phase backend's largest runs are 10^4 NPUs, and sizing a workload of 10^8 took
# minutes before anything was refused (its ring steps are listed one by one)
MAX_NPUS = 1 << 20


class ConfigError(ValueError):
    """A configuration that cannot run: names the key, the offending value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key}={as_written(value)} is not valid: {allowed}")


def as_written(value: Any) -> str:
    """`value` as a user writes it on the command line or in YAML: true, false, null; else Python's repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


@dataclass(frozen=True)
class ReducedGroups:
    """A way the hybrid backend reduces a network (engine/backends/reduction.py): groups of `hosts`
    consecutive NPUs, each behind its links to the rest of the fabric (`Topology.group_uplinks`), the
    simulated ones in one reduced network (`together`: a leaf-spine's leaves) or in mirrored pairs (a fat
    tree's pods or edge switches). `name`: a group, in words; `plural`: several. `rails` > 1: the
    network's scale-out carries every message between nodes on the rail of its receiver's local index (NPU
    mod `rails`), from the NIC of its sender's node on that rail (PXN), the rails alike and sharing no link:
    the reduction replays the messages to rail 0's NPUs only, each from that NIC, and they stand for the
    others."""

    hosts: int
    together: bool
    name: str
    plural: str
    rails: int = 1


@dataclass(frozen=True)
class NetworkConfig:
    """What every topology has (`network.*`): its name, its hosts and their links, the switches'
    buffers. A topology's own keys are on its subclass, registered in `TOPOLOGY_CONFIGS`."""

    # Whether its links queue in switch ports (a ring's: its forwarding ports), where `buffer_kb` and
    # `ecn_threshold_kb` apply
    SWITCH_PORTS: ClassVar[bool] = True
    # Whether its hosts send through interfaces of their own (`host.*` applies), not through ports
    # that also forward others' packets (the ring's)
    HOST_INTERFACES: ClassVar[bool] = True
    IN_WORDS: ClassVar[str] = "one switch"  # its name in words, for plots and reports
    # Why the hybrid backend cannot run it ('' where it can: reduced in groups, or simulated whole)
    HYBRID_REFUSAL: ClassVar[str] = ""

    topology: str = "switch"  # the key of `TOPOLOGY_CONFIGS` naming the subclass
    npus: int = 8
    link_gbps: float = 100.0
    link_latency_us: float = 1.0
    buffer_kb: float | None = 512.0
    ecn_threshold_kb: float | None = None
    mtu_bytes: int = 1500
    loss_rate: float = 0.0
    # Lossless Ethernet (IEEE 802.1Qbb PFC) at every switch ingress port: null = as the transport (on with
    # roce, off with tcp); thresholds on the bytes that entered by a port and have not left its switch,
    # null = htsim's main_roce (15 and 12 full packets: `PFC_XOFF_PACKETS`, `PFC_XON_PACKETS`)
    pfc: bool | None = None
    pfc_xoff_kb: float | None = None
    pfc_xon_kb: float | None = None
    load_balancing: str = "ecmp"  # `LOAD_BALANCING`: ecmp (per flow) or spray (per packet)

    def pfc_thresholds_bytes(self) -> tuple[int, int]:
        """PFC's XOFF and XON thresholds in bytes (`pfc_xoff_kb`, `pfc_xon_kb`; null: htsim's, in full
        packets of `mtu_bytes`)."""
        xoff = PFC_XOFF_PACKETS * self.mtu_bytes if self.pfc_xoff_kb is None else int(self.pfc_xoff_kb * 1024)
        xon = PFC_XON_PACKETS * self.mtu_bytes if self.pfc_xon_kb is None else int(self.pfc_xon_kb * 1024)
        return xoff, xon

    @property
    def node_npus(self) -> int:
        """NPUs that share a scale-up node (1: each NPU is its own node)."""
        return 1

    def has_equal_cost_paths(self) -> bool:
        """Whether some two hosts may be joined by several equal-cost paths (where `load_balancing` applies)."""
        return False

    def group_sizes(self) -> tuple[int, ...]:
        """NPUs in a collective's group in each of the network's dimensions (one dimension: all of them)."""
        return (self.npus,)

    def reduced_groups(self) -> tuple[ReducedGroups, ...]:
        """The groups the hybrid backend may reduce this network to, coarsest first; none: it simulates
        the network whole."""
        return ()

    def split_groups(self) -> tuple[ReducedGroups, ...]:
        """The groups of its scale-out the hybrid backend cannot reduce it to because they split its nodes
        (left out of `reduced_groups`); none where every NPU is its own node."""
        return ()

    def first_hosts(self, npus: int) -> NetworkConfig:
        """This network cut to its first `npus` hosts (a reduced network), its shape otherwise kept."""
        return replace(self, npus=npus)

    def second_group_host(self, groups: ReducedGroups) -> int:
        """Where a reduced network puts the second group of a pair: right after the first."""
        return groups.hosts

    def check(self) -> None:
        """Raise `ConfigError` for a value this topology cannot be built with."""
        require(2 <= self.npus <= MAX_NPUS, "network.npus", self.npus,
                f"an integer >= 2 and at most {MAX_NPUS:,} (no backend runs more on one machine)")
        _gbps("network.link_gbps", self.link_gbps)
        _non_negative("network.link_latency_us", self.link_latency_us)
        if self.buffer_kb is not None:
            _non_negative("network.buffer_kb", self.buffer_kb)
        if self.ecn_threshold_kb is not None:
            _non_negative("network.ecn_threshold_kb", self.ecn_threshold_kb)
        require(self.mtu_bytes >= 68, "network.mtu_bytes", self.mtu_bytes, "an integer >= 68 (the IPv4 minimum)")
        require(0.0 <= self.loss_rate < 1.0, "network.loss_rate", self.loss_rate, "a probability in [0, 1)")
        for key in ("pfc_xoff_kb", "pfc_xon_kb"):
            if getattr(self, key) is not None:
                _positive(f"network.{key}", getattr(self, key))
        _one_of("network.load_balancing", self.load_balancing, LOAD_BALANCING)


@dataclass(frozen=True)
class SwitchNetwork(NetworkConfig):
    """One switch: host -> switch -> host."""


@dataclass(frozen=True)
class DumbbellNetwork(NetworkConfig):
    """Two switches, half the hosts on each, joined by one bottleneck link each way."""

    IN_WORDS: ClassVar[str] = "dumbbell"

    topology: str = "dumbbell"
    bottleneck_gbps: float = 100.0
    bottleneck_latency_us: float = 1.0

    def check(self) -> None:
        super().check()
        require(self.npus % 2 == 0, "network.npus", self.npus, "an even number for a dumbbell (half on each side)")
        _gbps("network.bottleneck_gbps", self.bottleneck_gbps)
        _non_negative("network.bottleneck_latency_us", self.bottleneck_latency_us)


@dataclass(frozen=True)
class RingNetwork(NetworkConfig):
    """NPUs in a bidirectional ring, each forwarding for the others."""

    IN_WORDS: ClassVar[str] = "ring"
    # (a 6-NPU all-to-all through 4 KiB ring ports lost 152 packets and waited 100 ms; the screen saw no risk)
    HYBRID_REFUSAL: ClassVar[str] = ("a topology whose switch ports phase's incast screen sees (a ring's NPUs "
                                     "forward for each other, and their ports overflow unseen)")

    HOST_INTERFACES: ClassVar[bool] = False

    topology: str = "ring"

    def has_equal_cost_paths(self) -> bool:
        """Both ways half-way round an even ring."""
        return self.npus % 2 == 0

    def check(self) -> None:
        super().check()
        require(self.npus >= 3, "network.npus", self.npus, "at least 3 for a ring")


@dataclass(frozen=True)
class LeafSpineNetwork(NetworkConfig):
    """Leaves of `hosts_per_leaf` hosts, every leaf joined to every spine."""

    IN_WORDS: ClassVar[str] = "leaf-spine"

    topology: str = "leaf_spine"
    hosts_per_leaf: int = 4
    spines: int = 4
    uplink_gbps: float = 100.0

    def check(self) -> None:
        super().check()
        require(self.hosts_per_leaf >= 1, "network.hosts_per_leaf", self.hosts_per_leaf, "an integer >= 1")
        require(self.spines >= 1, "network.spines", self.spines, "an integer >= 1")
        _gbps("network.uplink_gbps", self.uplink_gbps)
        require(self.npus % self.hosts_per_leaf == 0, "network.npus", self.npus,
                f"a multiple of network.hosts_per_leaf = {self.hosts_per_leaf}")

    def reduced_groups(self) -> tuple[ReducedGroups, ...]:
        return (ReducedGroups(self.hosts_per_leaf, True, "leaf", "leaves"),)

    def has_equal_cost_paths(self) -> bool:
        """A path through each spine between two leaves."""
        return self.spines > 1 and self.npus > self.hosts_per_leaf


@dataclass(frozen=True)
class FatTreeNetwork(NetworkConfig):
    """A k-ary three-tier Clos of k^3/4 hosts (the first `npus` exist)."""

    IN_WORDS: ClassVar[str] = "fat tree"

    topology: str = "fat_tree"
    uplink_gbps: float | None = None  # null = link_gbps
    fat_tree_k: int | None = None  # null = the smallest k whose k^3/4 hosts hold npus

    @property
    def k(self) -> int:
        """The fat tree's k: `fat_tree_k`, or the smallest that holds `npus`."""
        return self.fat_tree_k if self.fat_tree_k is not None else smallest_fat_tree_k(self.npus)

    def check(self) -> None:
        super().check()
        if self.fat_tree_k is not None:
            smallest = smallest_fat_tree_k(self.npus)
            require(self.fat_tree_k >= 2 and self.fat_tree_k % 2 == 0 and fat_tree_hosts(self.fat_tree_k) >= self.npus,
                    "network.fat_tree_k", self.fat_tree_k,
                    f"an even integer >= 2 whose k^3/4 hosts hold network.npus = {self.npus} (the smallest is "
                    f"{smallest}), or null to choose that one")
        if self.uplink_gbps is not None:
            _gbps("network.uplink_gbps", self.uplink_gbps)

    def has_equal_cost_paths(self) -> bool:
        """An aggregation switch (and a core) of several between two edge switches."""
        return self.k >= 4 and self.npus > self.k // 2

    def reduced_groups(self) -> tuple[ReducedGroups, ...]:
        half = self.k // 2
        return (ReducedGroups(half * half, False, "pod", "pods"),
                ReducedGroups(half, False, "edge switch", "edge switches"))

    def first_hosts(self, npus: int) -> NetworkConfig:
        return replace(self, npus=npus, fat_tree_k=self.k)  # the full run's k, not the one npus implies

    def second_group_host(self, groups: ReducedGroups) -> int:
        """An edge switch pair's second in the second pod, where there is one: its traffic then crosses
        the core, as most of the full run's does."""
        pod = (self.k // 2) ** 2
        return pod if groups.hosts < pod and self.npus >= 2 * pod else groups.hosts


@dataclass(frozen=True)
class FullMeshNetwork(NetworkConfig):
    """Every NPU joined to every other by a link of its own each way (a scale-up box's mesh): one
    hop, no switch; each link is a host interface of its sender."""

    IN_WORDS: ClassVar[str] = "full mesh"

    SWITCH_PORTS: ClassVar[bool] = False
    MAX_NPUS: ClassVar[int] = 64  # it has npus x (npus - 1) links

    topology: str = "full_mesh"

    def check(self) -> None:
        super().check()
        require(self.npus <= self.MAX_NPUS, "network.npus", self.npus,
                f"at most {self.MAX_NPUS} for a full mesh (it has npus x (npus - 1) links)")


@dataclass(frozen=True)
class NodesNetwork(NetworkConfig):
    """What networks of multi-NPU nodes share: nodes of `npus_per_node` NPUs on a scale-up fabric
    (`scaleup_gbps`, `scaleup_latency_us`), every NPU with a NIC of `link_gbps` on a scale-out network
    joining the nodes (`scaleout_network`, its NIC of NPU n at host `nic_position(n)` there). Not a
    topology of its own: `HierarchicalNetwork` and `RailOptimizedNetwork` are."""

    npus_per_node: int = 8
    scaleup_gbps: float = 400.0
    scaleup_latency_us: float = 0.5
    hosts_per_leaf: int = 16
    spines: int = 4
    uplink_gbps: float | None = None  # null = link_gbps

    @property
    def node_npus(self) -> int:
        return self.npus_per_node

    def group_sizes(self) -> tuple[int, ...]:
        return (self.npus_per_node, self.npus // self.npus_per_node)

    def nic_position(self, npu: int) -> int:
        """The host of `scaleout_network` that NPU `npu`'s NIC is."""
        return npu

    def scaleout_network(self) -> NetworkConfig:
        """The NICs' network as a flat topology's config, host p being the NIC at position p."""
        raise NotImplementedError

    def has_equal_cost_paths(self) -> bool:
        """Its scale-out's, between nodes."""
        return self.npus > self.npus_per_node and self.scaleout_network().has_equal_cost_paths()

    def _scaleout_common(self) -> dict[str, Any]:
        """The keys a scale-out network takes from this one as they are."""
        return {"npus": self.npus, "link_gbps": self.link_gbps, "link_latency_us": self.link_latency_us,
                "buffer_kb": self.buffer_kb, "ecn_threshold_kb": self.ecn_threshold_kb, "mtu_bytes": self.mtu_bytes,
                "loss_rate": self.loss_rate, "pfc": self.pfc, "pfc_xoff_kb": self.pfc_xoff_kb,
                "pfc_xon_kb": self.pfc_xon_kb, "load_balancing": self.load_balancing}

    def _leaf_spine(self) -> LeafSpineNetwork:
        """The scale-out as a leaf-spine of `hosts_per_leaf` NICs a leaf."""
        uplink_gbps = self.link_gbps if self.uplink_gbps is None else self.uplink_gbps
        return LeafSpineNetwork(**self._scaleout_common(), hosts_per_leaf=self.hosts_per_leaf, spines=self.spines,
                                uplink_gbps=uplink_gbps)

    def check(self) -> None:
        super().check()
        require(self.npus_per_node >= 1, "network.npus_per_node", self.npus_per_node, "an integer >= 1")
        require(self.npus % self.npus_per_node == 0, "network.npus", self.npus,
                f"a multiple of network.npus_per_node = {self.npus_per_node}")
        _gbps("network.scaleup_gbps", self.scaleup_gbps)
        _non_negative("network.scaleup_latency_us", self.scaleup_latency_us)


@dataclass(frozen=True)
class HierarchicalNetwork(NodesNetwork):
    """Nodes of `npus_per_node` NPUs on a scale-up fabric; their NICs on `scaleout`: one switch, a
    leaf-spine of `hosts_per_leaf` NICs a leaf (a node's NICs on consecutive ports), or a fat tree,
    with those topologies' keys."""

    IN_WORDS: ClassVar[str] = "hierarchical"

    SCALEOUTS: ClassVar[tuple[str, ...]] = ("switch", "leaf_spine", "fat_tree")

    topology: str = "hierarchical"
    scaleout: str = "switch"
    fat_tree_k: int | None = None  # null = the smallest k whose k^3/4 hosts hold npus

    def scaleout_network(self) -> NetworkConfig:
        if self.scaleout == "leaf_spine":
            return self._leaf_spine()
        if self.scaleout == "fat_tree":
            return FatTreeNetwork(**self._scaleout_common(), uplink_gbps=self.uplink_gbps, fat_tree_k=self.fat_tree_k)
        return SwitchNetwork(**self._scaleout_common())

    def check(self) -> None:
        super().check()
        _one_of("network.scaleout", self.scaleout, self.SCALEOUTS)
        self.scaleout_network().check()

    def reduced_groups(self) -> tuple[ReducedGroups, ...]:
        """The scale-out's groups of NICs that hold whole nodes (a group's NPUs then send and receive
        through its uplinks alone)."""
        return tuple(groups for groups in self.scaleout_network().reduced_groups()
                     if groups.hosts % self.npus_per_node == 0)

    def split_groups(self) -> tuple[ReducedGroups, ...]:
        return tuple(groups for groups in self.scaleout_network().reduced_groups()
                     if groups.hosts % self.npus_per_node)

    def first_hosts(self, npus: int) -> NetworkConfig:
        scaleout = self.scaleout_network()
        return replace(self, npus=npus, fat_tree_k=scaleout.k if isinstance(scaleout, FatTreeNetwork) else None)

    def second_group_host(self, groups: ReducedGroups) -> int:
        return self.scaleout_network().second_group_host(groups)


@dataclass(frozen=True)
class RailOptimizedNetwork(NodesNetwork):
    """Nodes of `npus_per_node` GPUs on a scale-up fabric, one NIC per GPU; NIC i of every node on rail
    i: a rail leaf holds NIC i of `hosts_per_leaf` nodes (leaf s * npus_per_node + i: rail i of the s-th
    group of nodes), every rail leaf joined to every spine. A message between GPUs on different rails
    first moves over the scale-up fabric to its sender's node's GPU on the receiver's rail and leaves by
    that GPU's NIC (`pxn`, as NCCL's PXN does), or crosses the spines from its own rail's leaf."""

    IN_WORDS: ClassVar[str] = "rail-optimized"

    topology: str = "rail_optimized"
    hosts_per_leaf: int = 16  # nodes a rail leaf (its NICs of one rail)
    pxn: bool = True

    def reduced_groups(self) -> tuple[ReducedGroups, ...]:
        """Groups of `hosts_per_leaf` whole nodes (their rail leaves: a group's GPUs reach the rest through
        its rail leaves' uplinks alone); with PXN a message crosses the scale-out on its receiver's rail
        alone, so one rail is replayed, else every rail."""
        return (ReducedGroups(self.hosts_per_leaf * self.npus_per_node, True, "group of nodes", "groups of nodes",
                              self.npus_per_node if self.pxn else 1),)

    def nic_position(self, npu: int) -> int:
        node, rail = divmod(npu, self.npus_per_node)
        group, node_in_group = divmod(node, self.hosts_per_leaf)
        return (group * self.npus_per_node + rail) * self.hosts_per_leaf + node_in_group

    def scaleout_network(self) -> NetworkConfig:
        return self._leaf_spine()

    def check(self) -> None:
        super().check()
        whole = self.npus_per_node * self.hosts_per_leaf
        require(self.hosts_per_leaf >= 1, "network.hosts_per_leaf", self.hosts_per_leaf, "an integer >= 1")
        require(self.npus % whole == 0, "network.npus", self.npus,
                f"a multiple of network.npus_per_node x network.hosts_per_leaf = {whole} (whole rail leaves)")
        self.scaleout_network().check()


@dataclass(frozen=True)
class TcpConfig:
    """TCP parameters every congestion control shares (`tcp.*`); `cc` names the subclass
    (`TCP_CONFIGS`), whose own fields are its algorithm's constants."""

    cc: str = "newreno"  # the congestion control: one of TCP_CONFIGS
    mss_bytes: int | None = None  # null = network.mtu_bytes - 40 (the payload per segment, less 12 with timestamps)
    init_cwnd_pkts: int = 10  # initial congestion window, segments
    min_rto_ms: float = 200.0  # RTO floor (RFC 6298 says 1 s; Linux uses 200 ms)
    max_rto_s: float = 60.0  # RTO cap under exponential backoff
    initial_rto_ms: float = 1000.0  # RTO before the first RTT sample (with the handshake: the SYN's)
    clock_granularity_us: float = 1.0  # G of RFC 6298
    delayed_ack: bool = False  # ACK every 2nd segment or after delayed_ack_timeout_ms
    delayed_ack_timeout_ms: float = 40.0
    linux_delayed_ack: bool = False  # with delayed_ack: Linux's quick ACKs, sub-MSS segments ACKed at once
    sack: bool = True  # selective acknowledgements
    # At an RTO keep the SACK scoreboard and resend its holes (Linux, ns-3), or discard it (RFC 2018):
    # one of SACK_AFTER_RTO
    sack_after_rto: str = "keep"
    # RFC 7323 timestamp option on every segment (Linux's and ns-3's default): 12 header bytes, RTT
    # samples from retransmissions too, so an RTO's backoff ends at the next ACK
    timestamps: bool = True
    # Connections open before the workload (outside its timing): the SYN/SYN-ACK RTT sample seeds the
    # RTO (RFC 6298 2.2); false: no sample before the first data ACK
    handshake: bool = True
    ecn: bool = False  # ECN-capable (always, with dctcp)
    rcv_wnd_kb: float | None = None  # receive window cap, KiB; null = unlimited
    slow_start_after_idle: bool = True  # cwnd restarts after an idle RTO (Linux's default)
    rack_tlp: bool = False  # RACK-TLP loss detection and tail loss probes (RFC 8985; needs sack)
    pto_slack_ms: float = 0.0  # added to RACK-TLP's probe timeout with more than one segment out (Linux: 2)
    prr: bool = False  # proportional rate reduction in SACK recovery (RFC 6937, PRR-SSRB)
    hystart: bool = False  # HyStart++ slow-start exit on an RTT rise (RFC 9406)
    # RFC 5681 DupThresh: duplicate ACKs (RFC 6675 IsLost: SACKed ranges) that start fast retransmit;
    # Linux's net.ipv4.tcp_reordering and ns-3's ReTxThreshold, 3 in both
    dupthresh: int = 3

    def check(self) -> None:
        """Raise `ConfigError` for a constant this congestion control cannot run with."""

    def cc_constants(self) -> dict[str, float]:
        """Its congestion control's constants, as `engine.transport.make_congestion_control` takes them."""
        return {}


@dataclass(frozen=True)
class NewRenoTcp(TcpConfig):
    """NewReno (RFC 5681, RFC 6582): no constants of its own."""


@dataclass(frozen=True)
class DctcpTcp(TcpConfig):
    """DCTCP (RFC 8257): ECN-capable, its window cut by the fraction of marked bytes."""

    cc: str = "dctcp"
    dctcp_g: float = 1.0 / 16  # the weight of a window's marked fraction in its estimate

    def check(self) -> None:
        require(0 < self.dctcp_g <= 1, "tcp.dctcp_g", self.dctcp_g, "a number in (0, 1]")

    def cc_constants(self) -> dict[str, float]:
        return {"dctcp_g": self.dctcp_g}


@dataclass(frozen=True)
class CubicTcp(TcpConfig):
    """CUBIC (RFC 9438)."""

    cc: str = "cubic"
    cubic_c: float = 0.4  # C of W(t) = C (t - K)^3 + W_max
    cubic_beta: float = 0.7  # the window kept at a loss

    def check(self) -> None:
        _positive("tcp.cubic_c", self.cubic_c)
        require(0 < self.cubic_beta < 1, "tcp.cubic_beta", self.cubic_beta, "a number in (0, 1)")

    def cc_constants(self) -> dict[str, float]:
        return {"cubic_c": self.cubic_c, "cubic_beta": self.cubic_beta}


@dataclass(frozen=True)
class TransportConfig:
    """Which transport carries the messages (`transport.*`, chosen by Hydra's `transport` group)."""

    protocol: str = "tcp"  # one of TRANSPORTS: tcp (the `tcp.*` keys) or roce (the `roce.*` keys)


@dataclass(frozen=True)
class RoceConfig:
    """RoCEv2 reliable connections as a NIC runs them (`roce.*`; with transport.protocol=roce, packet backend).

    Go-back-N (IB spec 9.7.5): the responder ACKs every packet in order and NAKs the first out of order
    (once until the gap fills); a NAK or an expired timer sends everything again from the first
    packet not acknowledged. DCQCN's constants (`dcqcn_*`) default to the values of Zhu et al.,
    "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015 (set for 40 Gb/s), each with
    its source in docs/roce.md's key table beside NVIDIA's NIC defaults.
    """

    cc: str = "none"  # one of ROCE_CCS
    # Payload of a full packet (the IB path MTU); null = the largest of ROCE_PATH_MTUS whose packet
    # (payload + 44 header bytes) fits network.mtu_bytes: 1024 at 1500
    payload_bytes: int | None = None
    # The requester's retransmission timer (IB "local ACK timeout", 4.096 us x 2^timeout; timeout = 14,
    # the value NCCL sets by default before 2.14 (recall), gives 67.1 ms), restarted by every ACK of new data
    rto_us: float = 4.096 * 2 ** 14
    # Sources of each default: docs/roce.md, "Keys" (the paper's section 5, its first author's ns-3 code,
    # the HPCC artifact's "dcqcn_paper" set, NVIDIA's ConnectX defaults)
    dcqcn_kmin_kb: float = 5.0  # RED marking at switch egress: none below Kmin ...
    dcqcn_kmax_kb: float = 200.0  # ... probability rising linearly to Pmax at Kmax, every packet above
    dcqcn_pmax: float = 0.01
    dcqcn_g: float = 1.0 / 256  # alpha's EWMA gain
    dcqcn_cnp_interval_us: float = 50.0  # N: the receiver sends at most one CNP a flow per interval
    dcqcn_alpha_timer_us: float = 55.0  # K: alpha decays when no CNP came for this long
    dcqcn_increase_timer_us: float = 55.0  # T: the rate increase timer
    dcqcn_byte_counter_bytes: int = 10 * 1024 * 1024  # B: the rate increase byte counter (10 MB)
    dcqcn_fast_recovery_steps: int = 5  # F: increase events of fast recovery before additive increase
    dcqcn_ai_mbps: float = 40.0  # R_AI: additive increase step
    dcqcn_hai_mbps: float = 200.0  # R_HAI: hyper increase step (the first author's ns-3 configuration)
    dcqcn_min_rate_mbps: float = 1.0  # the rate never falls below (ConnectX's rpg_min_rate)
    # R_T = R_C on every CNP (the paper's equation 1), or false: only after an increase event since the
    # last cut (ConnectX's default, clamp_tgt_rate = 0 with clamp_tgt_rate_after_time_inc = 1)
    dcqcn_clamp_target_rate: bool = True

    def check(self, network: NetworkConfig) -> None:
        """Raise `ConfigError` for a value RoCE cannot run with on `network`."""
        _one_of("roce.cc", self.cc, ROCE_CCS)
        if self.payload_bytes is not None:
            require(256 <= self.payload_bytes <= network.mtu_bytes - ROCE_HEADER_BYTES, "roce.payload_bytes",
                    self.payload_bytes, f"an integer from 256 to network.mtu_bytes - {ROCE_HEADER_BYTES} = "
                    f"{network.mtu_bytes - ROCE_HEADER_BYTES} (IPv4, UDP, BTH and ICRC headers), or null")
        else:
            require(network.mtu_bytes >= ROCE_PATH_MTUS[0] + ROCE_HEADER_BYTES, "network.mtu_bytes", network.mtu_bytes,
                    f"at least {ROCE_PATH_MTUS[0] + ROCE_HEADER_BYTES} with transport.protocol=roce (the smallest "
                    f"IB path MTU, {ROCE_PATH_MTUS[0]}, and {ROCE_HEADER_BYTES} header bytes)")
        _positive("roce.rto_us", self.rto_us)
        _non_negative("roce.dcqcn_kmin_kb", self.dcqcn_kmin_kb)
        require(self.dcqcn_kmax_kb > self.dcqcn_kmin_kb, "roce.dcqcn_kmax_kb", self.dcqcn_kmax_kb,
                f"a number > roce.dcqcn_kmin_kb = {self.dcqcn_kmin_kb}")
        for key in ("dcqcn_pmax", "dcqcn_g"):
            require(0 < getattr(self, key) <= 1, f"roce.{key}", getattr(self, key), "a number in (0, 1]")
        for key in ("dcqcn_cnp_interval_us", "dcqcn_alpha_timer_us", "dcqcn_increase_timer_us", "dcqcn_ai_mbps",
                    "dcqcn_hai_mbps", "dcqcn_min_rate_mbps"):
            _positive(f"roce.{key}", getattr(self, key))
        require(self.dcqcn_byte_counter_bytes >= 1, "roce.dcqcn_byte_counter_bytes", self.dcqcn_byte_counter_bytes,
                "an integer >= 1")
        require(self.dcqcn_fast_recovery_steps >= 1, "roce.dcqcn_fast_recovery_steps",
                self.dcqcn_fast_recovery_steps, "an integer >= 1")

    def path_mtu_bytes(self, network: NetworkConfig) -> int:
        """The payload of a full packet: `payload_bytes`, or the largest IB path MTU that fits the network's MTU."""
        if self.payload_bytes is not None:
            return self.payload_bytes
        return max(mtu for mtu in ROCE_PATH_MTUS if mtu + ROCE_HEADER_BYTES <= network.mtu_bytes)


@dataclass(frozen=True)
class HostConfig:
    """A host's transmit path below TCP, as Linux's (`host.*`; packet backend, every topology but the
    ring, whose NPUs forward packets): TCP Small Queues and a bounded qdisc that holds TCP back.
    `tsq_bytes: null` and `qdisc_packets: null` together give the unbounded host queue of before."""

    # net.ipv4.tcp_limit_output_bytes (Linux's default since 4.19: 1 MiB): at most this many bytes of
    # one connection below TCP; null = no TCP Small Queues
    tsq_bytes: int | None = 1_048_576
    qdisc: str = "pfifo_fast"  # one of QDISCS
    qdisc_packets: int | None = 1000  # the qdisc's limit, a device's txqueuelen (Linux: 1000); null = none
    # Each packet a host sends reaches its switch a random time in [0, tx_jitter_ns) late (in order,
    # seeded): the variation of a real host's transmit timing (each packet a doorbell and DMA reads
    # across PCIe, each with nanoseconds of jitter: docs/hosts.md), which breaks the phase lock-out of
    # deterministic drop-tail queues (Floyd and Jacobson 1992); 0 = exact timing, as ns-3
    tx_jitter_ns: float = 30.0


@dataclass(frozen=True)
class SystemConfig:
    """Collective algorithms and their scheduling (`system.*`)."""

    all_reduce: str = "ring"
    all_to_all: str = "direct"
    all_gather: str = "ring"
    reduce_scatter: str = "ring"
    splits: int = 1
    scheduling: str = "lifo"
    hierarchy: str = "baseline"
    endpoint_delay_ns: float = 10.0
    # ASTRA-sim 1.0's choices where netsweep deliberately differs (docs/astra-compat.md): one queue for
    # all collectives, its single unpipelined tree for double_binary_tree, its ring all-to-all, and on
    # alpha_beta its network's cost (every message alone, whole and cut-through: no TCP/IP framing)
    astra_compat: bool = False


@dataclass(frozen=True)
class FlowSpec:
    """One explicit flow of the `flows` workload."""

    src: int
    dst: int
    bytes: int
    start_us: float = 0.0


@dataclass(frozen=True)
class WorkloadConfig:
    """What the network carries (`workload.*`): `type` names the subclass (`WORKLOAD_CONFIGS`), whose
    fields are that type's keys."""

    type: str = "dlrm"

    def check(self, npus: int) -> None:
        """Raise `ConfigError` for a value this workload cannot run with on `npus` NPUs."""


@dataclass(frozen=True)
class FlowsWorkload(WorkloadConfig):
    """TCP flows: listed one by one, or a pattern of them."""

    type: str = "flows"
    flows: tuple[FlowSpec, ...] = ()
    pattern: str | None = None  # one of FLOW_PATTERNS, or null with explicit flows
    senders: int | None = None  # incast: hosts 1..senders send to host 0
    bytes_per_flow: int = 1_000_000
    rounds: int = 1

    def check(self, npus: int) -> None:
        require(bool(self.flows or self.pattern), "workload.flows", list(self.flows),
                "at least one flow, or a workload.pattern (incast, permutation, all_to_all)")
        require(not (self.flows and self.pattern), "workload.pattern", self.pattern,
                "null when workload.flows lists explicit flows (give one or the other)")
        for index, flow in enumerate(self.flows):
            key = f"workload.flows[{index}]"
            for end in ("src", "dst"):
                host = getattr(flow, end)
                require(0 <= host < npus, f"{key}.{end}", host, f"a host in 0..{npus - 1} (network.npus = {npus})")
            require(flow.src != flow.dst, f"{key}.dst", flow.dst, "a host other than src")
            require(flow.bytes > 0, f"{key}.bytes", flow.bytes, "an integer > 0")
            _non_negative(f"{key}.start_us", flow.start_us)
        if self.pattern is not None:
            _one_of("workload.pattern", self.pattern, FLOW_PATTERNS)
            require(self.bytes_per_flow > 0, "workload.bytes_per_flow", self.bytes_per_flow, "an integer > 0")
            require(self.rounds >= 1, "workload.rounds", self.rounds, "an integer >= 1")
            if self.pattern == "incast":
                require(self.senders is not None and 1 <= self.senders <= npus - 1, "workload.senders",
                        self.senders, f"an integer in 1..{npus - 1} (hosts 1..senders send to host 0)")


@dataclass(frozen=True)
class IterativeWorkload(WorkloadConfig):
    """A workload of training iterations (every type but flows)."""

    iterations: int = 1

    def check(self, npus: int) -> None:
        require(self.iterations >= 1, "workload.iterations", self.iterations, "an integer >= 1")


@dataclass(frozen=True)
class DlrmWorkload(IterativeWorkload):
    """A DLRM model description; compute times from a roofline on npu_tflops and hbm_gbps."""

    type: str = "dlrm"
    num_tables: int = 8
    emb_dim: int = 64
    dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (512, 256, 64)
    top_mlp: tuple[int, ...] = (512, 256, 1)
    batch_per_npu: int = 128
    dtype_bytes: int = 4
    npu_tflops: float = 100.0
    hbm_gbps: float = 8000.0
    interaction: str = "dot"  # one of INTERACTIONS
    dcn_layers: int = 3  # dcn: cross layers
    dcn_low_rank: int = 512  # dcn: rank r of each cross layer's weight U V^T
    multi_hot: tuple[int, ...] | None = None  # lookups per sample in each table; None = one each
    index_bytes: int = 0  # bytes per sparse index sent to its table's NPU; 0 = none sent

    def check(self, npus: int) -> None:
        super().check(npus)
        for key in ("num_tables", "emb_dim", "dense_features", "batch_per_npu", "dtype_bytes"):
            require(getattr(self, key) >= 1, f"workload.{key}", getattr(self, key), "an integer >= 1")
        for key in ("bottom_mlp", "top_mlp"):
            require(all(width >= 1 for width in getattr(self, key)), f"workload.{key}", list(getattr(self, key)),
                    "a list of layer widths >= 1")
        require(self.bottom_mlp[-1] == self.emb_dim, "workload.bottom_mlp", list(self.bottom_mlp),
                f"a list whose last width equals workload.emb_dim = {self.emb_dim} (the bottom MLP's output "
                "meets the embeddings at the interaction)")
        _rate("workload.npu_tflops", self.npu_tflops, "TFLOP/s", "FLOP/s", 1e12)
        _gbps("workload.hbm_gbps", self.hbm_gbps)
        _one_of("workload.interaction", self.interaction, INTERACTIONS)
        for key in ("dcn_layers", "dcn_low_rank"):
            require(getattr(self, key) >= 1, f"workload.{key}", getattr(self, key), "an integer >= 1")
        if self.multi_hot is not None:
            require(len(self.multi_hot) == self.num_tables and all(hot >= 1 for hot in self.multi_hot),
                    "workload.multi_hot", list(self.multi_hot), f"a list of workload.num_tables = {self.num_tables} "
                    "lookups per sample (integers >= 1), one per table, or null for one lookup in each")
        require(self.index_bytes >= 0, "workload.index_bytes", self.index_bytes,
                "an integer >= 0 (bytes per sparse index in the input all-to-all; 0 = none sent)")


@dataclass(frozen=True)
class AstraWorkload(IterativeWorkload):
    """An ASTRA-sim 1.0 text workload."""

    type: str = "astra"
    path: str | None = None
    cycle_ns: float = 1.0

    def check(self, npus: int) -> None:
        super().check(npus)
        require(self.path is not None, "workload.path", self.path, "the path of an ASTRA-sim 1.0 workload file")
        _positive("workload.cycle_ns", self.cycle_ns)


@dataclass(frozen=True)
class ChakraWorkload(IterativeWorkload):
    """A Chakra execution trace, one file per NPU."""

    type: str = "chakra"
    path: str | None = None
    cycle_ns: float = 1.0  # with duration_unit: cycles
    duration_unit: str = "us"  # one of DURATION_UNITS: us (the schema's), ns, or cycles of cycle_ns

    def check(self, npus: int) -> None:
        super().check(npus)
        require(self.path is not None, "workload.path", self.path, "the prefix (or folder) of a Chakra trace, one "
                "<prefix>.<rank>.et file per NPU")
        _one_of("workload.duration_unit", self.duration_unit, DURATION_UNITS)
        _positive("workload.cycle_ns", self.cycle_ns)


@dataclass(frozen=True)
class CollectiveWorkload(IterativeWorkload):
    """One collective, a microbenchmark."""

    type: str = "collective"
    op: str = "all_reduce"  # one of COLLECTIVE_OPS
    bytes: int = 1_048_576  # per NPU

    def check(self, npus: int) -> None:
        super().check(npus)
        _one_of("workload.op", self.op, COLLECTIVE_OPS)
        require(self.bytes >= 1, "workload.bytes", self.bytes, "an integer >= 1 (bytes per NPU)")


@dataclass(frozen=True)
class EngineConfig:
    """Backend choice, the simulated-time budget and the links recorded (`engine.*`)."""

    backend: str = DEFAULT_BACKEND
    max_sim_time_s: float = 10.0
    link_stats: str = "none"
    incast_rto: bool = False  # phase backend: charge an RTO to every phase flagged as an incast
    hybrid_fat_tree_group: str = "auto"  # hybrid backend on a fat tree: its reduced networks' groups
    hybrid_rails: str = "auto"  # hybrid backend on rails with PXN: the rails its reduced networks replay
    hybrid_memoise: bool = True  # hybrid backend: an episode whose outcome has settled is not simulated again
    fast_forward: bool = False  # packet backend: skip whole periods of a repeating state (engine/fastforward.py)


@dataclass(frozen=True)
class SimConfig:
    """Everything one run needs."""

    seed: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    network: NetworkConfig = field(default_factory=SwitchNetwork)
    tcp: TcpConfig = field(default_factory=NewRenoTcp)
    transport: TransportConfig = field(default_factory=TransportConfig)
    roce: RoceConfig = field(default_factory=RoceConfig)
    host: HostConfig = field(default_factory=HostConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    workload: WorkloadConfig = field(default_factory=DlrmWorkload)

    @property
    def pfc_on(self) -> bool:
        """Whether switch ingress ports send PFC pauses: `network.pfc`, or null: with RoCE."""
        pfc = self.network.pfc
        return self.transport.protocol == "roce" if pfc is None else pfc

    @property
    def packet_payload_bytes(self) -> int:
        """The payload of a full packet of the run's transport: TCP's `segment_bytes`, or with RoCE the
        path MTU (`RoceConfig.path_mtu_bytes`). What the fluid backends cut a message into."""
        if self.transport.protocol == "roce":
            return self.roce.path_mtu_bytes(self.network)
        return self.segment_bytes

    @property
    def packet_header_bytes(self) -> int:
        """The header bytes every packet of the run's transport carries: TCP's `header_bytes`, or
        RoCEv2's 44 (IPv4, UDP, BTH, ICRC)."""
        return ROCE_HEADER_BYTES if self.transport.protocol == "roce" else self.header_bytes

    @property
    def opening_window_pkts(self) -> float:
        """The full packets a message may send before its first ACK: TCP's initial window
        (`tcp.init_cwnd_pkts`); unbounded with RoCE, whose queue pairs start at line rate."""
        return math.inf if self.transport.protocol == "roce" else self.tcp.init_cwnd_pkts

    @property
    def mss_bytes(self) -> int:
        """The MSS: `tcp.mss_bytes`, or MTU minus 40 bytes of IPv4 + TCP headers. Without options it
        is also the payload of a full segment (`segment_bytes`)."""
        return self.tcp.mss_bytes if self.tcp.mss_bytes is not None else self.network.mtu_bytes - 40

    @property
    def header_bytes(self) -> int:
        """IPv4 + TCP headers of every segment and pure ACK: 40, or 52 with the timestamp option."""
        return TCP_IP_HEADER_BYTES + (TCP_TIMESTAMP_OPTION_BYTES if self.tcp.timestamps else 0)

    @property
    def segment_bytes(self) -> int:
        """The payload of a full segment, what the transport calls its MSS (RFC 5681's SMSS): the
        MSS less the options every segment carries (as Linux: MSS 1460 with timestamps sends 1448)."""
        return self.mss_bytes - (self.header_bytes - TCP_IP_HEADER_BYTES)


# The engine's sections of a config, in the order of `SimConfig`'s fields.
SECTIONS = tuple(item.name for item in fields(SimConfig) if item.name != "seed")


def _by_name(name_key: str, *classes: type) -> dict[str, Any]:
    """Variant classes by the default of their naming field (`topology`, `type`)."""
    return {str(next(item.default for item in fields(cls) if item.name == name_key)): cls for cls in classes}


# A topology's config class by `network.topology` (each builds with `engine.topology`'s class of that name).
TOPOLOGY_CONFIGS: dict[str, type[NetworkConfig]] = _by_name(
    "topology", SwitchNetwork, DumbbellNetwork, RingNetwork, LeafSpineNetwork, FatTreeNetwork, HierarchicalNetwork,
    FullMeshNetwork, RailOptimizedNetwork)
# A congestion control's config class by `tcp.cc` (dctcp before cubic: the order of the runs table's columns).
TCP_CONFIGS: dict[str, type[TcpConfig]] = _by_name("cc", NewRenoTcp, DctcpTcp, CubicTcp)
# A workload type's config class by `workload.type` (flows first: the order of the runs table's columns).
WORKLOAD_CONFIGS: dict[str, type[WorkloadConfig]] = _by_name(
    "type", FlowsWorkload, DlrmWorkload, AstraWorkload, ChakraWorkload, CollectiveWorkload)
# The sections whose keys depend on a variant: (its naming key, the variants' classes by name).
VARIANT_SECTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "network": ("topology", TOPOLOGY_CONFIGS), "tcp": ("cc", TCP_CONFIGS), "workload": ("type", WORKLOAD_CONFIGS)}


@functools.cache
def section_classes(section: str) -> tuple[type, ...]:
    """The config classes of a section: one per variant (`VARIANT_SECTIONS`), or its one class."""
    if section in VARIANT_SECTIONS:
        return tuple(VARIANT_SECTIONS[section][1].values())
    return (type(getattr(SimConfig(), section)),)


@functools.cache  # asked for every key of every config a sweep plans
def field_defaults(cls: type) -> dict[str, Any]:
    """The fields of a config class and their defaults (every field of a config section has one)."""
    return {item.name: item.default for item in fields(cls)}


@functools.cache  # asked for every config loaded
def section_keys(section: str) -> tuple[str, ...]:
    """Every key of a section in any of its variants, each once, in declaration order (the order of
    the runs table's columns)."""
    return tuple(dict.fromkeys(item.name for cls in section_classes(section) for item in fields(cls)))
# Keys outside the engine's sections that a composed config may carry (the sweep's own settings).
_IGNORED_TOP_LEVEL = {"name", "results_dir", "ray", "replicate", "hydra", "sweep"}


def _section(cls: type, mapping: Mapping[str, Any] | None, prefix: str) -> dict[str, Any]:
    """Check a section's keys against the dataclass and coerce each value to the field's type. Keys
    of the section's other variants (`network.spines` on a switch) are left out: they cannot change
    this simulation (`engine.keys` says so where a user sets one)."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(prefix, mapping, f"a mapping of keys ({', '.join(f.name for f in fields(cls))})")
    known = {f.name: f for f in fields(cls)}
    other_variants = set(section_keys(prefix)) if prefix in VARIANT_SECTIONS else set()
    values: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in known:
            values[key] = _coerce(f"{prefix}.{key}", value, known[key].type)
        elif key not in other_variants:
            close = difflib.get_close_matches(str(key), known, n=1)
            guess = f" (did you mean {prefix}.{close[0]}?)" if close else ""
            raise ConfigError(f"{prefix}.{key}", value,
                              f"an existing key{guess}: {', '.join(f'{prefix}.{name}' for name in known)}")
    return values


def _variant(section: str, mapping: Mapping[str, Any] | None) -> Any:
    """The section's variant named by its naming key (`network.topology`, `workload.type`), built
    from `mapping`."""
    name_key, classes = VARIANT_SECTIONS[section]
    name = mapping.get(name_key) if isinstance(mapping, Mapping) else None
    if name is None:
        name = getattr(getattr(SimConfig(), section), name_key)
    _one_of(f"{section}.{name_key}", name, tuple(classes))
    values = _section(classes[name], mapping, section)
    if "flows" in values:
        values["flows"] = _flow_specs(values["flows"])
    return classes[name](**values)


def _coerce(key: str, value: Any, type_name: Any) -> Any:
    """Coerce `value` to the annotated type (annotations are strings under `from __future__`)."""
    type_text = str(type_name)
    optional = "None" in type_text
    if value is None:
        if optional:
            return None
        raise ConfigError(key, value, f"a value of type {type_text} is required")
    base = type_text.replace(" | None", "")
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(key, value, "true or false")
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()
        ):
            raise ConfigError(key, value, "an integer")
        return int(value)
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(key, value, "a finite number")
        return float(value)
    if base == "str":
        if not isinstance(value, str):
            raise ConfigError(key, value, "a string")
        return value
    if base == "tuple[int, ...]":
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError(key, value, "a non-empty list of integers")
        return tuple(_coerce(f"{key}[{i}]", item, "int") for i, item in enumerate(value))
    return value  # structured values (flow lists) are checked by their own validators


def require(condition: bool, key: str, value: Any, allowed: str) -> None:
    """Raise `ConfigError(key, value, allowed)` unless `condition` holds."""
    if not condition:
        raise ConfigError(key, value, allowed)


def _one_of(key: str, value: Any, options: tuple[str, ...]) -> None:
    require(value in options, key, value, f"one of {', '.join(options)}")


def _positive(key: str, value: float | None) -> None:
    require(value is not None and value > 0, key, value, "a number > 0")


# A rate above this many of its unit (Gb/s, GB/s, TFLOP/s) is none any hardware has (1 Pb/s a link, 1
# EFLOP/s an NPU): the value was written in the base unit (100e9 for 100 Gb/s), and would run silently
# a million times too fast.
RATE_MAX = 1e6


def _rate(key: str, value: float, unit: str, base: str, scale: float) -> None:
    """Raise `ConfigError` unless `value` (a rate in `unit`, `scale` of `base` each) is > 0 and at
    most `RATE_MAX`: above, it was written in `base` (which the message says, with the value it meant)."""
    _positive(key, value)
    require(value <= RATE_MAX, key, value,
            f"a rate in {unit}, at most {RATE_MAX:,.0f}: this looks like {base} ({value:g} {base} would be "
            f"{key}={value / scale:g})")


def _gbps(key: str, value: float) -> None:
    """A rate in Gb/s (`_rate`): 100e9 for 100 Gb/s is one in bit/s."""
    _rate(key, value, "Gb/s", "bit/s", 1e9)


def _at_least_one(key: str, value: int | None) -> int:
    """`value`, an integer >= 1 (raise `ConfigError` naming `key` if it is not)."""
    if value is None or value < 1:
        raise ConfigError(key, value, "an integer >= 1")
    return value


def _non_negative(key: str, value: float | None) -> None:
    require(value is not None and value >= 0, key, value, "a number >= 0")


def load_config(mapping: Mapping[str, Any]) -> SimConfig:
    """Validate a nested mapping and return the engine's `SimConfig`; raise `ConfigError` if it
    cannot run."""
    mapping = dict(mapping)
    for key in mapping:
        if key not in {"seed", *SECTIONS} | _IGNORED_TOP_LEVEL:
            raise ConfigError(key, mapping[key], f"unknown top-level key; known: seed, {', '.join(SECTIONS)}, "
                              + ", ".join(sorted(_IGNORED_TOP_LEVEL)))
    seed = _coerce("seed", mapping.get("seed", 0), "int")
    engine = EngineConfig(**_section(EngineConfig, mapping.get("engine"), "engine"))
    network = _variant("network", mapping.get("network"))
    tcp = _variant("tcp", mapping.get("tcp"))
    transport = TransportConfig(**_section(TransportConfig, mapping.get("transport"), "transport"))
    roce = RoceConfig(**_section(RoceConfig, mapping.get("roce"), "roce"))
    host = HostConfig(**_section(HostConfig, mapping.get("host"), "host"))
    system = SystemConfig(**_section(SystemConfig, mapping.get("system"), "system"))
    workload = _variant("workload", mapping.get("workload"))
    config = SimConfig(seed=seed, engine=engine, network=network, tcp=tcp, transport=transport, roce=roce,
                       host=host, system=system, workload=workload)
    _validate(config)
    return config


def _flow_specs(raw: Any) -> tuple[FlowSpec, ...]:
    if raw is None:
        return ()
    require(isinstance(raw, (list, tuple)), "workload.flows", raw, "a list of {src, dst, bytes, start_us}")
    specs = []
    for index, item in enumerate(raw):
        key = f"workload.flows[{index}]"
        require(isinstance(item, Mapping), key, item, "a mapping with src, dst, bytes and optional start_us")
        values = _section(FlowSpec, item, key)
        for needed in ("src", "dst", "bytes"):
            require(needed in values, f"{key}.{needed}", None, "required")
        specs.append(FlowSpec(**values))
    return tuple(specs)


def _validate(config: SimConfig) -> None:
    net, tcp, eng = config.network, config.tcp, config.engine
    _one_of("engine.backend", eng.backend, BACKEND_NAMES)
    _positive("engine.max_sim_time_s", eng.max_sim_time_s)
    _one_of("engine.link_stats", eng.link_stats, LINK_STATS)
    _one_of("engine.hybrid_fat_tree_group", eng.hybrid_fat_tree_group, HYBRID_FAT_TREE_GROUPS)
    _one_of("engine.hybrid_rails", eng.hybrid_rails, HYBRID_RAILS)
    net.check()

    tcp.check()
    if tcp.mss_bytes is not None:
        require(0 < tcp.mss_bytes <= net.mtu_bytes - 40, "tcp.mss_bytes", tcp.mss_bytes,
                f"between 1 and network.mtu_bytes - 40 = {net.mtu_bytes - 40} (IPv4 + TCP headers)")
    require(not tcp.timestamps or config.mss_bytes > TCP_TIMESTAMP_OPTION_BYTES, "tcp.timestamps",
            tcp.timestamps, f"false when the MSS ({config.mss_bytes} bytes) leaves no payload beside the "
            f"{TCP_TIMESTAMP_OPTION_BYTES}-byte timestamp option")
    require(tcp.init_cwnd_pkts >= 1, "tcp.init_cwnd_pkts", tcp.init_cwnd_pkts, "an integer >= 1")
    _positive("tcp.min_rto_ms", tcp.min_rto_ms)
    require(tcp.max_rto_s * 1000 >= tcp.min_rto_ms, "tcp.max_rto_s", tcp.max_rto_s,
            f"at least tcp.min_rto_ms = {tcp.min_rto_ms} ms")
    _positive("tcp.initial_rto_ms", tcp.initial_rto_ms)
    _positive("tcp.clock_granularity_us", tcp.clock_granularity_us)
    _positive("tcp.delayed_ack_timeout_ms", tcp.delayed_ack_timeout_ms)
    require(tcp.delayed_ack or not tcp.linux_delayed_ack, "tcp.linux_delayed_ack", tcp.linux_delayed_ack,
            "false unless tcp.delayed_ack is true (Linux's rules say when to delay an ACK)")
    for key in ("rack_tlp", "prr"):
        require(tcp.sack or not getattr(tcp, key), f"tcp.{key}", getattr(tcp, key),
                "false unless tcp.sack is true (it works on the SACK scoreboard, as in Linux)")
    # Without tcp.sack there is no scoreboard: both values then behave alike and the key is ignored
    # (refusing `keep`, the default, would refuse every config that turns SACK off).
    _one_of("tcp.sack_after_rto", tcp.sack_after_rto, SACK_AFTER_RTO)
    require(tcp.sack_after_rto == "keep" or not tcp.rack_tlp, "tcp.sack_after_rto", tcp.sack_after_rto,
            "keep with tcp.rack_tlp=true (RACK-TLP keeps the scoreboard across an RTO, RFC 8985 6.3)")
    require(tcp.pto_slack_ms >= 0, "tcp.pto_slack_ms", tcp.pto_slack_ms,
            "a number of ms >= 0 (0: RFC 8985's probe timeout; Linux adds 2)")
    if tcp.rcv_wnd_kb is not None:
        require(tcp.rcv_wnd_kb * 1024 >= config.mss_bytes, "tcp.rcv_wnd_kb", tcp.rcv_wnd_kb,
                f"at least one MSS ({config.mss_bytes} bytes), or null for unlimited")
    require(tcp.dupthresh >= 1, "tcp.dupthresh", tcp.dupthresh, "an integer >= 1 (RFC 5681's DupThresh is 3)")

    _validate_transport(config)
    _validate_host(config.host)
    _validate_system(config)
    config.workload.check(net.npus)


def _validate_transport(config: SimConfig) -> None:
    net = config.network
    _one_of("transport.protocol", config.transport.protocol, TRANSPORTS)
    if config.transport.protocol == "roce":
        config.roce.check(net)
        require(not isinstance(net, RingNetwork), "network.topology", net.topology,
                "a topology other than ring with transport.protocol=roce (a ring's NPUs forward through ports "
                "shared with their own traffic, which RoCE's NICs do not model)")
        require(net.loss_rate == 0, "network.loss_rate", net.loss_rate,
                "0 with transport.protocol=roce (random loss is not modelled on RoCE's links yet)")
    else:
        require(not net.pfc, "network.pfc", net.pfc,
                "null or false with transport.protocol=tcp (PFC under TCP is not modelled yet: docs/roce.md)")
    if config.pfc_on:
        xoff, xon = net.pfc_thresholds_bytes()
        require(xon < xoff, "network.pfc_xon_kb", net.pfc_xon_kb,
                f"below the XOFF threshold ({xoff / 1024:g} KiB), or null for {PFC_XON_PACKETS} full packets")
        require(xoff >= net.mtu_bytes, "network.pfc_xoff_kb", net.pfc_xoff_kb,
                f"at least one packet of network.mtu_bytes = {net.mtu_bytes} bytes, or null for "
                f"{PFC_XOFF_PACKETS} full packets")


def _validate_host(host: HostConfig) -> None:
    if host.tsq_bytes is not None:
        require(host.tsq_bytes >= 1, "host.tsq_bytes", host.tsq_bytes,
                "an integer >= 1 (bytes; Linux's tcp_limit_output_bytes is 1048576), or null for no TCP Small Queues")
    require(host.qdisc in QDISCS, "host.qdisc", host.qdisc,
            f"one of {', '.join(QDISCS)} (fq, per-flow fair queueing with pacing, is not modelled yet)")
    if host.qdisc_packets is not None:
        require(host.qdisc_packets >= 1, "host.qdisc_packets", host.qdisc_packets,
                "an integer >= 1 (packets; Linux's txqueuelen is 1000), or null for an unbounded qdisc")
    _non_negative("host.tx_jitter_ns", host.tx_jitter_ns)


def _validate_system(config: SimConfig) -> None:
    system, net = config.system, config.network
    for op, algorithms in SYSTEM_ALGORITHMS.items():
        _one_of(f"system.{op}", getattr(system, op), algorithms)
    require(system.splits >= 1, "system.splits", system.splits, "an integer >= 1 (chunks per collective)")
    _one_of("system.scheduling", system.scheduling, ("lifo", "fifo"))
    _one_of("system.hierarchy", system.hierarchy, ("baseline", "local_bw_aware"))
    _non_negative("system.endpoint_delay_ns", system.endpoint_delay_ns)
    group_sizes = net.group_sizes()
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        if getattr(system, op) == "halving_doubling":
            for size in group_sizes:
                require(size & (size - 1) == 0, f"system.{op}", "halving_doubling",
                        f"ring or direct: halving_doubling needs power-of-two groups, and this network has "
                        f"groups of {size} NPUs")
    if system.astra_compat:
        require(not isinstance(config.workload, FlowsWorkload), "system.astra_compat", True,
                "false with workload.type=flows (it changes how collectives run, and flows have none)")
        if system.all_reduce == "double_binary_tree":
            for size in group_sizes:
                require(size & (size - 1) == 0, "system.astra_compat", True,
                        f"false with system.all_reduce=double_binary_tree on groups of {size} NPUs: ASTRA-sim "
                        f"1.0 builds its binary tree for power-of-two groups only")


def fat_tree_hosts(k: int) -> int:
    """Hosts of a k-ary fat tree: k pods of k/2 edge switches with k/2 hosts each."""
    return k ** 3 // 4


def smallest_fat_tree_k(npus: int) -> int:
    """The smallest even k whose fat tree's k^3/4 hosts hold `npus` (what `network.fat_tree_k: null` means)."""
    k = 2
    while fat_tree_hosts(k) < npus:
        k += 2
    return k
