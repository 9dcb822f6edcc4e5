"""`run(config) -> rows`: one simulation from a plain mapping to plain result rows."""

from __future__ import annotations

import time
from typing import Any, Mapping

from .config import SimConfig, load_config
from .simulation import Simulation
from .units import ps_to_s
from .workload import FlowsWorkload


def run(config: Mapping[str, Any] | SimConfig) -> dict[str, list[dict]]:
    """Run one simulation. Returns {"runs": [one row], "flows": [one row per flow]}.

    The run row holds the engine's measurements only; the caller adds run_id, the config columns
    and provenance. `status` is `ok`, or `timeout` if work was left at `engine.max_sim_time_s`.
    Raises `ConfigError` before simulating anything if the config cannot run.
    """
    sim_config = config if isinstance(config, SimConfig) else load_config(config)
    wall_start = time.perf_counter()
    sim = Simulation(sim_config)
    workload = FlowsWorkload(sim, sim_config.workload)
    workload.start()
    sim.run()
    wall_s = time.perf_counter() - wall_start
    flow_rows = [record.row() for record in workload.records]
    return {"runs": [summary_row(sim, workload.finished, wall_s, flow_rows)], "flows": flow_rows}


def summary_row(sim: Simulation, finished: bool, wall_s: float, flow_rows: list[dict]) -> dict:
    """The engine's part of a `runs` row: counters summed over links and connections."""
    links = sim.topology.links
    senders = [connection.sender for connection in sim.connections]
    events = sim.eventlist.events_run
    fcts = sorted(row["fct_s"] for row in flow_rows if row["fct_s"] is not None)
    max_queue_bytes = max((port.max_queue_bytes for port in sim.topology.switch_ports), default=0)
    return {
        "status": "ok" if finished else "timeout",
        "error": None,
        "sim_time_s": ps_to_s(sim.eventlist.now_ps),
        "flows": len(flow_rows),
        "flows_completed": len(fcts),
        "mean_fct_s": sum(fcts) / len(fcts) if fcts else None,
        "max_fct_s": fcts[-1] if fcts else None,
        "bytes_sent": sum(sender.bytes_sent for sender in senders),
        "packets_sent": sum(sender.packets_sent for sender in senders),
        "retransmits": sum(sender.retransmits for sender in senders),
        "timeouts": sum(sender.timeouts for sender in senders),
        "drops": sum(link.drops for link in links),
        "ecn_marks": sum(link.ecn_marks for link in links),
        "max_queue_kb": max_queue_bytes / 1024,  # KiB, like network.buffer_kb
        "events": events,
        "wall_s": wall_s,
        "events_per_s": events / wall_s if wall_s > 0 else None,
    }
