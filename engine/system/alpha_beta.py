"""The alpha_beta backend: each phase of a collective timed in closed form, with no messages and no
contention; the lower bound of the analytical backend and a screen for 10,000-NPU designs.

Cost of a message (what the analytical backend charges a message alone on its path, and ASTRA-sim's
congestion-unaware analytical network in spirit: hops, latency and bandwidth): n payload bytes on a
route take the propagation delay of every hop, the store-and-forward serialisation of one packet
(min(MSS, n) + 40 bytes) at every hop after the first, and the serialisation of their wire bytes
(n + 40 per MSS segment) at the route's bottleneck rate.

What is shared is an NPU's own traffic on its own links: the messages a rank sends in one step
leave by the same link and, being of equal size, finish serialising together once all of them
have (the rank's injection bandwidth: the n/B term of a direct all-to-all); the messages between
one pair of NPUs go one after another (one stream, as over TCP). Nothing is shared between NPUs
or collectives: they never slow each other down in the fabric. That contention is what the backend
leaves out, and why it never exceeds the analytical backend.

Routes are costed per class (`Topology.route_class`), never per pair of NPUs, and a phase is timed
from its algorithm's symmetric description (`symmetric_steps`), so the work grows with the number
of steps and NPUs, not with the p x (p - 1) messages of a direct all-to-all:
- ring: ranks wait only for their predecessor, so a phase lasts as long as the slowest chain of
  messages around the ring (not steps x the slowest message): the longest path that crosses one
  ring link per step, found with window sums over the ring's route classes; or, if longer, as
  long as the slowest ring link takes to carry its one message per step;
- halving_doubling and direct: the first step lasts as long as its slowest rank; each later step
  starts from the rank that finished last, so it lasts at least the quickest rank's step (exact when
  every rank sees the same routes, as on one switch; a lower bound otherwise);
- double_binary_tree (ranks play different roles): the step program of every rank evaluated as a
  dependency graph, message by message (O(p x blocks) messages); or, if longer, the time the
  busiest link of an NPU takes to carry what both trees send through it.
A phase on several groups lasts as long as its slowest group. Durations are cached per dimension,
op and chunk size, so a training loop pays for each distinct collective once.

With `astra_network` (system.astra_compat on this backend) every message is costed as ASTRA-sim 1.0's
analytical network costs it (astra-network-analytical, src/api/AnalyticalNetwork.cc,
`AnalyticalNetwork::sim_send`, asks the topology for one message's latency and nothing else;
src/topology/HierarchicalTopology.cc, `HierarchicalTopology::send`: hops x link latency + payload /
bandwidth, 2 hops through a switch, the shorter way round a ring): alone, whole and cut-through. The
messages of one step do not share their NPU's link, so a direct all-to-all lasts one message; a
message pays the propagation of every link of its route and its payload at the route's bottleneck
rate, with no TCP/IP header and no store-and-forward; and the bounds that stand for a link carrying
several messages in turn (the ring's busiest link, the tree's busiest NPU link) are dropped. (ASTRA-sim
truncates each message's latency to whole ns, and its memory bus adds one endpoint delay a phase:
under 1 ns a message and 10 ns a phase at the endpoint delay of 10 ns, left out.)
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from ..eventlist import EventList
from ..links import TCP_IP_HEADER_BYTES, Link, unloaded_latency_ps, wire_bytes
from ..topology import Topology
from ..units import serialisation_ps
from .algorithms import RING, XOR, Program, SymmetricStep
from .collectives import Chunk, CollectivePhase, Dimension, SystemLayer

ClassCounts = tuple[tuple[int, int], ...]  # sorted (route class, messages) of one rank's step
PhaseKey = tuple[int, str, int, int | None]  # dimension, op, chunk bytes, ASTRA-sim tree (astra_compat)
# Decides when a phase ends, given the layer, the chunk, its queue, the phase, its key and alpha_beta's
# duration of it (the phase backend's `FluidPhases.start`); it must call `phase_ender(...)()` then.
PhaseTimer = Callable[["AlphaBetaSystemLayer", Chunk, int, CollectivePhase, PhaseKey, int], None]


class RouteCosts:
    """Message times per route class of one topology.

    Each class is costed on one representative route from host 0 (which reaches every class the
    topology has, hosts being placed in order) and its reverse into host 0, so two classes leave
    (enter) a host by the same link exactly when their representatives start (end) with the same
    link object.
    """

    def __init__(self, topology: Topology, mss_bytes: int, header_bytes: int = TCP_IP_HEADER_BYTES,
                 astra_network: bool = False) -> None:
        self.topology = topology
        # astra_network: ASTRA-sim 1.0's analytical network (module docstring): each message alone, as
        # if its NPU sent nothing else, whole (no TCP/IP header) and cut-through (no store-and-forward)
        self.share_nic = not astra_network
        self.cut_through = astra_network
        self.mss_bytes = mss_bytes  # payload of a full segment
        self.header_bytes = 0 if astra_network else header_bytes  # IPv4 + TCP headers and options of each segment
        self._host_of_class: dict[int, int] = {}
        for dst in range(topology.npus - 1, 0, -1):  # downwards: the nearest host of each class wins
            self._host_of_class[topology.route_class(0, dst)] = dst
        self._routes: dict[int, tuple[Link, ...]] = {}
        self._inbound: dict[int, Link] = {}
        self._arrivals_ps: dict[tuple[ClassCounts, int], dict[int, int]] = {}

    def _host(self, route_class: int) -> int:
        if route_class not in self._host_of_class:
            raise ValueError(f"route class {route_class} does not occur from host 0 of this topology")
        return self._host_of_class[route_class]

    def route(self, route_class: int) -> tuple[Link, ...]:
        """The representative route of a class (from host 0); its first link is the outbound port."""
        route = self._routes.get(route_class)
        if route is None:
            route = self.topology.path(0, self._host(route_class), 0)
            self._routes[route_class] = route
        return route

    def inbound(self, route_class: int) -> Link:
        """The link by which routes of a class enter their destination (shown into host 0)."""
        link = self._inbound.get(route_class)
        if link is None:
            link = self.topology.path(self._host(route_class), 0, 0)[-1]
            self._inbound[route_class] = link
        return link

    def wire_bytes(self, payload_bytes: int) -> int:
        """Payload plus one header (IPv4 + TCP and its options) per MSS-sized segment (no header with
        `astra_network`: the payload alone)."""
        return wire_bytes(payload_bytes, self.mss_bytes, self.header_bytes)

    def latency_ps(self, route_class: int, size_bytes: int) -> int:
        """Propagation of every hop + one packet's store-and-forward at each hop after the first (the
        propagation only with `astra_network`: the message crosses its route cut-through)."""
        route = self.route(route_class)
        if self.cut_through:
            return sum(link.latency_ps for link in route)
        return unloaded_latency_ps(route, size_bytes, self.mss_bytes, self.header_bytes)

    def serialisation_ps(self, route_class: int, size_bytes: int) -> int:
        """A message's wire bytes at the bottleneck rate of its route."""
        return serialisation_ps(self.wire_bytes(size_bytes), min(link.rate_bps for link in self.route(route_class)))

    def arrivals_ps(self, counts: ClassCounts, size_bytes: int) -> dict[int, int]:
        """Time from a rank issuing a step to its messages of each route class arriving: `counts`
        messages of `size_bytes` per class; those leaving by one link finish serialising together
        (unless `share_nic` is False: then each takes its own serialisation only)."""
        key = (counts, size_bytes)
        cached = self._arrivals_ps.get(key)
        if cached is not None:
            return cached
        wire = self.wire_bytes(size_bytes)
        port_wire: dict[Link, int] = {}
        for route_class, messages in counts:
            port = self.route(route_class)[0]
            port_wire[port] = port_wire.get(port, 0) + messages * wire
        arrivals: dict[int, int] = {}
        for route_class, _ in counts:
            port = self.route(route_class)[0]
            serialise_ps = self.serialisation_ps(route_class, size_bytes)
            if self.share_nic:
                serialise_ps = max(serialise_ps, serialisation_ps(port_wire[port], port.rate_bps))
            arrivals[route_class] = self.latency_ps(route_class, size_bytes) + serialise_ps
        self._arrivals_ps[key] = arrivals
        return arrivals

    def step_ps(self, counts: ClassCounts, size_bytes: int) -> int:
        """Time from a rank issuing a step to the last of its messages arriving."""
        return max(self.arrivals_ps(counts, size_bytes).values())


