"""Max-min fair sharing (engine/system/maxmin.py) against theory: hand-computed allocations, and on
random networks, after every batch of starts and finishes, the incremental update must give the
allocation that a plain progressive filling of everything, in exact rational arithmetic, gives."""

from __future__ import annotations

from fractions import Fraction
from random import Random

import pytest

from engine.backends.analytical import FluidMessages
from engine.config import LeafSpineNetwork
from engine.eventlist import EventList
from engine.system.maxmin import FluidFlow, MaxMinSharing, SharedLink
from engine.topology import build_topology


def reference_max_min(capacities: list[int], paths: list[list[int]]) -> list[Fraction]:
    """Textbook progressive filling in exact arithmetic: all unfrozen rates rise together; the
    links with the smallest equal share of what is left freeze every unfrozen flow on them."""
    rates: list[Fraction | None] = [None] * len(paths)
    left = [Fraction(capacity) for capacity in capacities]
    while any(rate is None for rate in rates):
        shares = {}
        for link in range(len(capacities)):
            unfrozen = [f for f, path in enumerate(paths) if rates[f] is None and link in path]
            if unfrozen:
                shares[link] = left[link] / len(unfrozen)
        level = min(shares.values())
        for link, share in shares.items():
            if share != level:
                continue
            for f, path in enumerate(paths):
                if rates[f] is None and link in path:
                    rates[f] = level
                    for crossed in path:
                        left[crossed] -= level
    return rates


def shared(capacities: list[int]) -> list[SharedLink]:
    return [SharedLink(float(capacity)) for capacity in capacities]


def test_the_classic_three_link_example():
    # Links A, B (capacity 1) and C (capacity 2); flow 0 crosses A, B, C; flow 1 A; flow 2 B;
    # flow 3 C. A and B offer 1/2 each: flows 0, 1, 2 get 1/2; C's other 3/2 go to flow 3.
    links = shared([1, 1, 2])
    paths = [(0, 1, 2), (0,), (1,), (2,)]
    flows = [FluidFlow(tuple(links[link] for link in path)) for path in paths]
    MaxMinSharing().update([], flows)
    assert [flow.rate_bps for flow in flows] == [0.5, 0.5, 0.5, 1.5]


def test_a_finish_frees_capacity_for_the_flows_it_held_back():
    # Bertsekas and Gallager's example: links of capacity 1 in a row, flow 0 over all three,
    # flows 1, 2, 3 on one link each: every flow gets 1/2. When flow 0 finishes the others get 1.
    links = shared([1, 1, 1])
    long_flow = FluidFlow(tuple(links))
    short_flows = [FluidFlow((link,)) for link in links]
    sharing = MaxMinSharing()
    sharing.update([], [long_flow, *short_flows])
    assert [flow.rate_bps for flow in (long_flow, *short_flows)] == [0.5, 0.5, 0.5, 0.5]
    changed, previous = sharing.update([long_flow], [])
    assert [flow.rate_bps for flow in short_flows] == [1.0, 1.0, 1.0]
    assert set(changed) == set(short_flows) and previous == [0.5, 0.5, 0.5]


def test_a_start_on_a_link_with_slower_flows_changes_only_the_faster_ones():
    # Link 0 (capacity 10) carries flow a, held to 1 by link 1 (capacity 1), and flow b at 9. A
    # new flow c on link 0 shares the 9 left with b: 4.5 each, and a is untouched.
    links = shared([10, 1])
    a, b, c = FluidFlow((links[0], links[1])), FluidFlow((links[0],)), FluidFlow((links[0],))
    sharing = MaxMinSharing()
    sharing.update([], [a, b])
    assert (a.rate_bps, b.rate_bps) == (1.0, 9.0)
    changed, previous = sharing.update([], [c])
    assert (a.rate_bps, b.rate_bps, c.rate_bps) == (1.0, 4.5, 4.5)
    assert changed == [c, b] and previous == [0.0, 9.0]


def random_network(rng: Random) -> tuple[list[int], list[list[int]]]:
    """A few links of mixed capacities and a pool of candidate paths over them (1 to 4 hops)."""
    capacities = [rng.choice([1, 2, 3, 5, 10, 25, 40, 100]) for _ in range(rng.randint(2, 9))]
    paths = [rng.sample(range(len(capacities)), rng.randint(1, min(4, len(capacities))))
             for _ in range(rng.randint(3, 30))]
    return capacities, paths


