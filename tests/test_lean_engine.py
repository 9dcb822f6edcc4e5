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
from scenario import build_path

from engine import load_config, run
from engine.eventlist import EventEntry, EventList, EventSource, StopFlag, run_together
from engine.simulation import Simulation
from engine.system.messages import MessageLog, flow_rows
from engine.transport import TcpReceiver, TcpSender
from engine.units import PS_PER_US

MSS = 1460


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


class _EntryReuser(EventSource):
    """As `_Recorder` on the event heap, but scheduling its one `EventEntry` again and again (a link's
    way), from within its own event; it also records what `pending()` and `next_time_ps()` say then."""

    __slots__ = ("name", "eventlist", "log", "rng", "entry", "seen")

    def __init__(self, name: int, eventlist: EventList, log: list, rng: Random, seen: list) -> None:
        self.name, self.eventlist, self.log, self.rng, self.seen = name, eventlist, log, rng, seen
        self.entry = EventEntry(self)

    def do_next_event(self) -> None:
        self.log.append((self.eventlist.now_ps, self.name))
        self.seen.append((self.eventlist.pending(), self.eventlist.next_time_ps() if self.eventlist.pending() else -1))
        if len(self.log) < 3_000:
            self.eventlist.schedule_entry(self.entry, self.eventlist.now_ps + self.rng.choice((0, 0, 1, 5, 40)))


def test_an_entry_scheduled_again_in_its_own_event_runs_in_the_order_of_one_heap():
    """The running entry stays at the head of the heap while its source runs (EventList.run): scheduled
    again from there, the order is still the single heap's (time, seq) order, and `pending()` and
    `next_time_ps()` leave the running entry out (the reference: what is left on the single heap)."""
    for seed in range(5):
        eventlist, rng, log, seen = EventList(), Random(seed), [], []
        reusers = [_EntryReuser(name, eventlist, log, rng, seen) for name in range(40)]
        for reuser in reusers:
            eventlist.schedule_entry(reuser.entry, rng.randrange(10))
        assert eventlist.run(10**9)
        assert log == _one_heap_order(seed, 40)
        # the reference: what the single heap holds once the event is popped, before it schedules again
        rng, sequence, heap, expected_seen = Random(seed), count(), [], []
        for name in range(40):
            heapq.heappush(heap, (rng.randrange(10), next(sequence), name))
        while heap:
            now_ps, _, name = heapq.heappop(heap)
            expected_seen.append((len(heap), heap[0][0] if heap else -1))
            if len(expected_seen) < 3_000:
                heapq.heappush(heap, (now_ps + rng.choice((0, 0, 1, 5, 40)), next(sequence), name))
        assert seen == expected_seen
        assert eventlist.pending() == 0


class _Reserver(EventSource):
    """At its event, schedules `early` at the same instant with a seq reserved before its own."""

    __slots__ = ("eventlist", "log", "early", "reserved_seq", "entry")

    def __init__(self, eventlist: EventList, log: list, early: EventEntry, reserved_seq: int) -> None:
        self.eventlist, self.log, self.early, self.reserved_seq = eventlist, log, early, reserved_seq
        self.entry = EventEntry(self)

    def do_next_event(self) -> None:
        self.log.append("reserver")
        now_ps = self.eventlist.now_ps
        self.eventlist.schedule_entry_seq(self.early, now_ps, self.reserved_seq, now_ps)


class _Named(EventSource):
    __slots__ = ("name", "log")

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def do_next_event(self) -> None:
        self.log.append(self.name)


def test_an_entry_given_a_seq_before_the_running_one_runs_next_and_the_running_one_not_again():
    """`schedule_entry_seq` at the current instant with a seq reserved earlier than the running
    event's: it runs right after it (the single heap's order), and the running event once."""
    eventlist, log = EventList(), []
    reserved_seq = eventlist.reserve_seq()  # 0: before everything scheduled below
    early = EventEntry(_Named("early", log))
    reserver = _Reserver(eventlist, log, early, reserved_seq)
    eventlist.schedule_entry(reserver.entry, 10)
    eventlist.schedule(_Named("later", log), 10)
    assert eventlist.run(100)
    assert log == ["reserver", "early", "later"]
    assert eventlist.pending() == 0


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