class AlphaBetaSystemLayer(SystemLayer):
    """The system layer of the alpha_beta backend: the same collectives, chunks, phases, scheduling
    and hierarchy as `SystemLayer`, but each phase ends after a computed duration (one event) instead
    of sending its messages; or, with a `phase_timer` (the phase backend), when
    that timer says. `astra_network` costs messages as ASTRA-sim 1.0's analytical network does (module
    docstring); `astra_compat` takes ASTRA-sim 1.0's system-layer choices (`SystemLayer`)."""

    def __init__(self, eventlist: EventList, topology: Topology, mss_bytes: int, dimensions: list[Dimension],
                 flat_dimension: Dimension, algorithms: dict[str, str], splits: int, scheduling: str,
                 hierarchy: str, endpoint_delay_ps: int, header_bytes: int = TCP_IP_HEADER_BYTES,
                 astra_compat: bool = False, phase_timer: PhaseTimer | None = None,
                 astra_network: bool = False) -> None:
        super().__init__(eventlist, None, dimensions, flat_dimension, algorithms, splits, scheduling, hierarchy,
                         endpoint_delay_ps, astra_compat)
        self.topology = topology
        self.costs = RouteCosts(topology, mss_bytes, header_bytes, astra_network)
        self._phase_ps: dict[PhaseKey, int] = {}  # duration of each distinct phase
        self._ring_classes: dict[tuple[int, ...], list[int]] = {}  # group -> class of each ring link
        self._peer_counts: dict[tuple[int, ...], set[ClassCounts]] = {}  # group -> its ranks' direct steps
        # phases of each kind that ended: what `host_link_bytes` expands
        self.phases_done: dict[PhaseKey, int] = {}
        self.phase_timer = phase_timer

    def _run_phase(self, chunk: Chunk, queue: int) -> None:
        """End the chunk's current phase after its computed duration (then free `queue`)."""
        phase = chunk.phases[chunk.next_phase]
        if self.dimensions[phase.dimension].size == 1:
            self._phase_done(chunk, queue)
            return
        key, duration_ps = self.phase_ps(phase)
        if self.phase_timer is not None:
            self.phase_timer(self, chunk, queue, phase, key, duration_ps)
            return
        self.eventlist.call_at(self.eventlist.now_ps + duration_ps, self.phase_ender(chunk, queue, key))

    def phase_ps(self, phase: CollectivePhase) -> tuple[PhaseKey, int]:
        """The phase's key and its duration on its dimension (its slowest group), computed once per key."""
        dim = self.dimensions[phase.dimension]
        key = (phase.dimension, phase.op, phase.chunk_bytes, phase.astra_tree)
        duration_ps = self._phase_ps.get(key)
        if duration_ps is None:
            duration_ps = max(self.group_ps(group, phase, dim) for group in dim.groups)
            self._phase_ps[key] = duration_ps
        return key, duration_ps

    def point_to_point(self, src: int, dst: int, size_bytes: int, on_delivered: Callable[[], None]) -> None:
        """A message outside any collective, delivered after its cost alone on its route (one step of
        one message)."""
        route_class = self.topology.route_class(src, dst)
        self.eventlist.call_at(self.eventlist.now_ps + self.costs.step_ps(((route_class, 1),), size_bytes),
                               on_delivered)

    def phase_ender(self, chunk: Chunk, queue: int, key: PhaseKey) -> Callable[[], None]:
        """What ends the chunk's phase of `key` (then frees `queue`) when called."""
        def end() -> None:
            self.phases_done[key] = self.phases_done.get(key, 0) + 1
            self._phase_done(chunk, queue)
        return end

    def host_link_bytes(self) -> dict[Link, int]:
        """Wire bytes (`RouteCosts.wire_bytes`) on the first and the last link of every message
        of the phases that ended: the links by which a message leaves its NPU and enters the other,
        which the two NPUs fix whatever equal-cost path it would take (this backend routes no
        message, so the links between switches are unknown to it). Expands every rank's step
        program once per distinct phase: O(messages of those phases), paid only when asked for."""
        totals: dict[Link, int] = {}
        for (dimension, op, chunk_bytes, astra_tree), times in self.phases_done.items():
            dim = self.dimensions[dimension]
            for group in dim.groups:
                p = len(group)
                for program in self.plan_phase(CollectivePhase(dimension, op, chunk_bytes, astra_tree), dim):
                    for rank, steps in enumerate(program):
                        for step in steps:
                            for send in step.sends:
                                route = self.topology.path(group[rank], group[(rank + send.peer_offset) % p], 0)
                                wire = times * self.costs.wire_bytes(send.size_bytes)
                                for link in (route[0],) if len(route) == 1 else (route[0], route[-1]):
                                    totals[link] = totals.get(link, 0) + wire
        return totals

    def group_ps(self, group: tuple[int, ...], phase: CollectivePhase, dim: Dimension) -> int:
        """Duration of one phase (with the configured algorithm) on one group of NPUs of `dim`."""
        steps = self.phase_steps(phase, len(group))
        if steps is None:  # ranks in different roles: evaluate every rank's program
            programs = self.plan_phase(phase, dim)
            bounds = [self.program_ps(group, program) for program in programs]
            if self.costs.share_nic:
                bounds.append(self.endpoint_load_ps(group, programs))
            return max(bounds)
        if steps[0].pattern == RING:
            return self.ring_ps(group, steps)
        return self.symmetric_ps(group, steps)

    def ring_ps(self, group: tuple[int, ...], steps: list[SymmetricStep]) -> int:
        """The longer of two bounds. The slowest chain: rank r's step s waits for rank r-1's step
        s-1 message, so a path crosses one ring link per step; its start is the one whose window of
        links is slowest at the steps' mean size (exact when all steps have one size, as all but
        netsweep's ring all-to-all), then it is costed at the steps' own sizes. The busiest link: each
        carries one message per step, one after another (one stream per pair of NPUs); with messages
        alone (`astra_network`), only the chain."""
        classes = self._ring_classes.get(group)
        if classes is None:
            p = len(group)
            classes = [self.topology.route_class(group[r], group[(r + 1) % p]) for r in range(p)]
            self._ring_classes[group] = classes
        p, count = len(classes), len(steps)
        mean_bytes = max(1, sum(step.size_bytes for step in steps) // count)
        link_ps = [self.costs.step_ps(((route_class, 1),), mean_bytes) for route_class in classes]
        remainder = count % p  # whole laps cross every link alike; the remainder picks the start
        window = sum(link_ps[:remainder])
        best_window, start = window, 0
        for r in range(1, p):
            window += link_ps[(r + remainder - 1) % p] - link_ps[r - 1]
            if window > best_window:
                best_window, start = window, r
        chain_ps = count * self.endpoint_delay_ps + sum(
            self.costs.step_ps(((classes[(start + s) % p], 1),), step.size_bytes) for s, step in enumerate(steps))
        if not self.costs.share_nic:  # messages alone: no link carries one after another
            return chain_ps
        busiest_link_ps = max(
            self.endpoint_delay_ps + sum(self.costs.serialisation_ps(route_class, step.size_bytes) for step in steps)
            + self.costs.latency_ps(route_class, steps[-1].size_bytes) for route_class in set(classes))
        return max(chain_ps, busiest_link_ps)

    def symmetric_ps(self, group: tuple[int, ...], steps: list[SymmetricStep]) -> int:
        """Steps in which every rank depends on its peers' previous step (halving_doubling, direct):
        the first lasts as long as the slowest rank's messages, each later one at least as long as
        the quickest rank's (it starts from whichever rank finished last)."""
        total = 0
        for index, step in enumerate(steps):
            times = [self.costs.step_ps(counts, step.size_bytes) for counts in self._step_counts(group, step)]
            total += self.endpoint_delay_ps + (max(times) if index == 0 else min(times))
        return total

    def _step_counts(self, group: tuple[int, ...], step: SymmetricStep) -> set[ClassCounts]:
        """The distinct per-rank (route class, messages) of a symmetric step on a group."""
        if step.pattern == XOR:
            return {((self.topology.route_class(group[r], group[r ^ step.mask]), 1),) for r in range(len(group))}
        counts = self._peer_counts.get(group)
        if counts is None:
            counts = self.topology.peer_class_counts(group)
            self._peer_counts[group] = counts
        return counts

    def program_ps(self, group: tuple[int, ...], program: Program) -> int:
        """Longest path through a step program's dependency graph: a rank issues a step once it has
        entered it (plus the endpoint delay) and enters the next once that step's messages have
        arrived; every message costed as in `RouteCosts.arrivals_ps` (the sends of one step have
        one size in every algorithm). O(messages)."""
        p = len(group)
        delay_ps = self.endpoint_delay_ps
        entered_ps = [0] * p
        position = [0] * p
        issued = [0] * p  # steps issued so far
        arrived = [[0] * len(steps) for steps in program]
        latest_ps = [[0] * len(steps) for steps in program]
        ready = list(range(p))
        while ready:
            rank = ready.pop()
            steps = program[rank]
            while position[rank] < len(steps):
                index = position[rank]
                step = steps[index]
                if issued[rank] == index:
                    issue_ps = entered_ps[rank] + delay_ps
                    peers = [(rank + send.peer_offset) % len(group) for send in step.sends]
                    classes = [self.topology.route_class(group[rank], group[peer]) for peer in peers]
                    counts: ClassCounts = tuple(sorted(Counter(classes).items()))
                    for send, peer, route_class in zip(step.sends, peers, classes):
                        arrival_ps = issue_ps + self.costs.arrivals_ps(counts, send.size_bytes)[route_class]
                        peer_step = send.peer_step
                        arrived[peer][peer_step] += 1
                        latest_ps[peer][peer_step] = max(latest_ps[peer][peer_step], arrival_ps)
                        if (position[peer] == peer_step
                                and arrived[peer][peer_step] == program[peer][peer_step].receives):
                            ready.append(peer)
                    issued[rank] = index + 1
                if arrived[rank][index] < step.receives:
                    break
                entered_ps[rank] = max(entered_ps[rank] + delay_ps, latest_ps[rank][index])
                position[rank] = index + 1
        return max(entered_ps)

    def endpoint_load_ps(self, group: tuple[int, ...], programs: list[Program]) -> int:
        """The busiest link at an NPU: everything the programs (running at once) send out of, or
        into, one NPU through one of its links passes it one byte after another."""
        load: dict[tuple[int, Link], list[int]] = {}  # (npu, link) -> [wire bytes, least latency]
        for program in programs:
            for rank, steps in enumerate(program):
                for step in steps:
                    for send in step.sends:
                        peer = (rank + send.peer_offset) % len(group)
                        route_class = self.topology.route_class(group[rank], group[peer])
                        wire = self.costs.wire_bytes(send.size_bytes)
                        latency_ps = self.costs.latency_ps(route_class, send.size_bytes)
                        for end in ((group[rank], self.costs.route(route_class)[0]),
                                    (group[peer], self.costs.inbound(route_class))):
                            entry = load.setdefault(end, [0, latency_ps])
                            entry[0] += wire
                            entry[1] = min(entry[1], latency_ps)
        return max(self.endpoint_delay_ps + serialisation_ps(wire, link.rate_bps) + latency_ps
                   for (_, link), (wire, latency_ps) in load.items())
