"""The hybrid backend's reduced networks (docs/hybrid-backend.md): which NPUs of the full run a reduced
packet network simulates and where the others land in it (`Reduction`), its persistent packet
simulation (`PacketEpisodes`), and a phase's step programs replayed on it (`replay_phase`: the system
layer's own `ProgramRun`, its messages carried by `ReducedCarrier`). A kernel module: an episode at
1,024 NPUs replays about a million messages.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..config import ReducedGroups, SimConfig
from ..links import Link
from ..simulation import Simulation
from ..system.algorithms import Program, Send, Step
from ..system.collectives import MessageCarrier, ProgramRun, Receipt
from ..topology import flow_hash
from ..transport import TcpConnection, TcpSender

# connections the reduced networks may hold at most (each simulated rank to every other NPU):
# 589,760 at 9,216 NPUs, 16 a leaf (1.9 GiB peak); a switch is simulated whole up to 1,024 NPUs; a fat
# tree's pods grow as k^2 / 4: pod pairs pass it from 4,096 NPUs (k = 26: 2 pairs x 338 x 4,095), edge
# pairs (k / 2 hosts each) from 13,719 NPUs (k = 40: 2 pairs x 40 x 13,718)
REDUCED_CONNECTIONS_MAX = 1_048_576
# `engine.hybrid_fat_tree_group=auto` reduces a fat tree to pod pairs while they hold at most this many
# connections, else to edge-switch pairs: the lossy 1,024-NPU iteration (k = 16, two pod pairs of 261,888
# connections) took 10 s on pods and 1.2 s on edge pairs, whose lossy iterations on the validation grid's fat
# trees were a median 0.01 % from the packet engine's (pods: 0.00 %), at worst a factor 1.50 (pods: 1.26)
# (docs/hybrid-backend.md)
POD_PAIRS_CONNECTIONS_MAX = 131_072
PAIRS = 2  # group pairs simulated at most; a network of no more hosts than they hold is simulated whole
# A leaf-spine's reduced network: the 2 PAIRS leaves its all-to-all loads most, together, each rank's peers
# in other leaves folded over the three others by their leaf distance (`Reduction.position`): a leaf's
# downlinks then take data from three uplinks at once, as the full run's take from G - 1; two mirrored
# pairs (one uplink each) missed the validation grid's threshold band (docs/hybrid-backend.md)
LEAF_SPINE_GROUPS = 2 * PAIRS


def simulated_pairs(npus: int, group_size: int) -> int:
    """How many group pairs are simulated (twice as many groups: a fat tree's pairs, a leaf-spine's
    `LEAF_SPINE_GROUPS` leaves): `PAIRS`, or fewer where the run has fewer whole groups."""
    return min(PAIRS, npus // group_size // 2)


def _pair_connections(npus: int, group_size: int) -> int:
    """The connections of the simulated groups of `group_size` (two a pair): each rank to every other NPU."""
    return 2 * group_size * simulated_pairs(npus, group_size) * (npus - 1)


def reduced_groups(config: SimConfig) -> ReducedGroups | None:
    """The groups the network is reduced to (`NetworkConfig.reduced_groups`): the coarsest, but on a fat
    tree with `engine.hybrid_fat_tree_group=edge` (or `auto` where there are fewer than two pods or their
    pairs would hold more than `POD_PAIRS_CONNECTIONS_MAX` connections) its edge switches; None where the
    network is simulated whole (one switch, a ring)."""
    options = config.network.reduced_groups()
    if not options:
        return None
    choice = config.engine.hybrid_fat_tree_group
    if len(options) == 1 or choice == "pod":
        return options[0]
    if choice == "edge":
        return options[-1]
    npus, pod = config.network.npus, options[0].hosts
    fits = npus >= 2 * pod and _pair_connections(npus, pod) <= POD_PAIRS_CONNECTIONS_MAX
    return options[0] if fits else options[-1]


def group_size(config: SimConfig) -> int | None:
    """The hosts of one group of the reduction (`reduced_groups`), or None where the reduced network is the
    whole network: one not reduced in groups, or a network of no more hosts than `PAIRS` pairs of its
    groups hold, which the whole network simulates at no more connections than the pairs
    (p (p - 1) <= 2 PAIRS g (p - 1)), and exactly (64 NPUs on 16-host leaves: the 4 leaves)."""
    groups = reduced_groups(config)
    if groups is None or config.network.npus <= 2 * PAIRS * groups.hosts:
        return None
    return groups.hosts


def second_group_host(config: SimConfig) -> int:
    """The reduced network's host of the second group's first rank (the first group's are hosts 0..g-1):
    the next group's, but where the network places a pair's second group further
    (`NetworkConfig.second_group_host`: a fat tree's edge pair in two pods)."""
    groups = reduced_groups(config)
    assert groups is not None and group_size(config) is not None, "a pair of groups"
    return config.network.second_group_host(groups)


def reduced_config(config: SimConfig) -> SimConfig:
    """The config of a reduced network: the hosts up to its last group's last (`LEAF_SPINE_GROUPS` groups
    together; a pair of groups, the hosts between them idle), the rest as the run's
    (`NetworkConfig.first_hosts`); the run's own where the whole network is simulated (`group_size` None)."""
    groups = reduced_groups(config)
    size = group_size(config)
    if groups is None or size is None:  # the whole network
        return config
    npus = LEAF_SPINE_GROUPS * size if groups.together else second_group_host(config) + size
    return dataclasses.replace(config, network=config.network.first_hosts(npus))


def reduced_connections(config: SimConfig) -> int:
    """The connections the reduced networks hold at most: each rank of the simulated group pairs (or
    of the whole network) to every other NPU."""
    npus = config.network.npus
    size = group_size(config)
    return npus * (npus - 1) if size is None else _pair_connections(npus, size)


class Reduction:
    """Which NPUs of the full run one reduced network simulates (its run ranks), which run rank stands
    for each NPU of the full run, and the routes of a full-run pair of NPUs there: `LEAF_SPINE_GROUPS`
    leaves of a leaf-spine, a mirrored pair of groups of a fat tree (pods or edge switches), or the
    whole network on a switch (`groups` None)."""

    def __init__(self, config: SimConfig, groups: tuple[int, ...] | None, scale: float = 1.0) -> None:
        self.npus: int = config.network.npus
        self.seed: int = config.seed
        self.scale = scale  # how many of the full run's groups each simulated one stands for
        size = group_size(config)
        self.index: dict[int, int] = {}  # the simulated groups' order in the reduced network
        self.groups = 1  # the full run's groups (a fat tree's last may be partial)
        if size is None or groups is None:  # the whole network
            self.ranks = list(range(self.npus))
            self.group_size = self.npus
            self.hosts = self.ranks
        else:
            self.group_size = size
            self.groups = -(-self.npus // size)
            self.index = {group: index for index, group in enumerate(groups)}
            self.ranks = [group * size + i for group in groups for i in range(size)]
            # the reduced network's host of each run rank: the groups one after the other, but for a fat
            # tree's edge pair (`second_group_host`)
            first_hosts = [index * size for index in range(len(groups))]
            if len(groups) == 2:
                first_hosts[1] = second_group_host(config)
            self.hosts = [first + i for first in first_hosts for i in range(size)]

    def position(self, sender: int, npu: int) -> int:
        """The run rank standing for the full run's `npu`, as a peer of `sender` (a simulated NPU): itself
        in the sender's group; else the NPU at its position in simulated group (s + 1 + d mod (m - 1))
        mod m, s the sender's group's index among the m simulated ones and d how many groups on the full
        run's peer is (npu's group less the sender's, mod G). As every simulated group's ranks send to the
        peers d groups on at once in an all-to-all's step, the m groups each send to another then, as the
        full run's groups do, and each group's downlinks take data from m - 1 uplinks; with m = 2 every
        other group's peer lands in the partner group (the mirrored pair)."""
        index = self.index
        if not index:
            return npu
        size = self.group_size
        group, sender_group = npu // size, sender // size
        if group == sender_group:
            return index[group] * size + npu % size
        groups = len(index)
        distance = (group - sender_group) % self.groups
        return (index[sender_group] + 1 + distance % (groups - 1)) % groups * size + npu % size

    def routes(self, reduced: Simulation, sender: int, npu: int,
               flow_id: int) -> tuple[tuple[int, int], tuple[Link, ...], tuple[Link, ...]]:
        """The reduced hosts of the full-run pair (`sender`, `npu`) and its data and ACK routes there:
        the paths the full run's ECMP hash (its unordered pair of NPUs and flow id) picks. (Where the
        network is simulated whole, `PacketEpisodes` opens its connections as the packet engine does.)"""
        src, dst = self.hosts[self.position(sender, sender)], self.hosts[self.position(sender, npu)]
        topology = reduced.topology
        ecmp_hash = flow_hash(self.seed, min(sender, npu), max(sender, npu), flow_id)
        return (src, dst), topology.path_for_hash(src, dst, ecmp_hash), topology.path_for_hash(dst, src, ecmp_hash)


class PacketEpisodes:
    """The persistent packet simulation of one reduced network (its own event list, topology and
    connections: one per full-run pair of NPUs that a simulated rank sends to, opened on first use;
    `models_host_stack`: its hosts send through Linux's transmit path, `host.*`)."""

    def __init__(self, config: SimConfig, reduction: Reduction, models_host_stack: bool) -> None:
        self.reduction = reduction
        self.sim = Simulation(reduced_config(config), models_host_stack)
        self._connections: dict[tuple[int, int], TcpConnection] = {}

    def connection(self, pair: tuple[int, int], flow_ids: dict[tuple[int, int], int]) -> TcpConnection:
        """The persistent connection of the full-run `pair` of NPUs (sender, receiver) on the reduced
        network, opened under its flow id in `flow_ids` on first use."""
        connection = self._connections.get(pair)
        if connection is None:
            sender, npu = pair
            flow_id = flow_ids[pair]
            if not self.reduction.index:  # the whole network: its own routes (a ring's through its ports)
                connection = self.sim.open_connection(sender, npu, flow_id)
            else:
                (src, dst), data_links, ack_links = self.reduction.routes(self.sim, sender, npu, flow_id)
                connection = self.sim.open_routed_connection(src, dst, flow_id, data_links, ack_links)
            self._connections[pair] = connection
        return connection

    def senders(self) -> list[TcpSender]:
        """The senders of its connections, in their order of opening."""
        return [connection.sender for connection in self.sim.connections]

    def drops(self) -> int:
        """Packets dropped on the reduced network's links so far."""
        return sum(link.drops for link in self.sim.topology.links)

    def counters(self) -> dict[str, int]:
        """Retransmissions, timeouts and drops of the reduced network, scaled to the full run."""
        senders = self.senders()
        scale = self.reduction.scale
        return {"retransmits": round(scale * sum(sender.retransmits for sender in senders)),
                "timeouts": round(scale * sum(sender.timeouts for sender in senders)),
                "drops": round(scale * self.drops())}


class ReducedCarrier(MessageCarrier):
    """The messages of a phase replayed on a reduced network: run rank i is the reduction's simulated
    NPU `ranks[i]`; each message goes on the connection of its full-run pair of NPUs, under the full
    run's flow id, to the run rank standing for the receiver (`Reduction.position`)."""

    __slots__ = ("episodes", "reduction", "ranks", "flow_ids")

    def __init__(self, episodes: PacketEpisodes, flow_ids: dict[tuple[int, int], int]) -> None:
        self.episodes = episodes
        self.reduction = episodes.reduction
        self.ranks = self.reduction.ranks
        self.flow_ids = flow_ids

    def carry(self, run: ProgramRun, index: int, send: Send) -> None:
        reduction = self.reduction
        rank = self.ranks[index]
        peer = (rank + send.peer_offset) % reduction.npus
        connection = self.episodes.connection((rank, peer), self.flow_ids)
        connection.send_message(send.size_bytes, Receipt(run, reduction.position(rank, peer), send.peer_step))


def replay_phase(episodes: PacketEpisodes, program: Program,
                 flow_ids: Callable[[list[int], list[int]], list[int]], delay_ps: int,
                 on_finished: Callable[[], None]) -> ProgramRun:
    """A phase's `program` (its ranks the full run's NPUs) replayed by the simulated ranks of
    `episodes`' reduction on its packet network, as the system layer runs it (`delay_ps` its endpoint
    delay); `flow_ids` gives the full run's flow ids of pairs of NPUs (senders, receivers);
    `on_finished` is called when the last simulated rank has finished; start it with `start`.

    Each step waits for the messages the simulated ranks send it: the program's count where the pair
    mirrors the full run (whole groups); where a peer group is partial (a fat tree's last pod) what
    arrives, so that no rank waits for a message nobody sends."""
    reduction = episodes.reduction
    npus = reduction.npus
    ranks = reduction.ranks
    steps: list[list[Step]] = [program[rank] for rank in ranks]
    expected = [[0] * len(rank_steps) for rank_steps in steps]
    senders: list[int] = []
    peers: list[int] = []
    for rank, rank_steps in zip(ranks, steps):
        for step in rank_steps:
            for send in step.sends:
                peer = (rank + send.peer_offset) % npus
                expected[reduction.position(rank, peer)][send.peer_step] += 1
                senders.append(rank)
                peers.append(peer)
    pair_flow_ids = dict(zip(zip(senders, peers), flow_ids(senders, peers)))
    return ProgramRun(episodes.sim.eventlist, delay_ps, steps, expected, ReducedCarrier(episodes, pair_flow_ids),
                      on_finished)