@pytest.mark.parametrize("seed", range(300))
def test_incremental_updates_equal_a_full_progressive_filling(seed):
    rng = Random(seed)
    capacities, candidate_paths = random_network(rng)
    links = shared(capacities)
    sharing = MaxMinSharing()
    active: list[tuple[FluidFlow, list[int]]] = []
    for _ in range(rng.randint(1, 25)):
        # a batch: some flows finish and some start at one instant (a collective step), often both
        finishing = rng.sample(active, rng.randint(0, len(active))) if active and rng.random() < 0.7 else []
        paths = [rng.choice(candidate_paths) for _ in range(rng.choice([0, 1, 1, 2, 3, 8]))]
        if not finishing and not paths:
            continue
        starting = [(FluidFlow(tuple(links[link] for link in path)), path) for path in paths]
        before = {flow: flow.rate_bps for flow, _ in active}
        active = [entry for entry in active if entry not in finishing]
        changed, previous = sharing.update([flow for flow, _ in finishing], [flow for flow, _ in starting])
        active += starting
        expected = reference_max_min(capacities, [path for _, path in active])
        for (flow, _), rate in zip(active, expected):
            assert flow.rate_bps == pytest.approx(float(rate), rel=1e-9)
        # exactly the flows whose rate moved are reported, with the rate they had
        moved = {flow for flow, _ in active if before.get(flow, 0.0) != flow.rate_bps}
        assert set(changed) == moved
        assert previous == [before.get(flow, 0.0) for flow in changed]


def reference_completions(topology, mss_bytes: int, sends: list[tuple[int, int, int, int]]) -> list[Fraction]:
    """Arrival time (ps, exact) of each message of `sends` = (start_ps, src, dst, payload bytes), in
    send order, in a fluid simulation that recomputes every rate at every event: a pair's messages
    one after another, each at its max-min fair share, arriving the path's latency after its last
    bit has left (propagation, plus one packet's serialisation per hop after the first)."""
    paths = [topology.path(src, dst, index) for index, (_, src, dst, _) in enumerate(sends)]
    links = sorted({link for path in paths for link in path}, key=lambda link: link.name)
    capacities = [link.rate_bps for link in links]
    wire_bits = [8 * (size + 40 * -(-size // mss_bytes)) for _, _, _, size in sends]
    latency_ps = [sum(link.latency_ps for link in path) + sum(
        8 * (min(mss_bytes, size) + 40) * 10**12 // link.rate_bps for link in path[1:])
        for path, (_, _, _, size) in zip(paths, sends)]
    remaining = [Fraction(bits) for bits in wire_bits]
    sent, done = [False] * len(sends), [False] * len(sends)
    arrival: list[Fraction] = [Fraction(0)] * len(sends)
    now = Fraction(0)
    while not all(done):
        for index, (start_ps, _, _, _) in enumerate(sends):
            sent[index] = sent[index] or start_ps <= now
        busy_pairs, active = set(), []
        for index, (_, src, dst, _) in enumerate(sends):  # the first unfinished sent message of each pair
            if sent[index] and not done[index] and (src, dst) not in busy_pairs:
                busy_pairs.add((src, dst))
                active.append(index)
        rates = reference_max_min(capacities, [[links.index(link) for link in paths[i]] for i in active])
        rates_per_ps = [rate / 10**12 for rate in rates]  # b/s -> bits per ps
        next_start = min((Fraction(start) for start, *_ in sends if Fraction(start) > now), default=None)
        step = min((remaining[i] / rate for i, rate in zip(active, rates_per_ps)), default=None)
        if step is None or (next_start is not None and next_start - now < step):
            step = next_start - now
        for i, rate in zip(active, rates_per_ps):
            remaining[i] -= rate * step
            if remaining[i] == 0:
                done[i] = True
                arrival[i] = now + step + latency_ps[i]
        now += step
    return arrival


@pytest.mark.parametrize("seed", range(40))
def test_analytical_messages_time_equal_a_fluid_simulation_that_recomputes_everything(seed):
    # Leaf-spine of 8 hosts (4 per leaf, 2 spines: ECMP), messages started at a few instants (so
    # many at once), pairs repeated (queued behind each other). The backend rounds each
    # completion to a whole picosecond, and so the instants at which the rates change: arrival
    # times may differ from the exact ones by a picosecond or two (1 at most over these seeds).
    rng = Random(seed)
    uplink_gbps = rng.choice([25, 100])
    net = LeafSpineNetwork(npus=8, hosts_per_leaf=4, spines=2, link_gbps=100,
                           uplink_gbps=uplink_gbps, link_latency_us=1)
    eventlist = EventList()
    topology = build_topology(eventlist, net, seed)
    messages = FluidMessages(eventlist, topology, mss_bytes=1460)
    instants_ps = [rng.randrange(0, 20_000_000) for _ in range(4)]
    sends = sorted((rng.choice(instants_ps), *rng.sample(range(8), 2), rng.randint(1, 300_000))
                   for _ in range(rng.randint(2, 30)))
    for start_ps, src, dst, size in sends:
        eventlist.call_at(start_ps, lambda src=src, dst=dst, size=size: messages.send(src, dst, size, lambda: None))
    eventlist.run(10**15)
    expected = reference_completions(build_topology(EventList(), net, seed), 1460, sends)
    for record, arrival_ps in zip(messages.records, expected):
        assert abs(record.end_ps - arrival_ps) <= 2, (record.flow_id, record.end_ps, float(arrival_ps))
