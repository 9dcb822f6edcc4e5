"""The packet engine at scale: what an idle connection holds, where timers wait, and that neither
changes the order of events.

Speed and bytes are measured by benchmarks/bench_packet_scale.py, never asserted here; these tests
check the structure that keeps them low.
"""

from __future__ import annotations

import gc
import heapq
from itertools import count
from random import Random

import pytest

from engine import load_config
from engine.eventlist import EventList, EventSource
from engine.simulation import Simulation


class _Recorder(EventSource):
    """Records each wake-up and schedules follow-ups from a seeded script (ties included)."""

    __slots__ = ("name", "eventlist", "log", "rng", "on_timer_heap")

    def __init__(self, name: int, eventlist: EventList, log: list, rng: Random, on_timer_heap: bool) -> None:
        self.name = name
        self.eventlist = eventlist
        self.log = log
        self.rng = rng
        self.on_timer_heap = on_timer_heap

    def do_next_event(self) -> None:
        self.log.append((self.eventlist.now_ps, self.name))
        if len(self.log) < 3_000:
            self.schedule(self.eventlist.now_ps + self.rng.choice((0, 0, 1, 5, 40)))

    def schedule(self, time_ps: int) -> None:
        if self.on_timer_heap:
            self.eventlist.schedule_timer(self, time_ps)
        else:
            self.eventlist.schedule(self, time_ps)


def _one_heap_order(script_seed: int, sources: int) -> list:
    """The reference: the same script on a single heap of (time_ps, seq, name)."""
    rng, sequence, heap, log, now_ps = Random(script_seed), count(), [], [], 0
    for name in range(sources):
        heapq.heappush(heap, (rng.randrange(10), next(sequence), name))
    while heap:
        now_ps, _, name = heapq.heappop(heap)
        log.append((now_ps, name))
        if len(log) < 3_000:
            heapq.heappush(heap, (now_ps + rng.choice((0, 0, 1, 5, 40)), next(sequence), name))
    return log


def test_timer_heap_and_event_heap_run_in_the_order_of_one_heap():
    """Sources split between the two heaps, many at equal times: the merged order is the single
    heap's (time, seq) order, whichever heap each entry sits on."""
    for seed in range(5):
        eventlist, rng, log = EventList(), Random(seed), []
        split = Random(seed + 100)
        recorders = [_Recorder(name, eventlist, log, rng, on_timer_heap=split.random() < 0.5) for name in range(40)]
        for recorder in recorders:
            recorder.schedule(rng.randrange(10))
        assert eventlist.run(10**9)
        assert log == _one_heap_order(seed, 40)
        assert eventlist.events_run == len(log) and eventlist.pending() == 0


def test_run_stops_at_the_time_limit_and_resumes_in_order():
    """`until_ps` and `max_events` cut the merged order anywhere; running on gives the same order."""
    eventlist, rng, log = EventList(), Random(3), []
    split = Random(103)
    recorders = [_Recorder(name, eventlist, log, rng, on_timer_heap=split.random() < 0.5) for name in range(40)]
    for recorder in recorders:
        recorder.schedule(rng.randrange(10))
    until_ps = 0
    while not eventlist.run(until_ps, max_events=7):
        assert eventlist.now_ps <= until_ps
        if eventlist.next_time_ps() > until_ps:
            until_ps += 3
    assert log == _one_heap_order(3, 40)


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_cyclic_collector_is_off_while_the_simulation_runs_and_restored_after(enabled_before):
    sim = Simulation(load_config({"network": {"npus": 2}}))
    seen = []
    sim.eventlist.call_at(5, lambda: seen.append(gc.isenabled()))
    was_enabled = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        sim.run()
        assert seen == [False]
        assert gc.isenabled() == enabled_before
    finally:
        (gc.enable if was_enabled else gc.disable)()
