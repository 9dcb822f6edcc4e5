"""The system layer: collectives split into chunks, chunks into phases (one per network dimension),
each phase an algorithm's step programs driven by message completions (as ASTRA-sim's system layer).

Each dimension runs one chunk phase at a time (ASTRA-sim's default of one active chunk per
dimension); ready chunks wait in the dimension's queue and are taken in `fifo` or `lifo` order,
so concurrent collectives compete for the network in a defined order, and chunks of one
collective pipeline across dimensions.

`astra_compat` (system.astra_compat) takes three of ASTRA-sim 1.0's system-layer choices where netsweep
deliberately differs: all-to-all over the whole network waits in the first dimension's queue, behind
the other collectives (ASTRA-sim's Sys.cc takes every phase's queue from the dimension's queues; its
one-phase `oneDirect` all-to-all takes the first dimension's), not in a queue of its own;
`double_binary_tree` is its single unpipelined tree (`plan`'s `astra_tree`); and the ring all-to-all is
its p(p-1)/2 messages of one block each, one after another (`symmetric_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from ..eventlist import EventEntry, EventList, EventSource
from ..units import ps_to_s
from .algorithms import Program, Send, Step, SymmetricStep, plan, symmetric_steps


class MessageSender(Protocol):
    """What collectives send their messages through: a backend that carries messages (packet,
    analytical, ns3)."""

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class Dimension:
    """One level of the network: disjoint groups of NPUs that talk among themselves."""

    name: str
    groups: tuple[tuple[int, ...], ...]
    node_size: int = 1  # consecutive ranks sharing one NIC-level node (staggers direct sends)

    @property
    def size(self) -> int:
        """NPUs per group."""
        return len(self.groups[0])


@dataclass
class CollectiveRecord:
    """One collective instance (a `collectives` table row)."""

    op: str
    size_bytes: int
    start_ps: int
    layer: str = ""
    iteration: int = 0
    end_ps: int = -1
    exposed_ps: int = 0

    def row(self) -> dict:
        """The `collectives` table row (DESIGN.md); times in seconds."""
        return {
            "iteration": self.iteration, "layer": self.layer, "op": self.op, "bytes": self.size_bytes,
            "start_s": ps_to_s(self.start_ps), "end_s": ps_to_s(self.end_ps) if self.end_ps >= 0 else None,
            "duration_s": ps_to_s(self.end_ps - self.start_ps) if self.end_ps >= 0 else None,
            "exposed_s": ps_to_s(self.exposed_ps),
        }


class MessageCarrier:
    """How a program run's messages travel: `carry` sends one message of the step that run rank
    `index` is issuing, with a `Receipt` for the run rank that consumes it. (A class, not a Protocol,
    so that the compiled kernel calls `carry` natively.)"""

    __slots__ = ()

    def carry(self, run: ProgramRun, index: int, send: Send) -> None:
        raise NotImplementedError


class _GroupCarrier(MessageCarrier):
    """The messages of a program run on a group of NPUs, over the system layer's sender: run rank i is
    the group's rank i, NPU `group[i]`."""

    __slots__ = ("group", "sender")

    def __init__(self, group: tuple[int, ...], sender: MessageSender) -> None:
        self.group = group
        self.sender = sender

    def carry(self, run: ProgramRun, index: int, send: Send) -> None:
        group = self.group
        peer = (index + send.peer_offset) % len(group)
        self.sender.send(group[index], group[peer], send.size_bytes, Receipt(run, peer, send.peer_step))


def receive_counts(program: Program) -> list[list[int]]:
    """How many messages each step of each rank of `program` waits for (ranks sharing a list of
    steps share its counts)."""
    counts: dict[int, list[int]] = {}
    rows: list[list[int]] = []
    for steps in program:
        row = counts.get(id(steps))
        if row is None:
            row = [step.receives for step in steps]
            counts[id(steps)] = row
        rows.append(row)
    return rows


