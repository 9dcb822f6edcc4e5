"""`engine.backend=hybrid`: the phase backend's fluid model everywhere, and packet-level TCP on a
reduced network for the phases that risk loss (issue 28; docs/hybrid-backend.md).

Every phase is timed as `phase` times it (`FluidPhases`). When a stage starts and the phases in their
fluid part overflow a switch port's buffer with their opening windows (phase's incast rule,
`_opens_incast`), those phases run as one *episode* on a persistent packet simulation of a reduced
network (`PacketEpisodes`), and each phase then ends no earlier than its packet replay did: it lasts
max(T_fluid, T_packet) = T_fluid + max(0, T_packet - T_fluid) from its start (T_fluid as the phase
lives it, whatever phases start or end meanwhile); an episode that drops nothing changes nothing.

The reduced network (`Reduction`):
- `leaf_spine`: the mirrored leaf pair. Two leaves (the pair whose uplinks the first risky stage loads
  most), with their real hosts, every spine, and the run's link rates, latencies, buffers, TCP and host
  stack. Each rank of the two leaves runs its step program as in the full run, every message of it on
  a persistent connection of its own pair of NPUs under the full run's flow id, routed on the spine
  the full run's ECMP hash picks. A peer on another leaf is folded onto the other leaf of the pair (at
  the same position): each leaf's uplinks then carry its own data and the ACKs of the data coming in,
  as in the full run, and every rank receives what its program waits for.
- `switch`: the whole network (no reduction), up to `SWITCH_NPUS` NPUs.
Connections persist from episode to episode (cwnd, ssthresh, RTT estimate, RTO backoff, idle restart).

Counters: `timeouts`, `retransmits` and `drops` are the reduced simulation's, scaled by the leaf
pairs it stands for (L / 2); `hybrid_packet_sims` and `hybrid_packet_wall_s` count the episodes
simulated and their wall time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from ..config import SimConfig, _require
from ..eventlist import EventList
from ..network import Link
from ..simulation import Simulation
from ..system.algorithms import ALL, RING, Program
from ..system.alpha_beta import AlphaBetaSystemLayer, PhaseKey
from ..system.collectives import _Chunk, _Phase
from ..system.phase import FluidPhases, _Fluid
from ..topology import LeafSpineTopology, flow_hash
from ..transport import TcpConnection
from ..units import ns_to_ps, s_to_ps
from .base import SCREEN_RISK_COLUMNS
from .packet import BYTES_PER_CONNECTION
from .phase import PhaseBackend

REDUCED_TOPOLOGIES = ("leaf_spine", "switch")
SWITCH_NPUS = 1_024  # on one switch the reduction is the whole network: p (p - 1) connections at most
REDUCED_PATTERNS = (RING, ALL)  # step patterns an episode replays: rings and direct (all-to-all) steps
REDUCED_ALGORITHMS = {"all_reduce": ("ring", "direct"), "all_gather": ("ring", "direct"),
                      "reduce_scatter": ("ring", "direct"), "all_to_all": ("direct", "ring")}
REDUCED_WORKLOADS = ("dlrm", "astra", "collective")
PACKET_COUNTERS = ("retransmits", "timeouts", "drops")  # the packet columns the reduced simulation fills


class Reduction:
    """Which NPUs of the full run the reduced network simulates, where each NPU of the full run
    lands in it, and the routes of a full-run pair of NPUs there."""

    def __init__(self, config: SimConfig, topology: LeafSpineTopology | None, leaves: tuple[int, int] | None) -> None:
        self.npus = config.network.npus
        self.seed = config.seed
        self.topology = topology
        self.leaves = leaves
        if topology is None or leaves is None:  # the whole network
            self.ranks = list(range(self.npus))
            self.scale = 1.0
            self.hosts_per_leaf = self.npus
        else:
            per_leaf = self.hosts_per_leaf = topology.hosts_per_leaf
            self.ranks = [leaf * per_leaf + i for leaf in leaves for i in range(per_leaf)]
            self.scale = self.npus / per_leaf / 2  # leaf pairs of the full run: L / 2

    def host(self, sender: int, npu: int) -> int:
        """The reduced host standing for the full run's `npu`, as a peer of `sender` (a simulated NPU):
        itself on the pair's leaves, else the NPU at its position on the leaf of the pair that is not
        the sender's."""
        if self.leaves is None:
            return npu
        per_leaf = self.hosts_per_leaf
        first, second = self.leaves
        leaf = npu // per_leaf
        if leaf not in self.leaves:
            leaf = second if sender // per_leaf == first else first
        return (0 if leaf == first else per_leaf) + npu % per_leaf

    def routes(self, reduced: Simulation, sender: int, npu: int,
               flow_id: int) -> tuple[tuple[int, int], tuple[Link, ...], tuple[Link, ...]]:
        """The reduced hosts of the full-run pair (`sender`, `npu`) and its data and ACK routes there:
        on the spine the full run's ECMP hash picks for the pair's flow id."""
        src, dst = self.host(sender, sender), self.host(sender, npu)
        topology = self.topology
        if topology is None:  # one switch: the network itself, on its own links (`Topology.routes`)
            return (src, dst), reduced.topology.path(src, dst, flow_id), reduced.topology.path(dst, src, flow_id)
        assert isinstance(reduced.topology, LeafSpineTopology)
        net = reduced.topology
        src_leaf, dst_leaf = src // self.hosts_per_leaf, dst // self.hosts_per_leaf
        if src_leaf == dst_leaf:
            return (src, dst), (net.up[src], net.down[dst]), (net.up[dst], net.down[src])
        # the full run's ECMP: the unordered pair of NPUs and the connection's flow id (`LeafSpineTopology._spine`)
        spine = flow_hash(self.seed, min(sender, npu), max(sender, npu), flow_id) % len(net.spine_down)
        data_links = (net.up[src], net.leaf_up[src_leaf][spine], net.spine_down[spine][dst_leaf], net.down[dst])
        ack_links = (net.up[dst], net.leaf_up[dst_leaf][spine], net.spine_down[spine][src_leaf], net.down[src])
        return (src, dst), data_links, ack_links


