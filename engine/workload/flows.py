"""The `flows` workload: explicit TCP flows, or generated patterns run in barrier-synchronised rounds.

An explicit flow is one new TCP connection opened at `start_us`. A pattern (`incast`, `permutation`,
`all_to_all`) sends one message of `bytes_per_flow` per (src, dst) pair and round over persistent
connections; a round starts when every flow of the previous one has been delivered, so later
rounds see the windows (and idle restarts) that earlier rounds left.
"""

from __future__ import annotations

import functools
from random import Random
from typing import Callable, Protocol

from ..config import FlowSpec, FlowsWorkload
from ..eventlist import EventList
from ..topology import flow_hash
from ..units import us_to_ps


def pattern_pairs(pattern: str, npus: int, senders: int | None, seed: int) -> list[tuple[int, int]]:
    """The (src, dst) pairs of one round of a generated pattern."""
    if pattern == "incast":
        assert senders is not None
        return [(src, 0) for src in range(1, senders + 1)]
    if pattern == "all_to_all":
        return [(src, dst) for src in range(npus) for dst in range(npus) if src != dst]
    if pattern == "permutation":
        # a random derangement: every host sends to exactly one other host and receives from one
        rng = Random(flow_hash(seed, 0x9E12))
        while True:
            targets = list(range(npus))
            rng.shuffle(targets)
            if all(src != dst for src, dst in enumerate(targets)):
                return list(enumerate(targets))
    raise ValueError(f"unknown flow pattern {pattern!r}")


class FlowSender(Protocol):
    """What the `flows` workload sends through: TCP flows between hosts (`NetworkBackend.flow_sender`)."""

    def send(self, src: int, dst: int, nbytes: int, on_delivered: Callable[[], None],
             new_connection: bool = False) -> None: ...


class FlowsDriver:
    """Drives the `flows` workload over a `FlowSender` (the packet backend's), which records one row per flow."""

    def __init__(self, eventlist: EventList, sender: FlowSender, workload: FlowsWorkload,
                 npus: int, seed: int) -> None:
        self.eventlist = eventlist
        self.sender = sender
        self.workload = workload
        self._pairs = [] if workload.pattern is None else pattern_pairs(workload.pattern, npus, workload.senders, seed)
        self._round = 0
        self._outstanding = 0
        self._flows_total = len(workload.flows) + workload.rounds * len(self._pairs)
        self._flows_delivered = 0

    @property
    def finished(self) -> bool:
        """True once every flow of every round has been delivered."""
        return self._flows_delivered == self._flows_total

    def start(self) -> None:
        """Schedule the flows (explicit ones at their start times, or the first round)."""
        for spec in self.workload.flows:
            self.eventlist.call_at(us_to_ps(spec.start_us), functools.partial(self._send_explicit, spec))
        if self._pairs:
            self.eventlist.call_at(0, self._start_round)


    def _send_explicit(self, spec: FlowSpec) -> None:
        """Send one explicit flow of `workload.flows`, on a connection of its own."""
        self.sender.send(spec.src, spec.dst, spec.bytes, self._delivered, new_connection=True)
    def _start_round(self) -> None:
        self._round += 1
        self._outstanding = len(self._pairs)
        for src, dst in self._pairs:
            self.sender.send(src, dst, self.workload.bytes_per_flow, self._round_flow_delivered)

    def _round_flow_delivered(self) -> None:
        self._outstanding -= 1
        if self._outstanding == 0 and self._round < self.workload.rounds:
            self._start_round()
        self._delivered()

    def _delivered(self) -> None:
        self._flows_delivered += 1
        if self.finished:
            self.eventlist.stop()  # nothing left to do: stale timer wake-ups need not run
