"""`engine.backend=hybrid`: the phase backend's fluid model everywhere, and packet-level TCP on a
reduced network for the phases that risk loss (issue 28; docs/hybrid-backend.md).

Every phase is timed as `phase` times it (`FluidPhases`). When a stage starts and the phases in their
fluid part fill a switch port's buffer with their opening windows past `TRIGGER_QUEUE_SHARE` (phase's
incast rule, `port_queue_share`, at half the buffer), an *episode* opens: those phases are replayed,
each from its own start, on persistent packet simulations of reduced networks (`PacketEpisodes`). The
reduced clocks follow the full run's (`_catch_up`): a phase that starts with such a stage while a
replay is unfinished joins the episode at its start; one that starts without waits for the next
episode, which replays it from where the reduced networks are. A replayed phase ends no earlier than
its slowest replay if packets were dropped meanwhile: it lasts max(T_fluid, T_packet) from its start
(T_fluid as the phase lives it, whatever phases start or end meanwhile); a phase during which nothing
was dropped keeps phase's figure exactly, its replays running on: the replays of the phases that start
meanwhile wait for them (a packet run starts a phase's successor once its packets are in).

The reduced networks (`Reduction`), of the groups whose uplinks the opening stage loads most, with their
real hosts and every switch above them, and the run's link rates, latencies, buffers, TCP and host stack:
- `leaf_spine`: one network of `LEAF_SPINE_GROUPS` leaves; `fat_tree`: up to `PAIRS` mirrored pairs of
  groups (pods; edge switches). Each simulated rank runs its step program as in the full run, every
  message of it on a persistent connection of its own pair of NPUs under the full run's flow id, routed
  where the full run's ECMP hash routes it (`path_for_hash`). A peer in another group is folded onto a
  simulated group by its group distance (`Reduction.position`; with a pair, onto the other group): each
  group's uplinks then carry its own data and the ACKs of the data coming in, as in the full run, and
  every rank receives what its program waits for. Halving-doubling's XOR partners are folded as involutions
  instead (`XorFold`); a double binary tree (whole networks only) and a Chakra process group's collectives
  wait only for the messages that reach their own receiver (`replay_phase`).
- `switch`, and a leaf_spine or fat_tree of no more hosts than the pairs would hold: the whole network (no
  reduction; on a switch up to 1,086 NPUs, `REDUCED_CONNECTIONS_MAX`).
Connections persist from episode to episode (cwnd, ssthresh, RTT estimate, RTO backoff, idle restart).

Memoisation (`engine.hybrid_memoise`): an episode is keyed by its opening phases (kinds, starts after
the opening) and the connections' TCP state class (`_tcp_class`); once a key's record went as its
previous one (`_EpisodeRecord.alike`), the next episode with that key is timed from the record
(`_MemoEpisode`) instead of simulated.

Counters: `timeouts`, `retransmits` and `drops` are the reduced simulations', scaled by the group
groups each simulated group stands for (groups / groups simulated), and the records' of memoised episodes;
`hybrid_packet_sims` counts the episodes simulated times the reduced networks, `hybrid_packet_wall_s` their wall
time, `hybrid_memo_episodes` the episodes timed from records.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable

import numpy as np

from ..config import SYSTEM_ALGORITHMS, ChakraWorkload, SimConfig, require
from ..eventlist import EventList, StopFlag, run_together
from ..simulation import EVENTS_PER_SLICE, Simulation
from ..system.algorithms import XOR, Program
from ..system.alpha_beta import AlphaBetaSystemLayer, PhaseKey
from ..system.collectives import Chunk, CollectivePhase
from ..system.phase import FluidPart, FluidPhases
from ..transport.cc import UNSET_SSTHRESH
from ..units import ns_to_ps, s_to_ps
from ..workload.chakra import SEND, read_rank, trace_files
from .base import SCREEN_RISK_COLUMNS
from .phase import PhaseBackend
from .reduction import (
    LEAF_SPINE_GROUPS,
    REDUCED_CONNECTIONS_MAX,
    PacketEpisodes,
    PhaseReplay,
    Reduction,
    group_size,
    reduced_connections,
    reduced_groups,
    replay_phase,
    replayed_rails,
    simulated_pairs,
)

# what a reduced connection costs in a lossy episode: the packet engine's connection (BYTES_PER_CONNECTION), its
# flow id entry, its share of the replays' step state and of a burst's packets; measured 2.2-2.5 KiB at 1,024 and
# 9,216 NPUs (benchmarks/hybrid_scale.csv: peak RSS less the lossless run's, over the connections)
BYTES_PER_REDUCED_CONNECTION = 3_072  # on one switch the reduction is the whole network: p (p - 1) connections at most
# workloads of collective phases (a Chakra trace's without point-to-point sends: `check_config`); `flows` are TCP
# flows, which the phase model that times every hybrid phase has no model of (the packet engine runs them)
REDUCED_WORKLOADS = ("dlrm", "astra", "collective", "chakra")
# An episode opens where phase's rule fills a port past this share of its buffer, not only past all of it
# (incast_phases): the fluid queue estimate misses packet-level bursts. On the validation grid
# (benchmarks/validate_hybrid.py) every case the packet engine lost packets in reached 0.97 or more, and
# two of them stayed below 1 (a 1:1 fabric's ECMP collisions at 256 NPUs, a fat tree's edge); a false alarm
# costs one reduced simulation, and its phases keep phase's figure exactly
TRIGGER_QUEUE_SHARE = 0.5
PACKET_COUNTERS = ("retransmits", "timeouts", "drops")  # the packet columns the reduced simulation fills
# An episode that met the same TCP state class as its previous occurrence (same phases, same starts
# relative to its opening), and whose every replayed phase ended within this share of its time as there
# (at phase's figure or past it alike), is taken as settled (`engine.hybrid_memoise`). 1 %: the repeats of
# lossy iterations differ by microseconds in RTO-long phases (docs/hybrid-backend.md, "Memoisation")
MEMO_TOLERANCE = 0.01
PhaseKind = tuple[int, str, int, "int | None", int]  # a phase's dimension, op, chunk bytes, ASTRA-sim tree, queue
Signature = tuple[tuple[PhaseKind, int], ...]  # an episode's opening phases: kind, start after the opening (ps)
EpisodeKey = tuple[Signature, int]  # and the TCP state class its connections were in (`HybridPhases._tcp_class`)


def _phase_kind(phase: CollectivePhase) -> PhaseKind:
    """What makes two phases of a run alike for memoisation: the same step program on the same NPUs."""
    return phase.dimension, phase.op, phase.chunk_bytes, phase.astra_tree, phase.queue


class _PhaseOutcome:
    """How one replayed phase of a recorded episode went: its kind, its start after the episode's
    opening, and, from its start, when its fluid time and fixed part were over (`due_ps`) and when it
    ended (`end_ps`); -1 while not known."""

    __slots__ = ("record", "kind", "offset_ps", "due_ps", "end_ps")

    def __init__(self, record: _EpisodeRecord, kind: PhaseKind, offset_ps: int) -> None:
        self.record = record
        self.kind = kind
        self.offset_ps = offset_ps
        self.due_ps = -1
        self.end_ps = -1

    def past_fluid(self) -> bool:
        """It ended past phase's figure: its replays' packets set its end."""
        return self.end_ps > self.due_ps

    def alike(self, other: _PhaseOutcome) -> bool:
        """The same phase, started alike, ended alike (`MEMO_TOLERANCE`)."""
        return (self.kind == other.kind and self.offset_ps == other.offset_ps
                and self.past_fluid() == other.past_fluid()
                and abs(self.end_ps - other.end_ps) <= MEMO_TOLERANCE * max(self.end_ps, other.end_ps))


class _EpisodeRecord:
    """An episode simulated at packet level: its `key` (the phases replayed at its opening, each one's kind
    and start after the opening, and the TCP state class the connections were in), every replayed phase's
    outcome in the order they were replayed (joins too), how long its replays lasted, what the reduced
    networks counted meanwhile (scaled), and the class the next episode opened in."""

    __slots__ = ("key", "open_ps", "counters_at_open", "outcomes", "unended", "duration_ps", "counters", "next_class")

    def __init__(self, key: EpisodeKey, open_ps: int, counters_at_open: dict[str, int]) -> None:
        self.key = key
        self.open_ps = open_ps
        self.counters_at_open = counters_at_open
        self.outcomes: list[_PhaseOutcome] = []
        self.unended = 0  # its phases not ended yet
        self.duration_ps = -1  # from its opening until its last replay finished; -1 while some run
        self.counters: dict[str, int] = {}
        self.next_class: int | None = None  # the TCP state class the next episode opened in

    def add(self, kind: PhaseKind, start_ps: int) -> _PhaseOutcome:
        """A phase replayed in it, starting at `start_ps` in the full run."""
        outcome = _PhaseOutcome(self, kind, start_ps - self.open_ps)
        self.outcomes.append(outcome)
        self.unended += 1
        return outcome

    def complete(self) -> bool:
        """Its replays have finished and its phases have ended."""
        return self.duration_ps >= 0 and not self.unended

    def alike(self, other: _EpisodeRecord) -> bool:
        """Every phase of it went as in `other` (`_PhaseOutcome.alike`)."""
        return len(self.outcomes) == len(other.outcomes) and all(
            mine.alike(theirs) for mine, theirs in zip(self.outcomes, other.outcomes))


class _MemoEpisode:
    """An episode timed from a settled record instead of simulated: each of its phases (the opening's,
    and those that join it as they joined the record) ends as the record's did, from its own start."""

    __slots__ = ("open_ps", "until_ps", "unserved")

    def __init__(self, record: _EpisodeRecord, open_ps: int) -> None:
        self.open_ps = open_ps
        self.until_ps = open_ps + record.duration_ps  # it lasts as the record's replays did
        self.unserved = list(record.outcomes)

    def serve(self, kind: PhaseKind, start_ps: int) -> _PhaseOutcome | None:
        """The record's outcome of the phase of `kind` that started as this one does (None: the record
        has none; the phase is simulated)."""
        for outcome in self.unserved:
            if outcome.kind == kind and outcome.offset_ps == start_ps - self.open_ps:
                self.unserved.remove(outcome)
                return outcome
        return None


