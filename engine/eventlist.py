"""The event list: a heap of events and a heap of timer wake-ups, one instance per simulation.

An event source is any object with a `do_next_event()` method. Sources schedule themselves; a
component keeps at most one pending entry where it can, and timers are deadlines checked lazily
when their entry fires (a moved or cancelled deadline leaves a stale entry that does nothing).

Two heaps, one order. Packets and slow layers schedule on the event heap (`schedule`,
`schedule_entry`); per-connection timers (RTO, delayed ACK) on the timer heap (`schedule_timer`).
A connection in use keeps one or two timer entries, which mostly lapse unused (a 200 ms RTO
against microseconds of transfer): on one heap they would outnumber the events that do happen (a
DLRM iteration on 256 NPUs: 131,000 timer entries, at most 642 others) and every packet event
would sift through them. Both heaps draw `seq` from one counter (`next_seq`) and `run` takes
whichever head is first by (time_ps, seq): events run in exactly the order one heap would give.
Both heaps hold `EventEntry` objects and share one sift code (`_push`, `_pop`). The timer heap once
kept its entries in three parallel `array('q')`s (24 bytes an entry against about 64): compiled, an
array's items are read through Python's generic indexing, and a pop and push took 4.8 us at 300,000
timers (the RTO waves of hybrid's 9,216-NPU episodes) against 1.1 us on entry objects.
"""

from __future__ import annotations

from typing import Callable, Final

from mypy_extensions import i64, mypyc_attr

# `next_timer_ps` with no timer pending: later than any simulated time, and below 2**62 so that
# compiled code compares it as a native integer
_NO_TIMER: Final = 1 << 61


@mypyc_attr(allow_interpreted_subclasses=True)
class EventSource:
    """Base of anything the event list can wake up (a class, not a Protocol, so that the compiled
    kernel calls `do_next_event` natively)."""

    __slots__ = ()

    def do_next_event(self) -> None:
        """Called when the entry this source scheduled comes due."""
        raise NotImplementedError


class EventEntry:
    """One pending wake-up on the event heap: `source` at `time_ps`, `seq` its place among entries
    of equal time (the order they were scheduled in). A component with at most one pending event
    (a link) keeps one entry and schedules it again and again; anything else gets a new entry."""

    __slots__ = ("time_ps", "seq", "source", "scheduled_ps")

    # native 64-bit integers: compiled, the sifts compare them without Python int's tag checks
    time_ps: i64
    seq: i64
    scheduled_ps: i64

    def __init__(self, source: EventSource) -> None:
        self.time_ps = 0
        self.seq = 0
        self.source = source
        self.scheduled_ps = 0  # when it was scheduled


