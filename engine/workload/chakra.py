"""Chakra execution traces (MLCommons; the input of ASTRA-sim 2.0): one `<prefix>.<rank>.et` file per
NPU, read with netsweep's own description of Chakra's protobuf schema (`chakra_schema`) and replayed
node by node on the system layer, every NPU following its own file.

A file is a sequence of length-delimited protobuf messages (each preceded by its length as a varint):
a `GlobalMetadata`, then `Node`s. What a node does:
- COMP_NODE: computes for `duration_micros` trace units (`workload.duration_unit`: the schema's
  microseconds, or nanoseconds, or cycles of `workload.cycle_ns` for traces converted from ASTRA-sim
  1.0 text, whose converter stores cycles there); an NPU runs one compute node at a time, in the
  order they became ready.
- COMM_COLL_NODE: a collective (`comm_type` ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER or ALL_TO_ALL,
  `comm_size` bytes per NPU as ASTRA-sim 2 reads them: ALL_GATHER's is each NPU's input, converted
  to the system layer's gathered result by `layers.system_bytes`) over its process group
  (`pg_name`: the NPUs whose traces issue collectives on that name; none = every NPU) and, for the
  whole network, the dimensions `involved_dim` names (none named: no collective, as ASTRA-sim). The
  k-th collective of a group in each member's file is one collective: it starts once every member
  has reached it (a rendezvous) and ends for all of them together. A collective of 0 bytes does
  nothing (ASTRA-sim 1.0's text converter writes one for every pass without communication).
- COMM_SEND_NODE / COMM_RECV_NODE: one message to `comm_dst` / from `comm_src`, matched by `comm_tag`
  in order; a send ends when its message has arrived, a receive when it has arrived and the receive
  was reached.
- METADATA_NODE, INVALID_NODE: nothing (ends at once, as in ASTRA-sim 2.0).
A node starts once all its `data_deps` and `ctrl_deps` have ended. An NPU's collectives may overlap
one another (ASTRA-sim 1.0's rule; ASTRA-sim 2.0 holds one in flight per NPU).

An iteration replays every file from its start; it ends when every NPU has finished its file, and
the next starts then. Errors in a trace are `ConfigError`s naming the file and the node.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..config import ConfigError
from ..eventlist import EventList
from ..system.collectives import CollectiveRecord, SystemLayer
from ..units import ns_to_ps, ps_to_s
from .layers import BUNDLED_DIR, BUNDLED_PREFIX, system_bytes
from .training import union_ps

# Chakra's CollectiveCommType values the system layer runs (the others: REDUCE, GATHER, SCATTER,
# BROADCAST, REDUCE_SCATTER_BLOCK, BARRIER are refused by name)
COLLECTIVES = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather", "REDUCE_SCATTER": "reduce_scatter",
               "ALL_TO_ALL": "all_to_all"}
COMPUTE, COLLECTIVE, SEND, RECV, NOTHING = "compute", "collective", "send", "recv", "nothing"
WORLD = ""  # the process group of a collective without `pg_name`: every NPU
_RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")


@dataclass(frozen=True)
class TraceNode:
    """One node of a rank's trace, validated: `parents` are positions in the rank's node list."""

    node_id: int
    name: str
    kind: str  # COMPUTE, COLLECTIVE, SEND, RECV or NOTHING
    parents: tuple[int, ...]
    duration: int = 0  # COMPUTE: trace units
    op: str = ""  # COLLECTIVE
    size_bytes: int = 0  # SEND, RECV; COLLECTIVE: in the system layer's convention once `read_trace` has it
    group: str = WORLD  # COLLECTIVE: its pg_name
    dimensions: tuple[bool, ...] | None = None  # COLLECTIVE: involved_dim, if the node has it
    peer: int = -1  # SEND: the receiver, RECV: the sender
    tag: int = 0  # SEND, RECV


@dataclass(frozen=True)
class RankTrace:
    """The nodes of one NPU's file, in file order."""

    rank: int
    file: str
    nodes: tuple[TraceNode, ...]


