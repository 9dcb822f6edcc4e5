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
from ..system.algorithms import XOR, Program, Send, Step
from ..system.collectives import MessageCarrier, ProgramRun, Receipt
from ..topology import flow_hash
from ..transport import TcpConnection, TcpSender

# connections the reduced networks may hold at most (each simulated rank to every other NPU, or to every
# NPU of the one rail replayed): 589,760 at 9,216 NPUs, 16 a leaf (1.9 GiB peak); 1,179,648 on 9,216
# rail-optimized GPUs with 32 nodes a rail leaf, one rail replayed (3.9 GiB peak with phase's model); a
# switch is simulated whole up to 1,086 NPUs; a fat tree's pods grow as k^2 / 4: pod pairs pass it from
# 2,439 NPUs (k = 22: 2 pairs x 242 x 2,438), edge pairs (k / 2 hosts each) from 14,747 NPUs (k = 40: 2
# pairs x 40 x 14,746)
REDUCED_CONNECTIONS_MAX = 1_179_648
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


def _pair_connections(npus: int, group_size: int, rails: int = 1) -> int:
    """The connections of the simulated groups of `group_size` (two a pair): each rank to every other NPU,
    or, one of `rails` rails replayed, to every NPU of that rail."""
    peers = npus - 1 if rails == 1 else -(-npus // rails)
    return 2 * group_size * simulated_pairs(npus, group_size) * peers


def replayed_rails(config: SimConfig) -> int:
    """How many rails each replayed rail stands for: 1 (every rail replayed), but on a network whose
    scale-out carries each message on its receiver's rail (`ReducedGroups.rails`: rail-optimized with PXN)
    with `engine.hybrid_rails=one`, or `auto` where replaying every rail would pass
    `REDUCED_CONNECTIONS_MAX` connections: then its rails, rail 0 replayed alone (`Reduction.routes`).
    `auto` replays every rail where they fit: on the validation grid one rail missed a loss that the packet
    engine and every rail saw (docs/hybrid-backend.md)."""
    groups = reduced_groups(config)
    size = group_size(config)
    choice = config.engine.hybrid_rails
    if groups is None or size is None or groups.rails == 1 or choice == "every":
        return 1
    if choice == "one":
        return groups.rails
    return 1 if _pair_connections(config.network.npus, size) <= REDUCED_CONNECTIONS_MAX else groups.rails


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
    return npus * (npus - 1) if size is None else _pair_connections(npus, size, replayed_rails(config))


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
        # the rails each replayed one stands for (`replayed_rails`): > 1, only the messages to rail 0's
        # NPUs are replayed
        self.rails = replayed_rails(config) if groups is not None else 1
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

    def replays(self, npu: int) -> bool:
        """Whether messages to the full run's `npu` are replayed: on the rail replayed (`rails`), or every one."""
        return npu % self.rails == 0

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
        network is simulated whole, `PacketEpisodes` opens its connections as the packet engine does.)
        With one rail replayed (`rails` > 1), a message to another node starts at the NIC that relays it
        (its sender's node's NPU on the receiver's rail, as PXN sends it) and its ACKs end there: the
        scale-up hop before it is left out, since the replay leaves out the other rails' messages that
        share that hop (kept at their full rate, seven relays' worth of messages met at one scale-up port
        and dropped packets the full run does not; at a fixed share of it, retransmissions after an RTO were
        paced where the full run's burst: docs/hybrid-backend.md)."""
        origin = sender
        if self.rails > 1 and npu // self.rails != sender // self.rails:
            origin = sender - sender % self.rails + npu % self.rails
        src, dst = self.hosts[self.position(sender, origin)], self.hosts[self.position(sender, npu)]
        topology = reduced.topology
        ecmp_hash = flow_hash(self.seed, min(sender, npu), max(sender, npu), flow_id)
        return (src, dst), topology.path_for_hash(src, dst, ecmp_hash), topology.path_for_hash(dst, src, ecmp_hash)


class PacketEpisodes:
    """The persistent packet simulation of one reduced network (its own event list, topology and
    connections: one per full-run pair of NPUs that a simulated rank sends to, opened on first use;
    `models_host_stack`: its hosts send through Linux's transmit path, `host.*`)."""

    def __init__(self, config: SimConfig, reduction: Reduction, models_host_stack: bool) -> None:
        self.reduction = reduction
        self.xor_fold = XorFold(reduction)
        self.sim = Simulation(reduced_config(config), models_host_stack)
        # by full-run pair and the run rank it lands on (one integer: a tuple key costs about 150 bytes more,
        # 170 MiB over a million connections): a pair that XOR exchanges fold elsewhere than other patterns do
        # has a connection for each
        self._connections: dict[int, TcpConnection] = {}

    def connection(self, pair: tuple[int, int], fold: Reduction, target: int,
                   flow_ids: dict[tuple[int, int], int]) -> TcpConnection:
        """The persistent connection of the full-run `pair` of NPUs (sender, receiver) on the reduced
        network, to run rank `target` (where `fold`, the reduction or its `xor_fold`, puts the receiver),
        opened under its flow id in `flow_ids` on first use."""
        sender, npu = pair
        npus = self.reduction.npus
        key = (sender * npus + npu) * npus + target
        connection = self._connections.get(key)
        if connection is None:
            flow_id = flow_ids[pair]
            if not self.reduction.index:  # the whole network: its own routes (a ring's through its ports)
                connection = self.sim.open_connection(sender, npu, flow_id)
            else:
                (src, dst), data_links, ack_links = fold.routes(self.sim, sender, npu, flow_id)
                connection = self.sim.open_routed_connection(src, dst, flow_id, data_links, ack_links)
            self._connections[key] = connection
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


class XorFold(Reduction):
    """A reduction's view for halving-doubling's XOR exchanges on the full run's group (`xor_fold`): a peer in a
    simulated group is itself; one in another group (the exchange's group mask M = its group XOR the sender's) is
    the NPU at its position in a partner group: the simulated groups whose partner group (theirs XOR M) is not
    simulated are paired in their order, first with second, third with fourth. The fold is then an involution, as
    the exchange is: every simulated rank receives one message a step, from the rank it sends to, and each
    simulated group's uplinks and downlinks carry one message per rank as the full run's do. Group sizes are powers
    of two (`HybridBackend.check_config`), so that a step's peers in other groups lie all in one group."""

    def __init__(self, reduction: Reduction) -> None:
        # the reduction's own fields: a view, not a copy of its state
        self.npus = reduction.npus
        self.seed = reduction.seed
        self.scale = reduction.scale
        self.index = reduction.index
        self.groups = reduction.groups
        self.group_size = reduction.group_size
        self.ranks = reduction.ranks
        self.hosts = reduction.hosts
        self.rails = reduction.rails

    def position(self, sender: int, npu: int) -> int:
        """The run rank standing for `npu` as the XOR partner of `sender` (class docstring)."""
        index = self.index
        if not index:
            return npu
        size = self.group_size
        group = npu // size
        if group in index:
            return index[group] * size + npu % size
        mask = group ^ sender // size
        unmatched = [simulated for simulated in sorted(index) if simulated ^ mask not in index]
        partner = unmatched[unmatched.index(sender // size) ^ 1]  # an even count: a match is mutual
        return index[partner] * size + npu % size


def _unconsumed() -> None:
    """What a message folded onto a rank that does not wait for it calls on arrival: nothing."""


class ReducedCarrier(MessageCarrier):
    """The messages of a phase replayed on a reduced network: run rank i is the reduction's simulated
    NPU `ranks[i]`, rank `local[i]` of its dimension group `groups[i]`; each message goes on the connection of
    its full-run pair of NPUs, under the full run's flow id, to the run rank standing for the receiver
    (`fold.position`). With `exact`, only a message that lands on its receiver itself counts for that rank's
    step; one folded onto another rank loads the network and is consumed by nobody."""

    __slots__ = ("episodes", "fold", "ranks", "groups", "local", "flow_ids", "exact")

    def __init__(self, episodes: PacketEpisodes, fold: Reduction, groups: list[tuple[int, ...]], local: list[int],
                 flow_ids: dict[tuple[int, int], int], exact: bool) -> None:
        self.episodes = episodes
        self.fold = fold
        self.ranks = fold.ranks
        self.groups = groups
        self.local = local
        self.flow_ids = flow_ids
        self.exact = exact

    def carry(self, run: ProgramRun, index: int, send: Send) -> None:
        rank = self.ranks[index]
        group = self.groups[index]
        peer = group[(self.local[index] + send.peer_offset) % len(group)]
        if not self.episodes.reduction.replays(peer):
            return
        target = self.fold.position(rank, peer)
        connection = self.episodes.connection((rank, peer), self.fold, target, self.flow_ids)
        if self.exact and self.ranks[target] != peer:
            connection.send_message(send.size_bytes, _unconsumed)
        else:
            connection.send_message(send.size_bytes, Receipt(run, target, send.peer_step))


class PhaseReplay:
    """A phase's program runs on one reduced network (two for a double binary tree's trees): `start` starts them
    all; `on_finished` is called once the last has finished."""

    __slots__ = ("runs", "left", "on_finished")

    def __init__(self, on_finished: Callable[[], None]) -> None:
        self.runs: list[ProgramRun] = []
        self.left = 0
        self.on_finished = on_finished

    def start(self) -> None:
        """Every run's ranks enter their first step now (none: it has finished)."""
        if not self.runs:
            self.on_finished()
        for run in self.runs:
            run.start()

    def run_finished(self) -> None:
        """One of the runs has finished."""
        self.left -= 1
        if not self.left:
            self.on_finished()


def replay_phase(episodes: PacketEpisodes, groups: tuple[tuple[int, ...], ...], programs: list[Program],
                 symmetric: str | None, flow_ids: Callable[[list[int], list[int]], list[int]], delay_ps: int,
                 on_finished: Callable[[], None]) -> PhaseReplay:
    """A phase's `programs` (run at once on every one of its dimension's `groups` of NPUs of the full run)
    replayed by the simulated ranks of `episodes`' reduction on its packet network, as the system layer
    runs them (`delay_ps` its endpoint delay); a simulated NPU in no group has nothing to do.
    `symmetric`: the pattern of every step where all ranks do alike (ring, all, xor), else None; `flow_ids`
    gives the full run's flow ids of pairs of NPUs (senders, receivers); `on_finished` is called when the last
    simulated rank has finished; start it with `start`.

    Which rank a message to a peer outside the simulated groups lands on, and what each step waits for:
    - a symmetric phase on one group of every NPU: the reduction's fold (`Reduction.position`; XOR exchanges:
      `XorFold`), every rank then sending and receiving at the same steps as in the full run; each step waits
      for the messages the simulated ranks send it: the program's count where the reduction mirrors the full
      run (whole groups); where a peer group is partial (a fat tree's last pod) what arrives, so that no rank
      waits for a message nobody sends;
    - ranks in different roles (a double binary tree) or a group of some NPUs (a Chakra process group): the
      reduction's fold for the load, but a step waits only for the messages that reach their own receiver
      (`ReducedCarrier.exact`): a folded message would land on a rank whose step does not consume it, and
      waits for it could deadlock. Those ranks then wait for less than in the full run (they run ahead: the
      replay's time is at most the full run's), and load the links as their programs do."""
    reduction = episodes.reduction
    fold = episodes.xor_fold if symmetric == XOR else reduction
    exact = symmetric is None or len(groups) != 1 or len(groups[0]) != reduction.npus
    ranks = reduction.ranks
    where = {npu: (group, local) for group in groups for local, npu in enumerate(group)}
    members = [where.get(rank, ((rank,), 0)) for rank in ranks]
    member_groups = [group for group, _ in members]
    local = [position for _, position in members]
    replay = PhaseReplay(on_finished)
    senders: list[int] = []
    peers: list[int] = []
    runs: list[tuple[list[list[Step]], list[list[int]]]] = []
    for program in programs:
        steps: list[list[Step]] = [program[position] if rank in where else []
                                   for rank, position in zip(ranks, local)]
        expected = [[0] * len(rank_steps) for rank_steps in steps]
        for rank, group, position, rank_steps in zip(ranks, member_groups, local, steps):
            for step in rank_steps:
                for send in step.sends:
                    peer = group[(position + send.peer_offset) % len(group)]
                    if not reduction.replays(peer):
                        continue
                    target = fold.position(rank, peer)
                    if not exact or ranks[target] == peer:
                        expected[target][send.peer_step] += 1
                    senders.append(rank)
                    peers.append(peer)
        runs.append((steps, expected))
    pair_flow_ids = dict(zip(zip(senders, peers), flow_ids(senders, peers)))
    carrier = ReducedCarrier(episodes, fold, member_groups, local, pair_flow_ids, exact)
    for steps, expected in runs:
        replay.runs.append(ProgramRun(episodes.sim.eventlist, delay_ps, steps, expected, carrier,
                                      replay.run_finished))
    replay.left = len(replay.runs)
    return replay