class ProgramRun:
    """Step programs executing: run rank i follows `steps[i]`, issues each step's messages (over
    `carrier`) `delay_ps` after entering it, and enters the next once they are out and the
    `expected[i][step]` messages its step consumes are in (they may arrive first); `on_done` is called
    when every run rank has finished. The system layer runs a group's program so (ranks are the
    group's); the hybrid backend replays the simulated ranks of a phase so on a reduced network."""

    __slots__ = ("eventlist", "delay_ps", "steps", "expected", "carrier", "position", "issued", "received",
                 "ranks_left", "on_done", "issuers")

    def __init__(self, eventlist: EventList, delay_ps: int, steps: list[list[Step]], expected: list[list[int]],
                 carrier: MessageCarrier, on_done: Callable[[], None]) -> None:
        self.eventlist = eventlist
        self.delay_ps = delay_ps
        self.steps = steps
        self.expected = expected
        self.carrier = carrier
        self.position = [0] * len(steps)
        self.issued = [False] * len(steps)  # has the rank sent its current step's messages yet?
        self.received = [[0] * len(rank_steps) for rank_steps in steps]
        self.ranks_left = len(steps)
        self.on_done = on_done
        # one reusable event per rank for its steps' endpoint delay (a rank waits out one at a time)
        self.issuers = [_StepIssue(self, index) for index in range(len(steps))] if delay_ps else []

    def start(self) -> None:
        """Every run rank enters its first step now."""
        for index in range(len(self.steps)):
            self._enter(index)

    def _enter(self, index: int) -> None:
        if self.position[index] == len(self.steps[index]):
            self.ranks_left -= 1
            if self.ranks_left == 0:
                self.on_done()
            return
        self.issued[index] = False
        if self.delay_ps:
            eventlist = self.eventlist
            eventlist.schedule_entry(self.issuers[index].entry, eventlist.now_ps + self.delay_ps)
        else:
            self.issue(index)

    def issue(self, index: int) -> None:
        """Send the run rank's messages of its current step."""
        carrier = self.carrier
        for send in self.steps[index][self.position[index]].sends:
            carrier.carry(self, index, send)
        self.issued[index] = True
        self.try_advance(index)

    def try_advance(self, index: int) -> None:
        """Move on once the step's sends are out and its messages are in (they may arrive first)."""
        step_index = self.position[index]
        if self.issued[index] and step_index < len(self.steps[index]) and \
                self.received[index][step_index] >= self.expected[index][step_index]:
            self.position[index] = step_index + 1
            self._enter(index)


class _StepIssue(EventSource):
    """A rank of a program run issuing its current step, once the endpoint delay has passed (at most
    one pending per rank: its `entry` is scheduled again for each step)."""

    __slots__ = ("run", "index", "entry")

    def __init__(self, run: ProgramRun, index: int) -> None:
        self.run = run
        self.index = index
        self.entry = EventEntry(self)

    def do_next_event(self) -> None:
        self.run.issue(self.index)


class Receipt:
    """Called when a message to run rank `index` has arrived: counts it for the step that consumes it.
    (An object, not a closure: a few dozen bytes a message in flight instead of a few hundred.)"""

    __slots__ = ("run", "index", "step_index")

    def __init__(self, run: ProgramRun, index: int, step_index: int) -> None:
        self.run = run
        self.index = index
        self.step_index = step_index

    def __call__(self) -> None:
        run, index, step_index = self.run, self.index, self.step_index
        run.received[index][step_index] += 1
        if run.position[index] == step_index:
            run.try_advance(index)


@dataclass
class CollectivePhase:
    dimension: int
    op: str
    chunk_bytes: int
    astra_tree: int | None = None  # with astra_compat, the ASTRA-sim tree a double_binary_tree phase takes
    queue: int = -1  # the scheduling queue it waits in; -1 = its dimension's

    def __post_init__(self) -> None:
        if self.queue < 0:
            self.queue = self.dimension


class Chunk:
    """A piece of a collective making its way through its phases."""

    __slots__ = ("collective", "phases", "next_phase", "issued_seq")

    def __init__(self, collective: _Collective, phases: list[CollectivePhase], issued_seq: int) -> None:
        self.collective = collective
        self.phases = phases
        self.next_phase = 0
        self.issued_seq = issued_seq


class _Collective:
    __slots__ = ("record", "chunks_left", "on_done")

    def __init__(self, record: CollectiveRecord, chunks: int, on_done: Callable[[], None] | None) -> None:
        self.record = record
        self.chunks_left = chunks
        self.on_done = on_done


