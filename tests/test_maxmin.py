"""Max-min fair sharing (engine/system/maxmin.py) against theory: hand-computed allocations, and on
random networks, after every batch of starts and finishes, the incremental update must give the
allocation that a plain progressive filling of everything, in exact rational arithmetic, gives."""

from __future__ import annotations

from fractions import Fraction
from random import Random

import pytest

from engine.system.maxmin import Flow, MaxMinSharing, SharedLink


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
    flows = [Flow(tuple(links[link] for link in path)) for path in paths]
    MaxMinSharing().update([], flows)
    assert [flow.rate_bps for flow in flows] == [0.5, 0.5, 0.5, 1.5]


def test_a_finish_frees_capacity_for_the_flows_it_held_back():
    # Bertsekas and Gallager's example: links of capacity 1 in a row, flow 0 over all three,
    # flows 1, 2, 3 on one link each: every flow gets 1/2. When flow 0 finishes the others get 1.
    links = shared([1, 1, 1])
    long_flow = Flow(tuple(links))
    short_flows = [Flow((link,)) for link in links]
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
    a, b, c = Flow((links[0], links[1])), Flow((links[0],)), Flow((links[0],))
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
    active: list[tuple[Flow, list[int]]] = []
    for _ in range(rng.randint(1, 25)):
        # a batch: some flows finish and some start at one instant (a collective step), often both
        finishing = rng.sample(active, rng.randint(0, len(active))) if active and rng.random() < 0.7 else []
        paths = [rng.choice(candidate_paths) for _ in range(rng.choice([0, 1, 1, 2, 3, 8]))]
        if not finishing and not paths:
            continue
        starting = [(Flow(tuple(links[link] for link in path)), path) for path in paths]
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