class _PhaseReplay:
    """One phase of an episode replayed on the reduced network: the step programs of its simulated
    ranks, as `SystemLayer`'s `_ProgramRun` runs them (a rank issues its step's
    messages `delay_ps` after entering it, and enters the next once they are out and the messages its
    step consumes are in). `finished_ps` is when its last rank finished (-1 until then)."""

    def __init__(self, episodes: PacketEpisodes, program: Program, flow_ids: dict[tuple[int, int], int],
                 delay_ps: int, on_finished: Callable[[], None]) -> None:
        self.episodes = episodes
        self.program = program
        self.flow_ids = flow_ids
        self.delay_ps = delay_ps
        self.on_finished = on_finished
        ranks = episodes.reduction.ranks
        self.ranks = ranks
        self.position = [0] * len(ranks)
        self.issued = [False] * len(ranks)
        self.received = [[0] * len(program[rank]) for rank in ranks]
        self.ranks_left = len(ranks)
        self.started_ps = -1
        self.finished_ps = -1

    def start(self) -> None:
        """Every simulated rank enters its first step now."""
        self.started_ps = self.episodes.sim.eventlist.now_ps
        for index in range(len(self.ranks)):
            self._enter(index)

    def _enter(self, index: int) -> None:
        steps = self.program[self.ranks[index]]
        if self.position[index] == len(steps):
            self.ranks_left -= 1
            if self.ranks_left == 0:
                self.finished_ps = self.episodes.sim.eventlist.now_ps
                self.on_finished()
            return
        self.issued[index] = False
        if self.delay_ps:
            eventlist = self.episodes.sim.eventlist
            eventlist.call_at(eventlist.now_ps + self.delay_ps, lambda: self._issue(index))
        else:
            self._issue(index)

    def _issue(self, index: int) -> None:
        rank = self.ranks[index]
        step = self.program[rank][self.position[index]]
        reduction = self.episodes.reduction
        for send in step.sends:
            peer = (rank + send.peer_offset) % reduction.npus
            connection = self.episodes.connection(rank, peer, self.flow_ids[(rank, peer)])
            # reduced host h stands for the peer, and is this replay's rank h (`Reduction.ranks`)
            receiver = reduction.host(rank, peer)
            connection.send_message(send.size_bytes, _Receipt(self, receiver, send.peer_step))
        self.issued[index] = True
        self._try_advance(index)

    def _try_advance(self, index: int) -> None:
        steps = self.program[self.ranks[index]]
        position = self.position[index]
        if self.issued[index] and position < len(steps) and self.received[index][position] >= steps[position].receives:
            self.position[index] = position + 1
            self._enter(index)

    def receive(self, index: int, step_index: int) -> None:
        """A message consumed by step `step_index` of rank `index` has arrived."""
        self.received[index][step_index] += 1
        if self.position[index] == step_index:
            self._try_advance(index)