class SystemLayer:
    """Runs collectives over `sender` on the given network dimensions (`sender` is None for
    a subclass that times each phase itself instead of sending messages: `AlphaBetaSystemLayer`).

    `algorithms` maps each op to its algorithm name; `hierarchy` is `baseline` (the whole collective
    in every dimension in turn) or `local_bw_aware` (reduce-scatter up the dimensions, all-reduce on
    the last, all-gather back down). All-to-all over the whole network runs flat over all NPUs
    (`flat_dimension`), with a scheduling queue of its own, so it shares the network with the other collectives instead
    of waiting for a dimension they hold (the same on one-dimensional and hierarchical networks);
    with `astra_compat`, as in ASTRA-sim 1.0, it waits in the first dimension's queue, and
    `double_binary_tree` and the ring all-to-all are ASTRA-sim 1.0's (module docstring). Queues are
    indexed as dimensions.
    """

    def __init__(self, eventlist: EventList, sender: MessageSender | None, dimensions: list[Dimension],
                 flat_dimension: Dimension, algorithms: dict[str, str], splits: int, scheduling: str,
                 hierarchy: str, endpoint_delay_ps: int, astra_compat: bool = False) -> None:
        self.eventlist = eventlist
        self.sender = sender
        self.dimensions = dimensions + [flat_dimension]
        self.flat_index = len(dimensions)
        self.algorithms = algorithms
        self.splits = splits
        self.lifo = scheduling == "lifo"
        self.hierarchy = hierarchy
        self.endpoint_delay_ps = endpoint_delay_ps
        self.astra_compat = astra_compat
        # ASTRA-sim 1.0's DoubleBinaryTreeTopology hands out its RootMax and RootMin trees in turn,
        # one per chunk phase it builds (get_topology's counter): how many it has handed out
        self._astra_trees = 0
        self.records: list[CollectiveRecord] = []
        self._ready: list[list[Chunk]] = [[] for _ in self.dimensions]
        self._busy = [False] * len(self.dimensions)
        self._issued = 0
        self._group_dimensions: dict[tuple[int, ...], int] = {}  # process group's ranks -> its dimension

    def _phases(self, op: str, chunk_bytes: int, dimensions: tuple[int, ...] | None) -> list[CollectivePhase]:
        """The phases of one chunk of `op` over `dimensions` (indices into `self.dimensions`; None = every
        real dimension of the network). A single flat or process-group dimension is one phase of the
        whole collective; real dimensions follow `hierarchy`."""
        real = self.flat_index  # the network's real dimensions come before the flat one
        if dimensions is None:
            dimensions = tuple(range(real))
            if op == "all_to_all":  # over the whole network: flat, in its own queue or (astra_compat) the first's
                return [CollectivePhase(self.flat_index, op, chunk_bytes,
                                        queue=0 if self.astra_compat else self.flat_index)]
        if len(dimensions) == 1:
            return [CollectivePhase(dimensions[0], op, chunk_bytes)]
        dims = list(dimensions)
        sizes = [self.dimensions[d].size for d in dims]
        if op == "all_to_all":  # over some real dimensions: the whole exchange within each in turn
            return [CollectivePhase(d, op, chunk_bytes) for d in dims]
        if op == "all_reduce" and self.hierarchy == "local_bw_aware":
            phases, data = [], chunk_bytes
            for level in range(len(dims) - 1):  # reduce-scatter up: each level keeps 1/size of the data
                phases.append(CollectivePhase(dims[level], "reduce_scatter", data))
                data = max(1, data // sizes[level])
            phases.append(CollectivePhase(dims[-1], "all_reduce", data))
            for level in reversed(range(len(dims) - 1)):  # all-gather back down
                data *= sizes[level]
                phases.append(CollectivePhase(dims[level], "all_gather", data))
            return phases
        if op == "all_reduce":  # baseline: the full all-reduce in each dimension
            return [CollectivePhase(d, op, chunk_bytes) for d in dims]
        if op == "reduce_scatter":
            phases, data = [], chunk_bytes
            for level, d in enumerate(dims):
                phases.append(CollectivePhase(d, op, data))
                data = max(1, data // sizes[level])
            return phases
        # all_gather: the result of size chunk_bytes is gathered from the last dimension down
        phases, data = [], chunk_bytes
        for level, d in enumerate(dims):
            phases.append(CollectivePhase(d, op, data))
            data = max(1, data // sizes[level])
        return list(reversed(phases))

    @property
    def real_dimensions(self) -> int:
        """How many dimensions the network has (1, or 2 for `hierarchical`)."""
        return self.flat_index

    def group_dimension(self, ranks: tuple[int, ...]) -> int:
        """The index of a dimension holding just `ranks` (a process group), added on first use with a
        scheduling queue of its own: collectives of disjoint groups run side by side."""
        index = self._group_dimensions.get(ranks)
        if index is None:
            index = len(self.dimensions)
            self.dimensions.append(Dimension(f"group{index}", (ranks,)))
            self._ready.append([])
            self._busy.append(False)
            self._group_dimensions[ranks] = index
        return index

    def point_to_point(self, src: int, dst: int, size_bytes: int, on_delivered: Callable[[], None]) -> None:
        """One message from NPU `src` to NPU `dst` outside any collective (a trace's send/receive)."""
        sender = self.sender
        assert sender is not None  # AlphaBetaSystemLayer times it instead
        sender.send(src, dst, size_bytes, on_delivered)

    def collective(self, op: str, size_bytes: int, on_done: Callable[[], None] | None = None,
                   layer: str = "", iteration: int = 0,
                   dimensions: tuple[int, ...] | None = None) -> CollectiveRecord:
        """Start collective `op` of `size_bytes` per NPU over `dimensions` (indices into `dimensions`,
        never empty; None = the whole network); `on_done` runs when every chunk finished."""
        record = CollectiveRecord(op, size_bytes, self.eventlist.now_ps, layer, iteration)
        self.records.append(record)
        chunks = max(1, min(self.splits, size_bytes))
        collective = _Collective(record, chunks, on_done)
        chunk_bytes = -(-size_bytes // chunks)
        for _ in range(chunks):
            self._issued += 1
            phases = self._phases(op, chunk_bytes, dimensions)
            if self.astra_compat:
                for phase in phases:
                    if self.algorithms.get(phase.op) == "double_binary_tree":
                        phase.astra_tree = self._astra_trees % 2
                        self._astra_trees += 1
            self._enqueue(Chunk(collective, phases, self._issued))
        return record

    def plan_phase(self, phase: CollectivePhase, dim: Dimension) -> list[Program]:
        """The step programs of one phase on one group of `dim` (`algorithms.plan`)."""
        return plan(phase.op, self.algorithms[phase.op], dim.size, phase.chunk_bytes, dim.node_size, phase.astra_tree,
                    self.astra_compat)

    def phase_steps(self, phase: CollectivePhase, group_size: int) -> list[SymmetricStep] | None:
        """The symmetric steps of one phase on a group of `group_size` NPUs (`algorithms.symmetric_steps`);
        None where ranks play different roles (double binary tree)."""
        return symmetric_steps(phase.op, self.algorithms[phase.op], group_size, phase.chunk_bytes, self.astra_compat)

    def _enqueue(self, chunk: Chunk) -> None:
        queue = chunk.phases[chunk.next_phase].queue
        self._ready[queue].append(chunk)
        self._dispatch(queue)

    def _dispatch(self, queue: int) -> None:
        if self._busy[queue] or not self._ready[queue]:
            return
        chunk = self._ready[queue].pop() if self.lifo else self._ready[queue].pop(0)
        self._busy[queue] = True
        self._run_phase(chunk, queue)

    def _run_phase(self, chunk: Chunk, queue: int) -> None:
        """Run the chunk's current phase on every group of its dimension, message by message over
        the sender; `_phase_done` (which frees `queue`) when all groups have finished."""
        phase = chunk.phases[chunk.next_phase]
        dim = self.dimensions[phase.dimension]
        programs = self.plan_phase(phase, dim)
        runs_left = len(programs) * len(dim.groups)
        if runs_left == 0:
            self._phase_done(chunk, queue)
            return
        state = {"left": runs_left}

        def run_done() -> None:
            state["left"] -= 1
            if state["left"] == 0:
                self._phase_done(chunk, queue)

        sender = self.sender
        assert sender is not None  # a system layer without one times its phases itself (alpha_beta)
        counts = [receive_counts(program) for program in programs]
        for group in dim.groups:
            carrier = _GroupCarrier(group, sender)
            for program, expected in zip(programs, counts):
                ProgramRun(self.eventlist, self.endpoint_delay_ps, program, expected, carrier, run_done).start()

    def _phase_done(self, chunk: Chunk, queue: int) -> None:
        self._busy[queue] = False
        chunk.next_phase += 1
        if chunk.next_phase < len(chunk.phases):
            self._enqueue(chunk)
        else:
            collective = chunk.collective
            collective.chunks_left -= 1
            if collective.chunks_left == 0:
                collective.record.end_ps = self.eventlist.now_ps
                if collective.on_done is not None:
                    collective.on_done()
        self._dispatch(queue)