@dataclass(frozen=True)
class Trace:
    """Every NPU's trace and the process groups their collectives use (name -> member NPUs)."""

    ranks: tuple[RankTrace, ...]
    groups: dict[str, tuple[int, ...]]


def trace_files(path: str) -> list[Path]:
    """The rank files `workload.path` names, in rank order: `<prefix>.0.et`, `<prefix>.1.et`, ... for a
    prefix (`bundled:<folder>/<prefix>` for one shipped with the engine), or the one set of such files
    in a folder. Raises ConfigError if there are none, or a rank's file is missing."""
    if path.startswith(BUNDLED_PREFIX):
        from importlib.resources import files
        location = Path(str(files("engine") / BUNDLED_DIR / path.removeprefix(BUNDLED_PREFIX)))
    else:
        location = Path(path)
    folder, prefix = (location, None) if location.is_dir() else (location.parent, location.name)
    by_prefix: dict[str, dict[int, Path]] = {}
    if folder.is_dir():
        for item in folder.iterdir():
            match = _RANK_FILE.match(item.name)
            if match and item.is_file() and (prefix is None or match["prefix"] == prefix):
                by_prefix.setdefault(match["prefix"], {})[int(match["rank"])] = item
    if not by_prefix:
        raise ConfigError("workload.path", path, "a Chakra trace: a prefix P with files P.0.et, P.1.et, ... (one "
                          "per NPU), or a folder holding one such set; found no such file")
    if len(by_prefix) > 1:
        raise ConfigError("workload.path", path,
                          f"one trace, but the folder holds several: {', '.join(sorted(by_prefix))}"
                          " (name the prefix)")
    (name, ranks), = by_prefix.items()
    for rank in range(max(ranks) + 1):
        if rank not in ranks:
            raise ConfigError("workload.path", path, f"a file per rank 0..{max(ranks)}: {folder / f'{name}.{rank}.et'} "
                              "is missing")
    return [ranks[rank] for rank in range(len(ranks))]


def _messages(data: bytes, file: Path) -> list[tuple[int, bytes]]:
    """Split a file into its length-delimited messages: (byte offset, message bytes) each."""
    messages, offset = [], 0
    while offset < len(data):
        start, length, shift = offset, 0, 0
        while True:  # the length, a base-128 varint
            if offset >= len(data) or shift > 63:
                raise ConfigError("workload.path", str(file), f"a Chakra trace, but the message length at byte {start} "
                                  "is cut off or not a varint (truncated or corrupt file)")
            byte = data[offset]
            offset += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        if offset + length > len(data):
            raise ConfigError("workload.path", str(file), f"a Chakra trace, but the message at byte {start} needs "
                              f"{length} bytes and {len(data) - offset} are left (truncated file)")
        messages.append((start, data[offset:offset + length]))
        offset += length
    return messages


def _attributes(node: Any) -> dict[str, Any]:
    """A node's attributes by name, each its set value (a list for the *_list kinds)."""
    values: dict[str, Any] = {}
    for attr in node.attr:
        kind = attr.WhichOneof("value")
        if kind is not None:
            value = getattr(attr, kind)
            values[attr.name] = list(value.values) if kind.endswith("_list") else value
    return values


