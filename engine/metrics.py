"""The measured part of a `runs` row: one record, `RunMetrics`, whose fields are those columns.

The engine fills what it counts on its own (the simulated time and the events, the messages of the
`flows` table, the packet engine's counters summed over links and connections); the workload fills
its per-iteration means; the backend overrides what it counts itself (`NetworkBackend.counters`) and
nulls what it does not model. Each fills field by field (`fill`, which refuses a name that is no
field), and the row holds what was filled: a column nobody filled is absent from the row and null in
the dataset, never zero. The Parquet schema of those columns derives from the fields' types
(`sweep.schema`), as the config columns derive from the config's dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# Which part of the engine fills a column, where a backend may not model it (`NetworkBackend.FILLS`)
PACKET, MESSAGE, SCREEN_RISK, EVENT_RATE = "packet_counters", "messages", "screen_risks", "event_rate"


def _column(group: str | None = None) -> Any:
    return field(default=None, metadata={"group": group})


@dataclass
class RunMetrics:
    """The measured columns of one `runs` row (null until filled), in the dataset's column order."""

    sim_time_s: float | None = _column()  # simulated time at the end (the limit, for a timeout)
    # the messages (or flows) sent: the `flows` table's rows, those delivered, their completion times
    flows: int | None = _column(MESSAGE)
    flows_completed: int | None = _column(MESSAGE)
    mean_fct_s: float | None = _column(MESSAGE)
    max_fct_s: float | None = _column(MESSAGE)
    # the packet engine's counters, summed over connections (sent, retransmitted, timeouts, RACK-TLP's
    # probes and losses) and links (drops, CE marks, the deepest switch queue, KiB)
    bytes_sent: int | None = _column(PACKET)
    packets_sent: int | None = _column(PACKET)
    retransmits: int | None = _column(PACKET)
    timeouts: int | None = _column(PACKET)
    loss_probes: int | None = _column(PACKET)
    rack_lost_segments: int | None = _column(PACKET)
    drops: int | None = _column(PACKET)
    ecn_marks: int | None = _column(PACKET)
    max_queue_kb: float | None = _column(PACKET)
    # PAUSE frames the switches sent (PFC), with transport.protocol=roce; null with TCP (not modelled)
    pause_frames: int | None = _column()
    events: int | None = _column()  # events the simulation ran (ns-3's own, on the ns3 backend)
    wall_s: float | None = _column()
    # events a second of wall time: the engine's speed where the events counted are the run's work (messages,
    # packets); null where the wall goes elsewhere (hybrid's packet episodes) or the events are a few phases
    events_per_s: float | None = _column(EVENT_RATE)
    # the workload's per-iteration means (training workloads: dlrm, astra, chakra, collective)
    iterations_done: int | None = _column()
    iteration_time_s: float | None = _column()
    compute_s: float | None = _column()
    comm_s: float | None = _column()
    exposed_comm_s: float | None = _column()
    all_to_all_s: float | None = _column()
    all_reduce_s: float | None = _column()
    # the fluid backends' signals of where TCP would part from them (screening: `sweep.fidelity`); the
    # phase backend's phases whose messages' opening windows overflow a switch port's buffer
    max_link_utilisation: float | None = _column(SCREEN_RISK)
    max_port_flows: int | None = _column(SCREEN_RISK)
    slow_start_share: float | None = _column(SCREEN_RISK)
    incast_phases: int | None = _column(SCREEN_RISK)
    # the phase backend's phases in which PFC would pause a sender (transport.protocol=roce; module engine.system.phase)
    pfc_pause_phases: int | None = _column()
    # the hybrid backend's: episodes simulated at packet level on its reduced networks, and their wall time
    hybrid_packet_sims: int | None = _column()
    hybrid_packet_wall_s: float | None = _column()
    hybrid_memo_episodes: int | None = _column()  # and episodes timed from a settled record instead
    filled: set[str] = field(default_factory=set, repr=False, compare=False, metadata={"group": "record"})

    def fill(self, values: dict[str, Any]) -> None:
        """Set these columns (a `KeyError` names one that is no column)."""
        for name, value in values.items():
            if name not in COLUMNS:
                raise KeyError(f"{name!r} is no runs column of RunMetrics: one of {', '.join(COLUMNS)}")
            setattr(self, name, value)
            self.filled.add(name)

    def row(self) -> dict[str, Any]:
        """The filled columns and their values."""
        return {name: getattr(self, name) for name in COLUMNS if name in self.filled}


COLUMNS: tuple[str, ...] = tuple(item.name for item in fields(RunMetrics) if item.metadata["group"] != "record")
COLUMN_TYPES: dict[str, str] = {item.name: str(item.type).replace(" | None", "") for item in fields(RunMetrics)
                                if item.name in COLUMNS}


def columns_of(group: str) -> tuple[str, ...]:
    """The columns of one group (`PACKET`, `MESSAGE`, `SCREEN_RISK`, `EVENT_RATE`), in order."""
    return tuple(item.name for item in fields(RunMetrics) if item.metadata["group"] == group)