class _MemoPhase:
    """A phase timed from a record: when its fluid and fixed parts are over (`HybridPhases.phase_end`)
    it ends then, or where the record's ended past its fluid end, as long after its start."""

    __slots__ = ("eventlist", "end", "end_ps")

    def __init__(self, eventlist: EventList, end: Callable[[], None], start_ps: int, outcome: _PhaseOutcome) -> None:
        self.eventlist = eventlist
        self.end = end
        self.end_ps = start_ps + outcome.end_ps if outcome.past_fluid() else -1

    def __call__(self) -> None:
        if self.end_ps > self.eventlist.now_ps:
            self.eventlist.call_at(self.end_ps, self.end)
        else:
            self.end()


class _ReplayedPhase:
    """A phase of the full run being replayed on the reduced networks: ends it (called when its fluid
    time and fixed part are over: `HybridPhases.phase_end`) no earlier than its replays finish if
    packets were dropped meanwhile (`HybridPhases.phase_due`); with `outcome`, records how it went."""

    __slots__ = ("phases", "end", "start_ps", "unfinished", "late_ps", "finished_ps", "drops_at_start", "ended_ps",
                 "due", "outcome")

    def __init__(self, phases: HybridPhases, end: Callable[[], None], start_ps: int, pairs: int,
                 drops_at_start: int, outcome: _PhaseOutcome | None) -> None:
        self.phases = phases
        self.end = end  # the phase's own end (the system layer's)
        self.start_ps = start_ps  # its start in the full run
        self.unfinished = set(range(pairs))  # the simulated pairs whose replay of it has not finished
        self.late_ps = [0] * pairs  # how much later than the phase its replay started on each pair
        # when its replays finished, each less its `late_ps` (the reduced clocks are the full run's)
        self.finished_ps = -1
        self.drops_at_start = drops_at_start  # the reduced networks' drops when its replays started
        self.ended_ps = -1  # when it ended in the full run with replays unfinished (nothing dropped meanwhile)
        self.due = False  # its fluid time and fixed part are over: it ends when its replays finish
        self.outcome = outcome

    def __call__(self) -> None:
        self.phases.phase_due(self)

    def finish(self) -> None:
        """End the phase in the full run (now), recording when."""
        if self.outcome is not None:
            self.phases.outcome_ended(self.outcome, self.phases.eventlist.now_ps - self.start_ps)
        self.end()


