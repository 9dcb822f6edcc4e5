"""The `flows` workload: explicit TCP flows, or generated patterns run in barrier-synchronised rounds.

An explicit flow is one TCP connection opened at `start_us`. A pattern (`incast`, `permutation`,
`all_to_all`) opens one persistent connection per (src, dst) pair and sends one message of
`bytes_per_flow` on each per round; a round starts when every flow of the previous one has been
delivered, so later rounds see the windows (and idle restarts) that earlier rounds left.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from ..config import WorkloadConfig
from ..simulation import Simulation
from ..topology import flow_hash
from ..transport import TcpConnection
from ..units import goodput_gbps, ps_to_s, us_to_ps


@dataclass
class FlowRecord:
    """One flow (message) and what happened to it; counters are the connection's deltas."""

    flow_id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: int
    end_ps: int = -1
    retransmits: int = 0
    timeouts: int = 0
    ecn_marks: int = 0

    def row(self) -> dict:
        """The `flows` table row (DESIGN.md)."""
        done = self.end_ps >= 0
        fct_ps = self.end_ps - self.start_ps if done else None
        return {
            "flow_id": self.flow_id, "src": self.src, "dst": self.dst, "bytes": self.size_bytes,
            "start_s": ps_to_s(self.start_ps),
            "end_s": ps_to_s(self.end_ps) if done else None,
            "fct_s": ps_to_s(fct_ps) if fct_ps is not None else None,
            "goodput_gbps": goodput_gbps(self.size_bytes, fct_ps) if fct_ps else None,
            "retransmits": self.retransmits, "timeouts": self.timeouts, "ecn_marks": self.ecn_marks,
        }


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


class FlowsWorkload:
    """Drives the `flows` workload on a `Simulation` and records one `FlowRecord` per flow."""

    def __init__(self, sim: Simulation, workload: WorkloadConfig) -> None:
        self.sim = sim
        self.workload = workload
        self.records: list[FlowRecord] = []
        self._round = 0
        self._outstanding = 0
        self._pair_connections: dict[tuple[int, int], TcpConnection] = {}
        self._pairs: list[tuple[int, int]] = []
        if workload.pattern is not None:
            config = sim.config
            self._pairs = pattern_pairs(workload.pattern, config.network.npus, workload.senders, config.seed)
        self._flows_total = len(workload.flows) + workload.rounds * len(self._pairs)
        self._flows_delivered = 0

    @property
    def finished(self) -> bool:
        """True once every flow of every round has been delivered."""
        return self._flows_delivered == self._flows_total

    def start(self) -> None:
        """Schedule the flows (explicit ones at their start times, or the first round)."""
        eventlist = self.sim.eventlist
        for spec in self.workload.flows:
            eventlist.call_at(us_to_ps(spec.start_us),
                              lambda spec=spec: self._start_flow(self.sim.open_connection(spec.src, spec.dst),
                                                                 spec.bytes, None))
        if self.workload.pattern is not None:
            eventlist.call_at(0, self._start_round)

    def _start_round(self) -> None:
        wl = self.workload
        self._round += 1
        self._outstanding = len(self._pairs)
        for src, dst in self._pairs:
            connection = self._pair_connections.get((src, dst))
            if connection is None:
                connection = self._pair_connections[(src, dst)] = self.sim.open_connection(src, dst)
            self._start_flow(connection, wl.bytes_per_flow, self._round_flow_done)

    def _round_flow_done(self) -> None:
        self._outstanding -= 1
        if self._outstanding == 0 and self._round < self.workload.rounds:
            self._start_round()

    def _start_flow(self, connection: TcpConnection, size_bytes: int, then) -> None:
        sender, receiver = connection.sender, connection.receiver
        record = FlowRecord(len(self.records), connection.src, connection.dst, size_bytes,
                            self.sim.eventlist.now_ps)
        base = (sender.retransmits, sender.timeouts, receiver.ce_received)
        self.records.append(record)

        def delivered() -> None:
            record.end_ps = self.sim.eventlist.now_ps
            record.retransmits = sender.retransmits - base[0]
            record.timeouts = sender.timeouts - base[1]
            record.ecn_marks = receiver.ce_received - base[2]
            self._flows_delivered += 1
            if then is not None:
                then()
            if self.finished:
                self.sim.eventlist.stop()  # nothing left to do: stale timer wake-ups need not run

        connection.send_message(size_bytes, delivered)