class EventList:
    """A discrete-event clock and its two heaps. Ties at equal times run in scheduling order (`seq`).

    The event heap is a binary heap of `EventEntry` objects ordered by (time_ps, seq), sifted here
    rather than by `heapq`: compiled, comparing two entries is two native integer comparisons, where
    `heapq` on (time_ps, seq, source) tuples calls Python's rich comparison on tuples and their
    items (a quarter of a DLRM run's time), and an entry a link reuses costs no tuple per event.
    """

    __slots__ = ("now_ps", "scheduled_ps", "current_seq", "events_run", "heap", "next_seq", "next_timer_ps",
                 "next_timer_seq", "_timers")

    # native 64-bit integers, as the entries' (compiled, `run` compares and copies them without tag checks)
    now_ps: i64
    scheduled_ps: i64
    current_seq: i64
    next_seq: i64
    next_timer_ps: i64
    next_timer_seq: i64

    def __init__(self) -> None:
        self.now_ps = 0
        # when the event being run was scheduled: among events due at one instant, those scheduled
        # earlier run first (a component that runs some of its own work lazily orders it by this)
        self.scheduled_ps = 0
        # The seq of the event being run. `run` leaves an event's entry at the head of the heap while it
        # runs; once the entry has left the head or been scheduled again (a new seq), no entry has it.
        self.current_seq = -1
        self.events_run = 0
        self.heap: list[EventEntry] = []
        self.next_seq = 0  # the seq of the next entry scheduled, on either heap
        # The timer heap; its head's time and seq are kept in `next_timer_ps` / `next_timer_seq` for `run`.
        self.next_timer_ps = _NO_TIMER
        self.next_timer_seq = 0
        self._timers: list[EventEntry] = []

    def schedule(self, source: EventSource, time_ps: int) -> None:
        """Wake `source` at absolute time `time_ps` (never earlier than now)."""
        self.schedule_entry(EventEntry(source), time_ps)

    def schedule_entry(self, entry: EventEntry, time_ps: int) -> None:
        """Put `entry` (not pending, or the one whose event is running) on the event heap for
        `time_ps` (never earlier than now)."""
        seq = self.next_seq
        self.next_seq = seq + 1
        entry.time_ps = time_ps
        entry.seq = seq
        entry.scheduled_ps = self.now_ps
        heap = self.heap
        if heap and heap[0] is entry:
            # the entry running now, still at the head (`run`), scheduled again (a link with more
            # packets on its wire): one sift down instead of a pop and a push
            _sift_down(heap, entry)
        else:
            _push(heap, entry)

    def reserve_seq(self) -> int:
        """A seq for an entry that may be scheduled later (`schedule_entry_seq`) in the place it has now."""
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def schedule_entry_seq(self, entry: EventEntry, time_ps: int, seq: int, scheduled_ps: int) -> None:
        """Put `entry` on the event heap for `time_ps` with a `seq` reserved at `scheduled_ps`."""
        heap = self.heap
        if heap:
            head = heap[0]
            if head.seq == self.current_seq and (time_ps < head.time_ps or (
                    time_ps == head.time_ps and seq < head.seq)):
                # due before the event running now, whose entry `run` keeps at the head: that entry
                # leaves the heap first (it is not pending), so it can neither run again nor be duplicated
                _pop(heap)
        entry.time_ps = time_ps
        entry.seq = seq
        entry.scheduled_ps = scheduled_ps
        _push(heap, entry)

    def schedule_timer(self, source: EventSource, time_ps: int) -> None:
        """As `schedule`, on the timer heap: for deadlines that are mostly moved or cancelled before
        they come (each source keeps at most one or two such entries)."""
        seq = self.next_seq
        self.next_seq = seq + 1
        entry = EventEntry(source)
        entry.time_ps = time_ps
        entry.seq = seq
        entry.scheduled_ps = self.now_ps
        if _push(self._timers, entry) == 0:
            self.next_timer_ps = time_ps
            self.next_timer_seq = seq

    def _pop_timer(self) -> EventSource:
        """Remove the head of the timer heap and return its source."""
        timers = self._timers
        head = _pop(timers)
        self.scheduled_ps = head.scheduled_ps
        self.current_seq = head.seq
        if timers:
            self.next_timer_ps = timers[0].time_ps
            self.next_timer_seq = timers[0].seq
        else:
            self.next_timer_ps = _NO_TIMER
        return head.source

    def call_at(self, time_ps: int, callback: Callable[[], None]) -> None:
        """Run a plain callback at `time_ps` (for slow layers: workloads, starters)."""
        self.schedule(_Callback(callback), time_ps)

    def stop(self) -> None:
        """End `run` after the current event: drop every pending entry."""
        self.heap.clear()
        self._timers.clear()
        self.next_timer_ps = _NO_TIMER

    def pending(self) -> int:
        """Number of entries in both heaps, stale ones included (not the one whose event is running)."""
        heap = self.heap
        running = 1 if heap and heap[0].seq == self.current_seq else 0
        return len(heap) - running + len(self._timers)

    def next_time_ps(self) -> int:
        """Time of the earliest pending entry (call only when `pending()`)."""
        heap = self.heap
        heap_ps = _NO_TIMER
        if heap:
            if heap[0].seq != self.current_seq:
                heap_ps = heap[0].time_ps
            else:  # the head's event is running: the next is the earlier of its children
                for position in range(1, min(3, len(heap))):
                    if heap[position].time_ps < heap_ps:
                        heap_ps = heap[position].time_ps
        return heap_ps if heap_ps < self.next_timer_ps else self.next_timer_ps

    def run(self, until_ps: int, max_events: int = -1) -> bool:
        """Run events with time <= `until_ps`, at most `max_events` of them if that is not negative.
        Returns True if both heaps ran empty (all work done)."""
        heap = self.heap
        events = 0
        while True:  # this loop is the hottest code in the engine
            if heap:
                if events == max_events:
                    break
                entry = heap[0]
                time_ps = entry.time_ps
                timer_ps = self.next_timer_ps
                seq = entry.seq
                if time_ps < timer_ps or (time_ps == timer_ps and seq < self.next_timer_seq):
                    if time_ps > until_ps:
                        break
                    # The entry stays at the head while its source runs: whatever that schedules comes
                    # after it (a later time, or seq; `schedule_entry_seq` takes it out of the heap
                    # otherwise), and `schedule_entry` moves it if it is scheduled again. Else it
                    # leaves the heap now (unless `stop` emptied it).
                    self.now_ps = time_ps
                    self.scheduled_ps = entry.scheduled_ps
                    self.current_seq = seq
                    entry.source.do_next_event()
                    if entry.seq == seq and heap and heap[0] is entry:
                        _pop(heap)
                    events += 1
                    continue
            elif self.next_timer_ps == _NO_TIMER:
                self.events_run += events
                return True
            elif events == max_events:
                break
            time_ps = self.next_timer_ps  # the timer heap's head comes first
            if time_ps > until_ps:
                break
            source = self._pop_timer()
            self.now_ps = time_ps
            source.do_next_event()
            events += 1
        self.events_run += events
        return False