def test_run_together_runs_lists_as_one_clock_and_stops_after_the_instant_raised():
    """`run_together`: two lists' events at interleaved instants run in time order across the lists,
    all of an instant in both before any later one; a callback raising the flag at 30 ps ends the run
    after the 30 ps events of both lists, with both clocks at 30 ps; run again, it goes to `until_ps`."""
    first, second, log, stop = EventList(), EventList(), [], StopFlag()
    for eventlist, name, times in ((first, "a", (10, 30, 50)), (second, "b", (20, 30, 40, 60))):
        for time_ps in times:
            eventlist.call_at(time_ps, lambda name=name, time_ps=time_ps: log.append((time_ps, name)))
    first.call_at(30, lambda: setattr(stop, "raised", True))
    run_together([first, second], 55, stop)
    assert log == [(10, "a"), (20, "b"), (30, "a"), (30, "b")]
    assert first.now_ps == second.now_ps == 30
    stop.raised = False
    run_together([first, second], 55, stop)
    assert log[4:] == [(40, "b"), (50, "a")] and second.next_time_ps() == 60  # past 55: left pending


def test_run_together_in_slices_ends_each_after_the_instant_that_reaches_max_events():
    """With `max_events`, `run_together` returns False after the instant whose events reach that many
    (all of that instant run, in both lists), and True once it has run up to `until_ps`: run again and
    again, it gives the order one call gives (hybrid runs its reduced networks so, for signal handlers)."""
    first, second, log = EventList(), EventList(), []
    for eventlist, name, times in ((first, "a", (10, 30, 50)), (second, "b", (20, 30, 40, 60))):
        for time_ps in times:
            eventlist.call_at(time_ps, lambda name=name, time_ps=time_ps: log.append((time_ps, name)))
    slices = []
    while True:
        done = run_together([first, second], 55, StopFlag(), max_events=2)
        slices.append((len(log), done))
        if done:
            break
    # 10 and 20 (2 events), then 30 in both (2), then 40 and 50 (2): each slice ends at 2; the last finds none left
    assert slices == [(2, False), (4, False), (6, False), (6, True)]
    assert log == [(10, "a"), (20, "b"), (30, "a"), (30, "b"), (40, "b"), (50, "a")] and first.now_ps == 50


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_cyclic_collector_is_off_while_a_run_runs_and_restored_after(enabled_before, monkeypatch):
    """`engine.run` pauses Python's cyclic collector (each full collection walks every live object:
    40 % of a 256-NPU packet run) and leaves it as it found it."""
    seen = []
    real_run = Simulation.run

    def observed_run(sim: Simulation) -> None:
        seen.append(gc.isenabled())
        real_run(sim)

    monkeypatch.setattr(Simulation, "run", observed_run)
    was_enabled = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        run({"network": {"npus": 2}, "workload": {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 1000}})
        assert seen == [False]
        assert gc.isenabled() == enabled_before
    finally:
        (gc.enable if was_enabled else gc.disable)()


def test_an_idle_connection_holds_no_scoreboard_queue_or_list():
    """SACK recovery fills the sender's scoreboard and recovery lists and the receiver's
    out-of-order blocks; once everything is acknowledged they are released (None), as is the list
    of messages awaiting delivery: an idle connection keeps only scalars, routes and its windows."""
    lost = {100, 102, 104}  # three holes in one window: SACK recovery
    path = build_path(latency_us=10, should_drop=lambda index, pkt: index in lost)
    sender, receiver = path.sender, path.receiver
    busy_fields = {"sacked": False, "recovery_retransmits": False, "out_of_order": False, "later_messages": False}
    path.send(400 * MSS)
    path.send(100 * MSS)  # a second message queued behind the first
    for step in range(1, 200):
        path.run_s(step * 1e-5)
        for name in busy_fields:
            owner = receiver if name in ("out_of_order", "later_messages") else sender
            busy_fields[name] |= getattr(owner, name) is not None
    assert len(path.delivered_ps) == 2 and sender.snd_una == sender.snd_max == 500 * MSS
    assert sender.retransmits == len(lost) and sender.timeouts == 0  # repaired by SACK recovery
    assert all(busy_fields.values()), busy_fields  # each was in use while the connection was busy
    assert sender.sacked is None and sender.recovery_retransmits is None and sender.lost_retransmits is None
    assert receiver.out_of_order is None
    assert receiver.on_next_message is None and receiver.later_messages is None