class _DeferredReplay:
    """A phase's replay on one pair held back until the replays there of the phases that had ended
    before it started (`blockers`, ended with replays unfinished) finish: in the full run it may be
    their successor, which a packet run starts only once their packets are in. It then starts as late
    as the latest of them finished after its phase ended (`shift_ps`)."""

    __slots__ = ("replayed", "run", "replay_ps", "blockers", "shift_ps")

    def __init__(self, replayed: _ReplayedPhase, run: PhaseReplay, replay_ps: int,
                 blockers: list[_ReplayedPhase]) -> None:
        self.replayed = replayed
        self.run = run
        self.replay_ps = replay_ps  # where it would start with nothing ahead of it
        self.blockers = set(blockers)
        self.shift_ps = 0


class HybridPhases(FluidPhases):
    """`FluidPhases` whose phases are also replayed at packet level while a risky stage's episode lasts
    (module docstring): each ends no earlier than its replays when packets were dropped meanwhile.

    The reduced networks' clocks follow the full run's (`_catch_up`): they are never ahead of it, so
    that a phase that starts with a risky stage while an episode lasts (the all-to-all that follows
    another at once) joins the replay at its own start."""

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(sim.eventlist, sim.topology, config.segment_bytes, config.header_bytes, config.seed,
                         config.tcp.init_cwnd_pkts, None)
        self.config = config
        self.delay_ps = ns_to_ps(config.system.endpoint_delay_ns)
        self.limit_ps = s_to_ps(config.engine.max_sim_time_s)
        # one persistent packet simulation per simulated group pair, made at the first episode (the
        # pairs then chosen)
        self.episodes: list[PacketEpisodes] = []
        self.packet_sims = 0  # episodes opened, times the reduced networks each ran on
        self.memo_episodes = 0  # episodes timed from a settled record, not simulated
        self._memo_counters = dict.fromkeys(PACKET_COUNTERS, 0)  # what those records' reduced networks counted
        self._records: dict[EpisodeKey, _EpisodeRecord] = {}  # the latest record of each key
        self._settled: dict[EpisodeKey, _EpisodeRecord] = {}  # the keys whose last two records went alike
        self._recording: _EpisodeRecord | None = None  # the simulated episode that lasts, if recorded
        self._previous: _EpisodeRecord | None = None  # the latest episode's record, if it was simulated
        self._memo: _MemoEpisode | None = None  # the latest episode timed from a record
        # the TCP state class the connections are in after it (None: as the reduced networks hold them)
        self._memo_class: int | None = None
        self.packet_wall_s = 0.0  # the reduced simulations' wall time
        self.timed_out = False  # a reduced simulation passed `engine.max_sim_time_s`: the run ends there
        # the phases in their fluid part not replayed yet: their layer, phase and start
        self._plans: dict[FluidPart, tuple[AlphaBetaSystemLayer, CollectivePhase, int]] = {}
        self._starting: tuple[AlphaBetaSystemLayer, CollectivePhase, int] | None = None
        # the phases in their fluid part whose end waits for their replays or record (`phase_end`)
        self._enders: dict[FluidPart, Callable[[], None]] = {}
        self._risky = False  # a stage filled a port past TRIGGER_QUEUE_SHARE: an episode after the sharing
        self._replaying = 0  # phases whose replays have not all finished: while > 0 an episode lasts
        self._due: list[_ReplayedPhase] = []  # phases past their fluid end waiting for their replays
        # per simulated pair: the phases that ended in the full run with their replay there unfinished, and
        # the replays held back until some of those finish
        self._lagging: list[list[_ReplayedPhase]] = []
        self._deferred: list[list[_DeferredReplay]] = []
        self._rechecks: set[int] = set()  # when `_recheck` is scheduled
        self._due_ended = StopFlag()  # raised when a due phase ends during the current `_catch_up`
        topology = sim.topology
        self._group_size = group_size(config)
        self._group_uplinks: np.ndarray | None = None  # [group, link]: indices into the links
        if self._group_size is not None:
            index = {id(link): position for position, link in enumerate(topology.links)}
            whole_groups = topology.group_uplinks(self._group_size)[:config.network.npus // self._group_size]
            self._group_uplinks = np.array([[index[id(link)] for link in row] for row in whole_groups], dtype=np.int64)

    def start(self, layer: AlphaBetaSystemLayer, chunk: Chunk, queue: int, phase: CollectivePhase, key: PhaseKey,
              duration_ps: int) -> None:
        """As `FluidPhases.start`, keeping the phase's plan for an episode."""
        self._starting = (layer, phase, self.eventlist.now_ps)
        super().start(layer, chunk, queue, phase, key, duration_ps)
        self._starting = None

    def on_stage_start(self, fluid: FluidPart, queue_share: float) -> None:
        """Keep a starting phase's plan, and mark an episode due if the stage fills a port past
        `TRIGGER_QUEUE_SHARE` of its buffer: with the opening windows of the stages in their fluid part
        (phase's rule), or, for a phase not replayed yet whose ranks exchange long messages with a few
        peers (halving-doubling, a double binary tree), with its stage's whole messages (`stage_queue_share`):
        loss-based TCP grows their windows until the queue of a port they collide at overflows."""
        if self._starting is not None and fluid not in self._plans:
            self._plans[fluid] = self._starting
        plan = self._plans.get(fluid)
        if plan is not None and self._few_peers(plan[0], plan[1]):
            queue_share = max(queue_share, self.stage_queue_share(fluid.stages[fluid.stage]))
        self._risky = self._risky or queue_share > TRIGGER_QUEUE_SHARE

    @staticmethod
    def _few_peers(layer: AlphaBetaSystemLayer, phase: CollectivePhase) -> bool:
        """A phase of XOR exchanges or of ranks in different roles (a tree): each rank's messages go to one
        or a few peers, whole, not spread over every peer (direct) or one block a step (ring)."""
        steps = layer.phase_steps(phase, layer.dimensions[phase.dimension].size)
        return steps is None or steps[0].pattern == XOR

    def phase_end(self, fluid: FluidPart) -> Callable[[], None]:
        """A replayed phase's end waits for its replays (`_ReplayedPhase`), a memoised one's for its
        record (`_MemoPhase`); any other ends as phase's."""
        return self._enders.pop(fluid, fluid.end)

    def after_share(self, now: int) -> None:
        """The links shared as phase does: if a stage that started risks loss, replay the phases in
        their fluid part not replayed yet: an episode opens, or, while one lasts, they join it. A phase
        that starts during an episode without such a stage waits for the next risky one (its ring steps
        at 9,216 NPUs would cost more packet events than the episode, for nothing measured)."""
        if self._risky and not self.timed_out:
            opens = not self._replaying and (self._memo is None or now >= self._memo.until_ps)
            memoised = self._replay(now, opens)
            self.packet_sims += len(self.episodes) if opens and not memoised else 0
        self._risky = False
        fluids = self.fluid_parts
        self._plans = {fluid: plan for fluid, plan in self._plans.items() if fluid in fluids}

    def _replay(self, now: int, opens: bool) -> bool:
        """Start the replays of the phases in their fluid part not replayed yet, on every simulated group
        pair, each from its own start (an episode that opens replays the phases that began before it too),
        and bring the reduced networks up to `now`. A phase that began while the reduced networks ran on
        (during an earlier episode, without a risky stage) is replayed whole from where they are, its
        packet time counted from there. An opening episode whose key has settled is timed from its
        record instead (`_memoise`), and so are the phases that join it as they joined the record; True
        if it was."""
        if not self.episodes:
            self.episodes = [PacketEpisodes(self.config, reduction, HybridBackend.MODELS_HOST_STACK)
                             for reduction in self._reductions()]
            self._lagging = [[] for _ in self.episodes]
            self._deferred = [[] for _ in self.episodes]
        fluids = [fluid for fluid in self.fluid_parts if fluid in self._plans]
        if not fluids:
            return False
        memoised = opens and self._memoise(fluids, now)
        memo = self._memo if self._memo is not None and now < self._memo.until_ps else None
        simulated = []
        for fluid in fluids:
            _, phase, start_ps = self._plans[fluid]
            outcome = memo.serve(_phase_kind(phase), start_ps) if memo is not None else None
            if outcome is None:
                simulated.append(fluid)
            else:
                del self._plans[fluid]
                self._enders[fluid] = _MemoPhase(self.eventlist, fluid.end, start_ps, outcome)
        if not simulated:
            return memoised
        if memo is not None and not self._replaying:  # a join the record does not have: simulated after all
            self.packet_sims += len(self.episodes)
        self._catch_up(min(self._plans[fluid][2] for fluid in simulated))
        reduced_ps = self.episodes[0].sim.eventlist.now_ps
        drops = self._drops()
        for fluid in simulated:
            layer, phase, start_ps = self._plans.pop(fluid)
            replay_ps = max(start_ps, reduced_ps)
            groups, programs, symmetric = self._programs(layer, phase)
            outcome = self._recording.add(_phase_kind(phase), start_ps) if self._recording is not None else None
            replayed = _ReplayedPhase(self, fluid.end, start_ps, len(self.episodes), drops, outcome)
            self._enders[fluid] = replayed
            self._replaying += 1
            for pair, episodes in enumerate(self.episodes):
                replay = replay_phase(episodes, groups, programs, symmetric, self._flow_ids, self.delay_ps,
                                      partial(self.replay_finished, replayed, pair))
                blockers = [ended for ended in self._lagging[pair] if ended.ended_ps <= start_ps]
                if blockers:
                    self._deferred[pair].append(_DeferredReplay(replayed, replay, replay_ps, blockers))
                else:
                    replayed.late_ps[pair] = replay_ps - start_ps
                    episodes.sim.eventlist.call_at(replay_ps, replay.start)
        self._catch_up(now)
        return memoised

    def _memoise(self, fluids: list[FluidPart], now: int) -> bool:
        """An episode opens at `now` with `fluids`: time it from the record of its key (its phases' kinds
        and starts after `now`, and the connections' TCP state class) if that has settled, else simulate
        and record it (`engine.hybrid_memoise`; off: simulate)."""
        if not self.config.engine.hybrid_memoise:
            return False
        signature = tuple((_phase_kind(self._plans[fluid][1]), self._plans[fluid][2] - now) for fluid in fluids)
        tcp_class = self._memo_class if self._memo_class is not None else self._tcp_class()
        if self._previous is not None:
            self._previous.next_class = tcp_class
        settled = self._settled.get((signature, tcp_class))
        if settled is None:
            self._recording = self._previous = _EpisodeRecord((signature, tcp_class), now, self._totals())
            self._memo_class = None
            return False
        self._recording = self._previous = None
        self._memo = _MemoEpisode(settled, now)
        self._memo_class = settled.next_class  # None (not known yet): the reduced networks' own from here
        self.memo_episodes += 1
        for key, value in settled.counters.items():
            self._memo_counters[key] += value
        return True

    def _tcp_class(self) -> int:
        """The TCP state class of the reduced networks' connections: each one's RTO (ms), ssthresh and
        cwnd (segments; ssthresh -1 while unset), in their order of opening; the state that sets how an
        all-to-all's losses and RTO waves go, but for the RTT estimate's fractions of a millisecond."""
        return hash(tuple((sender.rtt.rto_ps // 1_000_000_000,
                           int(sender.cc.ssthresh_bytes // sender.mss_bytes)
                           if sender.cc.ssthresh_bytes != UNSET_SSTHRESH else -1,
                           int(sender.cc.cwnd_bytes // sender.mss_bytes))
                          for episodes in self.episodes for sender in episodes.senders()))

    def outcome_ended(self, outcome: _PhaseOutcome, end_ps: int) -> None:
        """A recorded phase ended `end_ps` after its start; its record may be complete."""
        outcome.end_ps = end_ps
        outcome.record.unended -= 1
        self._close(outcome.record)

    def _close(self, record: _EpisodeRecord) -> None:
        """Once `record` is complete, keep it as its key's latest; settled if it went as the
        previous one did (`_EpisodeRecord.alike`)."""
        if not record.complete() or self.timed_out:
            return
        previous = self._records.get(record.key)
        if previous is not None and record.alike(previous):
            self._settled[record.key] = record
        self._records[record.key] = record

    def _catch_up(self, target_ps: int, stop_at_due: bool = False) -> None:
        """Run the reduced networks up to `target_ps` (their clocks then at it); with `stop_at_due`,
        together, one instant at a time, stopping early at an instant where the replays of a due phase
        finish (`replay_finished` has ended it then: the full run may start a phase there, which joins
        them). Stop where the next event would pass `engine.max_sim_time_s`."""
        wall_start = time.perf_counter()
        eventlists = [episodes.sim.eventlist for episodes in self.episodes]
        until_ps = min(target_ps, self.limit_ps)
        self._due_ended.raised = False
        # In slices, as `Simulation.run`: the compiled kernel runs no bytecode, and Python runs signal
        # handlers (Ctrl-C, a sweep's wall-time budget) only between bytecodes
        if stop_at_due:
            while not run_together(eventlists, until_ps, self._due_ended, EVENTS_PER_SLICE):
                pass
        else:  # the reduced networks do not meet: each runs on its own
            for eventlist in eventlists:
                while not eventlist.run(until_ps, EVENTS_PER_SLICE) and eventlist.next_time_ps() <= until_ps:
                    pass
        if not self._due_ended.raised:
            if any(eventlist.pending() and eventlist.next_time_ps() <= target_ps for eventlist in eventlists):
                self._time_out()  # the next event is past the limit, before the target
            else:
                for eventlist in eventlists:  # idle up to the target: the clocks move on
                    eventlist.now_ps = max(eventlist.now_ps, target_ps)
        self.packet_wall_s += time.perf_counter() - wall_start

    def replay_finished(self, replayed: _ReplayedPhase, pair: int) -> None:
        """The replay of `replayed` on simulated pair `pair` has finished, at that pair's now: the replays
        held back for it there may start; once every pair's has finished, if the phase is due, it ends now."""
        now_ps = self.episodes[pair].sim.eventlist.now_ps
        replayed.finished_ps = max(replayed.finished_ps, now_ps - replayed.late_ps[pair])
        replayed.unfinished.discard(pair)
        if replayed.ended_ps >= 0:
            self._lagging[pair].remove(replayed)
            self._release(replayed, pair, now_ps - replayed.ended_ps)
        if replayed.unfinished:
            return
        self._replaying -= 1
        if not self._replaying and self._recording is not None:  # the episode is over
            record, self._recording = self._recording, None
            record.duration_ps = now_ps - record.open_ps
            record.counters = {key: value - record.counters_at_open[key] for key, value in self._totals().items()}
            self._close(record)
        if replayed.due:
            self._due.remove(replayed)
            self.eventlist.call_at(max(replayed.finished_ps, self.eventlist.now_ps), replayed.finish)
            self._due_ended.raised = True  # the full run moves on from there (a collective may follow at once)

    def _release(self, ended: _ReplayedPhase, pair: int, lag_ps: int) -> None:
        """`ended`'s replay on `pair` finished `lag_ps` after the phase ended in the full run: start the
        replays there that waited for it and nothing else, as much later than their phases as the most
        late of what they waited for."""
        waiting = []
        for deferred in self._deferred[pair]:
            if ended in deferred.blockers:
                deferred.blockers.remove(ended)
                deferred.shift_ps = max(deferred.shift_ps, lag_ps)
            if deferred.blockers:
                waiting.append(deferred)
                continue
            replayed = deferred.replayed
            replay_ps = max(deferred.replay_ps, replayed.start_ps + deferred.shift_ps)
            replayed.late_ps[pair] = replay_ps - replayed.start_ps
            self.episodes[pair].sim.eventlist.call_at(replay_ps, deferred.run.start)
        self._deferred[pair] = waiting

    def phase_due(self, replayed: _ReplayedPhase) -> None:
        """A replayed phase's fluid time and fixed part are over: it ends now if its replays finished or
        no packet was dropped since they started (phase's figure, exactly), else when they finish (past
        the time limit if the reduced run passes it)."""
        now_ps = self.eventlist.now_ps
        if replayed.outcome is not None:
            replayed.outcome.due_ps = now_ps - replayed.start_ps
        self._catch_up(now_ps)
        if not replayed.unfinished:
            replayed.finish()
        elif self._drops() == replayed.drops_at_start:
            replayed.ended_ps = now_ps  # its replays go on: the phases that start from now wait for them
            for pair in replayed.unfinished:
                self._lagging[pair].append(replayed)
            replayed.finish()
        elif self.timed_out:
            self.eventlist.call_at(self.limit_ps + 1, replayed.finish)
        else:
            replayed.due = True
            self._due.append(replayed)
            self._recheck()

    def _recheck(self) -> None:
        """While phases are due, bring the reduced networks up to just before the full run's next event
        (a phase may start then and join them), stopping where a due phase's replays finish (it ends
        there), and come back then."""
        now = self.eventlist.now_ps
        self._rechecks.discard(now)
        if not self._due or self.timed_out:
            return
        target_ps = max(now, self.eventlist.next_time_ps() - 1 if self.eventlist.pending() else self.limit_ps)
        self._catch_up(target_ps, stop_at_due=True)
        if self._due and not self.timed_out:
            # the instant reached (a due phase ended there), or just before the next event; at least 1 ps on
            again_ps = max(now + 1, self.episodes[0].sim.eventlist.now_ps)
            if again_ps not in self._rechecks:  # one chain of rechecks, whoever started it
                self._rechecks.add(again_ps)
                self.eventlist.call_at(again_ps, self._recheck)

    def _time_out(self) -> None:
        """A reduced run passes `engine.max_sim_time_s`: every due phase ends past it, where the full
        run stops too."""
        self.timed_out = True
        for replayed in self._due:
            self.eventlist.call_at(self.limit_ps + 1, replayed.finish)
        self._due.clear()

    def _drops(self) -> int:
        return sum(episodes.drops() for episodes in self.episodes)

    def _programs(self, layer: AlphaBetaSystemLayer,
                  phase: CollectivePhase) -> tuple[tuple[tuple[int, ...], ...], list[Program], str | None]:
        """A phase's groups of NPUs, its step programs (run at once on each group: one, or a double binary
        tree's two) and the pattern of its steps where every rank does alike (ring, all, xor; else None)."""
        dim = layer.dimensions[phase.dimension]
        steps = layer.phase_steps(phase, len(dim.groups[0]))
        return dim.groups, layer.plan_phase(phase, dim), None if steps is None else steps[0].pattern

    def _flow_ids(self, senders: list[int], peers: list[int]) -> list[int]:
        """The full run's flow ids of the pairs of NPUs (`senders[i]`, `peers[i]`)."""
        src, dst = np.array(senders, dtype=np.int64), np.array(peers, dtype=np.int64)
        ids: list[int] = self.flow_ids.ids(src, dst, distinct=False).tolist()  # numbered when phase routed the phase
        return ids

    def _reductions(self) -> list[Reduction]:
        """The reduced networks: the network itself on a switch or where it is no larger than `PAIRS`
        group pairs (`group_size`); else the groups whose uplinks the phases in their fluid part load most
        (most messages on one uplink, then most bytes; the lower group first on ties): on leaf_spine the
        first `LEAF_SPINE_GROUPS` leaves in one network, on fat_tree up to `PAIRS` pairs of groups (pods or
        edge switches), paired in that order."""
        if self._group_size is None or self._group_uplinks is None:
            return [Reduction(self.config, None)]
        active = [fluid.stages[fluid.stage] for fluid in self.fluid_parts]  # a stage has just started: not empty
        peak = np.sum([stage.peak_messages for stage in active], axis=0)[self._group_uplinks].max(axis=1)
        load = np.sum([stage.link_bytes for stage in active], axis=0)[self._group_uplinks].sum(axis=1)
        # whole groups only (a fat tree's last pod or edge may be partial: its NPUs are folded, never simulated)
        order = sorted(range(len(peak)), key=lambda group: (-int(peak[group]), -float(load[group]), group))
        pairs = simulated_pairs(self.config.network.npus, self._group_size)
        groups = reduced_groups(self.config)
        assert groups is not None  # as `_group_size`
        # the full run's groups each simulated group stands for, and the rails the replayed one does
        scale = self.config.network.npus / self._group_size / (2 * pairs) * replayed_rails(self.config)
        if groups.together:
            return [Reduction(self.config, tuple(sorted(order[:LEAF_SPINE_GROUPS])), scale)]
        return [Reduction(self.config, tuple(sorted(order[2 * i:2 * i + 2])), scale) for i in range(pairs)]

    def _totals(self) -> dict[str, int]:
        """The reduced simulations' packet counters, scaled (zero if no episode ran)."""
        totals = dict.fromkeys(PACKET_COUNTERS, 0)
        for episodes in self.episodes:
            for key, value in episodes.counters().items():
                totals[key] += value
        return totals

    def counters(self) -> dict[str, Any]:
        """The packet counters: the reduced simulations' and the records' of the memoised episodes; and
        their cost."""
        totals = {key: value + self._memo_counters[key] for key, value in self._totals().items()}
        return {**totals, "hybrid_packet_sims": self.packet_sims, "hybrid_packet_wall_s": self.packet_wall_s,
                "hybrid_memo_episodes": self.memo_episodes}


class HybridBackend(PhaseBackend):
    """Phases timed by `HybridPhases`: phase's fluid model, and packet-level TCP on a reduced network
    where a phase risks loss."""

    DESCRIPTION = "phase's fluid coflows, and packet-level TCP on a reduced network where a phase risks loss"
    FILLS = frozenset(SCREEN_RISK_COLUMNS + PACKET_COUNTERS)
    INCAST_RTO = False  # its risky phases get the packet engine's time, not a charged RTO
    CARRIES_ROCE = False  # its reduced networks replay TCP only
    REDUCES_NETWORKS = True
    MODELS_HOST_STACK = True  # its reduced networks' hosts are the packet engine's
    FIDELITY_RANK = 3
    # The default screen from 256 NPUs: phase exactly where nothing risks loss, the packet engine's RTO chains
    # where its replays drop packets, so the screen ranks lossy points where they belong (docs/two-fidelity.md)
    DEFAULT_SCREEN_FROM_NPUS = 256

    def fluid_phases(self) -> HybridPhases:
        """The phase timer with packet-level episodes."""
        return HybridPhases(self.config, self.sim)

    @classmethod
    def check_config(cls, config: SimConfig) -> None:
        """Refuse what the reduction does not cover yet: a topology that says why (`HYBRID_REFUSAL`); a
        network reduced in groups (`NetworkConfig.reduced_groups`) of fewer than two whole groups; reduced
        networks, or networks simulated whole, of more than `REDUCED_CONNECTIONS_MAX` connections; double
        binary trees where the reduced network is not the whole network; halving-doubling where the reduced
        groups are not a power of two NPUs (`XorFold`); `flows` workloads (TCP flows, which phase has no
        model of); Chakra traces with point-to-point sends (not phases: never replayed)."""
        net = config.network
        require(not net.HYBRID_REFUSAL, "network.topology", net.topology,
                f"{net.HYBRID_REFUSAL} on engine.backend=hybrid")
        groups = reduced_groups(config)
        if groups is not None:
            require(net.npus >= 2 * groups.hosts, "network.npus", net.npus,
                    f"at least 2 whole {groups.plural} ({2 * groups.hosts} NPUs) on engine.backend=hybrid (it reduces "
                    f"a {net.IN_WORDS} to some of its {groups.plural})")
        for split in net.split_groups():  # the reduction cannot take them: refuse rather than take another
            require(config.engine.hybrid_fat_tree_group != "edge" or split.name != "edge switch",
                    "engine.hybrid_fat_tree_group", "edge",
                    f"auto or pod on engine.backend=hybrid: this {net.IN_WORDS} network's {split.plural} hold "
                    f"{split.hosts} NICs each, which split its nodes of network.npus_per_node = {net.node_npus} NPUs")
        connections = reduced_connections(config)
        whole = "" if groups is not None else f"; a {net.IN_WORDS} is simulated whole, no smaller part of it reduces"
        require(connections <= REDUCED_CONNECTIONS_MAX, "network.npus", net.npus,
                f"a size whose reduced networks hold at most {REDUCED_CONNECTIONS_MAX:,} connections on "
                f"engine.backend=hybrid (here {connections:,}: each simulated rank to every other NPU{whole})")
        size = group_size(config)
        require(size is None or config.system.all_reduce != "double_binary_tree", "system.all_reduce",
                config.system.all_reduce, f"one of ring, halving_doubling, direct on engine.backend=hybrid where it "
                f"simulates some groups of {size} NPUs, not the whole network (a tree's parent takes two children's "
                "messages; the simulated ranks' sends, folded, bring their groups one)")
        if size is not None and size & (size - 1):  # XorFold folds whole groups
            for op in ("all_reduce", "all_gather", "reduce_scatter"):
                algorithm = getattr(config.system, op)
                others = [name for name in SYSTEM_ALGORITHMS[op] if name != "halving_doubling"]
                require(algorithm != "halving_doubling", f"system.{op}", algorithm,
                        f"one of {', '.join(others)} on engine.backend=hybrid where its reduced groups are not a "
                        f"power of two NPUs (here {size}: halving-doubling's exchanges would split a group)")
        require(config.workload.type in REDUCED_WORKLOADS, "workload.type", config.workload.type,
                f"one of {', '.join(REDUCED_WORKLOADS)} on engine.backend=hybrid (flows are TCP flows, not "
                "collective phases: engine.backend=packet runs them)")
        workload = config.workload
        if isinstance(workload, ChakraWorkload) and workload.path is not None:
            files = trace_files(workload.path)
            require(not any(node.kind == SEND for rank, file in enumerate(files)
                            for node in read_rank(file, rank, len(files)).nodes),
                    "workload.path", workload.path,
                    "a trace without point-to-point sends (COMM_SEND_NODE) on engine.backend=hybrid (it replays "
                    "collective phases only: a send would keep phase's time alone on its route, blind to the loss "
                    "its collisions cause)")

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """Phase's estimate, and the reduced networks' connections (`reduced_connections`)."""
        return super().estimate_bytes(config) + reduced_connections(config) * BYTES_PER_REDUCED_CONNECTION

    def counters(self) -> dict[str, Any]:
        """Phase's TCP-risk signals and the reduced packet simulation's counters (`HybridPhases.counters`)."""
        assert isinstance(self.fluid, HybridPhases)
        return {**super().counters(), **self.fluid.counters()}


BACKEND = HybridBackend