def _push(heap: list[EventEntry], entry: EventEntry) -> int:
    """Add `entry` (its time and seq set) to `heap`, a binary heap ordered by (time_ps, seq); returns
    the position it lands at (0: the new head)."""
    time_ps: i64 = entry.time_ps
    seq: i64 = entry.seq
    heap.append(entry)
    # positions as native 64-bit integers: compiled, a list is then indexed without the checks and
    # tag arithmetic of Python's int (the sifts are a third of a RoCE run's compiled time)
    position: i64 = len(heap) - 1
    while position:  # sift up: parents later than the new entry move down a level
        parent_position: i64 = (position - 1) >> 1
        parent = heap[parent_position]
        if parent.time_ps < time_ps or (parent.time_ps == time_ps and parent.seq < seq):
            break
        heap[position] = parent
        position = parent_position
    heap[position] = entry
    return position


def _pop(heap: list[EventEntry]) -> EventEntry:
    """Remove and return the head of `heap` (which must not be empty)."""
    head = heap[0]
    last = heap.pop()
    if heap:
        _sift_down(heap, last)
    return head


def _sift_down(heap: list[EventEntry], entry: EventEntry) -> None:
    """Put `entry` (its time and seq set) in place of the head of `heap` (not empty), which leaves
    the heap (or is `entry` itself, moved)."""
    time_ps: i64 = entry.time_ps
    seq: i64 = entry.seq
    size: i64 = len(heap)
    position: i64 = 0  # native integers, as in `_push`
    child_position: i64 = 1
    while child_position < size:  # the earlier child moves up a level
        child = heap[child_position]
        right_position: i64 = child_position + 1
        if right_position < size:
            right = heap[right_position]
            if right.time_ps < child.time_ps or (right.time_ps == child.time_ps and right.seq < child.seq):
                child = right
                child_position = right_position
        if time_ps < child.time_ps or (time_ps == child.time_ps and seq < child.seq):
            break
        heap[position] = child
        position = child_position
        child_position = 2 * position + 1
    heap[position] = entry


class _Callback(EventSource):
    """Adapts a plain function to the event-source interface."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def do_next_event(self) -> None:
        self.callback()


class StopFlag:
    """Raised by a callback to end `run_together` after the instant it was raised in."""

    __slots__ = ("raised",)

    def __init__(self) -> None:
        self.raised = False


def run_together(eventlists: list[EventList], until_ps: int, stop: StopFlag, max_events: int = -1) -> bool:
    """Run independent event lists as one clock: instant by instant, every list's events at an instant
    before any list's next one, up to `until_ps` or to the end of an instant at which a callback
    raised `stop` (hybrid's reduced networks, engine/backends/hybrid.py: the full run may act at that
    instant on all of them), or, if `max_events` is not negative, to the end of the instant that
    reaches that many events. Each list's `now_ps` is then the last instant run. Returns True unless
    it stopped for `max_events` (work up to `until_ps` may be left)."""
    events_before = sum(eventlist.events_run for eventlist in eventlists)
    while not stop.raised:
        next_ps = until_ps + 1
        for eventlist in eventlists:
            if eventlist.pending():
                time_ps = eventlist.next_time_ps()
                if time_ps < next_ps:
                    next_ps = time_ps
        if next_ps > until_ps:
            return True
        events_after = 0
        for eventlist in eventlists:
            eventlist.run(next_ps)
            eventlist.now_ps = next_ps
            events_after += eventlist.events_run
        if 0 <= max_events <= events_after - events_before:
            return False
    return True