class _Receipt:
    """Called when a replayed message has arrived: counts it for the step of the rank that consumes it."""

    __slots__ = ("replay", "index", "step_index")

    def __init__(self, replay: _PhaseReplay, index: int, step_index: int) -> None:
        self.replay = replay
        self.index = index
        self.step_index = step_index

    def __call__(self) -> None:
        self.replay.receive(self.index, self.step_index)


@dataclasses.dataclass
class EpisodePhase:
    """A phase as an episode replays it: its ranks' step program, when it started in the full run
    and the flow id of every pair of NPUs its simulated ranks send to (the full run's connection ids)."""

    program: Program
    start_ps: int
    flow_ids: dict[tuple[int, int], int]


class PacketEpisodes:
    """The persistent packet simulation of the reduced network (its own event list, topology and
    connections: one per full-run pair of NPUs that a simulated rank sends to, opened on first use),
    and what its episodes counted."""

    def __init__(self, config: SimConfig, reduction: Reduction) -> None:
        self.reduction = reduction
        self.sim = Simulation(reduced_config(config))
        self.delay_ps = ns_to_ps(config.system.endpoint_delay_ns)
        self.limit_ps = s_to_ps(config.engine.max_sim_time_s)
        self._connections: dict[tuple[int, int], TcpConnection] = {}
        self.simulated = 0  # episodes simulated
        self.wall_s = 0.0  # their wall time
        self.timed_out = False  # an episode passed `engine.max_sim_time_s`: the run is ending as a timeout
        self._running = 0

    def connection(self, sender: int, npu: int, flow_id: int) -> TcpConnection:
        """The persistent connection of the full-run pair (`sender`, `npu`) on the reduced network."""
        key = (sender, npu)
        connection = self._connections.get(key)
        if connection is None:
            (src, dst), data_links, ack_links = self.reduction.routes(self.sim, sender, npu, flow_id)
            connection = self.sim.open_routed_connection(src, dst, flow_id, data_links, ack_links)
            self._connections[key] = connection
        return connection

    def run(self, phases: list[EpisodePhase]) -> tuple[list[tuple[int, int]], int]:
        """Replay `phases` together, each from its start in the full run (or, if the reduced network was
        still busy with the previous episode then, as soon as it is free), until all have finished.
        Returns when each started and finished on the reduced clock (-1 for finishing if the episode
        passed `engine.max_sim_time_s`) and the packets dropped."""
        wall_start = time.perf_counter()
        eventlist = self.sim.eventlist
        start_ps = max(eventlist.now_ps, min(phase.start_ps for phase in phases))
        eventlist.run(start_ps)  # what was left of the previous episode (its timers) up to now
        eventlist.now_ps = start_ps  # the reduced network was idle in between: its clock jumps
        drops_before = self.drops()
        replays = [_PhaseReplay(self, phase.program, phase.flow_ids, self.delay_ps, self._finished)
                   for phase in phases]
        self._running = len(replays)
        for phase, replay in zip(phases, replays):
            eventlist.call_at(max(start_ps, phase.start_ps), replay.start)
        while self._running and not self.timed_out:
            if not eventlist.pending():
                raise RuntimeError("the reduced packet simulation ran empty before its episode's phases finished")
            next_ps = eventlist.next_time_ps()
            if next_ps > self.limit_ps:
                self.timed_out = True
            else:
                # one instant at a time, so that the episode stops at its last delivery, not after: the
                # next one may start then (back-to-back collectives), as in the full run
                eventlist.run(next_ps)
        self.simulated += 1
        self.wall_s += time.perf_counter() - wall_start
        return [(replay.started_ps, replay.finished_ps) for replay in replays], self.drops() - drops_before

    def _finished(self) -> None:
        self._running -= 1

    def drops(self) -> int:
        """Packets dropped on the reduced network's links so far."""
        return sum(link.drops for link in self.sim.topology.links)

    def counters(self) -> dict[str, int]:
        """Retransmissions, timeouts and drops of the reduced network, scaled to the full run."""
        senders = [connection.sender for connection in self.sim.connections]
        scale = self.reduction.scale
        return {"retransmits": round(scale * sum(sender.retransmits for sender in senders)),
                "timeouts": round(scale * sum(sender.timeouts for sender in senders)),
                "drops": round(scale * self.drops())}


