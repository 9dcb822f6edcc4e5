"""The phase backend: collective phases as fluid coflows sharing links max-min fairly, solved per
phase with numpy, never per message; and TCP's signature at scale (busiest link, port fan-in, incast).

A phase (one chunk of a collective on one network dimension) is described once per distinct kind by
its stages (its consecutive steps of one pattern: all the steps of a ring, one exchange of
halving-doubling) and their demand on every link: the wire bytes their messages put there
(`StageDemand.link_bytes`) and how many of them cross the link at once, found by routing all the
messages of a pattern at once as numpy arrays with the packet engine's ECMP hash (`VectorRoutes`).
A pattern (a ring, an XOR exchange, every pair) is routed once per group and reused for every size.

A phase lasts a fluid part, its stages one after another, then a fixed part. A stage alone on the
network takes the time its busiest link needs (max over links of bytes / capacity: the coflow bound
of Varys, and Parsimon's per-link view). Stages of phases in their fluid part at once share links
max-min fairly per message: a stage holding w of the messages on a link gets w shares of it, as
`analytical` gives every message one share; one progressive filling over the active stages (a few)
and the links, vectorised, gives each a progress rate, recomputed when a stage starts or ends. The
fixed part is alpha_beta's duration of the phase less the serialisation
alpha_beta charges (the bytes an NPU's link carries one message after another, or a single message
on a slower link of its route): latencies and endpoint delays, which share nothing. So a phase alone
on a fabric that adds no load beyond what alpha_beta charges lasts exactly alpha_beta's time, and a
phase whose bytes pile up on an uplink lasts longer by what the uplink needs beyond that
(oversubscription, ECMP collisions).

TCP's signature (`screen_risks`): the busiest link's utilisation over the run; the most messages
into one switch port at once (`max_port_flows`, over the stages in their fluid part together); and
`incast_phases`, the phases that, as one of their stages starts, queue at some switch port more than
its buffer holds (`port_queue_share` above 1: each message opens with min(its wire bytes, `init_cwnd_pkts` full
packets); the port drains while they arrive). With `engine.incast_rto` each such phase is charged
one retransmission timeout more (its tail waits for it): where it opens connections, the RTO a
first loss waits (`tcp.min_rto_ms` after a handshake, `tcp.initial_rto_ms` without one), else
`tcp.min_rto_ms`; a first-order estimate of the collapse.

RoCE on lossless Ethernet (`pfc_xoff_bytes`): a queue pair has no window, so each message opens with
all of its bytes at line rate, and a port acts when its queue passes the PFC XOFF threshold rather
than its buffer: the same rule then counts `pfc_pause_phases`, the phases in which PFC would pause a
sender (exactly when one ingress port feeds the queue; XOFF counts per ingress port, so with several
feeding it the rule may flag a phase whose ports each stay below it). Nothing is charged for a pause:
the fluid shares the links max-min, which is what PFC's back-pressure approaches for the flows it
throttles, not what it does to the flows behind a paused port (congestion spreading, left out).

Halving-doubling, whose ranks wait for their partner rather than for the busiest link of a step, is
timed alone rank by rank (`xor_exchange_ps`, vectorised over the ranks, its events merged so that
their number does not grow with the messages) and its stages stretched to that time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import inf
from typing import Callable

import numpy as np

from ..eventlist import EventList, EventSource
from ..links import TCP_IP_HEADER_BYTES, Link, wire_bytes
from ..topology import Topology
from ..transport.cc import slow_start_dominates
from ..units import BITS_PER_BYTE, PS_PER_S, serialisation_ps
from .algorithms import ALL, RING, XOR, Program, SymmetricStep
from .alpha_beta import AlphaBetaSystemLayer, PhaseKey
from .collectives import Chunk, CollectivePhase
from .maxmin import RATE_TOLERANCE

CHUNK_MESSAGES = 1 << 18  # messages routed per numpy pass: its temporary arrays stay in the CPU caches
# events of an XOR exchange closer than this fraction of the time elapsed are taken together
# (`xor_exchange_ps`): it bounds the events by log(end / first event) / EVENT_MERGE, whatever the messages
EVENT_MERGE = 3e-3
FILL_ROUNDS = 20  # progressive-filling rounds per event at most (`max_min_message_rates`)


class VectorRoutes:
    """The links (indices into `topology.links`) of many messages at once, as `topology.path` gives
    them: vectorised where the topology routes so (`Topology.vector_path`); other topologies are routed
    message by message through `path` (they are not the ones simulated at thousands of NPUs)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.link_count = len(topology.links)
        self._index = {id(link): index for index, link in enumerate(topology.links)}

    def hops(self, src: np.ndarray, dst: np.ndarray, flow_ids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The link index of every hop of every message (-1 where a route is shorter; ECMP hashes
        `flow_ids`, the packet engine's ids of the pairs' connections), and which hops
        are endpoint links (a route's first and last: the links alpha_beta charges)."""
        rows = self.topology.vector_path(src, dst, flow_ids)
        if rows is None:
            return self._one_by_one(src, dst, flow_ids)
        endpoint = np.zeros(len(rows), dtype=bool)
        endpoint[0] = endpoint[-1] = True
        return rows, endpoint

    def _one_by_one(self, src: np.ndarray, dst: np.ndarray,
                    flow_ids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        paths = [self.topology.path(int(s), int(d), int(f)) for s, d, f in zip(src, dst, flow_ids)]
        longest = max((len(path) for path in paths), default=1)
        # row 0: the first link; row `longest`: the last one of a longer route (so both are endpoints)
        hops = np.full((longest + 1, len(paths)), -1, dtype=np.int64)
        for column, path in enumerate(paths):
            indices = [self._index[id(link)] for link in path]
            if len(indices) == 1:
                hops[0, column] = indices[0]
            else:
                hops[:len(indices) - 1, column] = indices[:-1]
                hops[longest, column] = indices[-1]
        endpoint = np.zeros(longest + 1, dtype=bool)
        endpoint[0] = endpoint[longest] = True
        return list(hops), endpoint


class PairFlowIds:
    """The flow id of each ordered pair of NPUs, given in the order pairs first send, as the packet
    engine numbers its connections (one per pair, opened by its first message): an int32 table of
    npus^2 entries, made on first use. `opened` counts the pairs numbered so far (connections open)."""

    def __init__(self, npus: int) -> None:
        self.npus = npus
        self._table: np.ndarray | None = None
        self.opened = 0

    def ids(self, src: np.ndarray, dst: np.ndarray, distinct: bool) -> np.ndarray:
        """The pairs' ids, numbering the new ones in order of first appearance; `distinct`: no pair
        occurs twice in the arrays (a symmetric step), which spares finding the first appearances."""
        if self._table is None:
            self._table = np.full(self.npus * self.npus, -1, dtype=np.int32)
        pairs = src * self.npus + dst
        ids = self._table[pairs]
        new = ids < 0
        if new.any():
            fresh = pairs[new]
            if not distinct:
                fresh, first = np.unique(fresh, return_index=True)
                fresh = fresh[np.argsort(first)]
            self._table[fresh] = np.arange(self.opened, self.opened + len(fresh), dtype=np.int32)
            self.opened += len(fresh)
            ids = self._table[pairs]
        return ids


@dataclass
class LinkCounts:
    """Messages of one pattern crossing each link: on any hop, and as a route's first or last link;
    and the rate at which their first bytes arrive there (`arrival_bytes_per_ps`): each message leaves its
    sender at an equal share of the sender's link among the messages it sends at once."""

    any_hop: np.ndarray  # int64 per link
    endpoint: np.ndarray  # int64 per link
    arrival_bytes_per_ps: np.ndarray  # float64 per link: bytes a picosecond
    # messages per kind of route: the (rate, latency) kind of each of its links, in order (`_route_kinds`)
    routes: dict[tuple[int, ...], int]


@dataclass
class StageDemand:
    """What a stage of a phase (its consecutive steps of one pattern: all the steps of a ring, one
    exchange of halving-doubling) asks of the links (arrays indexed like `topology.links`)."""

    link_bytes: np.ndarray  # float64: wire bytes it puts on each link, all its steps
    share_weight: np.ndarray  # float64: link_bytes / bytes_per_share (its messages there at once, about)
    bytes_per_share: float  # wire bytes one message-share of it carries
    alpha_beta_ps: int  # the serialisation alpha_beta charges it: an endpoint link's bytes, or one message's
    peak_messages: np.ndarray  # int64: its messages crossing each link at once (a step's; a tree's: mean)
    opening_bytes: np.ndarray  # float64: the bytes those messages open with on each link
    arrival_bytes_per_ps: np.ndarray  # float64: the rate at which they arrive at each link (`LinkCounts`)
    # its time alone over its coflow bound: 1, but for XOR exchanges, whose ranks wait for their partner
    # only, not for the busiest link (`FluidPhases._stretch_exchanges`); its progress rate is divided by it
    stretch: float = 1.0


class FluidPart:
    """A phase in its fluid part: its current stage, the fraction of that stage's link bytes left at
    `updated_ps` and the fraction it carries a picosecond (`progress_per_ps`); `end` ends the phase
    (after the fixed part)."""

    __slots__ = ("end", "stages", "stage", "left", "progress_per_ps", "updated_ps", "tail_ps", "flagged",
                 "opens_connections")

    def __init__(self, end: Callable[[], None], stages: list[StageDemand], now_ps: int, tail_ps: int) -> None:
        self.end = end
        self.stages = stages
        self.stage = 0
        self.left = 1.0
        self.progress_per_ps = 0.0
        self.updated_ps = now_ps
        self.tail_ps = tail_ps  # the fixed part, after the fluid one
        self.flagged = False  # counted in `incast_phases`
        self.opens_connections = False  # its messages are the first between some pairs of NPUs


class _Wake(EventSource):
    """The fluid clock: wakes `FluidPhases` when the next phase leaves its fluid part."""

    __slots__ = ("phases",)

    def __init__(self, phases: FluidPhases) -> None:
        self.phases = phases

    def do_next_event(self) -> None:
        self.phases.wake()


def max_min_levels(share_weight: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Progressive filling of phases (rows of `share_weight`, each row its shares of every link):
    every phase's level (bytes per unit time per share) rises together; when a link of `capacity`
    fills, the phases crossing it keep their level. Returns the levels. A round per filled link,
    each vectorised over the links."""
    phases = share_weight.shape[0]
    levels = np.zeros(phases)
    unfixed = np.ones(phases, dtype=bool)
    left = capacity.astype(np.float64).copy()
    while unfixed.any():  # every phase puts bytes on some link, so each round fixes at least one
        load = share_weight[unfixed].sum(axis=0)
        used = load > 0
        shares = np.full(load.shape, inf)
        shares[used] = np.maximum(left[used], 0.0) / load[used]
        bottleneck = int(np.argmin(shares))
        fixing = unfixed & (share_weight[:, bottleneck] > 0)
        levels[fixing] = shares[bottleneck]
        left -= shares[bottleneck] * share_weight[fixing].sum(axis=0)
        unfixed &= ~fixing
    return levels


def max_min_message_rates(hops: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of messages by progressive filling: `hops` holds each message's links
    (rows: hops, columns: messages), padded with the index `len(capacity) - 1`, a link of infinite
    capacity that no message is limited by. A round per distinct bottleneck level, each vectorised,
    `FILL_ROUNDS` at most."""
    links = len(capacity)
    rates = np.zeros(hops.shape[1])
    unfixed = np.ones(hops.shape[1], dtype=bool)
    left = capacity.astype(np.float64).copy()
    for _ in range(FILL_ROUNDS):
        if not unfixed.any():
            break
        load = np.bincount(hops[:, unfixed].ravel(), minlength=links).astype(np.float64)
        shares = np.divide(np.maximum(left, 0.0), load, out=np.full(links, inf), where=load > 0)
        level = shares[hops].min(axis=0)
        level[~unfixed] = inf
        lowest = float(level.min())
        fixing = level <= lowest * (1.0 + RATE_TOLERANCE)  # equal levels up to float rounding
        rates[fixing] = lowest
        left -= lowest * np.bincount(hops[:, fixing].ravel(), minlength=links)
        unfixed &= ~fixing
    else:
        # rounds used up: the rest get their equal share of what is left on their busiest link
        # (a feasible allocation, below max-min for some)
        rates[unfixed] = level[unfixed]
    return rates


@dataclass
class XorStep:
    """One XOR exchange step of every group at once, for `xor_exchange_ps`: rank i sends to rank
    `partner[i]` (ranks of all groups numbered together) a message of `wire_bytes` over the links
    `hops[:, i]` (padded as `max_min_message_rates` wants), which arrives `latency_ps[i]` after its
    last byte left."""

    partner: np.ndarray  # int64 per rank
    hops: np.ndarray  # int64, hops x ranks
    wire_bytes: float
    latency_ps: np.ndarray  # float64 per rank


def xor_exchange_ps(steps: list[XorStep], capacity: np.ndarray, delay_ps: int) -> float:
    """How long XOR exchanges (halving-doubling) take alone, rank by rank: as `SystemLayer` runs a
    step program, each rank issues its step's message `delay_ps` after entering the step and enters
    the next once that is done and its partner's message has arrived; the messages in flight share
    links max-min fairly, re-solved at every start and finish, as `analytical` does message by
    message. Vectorised over ranks: the Python work is per event, and events within `EVENT_MERGE` of
    the time elapsed are merged (a finish or start waits that long at most), so that it does not grow
    with the messages. Returns the time the last rank finishes, from the phase's start."""
    ranks, count = len(steps[0].partner), len(steps)
    padding = len(capacity) - 1
    height = max(len(step.hops) for step in steps)  # routes routed one by one differ in length from step to step
    # message k * ranks + i: step k, rank i
    hops = np.concatenate([np.pad(step.hops, ((0, height - len(step.hops)), (0, 0)), constant_values=padding)
                           for step in steps], axis=1)
    latency = np.concatenate([step.latency_ps for step in steps])
    left = np.repeat([step.wire_bytes for step in steps], ranks)
    start = np.full(count * ranks, inf)
    start[:ranks] = delay_ps
    arrival = np.full(count * ranks, inf)
    entered = np.full((count + 1, ranks), inf)  # when each rank enters each step (and leaves the last)
    entered[0] = 0.0
    done = np.zeros(count * ranks, dtype=bool)
    now = float(delay_ps)
    while not done.all():
        active = np.flatnonzero((start <= now) & ~done)
        waiting = start[(start > now) & ~done]
        next_start = float(waiting.min()) if waiting.size else inf
        if not active.size:
            now = next_start
            continue
        rates = max_min_message_rates(hops[:, active], capacity)
        finish = now + left[active] / rates
        event = min(float(finish.min()), next_start)
        later = max(event, now + EVENT_MERGE * (now - delay_ps))
        ending = finish <= later
        left[active] -= rates * (later - now)
        ended = active[ending]
        done[ended] = True
        arrival[ended] = finish[ending] + latency[ended]
        now = later
        # ranks whose step k is done (issued, and the partner's message in): from the steps whose messages
        # ended, and on to the next step of a rank that leaves one (its partner's message may be in already)
        touched = set((ended // ranks).tolist())
        for k in range(min(touched, default=count), count):
            if k not in touched:
                continue
            received = arrival[k * ranks + steps[k].partner]
            leaving = np.isinf(entered[k + 1]) & np.isfinite(received) & np.isfinite(entered[k])
            if leaving.any():
                entered[k + 1, leaving] = np.maximum(entered[k, leaving] + delay_ps, received[leaving])
                if k + 1 < count:
                    start[(k + 1) * ranks + np.flatnonzero(leaving)] = entered[k + 1, leaving] + delay_ps
                    touched.add(k + 1)
    return float(entered[count].max())


class FluidPhases:
    """The phase backend (module docstring): the `phase_timer` of an `AlphaBetaSystemLayer`, which
    then keeps alpha_beta's collectives, phases and scheduling while each phase lasts its fixed part
    plus a fluid part shared with the phases active at once."""

    def __init__(self, eventlist: EventList, topology: Topology, mss_bytes: int,
                 header_bytes: int = TCP_IP_HEADER_BYTES, seed: int = 0, init_cwnd_pkts: float = 10,
                 incast_rto_ps: tuple[int, int] | None = None, pfc_xoff_bytes: int | None = None) -> None:
        self.eventlist = eventlist
        self.topology = topology
        self.routes = VectorRoutes(topology)
        self.flow_ids = PairFlowIds(topology.npus)
        self.mss_bytes = mss_bytes
        self.header_bytes = header_bytes
        self.init_window_bytes = init_cwnd_pkts * (mss_bytes + header_bytes)  # what a cold window opens with
        # (initial, minimum) RTO charged to each incast phase (`_stage_starts`); None: not charged
        self.incast_rto_ps = incast_rto_ps
        links = topology.links
        self.capacity_bytes_per_ps = np.array([link.rate_bps for link in links], dtype=np.float64) / (
            BITS_PER_BYTE * PS_PER_S)  # bytes a picosecond
        switch_ports = {id(link) for link in topology.switch_ports}
        self.switch_port = np.array([id(link) in switch_ports for link in links])
        # the queue a switch port holds before it acts: its buffer (then drops), or with PFC the XOFF
        # threshold (then pauses its senders: the rule counts `pfc_pause_phases` instead of `incast_phases`)
        self.pfc = pfc_xoff_bytes is not None
        self.buffer_bytes = (np.full(len(links), float(pfc_xoff_bytes)) if pfc_xoff_bytes is not None else
                             np.array([inf if link.buffer_bytes is None else link.buffer_bytes for link in links]))
        self.link_bytes = np.zeros(len(links))  # wire bytes of the fluid parts that ended
        self.max_port_flows = 0
        self.incast_phases = 0
        self._demands: dict[PhaseKey, list[StageDemand]] = {}
        # slow start (`slow_start_share`): messages whose slow start would outlast their transmission,
        # and all messages, of the phases started; and of one phase of each kind
        self.slow_start_messages = 0
        self.messages = 0
        self._slow_start: dict[PhaseKey, tuple[int, int]] = {}
        self.init_payload_window_bytes = init_cwnd_pkts * mss_bytes  # as `FluidMessages` counts it
        # links by kind, (rate, latency): kind 0 is no link (a hop of -1), so that routes count by kind
        kinds = sorted({(link.rate_bps, link.latency_ps) for link in links})
        self._kinds: list[tuple[int, int]] = [(0, 0)] + kinds
        kind_of = {kind: index + 1 for index, kind in enumerate(kinds)}
        self._link_latency_ps = np.array([link.latency_ps for link in links], dtype=np.float64)
        self._link_kind = np.array([kind_of[(link.rate_bps, link.latency_ps)] for link in links] + [0], np.int32)
        self._patterns: dict[tuple[tuple[int, ...], str, int], LinkCounts] = {}
        self._fluid: list[FluidPart] = []
        self._wake = _Wake(self)
        self._next_wake_ps = -1

    # -- phases ------------------------------------------------------------------------------------

    def start(self, layer: AlphaBetaSystemLayer, chunk: Chunk, queue: int, phase: CollectivePhase, key: PhaseKey,
              duration_ps: int) -> None:
        """Start a chunk's phase of alpha_beta duration `duration_ps`: its fluid part now, sharing
        links with the phases in theirs (the layer's `PhaseTimer`)."""
        opened = self.flow_ids.opened
        stages = self.demand(layer, key, phase)
        slow, messages = self._slow_start[key]
        self.slow_start_messages += slow
        self.messages += messages
        now = self.eventlist.now_ps
        self._advance(now)
        tail_ps = self.tail_ps(duration_ps, stages)
        fluid = FluidPart(layer.phase_ender(chunk, queue, key), stages, now, tail_ps)
        fluid.opens_connections = self.flow_ids.opened > opened
        self._fluid.append(fluid)
        self._stage_starts(fluid)
        self._share(now)

    @property
    def fluid_parts(self) -> list[FluidPart]:
        """The phases in their fluid part, in their order of starting (read only: the timer owns it)."""
        return self._fluid

    def on_stage_start(self, fluid: FluidPart, queue_share: float) -> None:
        """Hook: a stage of `fluid` has just opened (its phase's first one as `start` runs, or its next
        one), `queue_share` the fullest switch port's buffer share then (`port_queue_share`), after the
        incast rule flagged the phase; before the links are shared again (`after_share`). Nothing here."""

    def after_share(self, now_ps: int) -> None:
        """Hook: the links have just been shared among `fluid_parts` at `now_ps` (as a phase starts or
        a stage ends), every `on_stage_start` of that instant called before. Nothing here."""

    def phase_end(self, fluid: FluidPart) -> Callable[[], None]:
        """Hook: what is called once `fluid`'s fluid part and fixed part are over, asked as its fluid
        part ends: here its layer's end (`FluidPart.end`); a subclass may end it later."""
        return fluid.end

    def _stage_starts(self, fluid: FluidPart) -> None:
        """A phase's stage opens its messages' windows: keep `max_port_flows`, and flag (and charge)
        the phase, once at most, if they overflow a port (`port_queue_share` above 1). The charge is one RTO:
        the initial one (RFC 6298: 1 s, before any RTT sample) where the phase opens connections
        that never sent before, the minimum one where they have. Then `on_stage_start`."""
        share = self.port_queue_share()
        if share > 1.0 and not fluid.flagged:
            fluid.flagged = True
            self.incast_phases += 1
            if self.incast_rto_ps is not None:
                initial_rto_ps, min_rto_ps = self.incast_rto_ps
                fluid.tail_ps += initial_rto_ps if fluid.opens_connections else min_rto_ps
        self.on_stage_start(fluid, share)

    def port_queue_share(self) -> float:
        """How full the current stages of the phases in their fluid part make the fullest switch port,
        as a share of its buffer (above 1: they overflow it, the incast rule): the opening bytes of the
        messages into it, less what the port sends on while they arrive (a port fed at rate A drains C
        of every A: the queue peaks at opening x (1 - C / A), none when A <= C); 0 with unlimited
        buffers. Also keeps `max_port_flows`."""
        active = [fluid.stages[fluid.stage] for fluid in self._fluid]
        ports = self.switch_port
        port_flows = sum(demand.peak_messages[ports] for demand in active)
        self.max_port_flows = max(self.max_port_flows, int(port_flows.max(initial=0)))
        opening = sum(demand.opening_bytes[ports] for demand in active)
        arrival = sum(demand.arrival_bytes_per_ps[ports] for demand in active)
        return self._buffer_share(opening, arrival)

    def stage_queue_share(self, stage: StageDemand) -> float:
        """As `port_queue_share`, for `stage` alone and its whole messages instead of their opening windows:
        the share of its buffer the fullest switch port would hold if every byte the stage puts there came
        at its messages' arrival rate (what loss-based TCP, its windows growing until a drop, can fill)."""
        ports = self.switch_port
        return self._buffer_share(stage.link_bytes[ports], stage.arrival_bytes_per_ps[ports])

    def _buffer_share(self, arriving: np.ndarray, arrival: np.ndarray) -> float:
        """The fullest switch port's queue as a share of its buffer when `arriving` bytes come at `arrival`
        bytes a picosecond (arrays over the switch ports) while it drains at its rate."""
        ports = self.switch_port
        drained = np.divide(self.capacity_bytes_per_ps[ports], arrival, out=np.ones_like(arrival), where=arrival > 0)
        queued = 1.0 - drained
        queued[queued < RATE_TOLERANCE] = 0.0  # a port fed at its own rate, within float rounding: no queue
        queue_bytes = arriving * queued
        # no queue is no share, whatever the buffer (0 / 0 would be nan); a queue on no buffer is infinite
        with np.errstate(divide="ignore"):
            share = np.divide(queue_bytes, self.buffer_bytes[ports], out=np.zeros_like(queue_bytes),
                              where=queue_bytes > 0)
        return float(share.max(initial=0.0))

    def wake(self) -> None:
        """End the fluid parts that are over (their fixed parts follow), then share the links again."""
        now = self.eventlist.now_ps
        if now != self._next_wake_ps:
            return  # superseded by an earlier wake-up
        self._next_wake_ps = -1
        self._advance(now)
        still: list[FluidPart] = []
        starting: list[FluidPart] = []  # phases entering their next stage
        for fluid in self._fluid:
            if fluid.left <= 0.0:
                self.link_bytes += fluid.stages[fluid.stage].link_bytes
                fluid.stage += 1
                if fluid.stage == len(fluid.stages):
                    self.eventlist.call_at(now + fluid.tail_ps, self.phase_end(fluid))
                    continue
                fluid.left = 1.0  # the next stage's messages go out at once
                starting.append(fluid)
            still.append(fluid)
        self._fluid = still
        for fluid in starting:
            self._stage_starts(fluid)
        self._share(now)

    def _advance(self, now: int) -> None:
        """Bring every fluid part's progress up to `now`; one due by now (within a picosecond) is over."""
        for fluid in self._fluid:
            elapsed = now - fluid.updated_ps
            if fluid.progress_per_ps > 0.0 and elapsed > 0:
                due_ps = round(fluid.left / fluid.progress_per_ps)
                fluid.left = 0.0 if elapsed >= due_ps else fluid.left - fluid.progress_per_ps * elapsed
            fluid.updated_ps = now

    def _share(self, now: int) -> None:
        """Max-min fair rates for the phases in their fluid part; wake at the first to finish; then
        `after_share`."""
        if self._fluid:
            self._set_rates(now)
        self.after_share(now)

    def _set_rates(self, now: int) -> None:
        """Max-min fair rates for the phases in their fluid part (some); wake at the first to finish."""
        levels = max_min_levels(np.stack([fluid.stages[fluid.stage].share_weight for fluid in self._fluid]),
                                self.capacity_bytes_per_ps)
        first_ps = -1
        for fluid, level in zip(self._fluid, levels):
            stage = fluid.stages[fluid.stage]
            fluid.progress_per_ps = float(level) / (stage.bytes_per_share * stage.stretch)
            # at least 1 ps ahead, so that float rounding never spins at one instant
            finish_ps = now + max(1, round(fluid.left / fluid.progress_per_ps))
            first_ps = finish_ps if first_ps < 0 else min(first_ps, finish_ps)
        if first_ps != self._next_wake_ps:  # a wake-up pending for another time will find it is not its own
            self._next_wake_ps = first_ps
            self.eventlist.schedule(self._wake, first_ps)

    # -- what a phase asks of the links ------------------------------------------------------------

    def demand(self, layer: AlphaBetaSystemLayer, key: PhaseKey, phase: CollectivePhase) -> list[StageDemand]:
        """The link demand of a kind of phase, stage by stage, over every group of its dimension
        (computed once). The steps of a stage are added up first, then applied to their pattern's
        link counts once: O(steps + stages x links)."""
        cached = self._demands.get(key)
        if cached is not None:
            return cached
        dim = layer.dimensions[phase.dimension]
        # per stage, for each group: (link counts, wire bytes of all its steps, the steps its messages
        # are there for, the largest opening of one of its messages); and the stage's steps
        stage_pieces: list[list[tuple[LinkCounts, int, int, int]]] = []
        stage_steps: list[int] = []
        slow = messages = 0
        for group in dim.groups:
            if len(group) < 2:
                continue
            steps = layer.phase_steps(phase, len(group))
            if steps is None:  # ranks in different roles (double binary tree): one stage of every message
                programs = layer.plan_phase(phase, dim)
                longest = max(len(rank_steps) for program in programs for rank_steps in program)
                sized = self._program_counts(group, programs)
                pieces = [[(counts, wire, 1, opening) for counts, wire, opening, _ in sized]]
                steps_of = [longest]
                for counts, _, _, size_bytes in sized:
                    slow += self._slow_starts(counts, size_bytes)
                    messages += sum(counts.routes.values())
            else:
                # consecutive steps of one pattern: their sizes
                runs: list[tuple[str, int, list[int]]] = []
                for step in steps:
                    if runs and runs[-1][:2] == (step.pattern, step.mask):
                        runs[-1][2].append(step.size_bytes)
                    else:
                        runs.append((step.pattern, step.mask, [step.size_bytes]))
                pieces = []
                for pattern, mask, sizes in runs:
                    counts = self._pattern(layer, group, pattern, mask, phase)
                    wires = [wire_bytes(size, self.mss_bytes, self.header_bytes) for size in sizes]
                    pieces.append([(counts, sum(wires), len(wires), int(min(max(wires), self.init_window_bytes)))])
                    for size, times in Counter(sizes).items():
                        slow += times * self._slow_starts(counts, size)
                        messages += times * sum(counts.routes.values())
                steps_of = [len(sizes) for _, _, sizes in runs]
            for index, stage in enumerate(pieces):  # the groups run the same stages side by side
                if index == len(stage_pieces):
                    stage_pieces.append([])
                    stage_steps.append(1)
                stage_pieces[index] += stage
                stage_steps[index] = max(stage_steps[index], steps_of[index])
        stages = [self._stage(pieces, steps) for pieces, steps in zip(stage_pieces, stage_steps)]
        groups = [group for group in dim.groups if len(group) > 1]
        exchange = layer.phase_steps(phase, len(groups[0]))
        if exchange is not None and all(step.pattern == XOR for step in exchange):
            self._stretch_exchanges(layer, phase, groups, exchange, stages)
        self._demands[key] = stages
        self._slow_start[key] = (slow, messages)
        return stages

    def _stretch_exchanges(self, layer: AlphaBetaSystemLayer, phase: CollectivePhase, groups: list[tuple[int, ...]],
                           steps: list[SymmetricStep], stages: list[StageDemand]) -> None:
        """Make a phase of XOR exchanges (halving-doubling) last alone what its ranks take
        (`xor_exchange_ps`: each waits for its partner, not for the step's busiest link), stretching
        every stage alike: the fluid part is that time less the fixed part, shared out over the stages
        in proportion to their coflow bounds."""
        p = len(groups[0])
        hosts = np.array(groups, dtype=np.int64).ravel()
        first_of_group = np.repeat(np.arange(0, len(hosts), p), p)  # ranks of all groups numbered together
        local = np.tile(np.arange(p), len(groups))
        capacity = np.append(self.capacity_bytes_per_ps, inf)  # the last: a hop that is no link
        link_latency_ps = np.append(self._link_latency_ps, 0.0)
        exchanges = []
        for step in steps:
            partner = first_of_group + (local ^ step.mask)
            src, dst = hosts, hosts[partner]
            hops = np.stack(self.routes.hops(src, dst, self.flow_ids.ids(src, dst, distinct=True))[0])
            hops[hops < 0] = self.routes.link_count
            packet_bytes = min(self.mss_bytes, step.size_bytes) + self.header_bytes
            # unloaded latency: propagation, and one packet stored and forwarded at every hop after the first
            latency_ps = link_latency_ps[hops].sum(axis=0) + (packet_bytes / capacity[hops[1:]]).sum(axis=0)
            exchanges.append(XorStep(partner, hops, float(wire_bytes(step.size_bytes, self.mss_bytes,
                                                                      self.header_bytes)), latency_ps))
        alone_ps = xor_exchange_ps(exchanges, capacity, layer.endpoint_delay_ps)
        _, duration_ps = layer.phase_ps(phase)
        fluid_ps = max(1.0, alone_ps - self.tail_ps(duration_ps, stages))
        coflow_ps = [float((stage.link_bytes / self.capacity_bytes_per_ps).max()) for stage in stages]
        for stage in stages:
            stage.stretch = fluid_ps / sum(coflow_ps)

    @staticmethod
    def tail_ps(duration_ps: int, stages: list[StageDemand]) -> int:
        """A phase's fixed part: its alpha_beta duration less the serialisation alpha_beta charges its stages."""
        return max(0, duration_ps - sum(stage.alpha_beta_ps for stage in stages))

    def _slow_starts(self, counts: LinkCounts, size_bytes: int) -> int:
        """How many messages of `size_bytes` on the routes of `counts` would spend longer in slow start
        than in transmission (`slow_start_dominates`, with `analytical`'s costs of a route alone: its
        propagation and one packet stored and forwarded at every link after the first, twice for the
        RTT; the message's wire bytes at its slowest link)."""
        packet_bytes = min(self.mss_bytes, size_bytes) + self.header_bytes
        message_wire_bytes = wire_bytes(size_bytes, self.mss_bytes, self.header_bytes)
        slow = 0
        for route, count in counts.routes.items():
            links = [self._kinds[kind] for kind in route if kind]
            latency_ps = sum(latency for _, latency in links) + sum(
                serialisation_ps(packet_bytes, rate_bps) for rate_bps, _ in links[1:])
            bottleneck_bps = min(rate_bps for rate_bps, _ in links)
            transmission_ps = message_wire_bytes * BITS_PER_BYTE / bottleneck_bps * PS_PER_S
            if slow_start_dominates(size_bytes, transmission_ps, 2 * latency_ps, bottleneck_bps,
                                    self.init_payload_window_bytes):
                slow += count
        return slow

    def _stage(self, pieces: list[tuple[LinkCounts, int, int, int]], steps_count: int) -> StageDemand:
        """A stage of `steps_count` steps from its pieces: (link counts, their wire bytes over the
        stage, the steps each of their messages is there for, one message's opening)."""
        link_count = self.routes.link_count
        link_bytes = np.zeros(link_count)
        alpha_beta_bytes = np.zeros(link_count)  # what alpha_beta serialises on each link, one after another
        message_steps = np.zeros(link_count)  # messages x steps: what one step holds at once, summed
        peak = np.zeros(link_count, dtype=np.int64)
        opening = np.zeros(link_count)
        arrival = np.zeros(link_count)
        for counts, wire_total, steps, opening_bytes in pieces:
            link_bytes += counts.any_hop * float(wire_total)
            # alpha_beta: the messages leaving or entering an NPU by one link in turn; any other link
            # carries one message at a time (its route's bottleneck)
            alpha_beta_bytes += np.maximum(counts.endpoint, counts.any_hop > 0) * float(wire_total)
            message_steps += counts.any_hop * float(steps)
            # at once: all of a pattern repeated over the stage's steps; of a double binary tree's
            # messages (each there for one of the stage's steps), their mean over the steps
            at_once = counts.any_hop * (steps / steps_count)
            peak += np.ceil(at_once).astype(np.int64)
            opening += at_once * float(opening_bytes)
            arrival += counts.arrival_bytes_per_ps * (steps / steps_count)
        used = message_steps > 0
        weight = message_steps / steps_count  # messages of the stage on the link at once, on average
        bytes_per_share = float((link_bytes[used] / weight[used]).max()) if used.any() else 1.0
        alpha_beta_ps = round(float((alpha_beta_bytes / self.capacity_bytes_per_ps).max()))
        return StageDemand(link_bytes, link_bytes / bytes_per_share, bytes_per_share, alpha_beta_ps, peak, opening,
                           arrival)

    def _pattern(self, layer: AlphaBetaSystemLayer, group: tuple[int, ...], pattern: str, mask: int,
                 phase: CollectivePhase) -> LinkCounts:
        """Link counts of one step's messages on a group (every rank alike), counted once per pattern."""
        key = (group, pattern, mask)
        counts = self._patterns.get(key)
        if counts is None:
            hosts = np.array(group, dtype=np.int64)
            p = len(group)
            ranks = np.arange(p)
            if pattern == RING:
                counts = self._count(hosts, hosts[(ranks + 1) % p], distinct=True, sends_per_rank=1)
            elif pattern == XOR:
                counts = self._count(hosts, hosts[ranks ^ mask], distinct=True, sends_per_rank=1)
            else:
                assert pattern == ALL
                counts = self._count_all(hosts, layer.plan_phase(phase, layer.dimensions[phase.dimension])[0])
            self._patterns[key] = counts
        return counts

    def _count_all(self, hosts: np.ndarray, program: Program) -> LinkCounts:
        """Every rank to every other in its program's send order (ranks of one node-local index share
        one order of peer offsets), rank after rank as the packet engine opens the pairs'
        connections, in chunks of at most `CHUNK_MESSAGES` messages."""
        p = len(hosts)
        lists: dict[int, int] = {}  # id of a rank's step list -> its row in `offsets`
        rows_of_rank = np.array([lists.setdefault(id(program[r]), len(lists)) for r in range(p)], dtype=np.int64)
        first_rank = {row: r for r, row in reversed(list(enumerate(rows_of_rank.tolist())))}
        offsets = np.array([[send.peer_offset for send in program[first_rank[row]][0].sends]
                            for row in range(len(lists))], dtype=np.int64)
        link_count = self.routes.link_count
        total = LinkCounts(np.zeros(link_count, np.int64), np.zeros(link_count, np.int64), np.zeros(link_count), {})
        rows = max(1, CHUNK_MESSAGES // max(1, p - 1))
        for start in range(0, p, rows):
            ranks = np.arange(start, min(p, start + rows))
            src = np.repeat(ranks, p - 1)
            dst = (src + offsets[rows_of_rank[ranks]].ravel()) % p
            part = self._count(hosts[src], hosts[dst], distinct=True, sends_per_rank=p - 1)
            total.any_hop += part.any_hop
            total.endpoint += part.endpoint
            total.arrival_bytes_per_ps += part.arrival_bytes_per_ps
            for route, count in part.routes.items():
                total.routes[route] = total.routes.get(route, 0) + count
        return total

    def _count(self, src: np.ndarray, dst: np.ndarray, distinct: bool, sends_per_rank: int) -> LinkCounts:
        """Route messages `src` -> `dst` (host arrays) and count them per link; `distinct`: no pair
        twice; `sends_per_rank`: how many messages each sender sends at once (sharing its link)."""
        flow_ids = self.flow_ids.ids(src, dst, distinct)  # ECMP hashes them; new ones open connections
        hops, endpoint = self.routes.hops(src, dst, flow_ids)
        link_count = self.routes.link_count
        any_hop = np.zeros(link_count, np.int64)
        ends = np.zeros(link_count, np.int64)
        arrival = np.zeros(link_count)
        sender_share = self.capacity_bytes_per_ps[hops[0]] / sends_per_rank  # every route has a first link
        # one share for all where every sender's link has the same rate (each fabric at thousands of NPUs):
        # then a link's arrival rate is its count times it, and no hop needs its -1 entries masked out
        one_share = float(sender_share[0]) if len(sender_share) and sender_share.min() == sender_share.max() else None
        for hop, is_endpoint in zip(hops, endpoint):
            if one_share is None:
                on_route = hop >= 0
                counted = np.bincount(hop[on_route], minlength=link_count)
                arrival += np.bincount(hop[on_route], weights=sender_share[on_route], minlength=link_count)
            else:  # routes without this hop (-1) counted at index 0, dropped
                counted = np.bincount(hop + 1, minlength=link_count + 1)[1:]
                arrival += counted * one_share
            any_hop += counted
            if is_endpoint:
                ends += counted
        return LinkCounts(any_hop, ends, arrival, self._route_kinds(hops))

    def _route_kinds(self, hops: list[np.ndarray]) -> dict[tuple[int, ...], int]:
        """Messages per kind of route (the kinds of its hops, 0 for none), counted without sorting: each
        route's kinds as the digits of one integer, tallied with `bincount`; or, where so many hops make
        the integer too large (a long ring), found with `np.unique`."""
        kinds = [self._link_kind[hop] for hop in hops]
        base = len(self._kinds)
        if base ** len(hops) >= 2**62:
            routes, tally = np.unique(np.stack(kinds), axis=1, return_counts=True)
            return {tuple(int(kind) for kind in route): int(count) for route, count in zip(routes.T, tally)}
        # 32-bit digits where they fit (half the memory traffic of 64)
        code: np.ndarray = np.zeros(len(hops[0]), np.int32 if base ** len(hops) < 2**31 else np.int64)
        for hop_kinds in reversed(kinds):
            np.multiply(code, base, out=code)
            np.add(code, hop_kinds, out=code)
        tally = np.bincount(code)
        result: dict[tuple[int, ...], int] = {}
        for value in np.flatnonzero(tally):
            digits, rest = [], int(value)
            for _ in hops:
                rest, digit = divmod(rest, base)
                digits.append(digit)
            result[tuple(digits)] = int(tally[value])
        return result

    def _program_counts(self, group: tuple[int, ...],
                        programs: list[Program]) -> list[tuple[LinkCounts, int, int, int]]:
        """Link counts of every message of step programs whose ranks differ (double binary tree), one
        piece per message size: (counts, its wire bytes, its opening, its size); O(messages), which
        such programs keep to O(p x blocks)."""
        by_size: dict[int, tuple[list[int], list[int]]] = {}
        for program in programs:
            for rank, steps in enumerate(program):
                for step in steps:
                    for send in step.sends:
                        sources, targets = by_size.setdefault(send.size_bytes, ([], []))
                        sources.append(group[rank])
                        targets.append(group[(rank + send.peer_offset) % len(group)])
        pieces = []
        for size, (sources, targets) in by_size.items():
            wire = wire_bytes(size, self.mss_bytes, self.header_bytes)
            counts = self._count(np.array(sources, dtype=np.int64), np.array(targets, dtype=np.int64), distinct=False,
                                 sends_per_rank=1)
            pieces.append((counts, wire, int(min(wire, self.init_window_bytes)), size))
        return pieces

    # -- results -----------------------------------------------------------------------------------

    def screen_risks(self, sim_time_ps: int) -> dict[str, float | int | None]:
        """The runs row's TCP signals (module docstring), and `slow_start_share` as `analytical` counts it
        (of all messages, those whose slow start would outlast their transmission)."""
        busiest = 0.0
        if sim_time_ps > 0:
            busiest = float((self.link_bytes / (self.capacity_bytes_per_ps * sim_time_ps)).max())
        return {"max_link_utilisation": busiest, "max_port_flows": self.max_port_flows,
                "slow_start_share": self.slow_start_messages / self.messages if self.messages else None,
                "pfc_pause_phases" if self.pfc else "incast_phases": self.incast_phases}

    def link_bytes_by_link(self) -> dict[Link, int]:
        """Wire bytes of the phases' fluid parts that ended, per link that carried any (`links` table)."""
        links = self.topology.links
        return {links[index]: int(round(self.link_bytes[index])) for index in np.flatnonzero(self.link_bytes)}