def test_connection_timers_wait_on_the_timer_heap_not_among_packet_events():
    """Mid-run, every connection's RTO wake-up is on the timer heap; the event heap holds links
    and callbacks only, so its size follows the links busy, not the connections open."""
    sim = Simulation(load_config({"network": {"npus": 16},
                                  "workload": {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 20_000}}),
                     models_host_stack=True)
    for src in range(16):
        for dst in range(16):
            if src != dst:
                sim.open_connection(src, dst).send_message(20_000, lambda: None)
    sim.eventlist.run(3 * PS_PER_US)
    endpoints = (TcpSender, TcpReceiver)
    assert not any(isinstance(entry.source, endpoints) for entry in sim.eventlist.heap)
    assert sim.eventlist.pending() - len(sim.eventlist.heap) >= len(sim.connections) == 240  # the timer heap's entries
    assert len(sim.eventlist.heap) <= len(sim.topology.links)


def test_flow_columns_hold_the_flow_rows():
    """`run(config, flow_columns=True)` (what the sweep stores) gives the flows table as typed
    arrays holding exactly the rows `run(config)` gives, NaN where a row has None (here: messages
    still in flight when the time limit stops the run); every other table is the same."""
    config = {"engine": {"max_sim_time_s": 0.00002},
              "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100},
              "workload": {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 30_000}}
    as_rows, as_columns = run(config), run(config, flow_columns=True)
    assert ({name: len(column) for name, column in as_columns["flows"].items()}
            == {name: 56 for name in as_rows["flows"][0]})
    assert flow_rows(as_columns["flows"]) == as_rows["flows"]
    assert any(row["end_s"] is None for row in as_rows["flows"]) and any(row["end_s"] for row in as_rows["flows"])
    for table in ("runs", "collectives", "layers"):
        for row in as_rows[table] + as_columns[table]:
            row.pop("wall_s", None), row.pop("events_per_s", None)
        assert as_rows[table] == as_columns[table]


def test_message_log_holds_every_message_across_its_batches():
    """The log gathers messages in lists and moves them to its arrays 4,096 at a time; messages
    finish in any order. Every column holds what was logged, by flow_id, wherever the batch
    boundaries fell."""
    log, rng = MessageLog(), Random(5)
    sent = [(rng.randrange(64), rng.randrange(64), rng.randrange(1, 10**6), rng.randrange(10**12))
            for _ in range(10_001)]
    ended = {}
    for flow_id, (src, dst, size, start_ps) in enumerate(sent):
        assert log.add(src, dst, size, start_ps) == flow_id
        if flow_id % 3 and rng.random() < 0.9:  # finish an earlier message, in no particular order
            done = rng.randrange(flow_id + 1)
            if done not in ended:
                ended[done] = sent[done][3] + rng.randrange(1, 10**9)
                log.finish(done, ended[done], retransmits=1 if done % 7 == 0 else 0)
    columns = log.columns()
    assert len(log) == len(sent) and all(len(column) == len(sent) for column in columns.values())
    assert list(zip(columns["src"], columns["dst"], columns["bytes"])) == [row[:3] for row in sent]
    assert list(columns["start_s"]) == [start_ps / 10**12 for *_, start_ps in sent]
    assert [end_s == end_s for end_s in columns["end_s"]] == [flow_id in ended for flow_id in range(len(sent))]
    assert [record.end_ps for record in log] == [ended.get(flow_id, -1) for flow_id in range(len(sent))]
    assert sum(columns["retransmits"]) == sum(1 for flow_id in ended if flow_id % 7 == 0)