def reduced_config(config: SimConfig) -> SimConfig:
    """The config of the reduced network: on leaf_spine two leaves, the rest as the run's."""
    net = config.network
    if net.topology != "leaf_spine":
        return config
    assert net.hosts_per_leaf is not None
    return dataclasses.replace(config, network=dataclasses.replace(net, npus=2 * net.hosts_per_leaf))


class _EndNotBefore:
    """Ends a phase when its fluid time is over (`FluidPhases.wake` calls it then), but not before
    `end_ps`: the time its packet replay took from its start."""

    __slots__ = ("eventlist", "end", "end_ps")

    def __init__(self, eventlist: EventList, end: Callable[[], None], end_ps: int) -> None:
        self.eventlist = eventlist
        self.end = end
        self.end_ps = end_ps

    def __call__(self) -> None:
        if self.eventlist.now_ps < self.end_ps:
            self.eventlist.call_at(self.end_ps, self.end)
        else:
            self.end()


class HybridPhases(FluidPhases):
    """`FluidPhases` whose risky stages are also replayed at packet level (module docstring): each
    phase in an episode ends no earlier than its packet replay when the episode drops packets."""

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(sim.eventlist, sim.topology, config.segment_bytes, config.header_bytes, config.seed,
                         config.tcp.init_cwnd_pkts, None)
        self.config = config
        self.episodes: PacketEpisodes | None = None  # made at the first episode (its leaf pair then chosen)
        # the phases in their fluid part not replayed yet: their layer, phase and start
        self._plans: dict[_Fluid, tuple[AlphaBetaSystemLayer, _Phase, int]] = {}
        self._starting: tuple[AlphaBetaSystemLayer, _Phase, int] | None = None
        self._risky = False  # a stage has started that overflows a port: an episode after the sharing
        index = {id(link): position for position, link in enumerate(sim.topology.links)}
        topology = sim.topology
        # each leaf's uplinks, as indices into the links (leaf_spine)
        self._leaf_uplinks = (np.array([[index[id(link)] for link in row] for row in topology.leaf_up], dtype=np.int64)
                              if isinstance(topology, LeafSpineTopology) else None)

    def start(self, layer: AlphaBetaSystemLayer, chunk: _Chunk, queue: int, phase: _Phase, key: PhaseKey,
              duration_ps: int) -> None:
        """As `FluidPhases.start`, keeping the phase's plan for an episode."""
        self._starting = (layer, phase, self.eventlist.now_ps)
        super().start(layer, chunk, queue, phase, key, duration_ps)
        self._starting = None

    def _stage_starts(self, fluid: _Fluid) -> None:
        """Flag the phase as phase does, and mark an episode due if the stage overflows a port."""
        if self._starting is not None and fluid not in self._plans:
            self._plans[fluid] = self._starting
        if self._opens_incast():
            self._risky = True
            if not fluid.flagged:
                fluid.flagged = True
                self.incast_phases += 1

    def _share(self, now: int) -> None:
        """Share the links as phase does; then, if a stage that started risks loss, run its episode."""
        super()._share(now)
        if self._risky:
            self._risky = False
            self._episode(now)
        self._plans = {fluid: plan for fluid, plan in self._plans.items() if fluid in self._fluid}

    def _episode(self, now: int) -> None:
        """Replay at packet level the phases in their fluid part not replayed yet, each whole from its
        start, and make each end no earlier than its replay did (when the episode dropped packets)."""
        if self.episodes is None:
            self.episodes = PacketEpisodes(self.config, self._reduction())
        if self.episodes.timed_out:
            return  # a phase already ends past the time limit: the run ends there
        fluids = [fluid for fluid in self._fluid if fluid in self._plans]
        phases = [self._episode_phase(fluid) for fluid in fluids]
        for fluid in fluids:
            del self._plans[fluid]  # replayed once
        spans, dropped = self.episodes.run(phases)
        if self.episodes.timed_out:
            for fluid in fluids:  # it ends past the limit, where the full run stops too
                fluid.end = _EndNotBefore(self.eventlist, fluid.end, self.episodes.limit_ps + 1)
            return
        if not dropped:
            return  # lossless: phase's figure, exactly
        for fluid, phase, (started_ps, finished_ps) in zip(fluids, phases, spans):
            # it lasts max(T_fluid, T_packet) from its start: its fluid time, plus what the packet run took
            # beyond it (the fluid time as the phase lives it, whatever phases start or end meanwhile)
            fluid.end = _EndNotBefore(self.eventlist, fluid.end, phase.start_ps + finished_ps - started_ps)

    def _episode_phase(self, fluid: _Fluid) -> EpisodePhase:
        """A phase as an episode replays it: its program (one, as rings and direct steps have), its
        start and its pairs' flow ids."""
        layer, phase, start_ps = self._plans[fluid]
        dim = layer.dimensions[phase.dimension]
        steps = layer.phase_steps(phase, len(dim.groups[0]))
        assert steps is not None and all(step.pattern in REDUCED_PATTERNS for step in steps), \
            "check_config refuses what the reduction does not replay"
        (program,) = layer.plan_phase(phase, dim)
        reduction = self.episodes.reduction if self.episodes is not None else None
        assert reduction is not None
        senders, peers = [], []
        for rank in reduction.ranks:
            for step in program[rank]:
                for send in step.sends:
                    senders.append(rank)
                    peers.append((rank + send.peer_offset) % reduction.npus)
        src, dst = np.array(senders, dtype=np.int64), np.array(peers, dtype=np.int64)
        ids = self.flow_ids.ids(src, dst, distinct=False)  # numbered already, when phase routed the phase
        return EpisodePhase(program, start_ps, dict(zip(zip(senders, peers), ids.tolist())))

    def _reduction(self) -> Reduction:
        """The reduced network: on leaf_spine the two leaves whose uplinks the phases in their fluid part
        load most (most messages on one uplink, then most bytes; the lower leaf first on ties)."""
        topology = self.topology
        if not isinstance(topology, LeafSpineTopology) or self._leaf_uplinks is None:
            return Reduction(self.config, None, None)
        active = [fluid.stages[fluid.stage] for fluid in self._fluid]  # a stage has just started: not empty
        peak = np.sum([stage.peak_messages for stage in active], axis=0)[self._leaf_uplinks].max(axis=1)
        load = np.sum([stage.link_bytes for stage in active], axis=0)[self._leaf_uplinks].sum(axis=1)
        order = sorted(range(len(peak)), key=lambda leaf: (-int(peak[leaf]), -float(load[leaf]), leaf))
        first, second = sorted(order[:2])
        return Reduction(self.config, topology, (first, second))

    def counters(self) -> dict[str, Any]:
        """The reduced simulation's packet counters, scaled (zero if no episode ran), and its cost."""
        if self.episodes is None:
            return {**dict.fromkeys(PACKET_COUNTERS, 0), "hybrid_packet_sims": 0, "hybrid_packet_wall_s": 0.0}
        return {**self.episodes.counters(), "hybrid_packet_sims": self.episodes.simulated,
                "hybrid_packet_wall_s": self.episodes.wall_s}


