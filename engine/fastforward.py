"""`engine.fast_forward`: skip whole periods of a packet simulation whose state repeats exactly.

When every busy connection's packets, windows, timers and every busy link's queue and wire are the
same at two instants `t_a` and `t_b = t_a + P`, measured from each instant (times less the instant,
sequence numbers less the connection's snd_una), the simulation is deterministic, so it would repeat
the same events every P until something from outside the pattern comes: a message's end, a new
message, a compute delay's end, the time limit. Fast-forward then moves every busy connection and
link k periods ahead at once: every pending network event and timer later by k P, every sequence
number of a connection (its packets', its sender's and receiver's) on by k times the bytes it moved
in a period, every counter (packets, bytes, ACKs) on by k times its growth in a period, and the
clock to `t_b + k P`. k is the largest that keeps the next period clear of everything outside the
pattern, so each connection's TCP state is the one the exact run would reach: consistent by
construction, not estimated.

Looking for a period: every so many events (`FIRST_GAP_EVENTS`, doubling while nothing is found) the
run steps instant by instant through the packets the busiest host interface hands on, and takes a cheap
fingerprint of each (that link's backlog and wire, the number of pending events); a gap between two
instants of one fingerprint over which the last instants' fingerprints repeated too is a candidate
period, checked first on a summary of every busy connection and link, then on the full state, twice one
period apart. The work of attempts that find nothing is kept within `DETECTION_WORK_PER_EVENT` of the
events run or skipped (counted in items of state looked at, never in wall time: a run's rows do not
depend on the machine).

What is not periodic is handled so:
- the congestion window, which NewReno grows on every ACK whether or not it limits the sender, is
  credited for the k periods' ACKs (slow start: one MSS each, exactly; congestion avoidance: the
  closed form of cwnd += MSS^2 / cwnd), and a jump is made only if the window cannot have limited
  the sender in the period (the flight plus a period's bytes fits in it) nor the pacing rate of TCP
  Small Queues (the limit stays at its cap with a margin of 2 on the smoothed RTT);
- retransmission-timer wake-ups, set to deadlines that each ACK moves later, are not part of the
  pattern: a busy connection's move with it (they only re-arm), an idle one's that fall in the
  skipped span are dropped, as the exact run would have run them for nothing.

Not covered (a run with these keys is refused by `engine.checks`): other congestion controls than
NewReno, RACK-TLP, HyStart++, random loss, transmit jitter, RoCE, the ring topology. A period with a
drop, an ECN mark, a retransmission, a SACK block or an out-of-order segment is never steady.
Ties between a moved event and one outside the pattern at the same picosecond may run in another
order than the exact run's; event counts differ (the skipped events are not counted in
`events_run`; `FastForward.skipped_events` estimates them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from .eventlist import EventEntry, EventList
from .links import HostNic, Link, Packet
from .transport.cc import UNSET_SSTHRESH
from .transport.tcp import TcpConnection, tsq_limit_bytes

if TYPE_CHECKING:  # the simulation builds its FastForward: a type here, not an import at run time
    from .simulation import Simulation

_NO_EVENT: Final = -1  # `TcpSender.timer_event_ps` / `TcpReceiver.timer_event_ps` with no wake-up pending
_NO_TIMER: Final = 1 << 61  # `EventList.next_timer_ps` with no timer pending
FIRST_GAP_EVENTS: Final = 1 << 14  # events run between two attempts at first, and after a jump
MAX_GAP_EVENTS: Final = 1 << 16  # the gap doubles after each failed attempt, up to this
SNAPSHOTS_PER_ATTEMPT: Final = 256  # instants of the anchor link looked at in one attempt
EARLIER_INSTANTS: Final = 4  # instants of a fingerprint whose distance from the latest is a candidate period
REPEATED_INSTANTS: Final = 16  # a candidate period must have repeated the fingerprints of this many instants
CANDIDATES_PER_ATTEMPT: Final = 4  # candidate periods checked (a summary, then the full state) in one attempt
MIN_JUMP_PERIODS: Final = 2  # fewer periods to skip than this: not worth a jump
# detection work allowed per event run or skipped (an item of state looked at in Python costs 10-20 events)
DETECTION_WORK_PER_EVENT: Final = 0.01
WORK_PER_INSTANT: Final = 4  # an instant stepped through on its own (a call of `run`, its fingerprint)
SRTT_MARGIN: Final = 2  # the smoothed RTT may grow by this factor within a period (TSQ pacing check)

# the kinds of event sources that belong to the network (all others are outside the pattern)
_LINK, _QDISC, _SENDER, _RECEIVER = 0, 1, 2, 3


class _NotSteady(Exception):
    """The state at an instant cannot be part of a steady pattern (a loss recovery, SACK blocks...)."""


class FastForward:
    """Runs a packet simulation (`Simulation.run` with `engine.fast_forward`), jumping over whole
    periods of an exactly repeating state (module docstring). `jumps`, `skipped_ps` and
    `skipped_events` (an estimate: the periods' events times k) say what it skipped."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.eventlist: EventList = sim.eventlist
        self.links: list[Link] = sim.topology.links
        self.connections: list[TcpConnection] = sim.connections
        # id(event source) -> (kind, index): what belongs to the network (links, qdisc wake-ups, TCP timers)
        self._labels: dict[int, tuple[int, int]] = {}
        self._labelled_connections = 0
        for index, link in enumerate(self.links):
            self._labels[id(link)] = (_LINK, index)
            if isinstance(link, HostNic):
                self._labels[id(link._wakeup.source)] = (_QDISC, index)
        self._gap_events = FIRST_GAP_EVENTS
        self.jumps = 0
        self.attempts = 0
        self.skipped_ps = 0
        self.skipped_events = 0
        self.refusals: dict[str, int] = {}  # why attempts found no jump, and how often
        # connections, links, entries and packets the summaries and snapshots of attempts that found no
        # jump looked at: kept within DETECTION_WORK_PER_EVENT of the events run or skipped, so that a run
        # with nothing to skip pays little for looking
        self.work = 0

    # -- the run loop -----------------------------------------------------------------------

    def run(self, until_ps: int) -> None:
        """As `Simulation.run`: until no event is left or `until_ps` (then `time_limit_reached`)."""
        eventlist = self.eventlist
        while not eventlist.run(until_ps, self._gap_events):
            if eventlist.next_time_ps() > until_ps:
                self.sim.time_limit_reached = True
                return
            if self.work > DETECTION_WORK_PER_EVENT * (eventlist.events_run + self.skipped_events):
                continue  # over the detection budget: simulate on until the events (run or skipped) catch up
            self.attempts += 1
            work_before = self.work
            if self._attempt(until_ps):
                self.work = work_before  # a jump pays for the looking that found it
                self._gap_events = FIRST_GAP_EVENTS
            else:
                self._gap_events = min(2 * self._gap_events, MAX_GAP_EVENTS)

    def _label_connections(self) -> None:
        """Label the senders and receivers of the connections opened since the last call."""
        connections = self.connections
        for index in range(self._labelled_connections, len(connections)):
            self._labels[id(connections[index].sender)] = (_SENDER, index)
            self._labels[id(connections[index].receiver)] = (_RECEIVER, index)
        self._labelled_connections = len(connections)

    def _attempt(self, until_ps: int) -> bool:
        """Look for a period at the ends of the instants at which an anchor link hands on a packet,
        and jump if one is found. Runs events meanwhile; False if no jump was made."""
        self._label_connections()
        eventlist = self.eventlist
        # the busiest host interface (its backlog follows its senders' TCP Small Queues turns, where a
        # switch port fed at its own rate may hold a constant queue that shows no period), else link
        anchor = max((link for link in self.links if link._wire_head is not None),
                     key=lambda link: (isinstance(link, HostNic), link.bytes_sent), default=None)
        if anchor is None:
            return self._refuse("no packet on any wire")
        seen: dict[tuple, list[int]] = {}  # cheap fingerprint of an instant -> the instants that had it
        fingerprints: dict[int, tuple] = {}  # instant -> its fingerprint
        order: list[int] = []  # the instants looked at, in order
        tried: set[int] = set()  # candidate periods confirmed or refuted
        for _ in range(SNAPSHOTS_PER_ATTEMPT):
            if anchor._wire_head is None:
                return self._refuse("the anchor link fell idle")
            now = anchor._event.time_ps
            if now > until_ps or eventlist.run(now):
                return self._refuse("the run ended")
            self.work += WORK_PER_INSTANT
            fingerprint = self._fingerprint(anchor, now)
            instants = seen.setdefault(fingerprint, [])
            # a candidate period: the shortest one not tried yet since one of the last few instants of the
            # same fingerprint, over which the last instants' fingerprints repeated too
            period_ps = next((now - earlier for earlier in reversed(instants[-EARLIER_INSTANTS:])
                              if now - earlier not in tried and self._repeats(fingerprints, order, now - earlier)), 0)
            instants.append(now)
            fingerprints[now] = fingerprint
            order.append(now)
            if not period_ps:
                continue
            tried.add(period_ps)
            # confirm it: first on a summary of the state one period on, then on the full state
            try:
                summary = self._summary(now)
                una = self._busy_una()
                if not self._run_to(now + period_ps, until_ps):
                    return self._refuse("the run ended")
                if summary == self._summary(now + period_ps):
                    moved = {index: snd_una - una.get(index, snd_una) for index, snd_una in self._busy_una().items()}
                    # room for a jump after the period the full check takes, before paying for that check
                    if self._room_periods(now + period_ps, period_ps, moved, until_ps) < MIN_JUMP_PERIODS + 1:
                        return self._refuse("fewer than MIN_JUMP_PERIODS periods before an event outside the pattern")
                    state_a = self._snapshot(now + period_ps)
                    if not self._run_to(now + 2 * period_ps, until_ps):
                        return self._refuse("the run ended")
                    state_b = self._snapshot(now + 2 * period_ps)
                    if state_a[0] == state_b[0]:
                        return self._jump(state_a, state_b, now + period_ps, now + 2 * period_ps, until_ps)
            except _NotSteady as error:
                return self._refuse(str(error))
            self._refuse("a candidate period did not repeat")
            if len(tried) == CANDIDATES_PER_ATTEMPT:
                return False
            seen.clear()  # the clock has moved on a period or two: start the history afresh
            fingerprints.clear()
            order.clear()
        return self._refuse("no period within the instants looked at")

    @staticmethod
    def _repeats(fingerprints: dict[int, tuple], order: list[int], period_ps: int) -> bool:
        """Whether the last `REPEATED_INSTANTS` instants looked at (`order`) each had the fingerprint of
        an instant `period_ps` before them."""
        return len(order) >= REPEATED_INSTANTS and all(
            fingerprints.get(instant - period_ps) == fingerprints[instant] for instant in order[-REPEATED_INSTANTS:])

    def _run_to(self, time_ps: int, until_ps: int) -> bool:
        """Run every event up to `time_ps`; False if that passes `until_ps` or the run ends."""
        return time_ps <= until_ps and not self.eventlist.run(time_ps)

    def _refuse(self, reason: str) -> bool:
        """Count why an attempt or a jump was given up (`refusals`, for benchmarks); False."""
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        return False

    def _fingerprint(self, anchor: Link, now_ps: int) -> tuple:
        """A cheap description of the instant: the anchor's backlog and wire ends, and the events pending."""
        head, tail = anchor._wire_head, anchor._wire_tail
        wire = (head.arrival_ps - now_ps, tail.arrival_ps - now_ps) if head is not None and tail is not None else ()
        return anchor.busy_until_ps - now_ps, wire, len(self.eventlist.heap)

    # -- the state, relative to an instant ----------------------------------------------------

    def _active(self, connection: TcpConnection) -> bool:
        """Whether `connection` has anything out or to do (else its state is left as it is)."""
        sender, receiver = connection.sender, connection.receiver
        return bool(sender.snd_max > sender.snd_una or sender.snd_nxt < sender.stream_end
                    or receiver.unacked_segments or sender.tsq_wake_ps or sender.waiting_for_room)

    def _summary(self, now_ps: int) -> tuple:
        """A part of `_snapshot`'s signature that is cheap to take (no packet-by-packet walk): the busy
        connections' windows, timers and RTT estimates, and the busy links' backlogs and wire ends."""
        self._label_connections()  # connections opened since the attempt began
        parts: list[tuple] = []
        self.work += len(self.connections) + len(self.links)
        for index, connection in enumerate(self.connections):
            if not self._active(connection):
                continue
            sender, receiver = connection.sender, connection.receiver
            if sender.in_recovery or sender.sacked is not None or receiver.out_of_order is not None:
                raise _NotSteady("a connection in loss recovery")
            base = sender.snd_una
            parts.append((index, sender.snd_nxt - base, sender.snd_max - base, receiver.rcv_nxt - base,
                          sender.rtt.srtt_ps, sender.rtt.rttvar_ps, sender.bytes_below_tcp,
                          sender.tsq_wake_ps - now_ps if sender.tsq_wake_ps else None, receiver.unacked_segments))
        for index, link in enumerate(self.links):
            head, tail = link._wire_head, link._wire_tail
            if head is not None and tail is not None:
                parts.append((index, link.busy_until_ps - now_ps, head.arrival_ps - now_ps, tail.arrival_ps - now_ps))
        return tuple(parts)

    def _busy_una(self) -> dict[int, int]:
        """snd_una of every busy connection, by its index."""
        return {index: connection.sender.snd_una for index, connection in enumerate(self.connections)
                if self._active(connection)}

    def _snapshot(self, now_ps: int) -> tuple[tuple, dict[str, Any]]:
        """(signature, counters) at `now_ps`: the signature holds everything that decides what
        happens next, relative to `now_ps`; the counters are absolute, for the jump."""
        self._label_connections()
        labels = self._labels
        eventlist = self.eventlist
        self.work += len(self.connections) + len(self.links) + len(eventlist.heap) + len(eventlist._timers)
        active = [index for index, connection in enumerate(self.connections) if self._active(connection)]
        una = {index: self.connections[index].sender.snd_una for index in active}

        def rel(time_ps: int) -> int | None:
            return time_ps - now_ps if time_ps else None

        def packet_signature(pkt: Packet) -> tuple:
            if pkt.sack_blocks:
                raise _NotSteady("a SACK block in flight")
            kind, index = labels[id(pkt.route[-1])]
            base = una.get(index)
            if base is None:
                raise _NotSteady("a packet of an idle connection in flight")
            return (kind, index, id(pkt.route), pkt.hop, pkt.size_bytes, pkt.payload_bytes,
                    pkt.seq - base if kind == _RECEIVER else 0, pkt.ack - base if kind == _SENDER else 0,
                    pkt.arrival_ps - now_ps, pkt.sent_ps - now_ps, rel(pkt.ts_echo_ps),
                    pkt.is_retransmit, pkt.ecn_capable, pkt.ce, pkt.ece, pkt.cwr)

        # the network's pending events in the order they will run; a sender's timer entries only for
        # TCP Small Queues' wake-ups and a receiver's for its delayed ACK (retransmission-timer
        # wake-ups are not periodic, and only re-arm while ACKs keep coming)
        entries = []
        for entry in self.eventlist.heap:
            label = labels.get(id(entry.source))
            if label is not None:
                entries.append((entry.time_ps, entry.seq, label))
        for entry in self.eventlist._timers:
            label = labels.get(id(entry.source))
            if label is None:
                continue
            source: Any = entry.source
            if label[0] == _SENDER and entry.time_ps == source.tsq_wake_ps:
                entries.append((entry.time_ps, entry.seq, label))
            elif label[0] == _RECEIVER and source.unacked_segments and entry.time_ps == source.delack_deadline_ps:
                entries.append((entry.time_ps, entry.seq, label))
        entries.sort()
        signature: list[Any] = [tuple((time_ps - now_ps, label) for time_ps, _, label in entries)]
        counters: dict[str, Any] = {"events": self.eventlist.events_run, "una": una}
        link_counts = []
        for index, link in enumerate(self.links):
            link_counts.append((link.packets_sent, link.bytes_sent, link.drops, link.ecn_marks,
                                link.sender_stops if isinstance(link, HostNic) else 0))
            busy = link.busy_until_ps > now_ps
            pkt = link._wire_head
            if not busy and pkt is None:
                continue
            wire = []
            while pkt is not None:
                wire.append(packet_signature(pkt))
                pkt = pkt.next_on_wire
            self.work += len(wire)
            part: tuple = (index, link.busy_until_ps - now_ps if busy else 0, tuple(wire))
            if isinstance(link, HostNic):
                part += (tuple(labels[id(sender)] for sender in link._waiting), link._wakeup_pending)
            signature.append(part)
        counters["links"] = link_counts
        connection_counts = {}
        for index in active:
            connection = self.connections[index]
            sender, receiver = connection.sender, connection.receiver
            if (sender.in_recovery or sender.sacked is not None or sender.dupacks or receiver.out_of_order is not None
                    or sender.rack is not None or sender.hystart is not None):
                raise _NotSteady("a connection in loss recovery")
            base = una[index]
            settings = sender.settings
            timestamps, linux_acks = settings.timestamps, settings.delayed_ack and settings.linux_delayed_ack
            below = []
            pkt = sender.below_head
            while pkt is not None:
                below.append((pkt.seq - base, pkt.below_end_ps - now_ps))
                pkt = pkt.next_below
            self.work += len(below)
            rtt = sender.rtt
            spray = sender.spray
            signature.append((
                index, sender.snd_nxt - base, sender.snd_max - base, receiver.rcv_nxt - base,
                rel(sender.rto_deadline_ps), rtt.srtt_ps, rtt.rttvar_ps, rtt.rto_ps, rel(sender.tsq_wake_ps),
                sender.waiting_for_room, sender.bytes_below_tcp, tuple(below), sender.cwr_pending,
                sender.cwr_end_seq >= base, sender.ecn_recover_seq > base, sender.recover_seq > base,
                sender.last_send_ps - now_ps, sender.cc.ssthresh_bytes,
                receiver.unacked_segments, rel(receiver.delack_deadline_ps) if receiver.unacked_segments else None,
                receiver.ce_state, receiver.ece_latched, receiver.echo_sent_ps - now_ps, receiver.echo_retransmit,
                rel(receiver.ts_recent_ps), receiver.last_ack_sent - base if timestamps else None,
                None if spray is None else spray._turn,
                # Linux's quick-ACK state is read only with linux_delayed_ack
                (receiver.last_data_ps - now_ps, receiver.quick_acks_left) if linux_acks else None,
            ))
            connection_counts[index] = (
                sender.snd_max, sender.packets_sent, sender.bytes_sent, sender.acks_received, sender.tsq_stops,
                sender.retransmits, sender.timeouts, sender.ece_received, rtt.samples, sender.cc.cwnd_bytes,
                receiver.segments_received, receiver.acks_sent, receiver.ce_received)
        counters["connections"] = connection_counts
        return tuple(signature), counters

    # -- the jump ---------------------------------------------------------------------------

    def _jump(self, state_a: tuple[tuple, dict[str, Any]], state_b: tuple[tuple, dict[str, Any]], time_a_ps: int,
              time_b_ps: int, until_ps: int) -> bool:
        """The state at `time_b_ps` repeats the one at `time_a_ps`: skip as many whole periods as
        nothing outside the pattern interrupts. False if that is fewer than `MIN_JUMP_PERIODS`."""
        counters_a, counters_b = state_a[1], state_b[1]
        period_ps = time_b_ps - time_a_ps
        links_a, links_b = counters_a["links"], counters_b["links"]
        for before, after in zip(links_a, links_b):
            if after[2] != before[2] or after[3] != before[3]:
                return self._refuse("a drop or an ECN mark in the period")
        moved: dict[int, int] = {}  # connection -> bytes it moves in a period
        for index, una_b in counters_b["una"].items():
            sender = self.connections[index].sender
            count_a, count_b = counters_a["connections"][index], counters_b["connections"][index]
            if count_b[5:8] != count_a[5:8] or count_b[12] != count_a[12]:
                return self._refuse("retransmissions, timeouts or ECN echoes in the period")
            moved_bytes = una_b - counters_a["una"][index]
            moved[index] = moved_bytes
            if not moved_bytes:
                continue
            acks = count_b[3] - count_a[3]
            mss = sender.mss_bytes
            if moved_bytes < acks * mss:
                return self._refuse("ACKs of less than a full segment")  # the window's credit would be wrong
            # the window must not have limited the sender: at most the flight and a period's bytes were out
            cwnd_a = count_a[9]
            needed = min(float(sender.rwnd_bytes), float(count_a[0] - counters_a["una"][index] + moved_bytes + mss))
            if cwnd_a < needed:
                return self._refuse("a congestion window that may limit its sender")
            nic = sender.host_nic
            if nic is not None and nic.tsq_bytes:
                limit = tsq_limit_bytes(cwnd_a, 0, 0.0, SRTT_MARGIN * sender.rtt.srtt_ps,
                                        mss + sender.header_bytes, nic.tsq_bytes)
                if limit < nic.tsq_bytes:
                    return self._refuse("TCP Small Queues' pacing limit may move with the window")
        periods = self._room_periods(time_b_ps, period_ps, moved, until_ps)
        if periods < MIN_JUMP_PERIODS:
            return self._refuse("fewer than MIN_JUMP_PERIODS periods before an event outside the pattern")
        self._shift(periods, period_ps, time_b_ps, counters_a, counters_b, moved)
        self.jumps += 1
        self.skipped_ps += periods * period_ps
        self.skipped_events += periods * (counters_b["events"] - counters_a["events"])
        return True

    def _room_periods(self, now_ps: int, period_ps: int, moved: dict[int, int], until_ps: int) -> int:
        """How many periods of `period_ps` may be skipped from `now_ps` so that the period after them is
        still clear of the time limit, of every event outside the pattern (a message, a compute delay's
        end), of the end of each busy connection's stream and of its next message's delivery, the
        connections moving `moved` bytes a period."""
        periods = (until_ps - now_ps) // period_ps - 1
        labels = self._labels
        outside_ps = min((entry.time_ps for entry in self.eventlist.heap if id(entry.source) not in labels),
                         default=None)
        if outside_ps is not None:
            periods = min(periods, (outside_ps - now_ps) // period_ps - 2)
        for index, moved_bytes in moved.items():
            if not moved_bytes:
                continue
            sender, receiver = self.connections[index].sender, self.connections[index].receiver
            periods = min(periods, (sender.stream_end - sender.mss_bytes - sender.snd_max) // moved_bytes - 1)
            if receiver.on_next_message is not None:
                periods = min(periods, (receiver.next_message_end_seq - 1 - receiver.rcv_nxt) // moved_bytes - 1)
        return periods

    def _shift(self, periods: int, period_ps: int, now_ps: int, counters_a: dict[str, Any],
               counters_b: dict[str, Any], moved: dict[int, int]) -> None:
        """Move the busy part of the network `periods` periods of `period_ps` ahead of `now_ps`."""
        shift_ps = periods * period_ps
        eventlist = self.eventlist
        labels = self._labels
        active = set(moved)
        # the event heap: the network's entries later by the shift (those outside stay), re-sorted
        heap = eventlist.heap
        for entry in heap:
            if id(entry.source) in labels:
                entry.time_ps += shift_ps
                entry.scheduled_ps += shift_ps
        heap.sort(key=_entry_order)
        # the timer heap: a busy connection's entries move; an idle one's in the skipped span are dropped
        kept: list[EventEntry] = []
        for entry in eventlist._timers:
            kind, index = labels[id(entry.source)]
            source: Any = entry.source
            if index in active:
                entry.time_ps += shift_ps
                entry.scheduled_ps += shift_ps
            elif entry.time_ps < now_ps + shift_ps:
                if source.timer_event_ps == entry.time_ps:
                    source.timer_event_ps = _NO_EVENT
                continue
            kept.append(entry)
        kept.sort(key=_entry_order)
        eventlist._timers[:] = kept
        if kept:
            eventlist.next_timer_ps = kept[0].time_ps
            eventlist.next_timer_seq = kept[0].seq
        else:
            eventlist.next_timer_ps = _NO_TIMER
        # links: their backlog and wire later by the shift; their counters on by k periods' growth
        packets: dict[int, Packet] = {}
        for link, before, after in zip(self.links, counters_a["links"], counters_b["links"]):
            link.packets_sent += periods * (after[0] - before[0])
            link.bytes_sent += periods * (after[1] - before[1])
            if isinstance(link, HostNic):
                link.sender_stops += periods * (after[4] - before[4])
            if link.busy_until_ps > now_ps:
                link.busy_until_ps += shift_ps
            pkt = link._wire_head
            while pkt is not None:
                pkt.arrival_ps += shift_ps
                packets[id(pkt)] = pkt
                pkt = pkt.next_on_wire
        for index in active:
            pkt = self.connections[index].sender.below_head
            while pkt is not None:
                pkt.below_end_ps += shift_ps
                packets[id(pkt)] = pkt
                pkt = pkt.next_below
        for pkt in packets.values():
            kind, index = labels[id(pkt.route[-1])]
            if kind == _RECEIVER:
                pkt.seq += periods * moved[index]
            else:
                pkt.ack += periods * moved[index]
            pkt.sent_ps += shift_ps
            if pkt.ts_echo_ps:
                pkt.ts_echo_ps += shift_ps
        for index in active:
            self._shift_connection(self.connections[index], periods, shift_ps, periods * moved[index],
                                   counters_a["connections"][index], counters_b["connections"][index])
        eventlist.now_ps = now_ps + shift_ps
        eventlist.current_seq = -1

    @staticmethod
    def _shift_connection(connection: TcpConnection, periods: int, shift_ps: int, shift_bytes: int,
                          before: tuple, after: tuple) -> None:
        """A busy connection `periods` periods on: sequence numbers by `shift_bytes`, times by `shift_ps`."""
        sender, receiver = connection.sender, connection.receiver
        sender.snd_una += shift_bytes
        sender.snd_nxt += shift_bytes
        sender.snd_max += shift_bytes
        if sender.rto_deadline_ps:
            sender.rto_deadline_ps += shift_ps
        if sender.timer_event_ps != _NO_EVENT:
            sender.timer_event_ps += shift_ps
        if sender.tsq_wake_ps:
            sender.tsq_wake_ps += shift_ps
        sender.last_send_ps += shift_ps
        sender.packets_sent += periods * (after[1] - before[1])
        sender.bytes_sent += periods * (after[2] - before[2])
        acks = periods * (after[3] - before[3])
        sender.acks_received += acks
        sender.tsq_stops += periods * (after[4] - before[4])
        sender.rtt.samples += periods * (after[8] - before[8])
        _credit_cwnd(sender.cc, acks)
        receiver.rcv_nxt += shift_bytes
        receiver.last_ack_sent += shift_bytes
        if receiver.delack_deadline_ps:
            receiver.delack_deadline_ps += shift_ps
        if receiver.timer_event_ps != _NO_EVENT:
            receiver.timer_event_ps += shift_ps
        receiver.echo_sent_ps += shift_ps
        receiver.last_data_ps += shift_ps
        if receiver.ts_recent_ps:
            receiver.ts_recent_ps += shift_ps
        receiver.segments_received += periods * (after[10] - before[10])
        receiver.acks_sent += periods * (after[11] - before[11])


def _entry_order(entry: EventEntry) -> tuple[int, int]:
    return entry.time_ps, entry.seq


def _credit_cwnd(cc: Any, acks: int) -> None:
    """NewReno's window after `acks` more ACKs of at least a full segment each, outside recovery:
    one MSS each in slow start (exact: the window is a whole number of bytes), then in congestion
    avoidance cwnd += MSS^2 / cwnd each, whose sum over n ACKs is cwnd^2 + 2 n MSS^2 squared (to
    within a segment per 1,000 ACKs, and the window does not limit the sender)."""
    mss = cc.mss_bytes
    ssthresh = cc.ssthresh_bytes
    if acks and cc.cwnd_bytes < ssthresh:
        slow_acks = acks if ssthresh == UNSET_SSTHRESH else min(acks, math.ceil((ssthresh - cc.cwnd_bytes) / mss))
        cc.cwnd_bytes += slow_acks * mss
        acks -= slow_acks
    if acks:
        cc.cwnd_bytes = math.sqrt(cc.cwnd_bytes * cc.cwnd_bytes + 2.0 * acks * mss * mss)
