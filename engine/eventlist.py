"""The event list: one heap of (time_ps, seq, source), one instance per simulation.

An event source is any object with a `do_next_event()` method. Sources schedule themselves; a
component keeps at most one pending entry where it can, and timers are deadlines checked lazily
when their entry fires (a moved or cancelled deadline leaves a stale entry that does nothing).
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count
from typing import Callable

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)
class EventSource:
    """Base of anything the event list can wake up (a class, not a Protocol, so that the compiled
    kernel calls `do_next_event` natively)."""

    __slots__ = ()

    def do_next_event(self) -> None:
        """Called when the entry this source scheduled comes due."""
        raise NotImplementedError


class EventList:
    """A discrete-event clock and heap. Ties at equal times run in scheduling order (`seq`)."""

    __slots__ = ("now_ps", "events_run", "heap", "sequence")

    def __init__(self) -> None:
        self.now_ps = 0
        self.events_run = 0
        # Hot-path components push (time_ps, next(sequence), self) onto `heap` directly, saving a
        # method call per event; everything else uses `schedule`.
        self.heap: list[tuple[int, int, EventSource]] = []
        self.sequence = count()

    def schedule(self, source: EventSource, time_ps: int) -> None:
        """Wake `source` at absolute time `time_ps` (never earlier than now)."""
        heappush(self.heap, (time_ps, next(self.sequence), source))

    def call_at(self, time_ps: int, callback: Callable[[], None]) -> None:
        """Run a plain callback at `time_ps` (for slow layers: workloads, starters)."""
        self.schedule(_Callback(callback), time_ps)

    def stop(self) -> None:
        """End `run` after the current event: drop every pending entry."""
        self.heap.clear()

    def pending(self) -> int:
        """Number of entries in the heap, stale ones included."""
        return len(self.heap)

    def run(self, until_ps: int, max_events: int = -1) -> bool:
        """Run events with time <= `until_ps`, at most `max_events` of them if that is not negative.
        Returns True if the heap ran empty (all work done)."""
        heap = self.heap
        pop = heappop  # local binding: this loop is the hottest code in the engine
        events = 0
        while heap:
            if events == max_events:
                self.events_run += events
                return False
            entry = pop(heap)
            time_ps = entry[0]
            if time_ps > until_ps:
                heappush(heap, entry)  # not yet: put it back (once per call, not per event)
                self.events_run += events
                return False
            self.now_ps = time_ps
            entry[2].do_next_event()
            events += 1
        self.events_run += events
        return True


class _Callback(EventSource):
    """Adapts a plain function to the event-source interface."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def do_next_event(self) -> None:
        self.callback()