class HybridBackend(PhaseBackend):
    """Phases timed by `HybridPhases`: phase's fluid model, and packet-level TCP on a reduced network
    where a phase risks loss."""

    DESCRIPTION = "phase's fluid coflows, and packet-level TCP on a reduced network where a phase risks loss"
    FILLS = frozenset(SCREEN_RISK_COLUMNS + PACKET_COUNTERS)
    INCAST_RTO = False  # its risky phases get the packet engine's time, not a charged RTO

    def fluid_phases(self) -> HybridPhases:
        """The phase timer with packet-level episodes."""
        return HybridPhases(self.config, self.sim)

    @classmethod
    def check_config(cls, config: SimConfig) -> None:
        """Refuse what the reduction does not cover yet: topologies but leaf_spine (at least two leaves)
        and a switch of at most `SWITCH_NPUS` NPUs; algorithms but rings and direct steps; workloads
        whose collectives do not span the whole network (Chakra traces' process groups)."""
        net = config.network
        _require(net.topology in REDUCED_TOPOLOGIES, "network.topology", net.topology,
                 f"one of {', '.join(REDUCED_TOPOLOGIES)} on engine.backend=hybrid (the topologies it reduces yet)")
        if net.topology == "leaf_spine":
            assert net.hosts_per_leaf is not None
            _require(net.npus >= 2 * net.hosts_per_leaf, "network.npus", net.npus,
                     f"at least 2 leaves (2 x network.hosts_per_leaf = {2 * net.hosts_per_leaf}) on "
                     "engine.backend=hybrid (its reduced network is a leaf pair)")
        else:
            _require(net.npus <= SWITCH_NPUS, "network.npus", net.npus,
                     f"at most {SWITCH_NPUS} on engine.backend=hybrid with network.topology=switch "
                     "(the whole network is simulated at packet level)")
        for op, algorithms in REDUCED_ALGORITHMS.items():
            _require(getattr(config.system, op) in algorithms, f"system.{op}", getattr(config.system, op),
                     f"one of {', '.join(algorithms)} on engine.backend=hybrid (rings and direct steps are "
                     "the patterns it reduces yet)")
        _require(config.workload.type in REDUCED_WORKLOADS, "workload.type", config.workload.type,
                 f"one of {', '.join(REDUCED_WORKLOADS)} on engine.backend=hybrid")

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """Phase's estimate, and the reduced network's connections: every simulated rank to every other
        NPU at most."""
        net = config.network
        ranks = 2 * net.hosts_per_leaf if net.topology == "leaf_spine" and net.hosts_per_leaf else net.npus
        return super().estimate_bytes(config) + ranks * (net.npus - 1) * BYTES_PER_CONNECTION

    def counters(self) -> dict[str, Any]:
        """Phase's TCP-risk signals and the reduced packet simulation's counters (`HybridPhases.counters`)."""
        assert isinstance(self.fluid, HybridPhases)
        return {**super().counters(), **self.fluid.counters()}


BACKEND = HybridBackend