def read_rank(file: Path, rank: int, npus: int) -> RankTrace:
    """Read and check one NPU's file. Raises ConfigError naming the file and the node."""
    # imported here, not with the engine: building the schema costs about 12 ms, which runs of
    # other workloads need not pay
    from google.protobuf.message import DecodeError

    from .chakra_schema import COLLECTIVE_COMM_TYPES, NODE_TYPES, GlobalMetadata, Node

    try:
        data = file.read_bytes()
    except OSError as error:
        raise ConfigError("workload.path", str(file), f"a readable Chakra trace file ({error.strerror})") from None
    messages = _messages(data, file)
    if not messages:
        raise ConfigError("workload.path", str(file), "a Chakra trace, but the file is empty")
    try:
        GlobalMetadata.FromString(messages[0][1])
    except DecodeError:
        raise ConfigError("workload.path", str(file), "a Chakra trace starting with its global metadata; the first "
                          "message does not decode (not a Chakra file, or corrupt)") from None
    raw = []
    for offset, message in messages[1:]:
        try:
            raw.append(Node.FromString(message))
        except DecodeError:
            after = f"after node {raw[-1].id} ({raw[-1].name})" if raw else "the first node"
            raise ConfigError("workload.path", str(file), f"Chakra nodes; the message at byte {offset} ({after}) does "
                              "not decode (corrupt file)") from None
    if not raw:
        raise ConfigError("workload.path", str(file), "a Chakra trace with at least one node; this file has only its "
                          "global metadata")
    position: dict[int, int] = {}
    for index, node in enumerate(raw):
        if node.id in position:
            raise ConfigError("workload.path", str(file),
                              f"distinct node ids; node {node.id} ({node.name}) appears twice")
        position[node.id] = index
    nodes = []
    for node in raw:
        where = f"node {node.id} ({node.name})"

        def refuse(what: str, where: str = where) -> ConfigError:
            return ConfigError("workload.path", str(file), f"{where}: {what}")

        parents = []
        for parent in list(node.data_deps) + list(node.ctrl_deps):
            if parent not in position:
                raise refuse(f"its dependency {parent} is not a node of this file")
            parents.append(position[parent])
        attributes = _attributes(node)
        type_name = NODE_TYPES.get(node.type, str(node.type))
        if type_name == "COMP_NODE":
            nodes.append(TraceNode(node.id, node.name, COMPUTE, tuple(parents), duration=node.duration_micros))
        elif type_name == "COMM_COLL_NODE":
            code = attributes.get("comm_type")
            comm_type = COLLECTIVE_COMM_TYPES.get(code) if isinstance(code, int) else None
            if comm_type not in COLLECTIVES:
                raise refuse(f"collective comm_type {comm_type or code!r} is not one of {', '.join(COLLECTIVES)}")
            assert comm_type is not None
            nodes.append(TraceNode(node.id, node.name, COLLECTIVE, tuple(parents),
                                   op=COLLECTIVES[comm_type],
                                   size_bytes=_size(attributes, refuse), group=str(attributes.get("pg_name", WORLD)),
                                   dimensions=_dimensions(attributes, refuse)))
        elif type_name in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
            own, other = ("comm_src", "comm_dst") if type_name == "COMM_SEND_NODE" else ("comm_dst", "comm_src")
            if attributes.get(own, rank) != rank:
                raise refuse(f"{own} = {attributes[own]}, but this is the file of rank {rank}")
            peer = attributes.get(other)
            if not isinstance(peer, int) or not 0 <= peer < npus or peer == rank:
                raise refuse(f"{other} must be another NPU in 0..{npus - 1}, got {peer!r}")
            kind = SEND if type_name == "COMM_SEND_NODE" else RECV
            nodes.append(TraceNode(node.id, node.name, kind, tuple(parents), size_bytes=_size(attributes, refuse),
                                   peer=peer, tag=int(attributes.get("comm_tag", 0))))
        elif type_name in ("METADATA_NODE", "INVALID_NODE"):
            nodes.append(TraceNode(node.id, node.name, NOTHING, tuple(parents)))
        else:
            raise refuse(f"node type {type_name} is not one netsweep runs: COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, "
                         "COMM_RECV_NODE (METADATA_NODE and INVALID_NODE do nothing)")
    _refuse_cycles(file, nodes)
    return RankTrace(rank, str(file), tuple(nodes))


def _size(attributes: dict[str, Any], refuse: Callable[[str], ConfigError]) -> int:
    size = attributes.get("comm_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise refuse(f"comm_size must be a byte count >= 0, got {size!r}")
    return size


def _dimensions(attributes: dict[str, Any], refuse: Callable[[str], ConfigError]) -> tuple[bool, ...] | None:
    dims = attributes.get("involved_dim")
    if dims is None:
        return None
    if not isinstance(dims, list) or not all(isinstance(flag, bool) for flag in dims):
        raise refuse(f"involved_dim must be a bool_list, got {dims!r}")
    return tuple(dims)


def _refuse_cycles(file: Path, nodes: list[TraceNode]) -> None:
    """Kahn's algorithm: a node left unordered lies on (or behind) a dependency cycle."""
    waiting = [len(set(node.parents)) for node in nodes]
    children: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        for parent in set(node.parents):
            children[parent].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    ordered = 0
    while ready:
        index = ready.pop()
        ordered += 1
        for child in children[index]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if ordered < len(nodes):
        # walk parents among the unordered nodes until one repeats: it is on a cycle
        index, seen = next(i for i, count in enumerate(waiting) if count), set()
        while index not in seen:
            seen.add(index)
            index = next(parent for parent in nodes[index].parents if waiting[parent])
        node = nodes[index]
        raise ConfigError("workload.path", str(file), f"node {node.node_id} ({node.name}): a dependency cycle runs "
                          "through it (a node waits, through its dependencies, for itself)")


def involved_dimensions(flags: tuple[bool, ...], real: int) -> tuple[int, ...]:
    """The dimensions, of the network's `real` ones, that a node's `involved_dim` names."""
    return tuple(d for d in range(real) if d < len(flags) and flags[d])


def _group_npus(node: TraceNode, members: tuple[int, ...], dimension_sizes: tuple[int, ...]) -> int:
    """NPUs in one group of a collective node: its process group's members, or for a collective of
    every NPU the product of the sizes of the dimensions its `involved_dim` names (all if it has none)."""
    if len(members) < math.prod(dimension_sizes) or node.dimensions is None:
        return len(members)
    return math.prod(dimension_sizes[d] for d in involved_dimensions(node.dimensions, len(dimension_sizes)))


def read_trace(path: str, npus: int, dimension_sizes: tuple[int, ...]) -> Trace:
    """Read and check every rank's file of the trace `path` names, for a network of `npus` NPUs whose
    dimensions have groups of `dimension_sizes` NPUs: one file per NPU, and collectives and messages
    that match up between them. Collective sizes are converted from ASTRA-sim's convention to the
    system layer's (`layers.system_bytes`)."""
    files = trace_files(path)
    if len(files) != npus:
        raise ConfigError("network.npus", npus, f"the number of rank files of workload.path={path!r}: "
                          f"{len(files)} ({files[0].name} .. {files[-1].name})")
    ranks = tuple(read_rank(file, rank, npus) for rank, file in enumerate(files))
    members: dict[str, set[int]] = {WORLD: set(range(npus))}
    for trace in ranks:
        for node in trace.nodes:
            if node.kind == COLLECTIVE:
                members.setdefault(node.group, set()).add(trace.rank)
    groups = {name: tuple(sorted(ranks_in)) for name, ranks_in in members.items()}
    ranks = tuple(RankTrace(trace.rank, trace.file, tuple(
        replace(node, size_bytes=system_bytes(node.op, node.size_bytes,
                                              _group_npus(node, groups[node.group], dimension_sizes)))
        if node.kind == COLLECTIVE else node for node in trace.nodes)) for trace in ranks)
    _check_matching(ranks, groups)
    return Trace(ranks, groups)


def _check_matching(ranks: tuple[RankTrace, ...], groups: dict[str, tuple[int, ...]]) -> None:
    """Every member of a group issues the same collectives on it in the same order (else the
    rendezvous would wait for ever or pair unlike collectives), and every message sent is received."""
    for name, members in groups.items():
        sequences = {rank: [node for node in ranks[rank].nodes if node.kind == COLLECTIVE and node.group == name]
                     for rank in members}
        first = members[0]
        for rank in members[1:]:
            mine, theirs = sequences[rank], sequences[first]
            for k, (node, reference) in enumerate(zip(mine, theirs)):
                if (node.op, node.size_bytes, node.dimensions) != (reference.op, reference.size_bytes,
                                                                   reference.dimensions):
                    raise ConfigError("workload.path", ranks[rank].file,
                                      f"node {node.node_id} ({node.name}): collective {k} of process group "
                                      f"{name or 'of all NPUs'} is {node.op} of {node.size_bytes} bytes, but rank "
                                      f"{first}'s (node {reference.node_id} of {ranks[first].file}) is "
                                      f"{reference.op} of {reference.size_bytes} bytes")
            if len(mine) != len(theirs):
                raise ConfigError("workload.path", ranks[rank].file,
                                  f"{len(theirs)} collectives on process group {name or 'of all NPUs'} like rank "
                                  f"{first}'s file, found {len(mine)} (a collective every member must join)")
    sends: dict[tuple[int, int, int], int] = {}
    for trace in ranks:
        for node in trace.nodes:
            if node.kind == SEND:
                key = (trace.rank, node.peer, node.tag)
                sends[key] = sends.get(key, 0) + 1
            elif node.kind == RECV:
                key = (node.peer, trace.rank, node.tag)
                sends[key] = sends.get(key, 0) - 1
    for (src, dst, tag), surplus in sorted(sends.items()):
        if surplus:
            file = ranks[src if surplus > 0 else dst].file
            raise ConfigError("workload.path", file, f"as many receives as sends from rank {src} to rank {dst} with "
                              f"tag {tag}; {abs(surplus)} more {'sends' if surplus > 0 else 'receives'}")


def duration_ps_per_unit(duration_unit: str, cycle_ns: float) -> int:
    """Picoseconds in one unit of a compute node's `duration_micros`."""
    if duration_unit == "us":
        return 1_000_000  # 1 us = 10^6 ps
    if duration_unit == "ns":
        return 1_000  # 1 ns = 10^3 ps
    return ns_to_ps(cycle_ns)  # cycles, as ASTRA-sim 1.0 text workloads count compute


class _Instance:
    """One collective of a process group, waiting for its members to reach it, then in flight."""

    __slots__ = ("joined", "waiters", "record")

    def __init__(self) -> None:
        self.joined = 0
        self.waiters: list[tuple[int, int]] = []  # (rank, node position) to complete when it ends
        self.record: CollectiveRecord | None = None


class _Rank:
    """One NPU's progress through its trace in the current iteration."""

    __slots__ = ("trace", "children", "waiting", "left", "compute_queue", "computing", "idle_since_ps",
                 "compute_ps", "collectives_reached", "mailbox", "posted", "finished_ps")

    def __init__(self, trace: RankTrace) -> None:
        self.trace = trace
        self.children: list[list[int]] = [[] for _ in trace.nodes]
        for index, node in enumerate(trace.nodes):
            for parent in set(node.parents):
                self.children[parent].append(index)
        self.reset(0)

    def reset(self, now_ps: int) -> None:
        self.waiting = [len(set(node.parents)) for node in self.trace.nodes]
        self.left = len(self.trace.nodes)
        self.compute_queue: list[int] = []
        self.computing = False
        self.idle_since_ps = now_ps
        self.compute_ps = 0
        self.collectives_reached: dict[str, int] = {}
        self.mailbox: dict[tuple[int, int], int] = {}  # (sender, tag) -> messages arrived, not yet received
        self.posted: dict[tuple[int, int], list[int]] = {}  # (sender, tag) -> receive nodes waiting
        self.finished_ps = -1


class TraceReplay:
    """Runs `iterations` of a Chakra trace on a `SystemLayer`: each NPU issues its own nodes as their
    dependencies end (the training loop's interface: `start`, `finished`, `summary`, `layer_rows`)."""

    def __init__(self, eventlist: EventList, system: SystemLayer, trace: Trace, unit_ps: int,
                 iterations: int) -> None:
        self.eventlist = eventlist
        self.system = system
        self.trace = trace
        self.unit_ps = unit_ps
        self.iterations = iterations
        self.ranks = [_Rank(rank_trace) for rank_trace in trace.ranks]
        npus = len(trace.ranks)
        # how each group's collectives run: over the network's dimensions, or a group dimension of its own
        self._group_dimension = {name: None if len(members) == npus else system.group_dimension(members)
                                 for name, members in trace.groups.items()}
        self._instances: dict[tuple[str, int], _Instance] = {}
        self._members: dict[int, int] = {}  # id(record) -> NPUs whose mean wait is its exposed_ps
        self.iteration_starts_ps: list[int] = []
        self.iteration_ends_ps: list[int] = []
        self.iteration_compute_ps: list[int] = []  # summed over NPUs
        self._finished_ranks = 0

    @property
    def finished(self) -> bool:
        """True once every iteration has ended."""
        return len(self.iteration_ends_ps) == self.iterations

    def start(self) -> None:
        """Begin the first iteration at the current time."""
        self._start_iteration()

    def _start_iteration(self) -> None:
        now = self.eventlist.now_ps
        self.iteration_starts_ps.append(now)
        self._instances.clear()
        self._finished_ranks = 0
        for rank in self.ranks:
            rank.reset(now)
        for rank_index, rank in enumerate(self.ranks):
            for position, count in enumerate(rank.waiting):
                if count == 0:
                    self._ready(rank_index, position, None)

    # -- nodes -----------------------------------------------------------------------------------

    def _ready(self, rank_index: int, position: int, record: CollectiveRecord | None) -> None:
        """The node's dependencies have ended (the last one a collective of `record`, if any)."""
        rank = self.ranks[rank_index]
        node = rank.trace.nodes[position]
        if node.kind == COMPUTE:
            rank.compute_queue.append(position)
            if not rank.computing:
                self._charge_idle(rank, record)
                self._next_compute(rank_index)
        elif node.kind == COLLECTIVE:
            self._reach_collective(rank_index, position, node)
        elif node.kind == SEND:
            self._send(rank_index, position, node)
        elif node.kind == RECV:
            key = (node.peer, node.tag)
            if rank.mailbox.get(key, 0):
                rank.mailbox[key] -= 1
                self._done(rank_index, position, None)
            else:
                rank.posted.setdefault(key, []).append(position)
        else:
            self._done(rank_index, position, None)

    def _charge_idle(self, rank: _Rank, record: CollectiveRecord | None) -> None:
        """The NPU's compute unit was idle until now: time its computation waited, charged to the
        collective whose end let it go on (the `collectives` table's `exposed_s`: the mean wait of its
        members)."""
        waited = self.eventlist.now_ps - rank.idle_since_ps
        if record is not None and waited > 0:
            record.exposed_ps += round(waited / self._members[id(record)])

    def _next_compute(self, rank_index: int) -> None:
        rank = self.ranks[rank_index]
        if not rank.compute_queue:
            rank.computing = False
            rank.idle_since_ps = self.eventlist.now_ps
            return
        position = rank.compute_queue.pop(0)
        duration_ps = rank.trace.nodes[position].duration * self.unit_ps
        rank.computing = True
        rank.compute_ps += duration_ps

        def end() -> None:
            self._done(rank_index, position, None)
            self._next_compute(rank_index)

        if duration_ps:
            self.eventlist.call_at(self.eventlist.now_ps + duration_ps, end)
        else:
            end()

    def _reach_collective(self, rank_index: int, position: int, node: TraceNode) -> None:
        rank = self.ranks[rank_index]
        k = rank.collectives_reached.get(node.group, 0)
        rank.collectives_reached[node.group] = k + 1
        dimensions = self._dimensions(node)
        if node.size_bytes == 0 or dimensions == ():  # nothing to communicate
            self._done(rank_index, position, None)
            return
        instance = self._instances.setdefault((node.group, k), _Instance())
        instance.joined += 1
        instance.waiters.append((rank_index, position))
        members = self.trace.groups[node.group]
        if instance.joined < len(members):
            return

        def end() -> None:
            for waiter_rank, waiter_position in instance.waiters:
                self._done(waiter_rank, waiter_position, instance.record)

        instance.record = self.system.collective(node.op, node.size_bytes, end, layer=node.name,
                                                 iteration=len(self.iteration_starts_ps) - 1, dimensions=dimensions)
        self._members[id(instance.record)] = len(members)

    def _dimensions(self, node: TraceNode) -> tuple[int, ...] | None:
        """Where a collective runs: its group's own dimension, or the network's dimensions that
        `involved_dim` names (None = all of them; () = none, so no collective)."""
        group_dimension = self._group_dimension[node.group]
        if group_dimension is not None:
            return (group_dimension,)
        if node.dimensions is None:
            return None
        real = self.system.real_dimensions
        involved = involved_dimensions(node.dimensions, real)
        return None if len(involved) == real else involved

    def _send(self, rank_index: int, position: int, node: TraceNode) -> None:
        def delivered() -> None:
            self._done(rank_index, position, None)
            receiver = self.ranks[node.peer]
            key = (rank_index, node.tag)
            posted = receiver.posted.get(key)
            if posted:
                self._done(node.peer, posted.pop(0), None)
            else:
                receiver.mailbox[key] = receiver.mailbox.get(key, 0) + 1

        if node.size_bytes:
            self.system.point_to_point(rank_index, node.peer, node.size_bytes, delivered)
        else:
            delivered()

    def _done(self, rank_index: int, position: int, record: CollectiveRecord | None) -> None:
        rank = self.ranks[rank_index]
        rank.left -= 1
        for child in rank.children[position]:
            rank.waiting[child] -= 1
            if rank.waiting[child] == 0:
                self._ready(rank_index, child, record)
        if rank.left == 0:
            if not rank.computing:
                self._charge_idle(rank, record)  # the file ended waiting for this collective
            self._rank_done(rank_index)

    def _rank_done(self, rank_index: int) -> None:
        self.ranks[rank_index].finished_ps = self.eventlist.now_ps
        self._finished_ranks += 1
        if self._finished_ranks == len(self.ranks):
            self.iteration_ends_ps.append(self.eventlist.now_ps)
            self.iteration_compute_ps.append(sum(rank.compute_ps for rank in self.ranks))
            if len(self.iteration_ends_ps) < self.iterations:
                self._start_iteration()
            else:
                self.eventlist.stop()

    # -- results ---------------------------------------------------------------------------------

    def layer_rows(self) -> list[dict]:
        """A trace has no layers or passes: no `layers` rows."""
        return []

    def summary(self) -> dict:
        """Per-iteration means: iteration time (until every NPU finished its file), compute (per NPU,
        the mean over NPUs), exposed communication (the rest of the iteration) and the time
        collectives were in flight, as the training loop reports them."""
        done = len(self.iteration_ends_ps)
        n = done or 1
        npus = len(self.ranks)
        iteration_ps = sum(end - start for start, end in zip(self.iteration_starts_ps, self.iteration_ends_ps))
        compute_ps = sum(self.iteration_compute_ps) / npus
        finished = [r for r in self.system.records if r.end_ps >= 0]
        return {
            "iterations_done": done,
            "iteration_time_s": ps_to_s(iteration_ps) / n if done else None,
            "compute_s": ps_to_s(round(compute_ps)) / n,
            "comm_s": ps_to_s(union_ps(finished)) / n,
            "exposed_comm_s": ps_to_s(round(iteration_ps - compute_ps)) / n,
            "all_to_all_s": ps_to_s(union_ps([r for r in finished if r.op == "all_to_all"])) / n,
            "all_reduce_s": ps_to_s(union_ps([r for r in finished if r.op == "all_reduce"])) / n,
        }


def trace_collectives(trace: Trace) -> list[tuple[str, int, int]]:
    """(op, bytes per NPU, NPUs) of each collective one iteration runs, and (`send`, bytes, 1) of each
    message: what the memory estimate counts."""
    work = []
    for name, members in trace.groups.items():
        first = trace.ranks[members[0]]
        work += [(node.op, node.size_bytes, len(members)) for node in first.nodes
                 if node.kind == COLLECTIVE and node.group == name and node.size_bytes]
    work += [(SEND, node.size_bytes, 1) for rank in trace.ranks for node in rank.nodes if node.kind == SEND]
    return work
