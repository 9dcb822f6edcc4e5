"""`run(config) -> rows`: one simulation from a plain mapping to plain result rows."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from .backends import backend_class
from .backends.base import BACKEND_COLUMNS, NetworkBackend
from .checks import check_backend
from .config import ChakraWorkload, FlowsWorkload, IterativeWorkload, SimConfig, load_config
from .metrics import RunMetrics
from .simulation import Simulation
from .system import SystemLayer
from .system.messages import flow_rows
from .transport import TcpSender
from .transport.roce import RoceSender
from .units import ps_to_s, s_to_ps
from .workload import FlowsDriver, TrainingLoop, workload_spec
from .workload.chakra import TraceReplay, duration_ps_per_unit, read_trace


@dataclass
class PreparedRun:
    """A simulation with its workload wired up and not yet started: `start()`, then run the event
    list (all at once with `simulate()`, or in steps to observe it), then `rows()`. `backend` is the
    network the workload runs on (engine/backends/); `close()` releases what it holds outside this
    process (the ns3 backend's helper)."""

    config: SimConfig
    sim: Simulation
    backend: NetworkBackend
    flows: FlowsDriver | None = None
    system: SystemLayer | None = None
    training: TrainingLoop | TraceReplay | None = None  # a trace replays like a training loop

    @property
    def finished(self) -> bool:
        """True once the workload has done all its work."""
        driver = self.flows if self.flows is not None else self.training
        assert driver is not None
        return driver.finished

    def start(self) -> None:
        """Schedule the workload's first actions at time 0."""
        driver = self.flows if self.flows is not None else self.training
        assert driver is not None
        driver.start()

    def simulate(self) -> None:
        """Run the simulation to its end or to `engine.max_sim_time_s`."""
        self.backend.simulate()

    def close(self) -> None:
        """Release what the run holds outside this process."""
        self.backend.close()

    def rows(self, wall_s: float, flow_columns: bool = False) -> dict[str, Any]:
        """Result rows per table; `wall_s` is the wall time the caller measured. With
        `flow_columns` the `flows` table comes as `MessageLog.columns()` (a dict of typed arrays)."""
        tables: dict[str, Any] = {"collectives": [], "layers": []}
        flows = self.backend.message_log().columns()
        tables["flows"] = flows if flow_columns else flow_rows(flows)
        status, error, metrics = engine_metrics(self.sim, self.finished, wall_s, flows)
        if self.training is not None and self.system is not None:
            tables["collectives"] = [record.row() for record in self.system.records]
            tables["layers"] = self.training.layer_rows()
            metrics.fill(self.training.summary())
        assert metrics.sim_time_s is not None
        if self.config.engine.link_stats != "none":  # else no links table at all (and nothing collected)
            tables["links"] = self.backend.link_rows(self.config.engine.link_stats, s_to_ps(metrics.sim_time_s))
        # what the backend does not know is null, never zero (the engine sums the packet engine's
        # counters, zero where it sent no packet); then what it counted itself
        metrics.fill(dict.fromkeys(column for column in BACKEND_COLUMNS
                                   if column in metrics.filled and column not in self.backend.FILLS))
        counters = self.backend.counters()
        metrics.fill(counters)
        if "events" in counters and metrics.events is not None:  # the backend's own events (ns-3's)
            metrics.fill({"events_per_s": metrics.events / wall_s if wall_s > 0 else None})
        return {"runs": [{"status": status, "error": error, **metrics.row()}], **tables}


def estimate_run_bytes(config: SimConfig) -> int:
    """Peak memory the run will need, in bytes: its backend's estimate (`engine.memory`)."""
    return backend_class(config.engine.backend).estimate_bytes(config)


def prepare(config: Mapping[str, Any] | SimConfig) -> PreparedRun:
    """Validate the config and build the network, its backend, the system layer and the workload."""
    cfg = config if isinstance(config, SimConfig) else load_config(config)
    check_backend(cfg)
    backend_type = backend_class(cfg.engine.backend)
    sim = Simulation(cfg, backend_type.MODELS_HOST_STACK)
    backend = backend_type(cfg, sim)
    if isinstance(cfg.workload, FlowsWorkload):  # the config refuses it on a backend that does not carry flows
        flows = FlowsDriver(sim.eventlist, backend.flow_sender(), cfg.workload, cfg.network.npus, cfg.seed)
        return PreparedRun(cfg, sim, backend, flows=flows)
    system = backend.system_layer()
    wl = cfg.workload
    assert isinstance(wl, IterativeWorkload)  # every type but flows
    # NPUs per group of each network dimension: the readers convert ASTRA-sim's sizes with them
    dimension_sizes = tuple(len(groups[0]) for groups in sim.topology.dimensions())
    if isinstance(wl, ChakraWorkload):
        assert wl.path is not None
        replay = TraceReplay(sim.eventlist, system, read_trace(wl.path, cfg.network.npus, dimension_sizes),
                             duration_ps_per_unit(wl.duration_unit, wl.cycle_ns), wl.iterations)
        return PreparedRun(cfg, sim, backend, system=system, training=replay)
    training = TrainingLoop(sim.eventlist, system, workload_spec(cfg, dimension_sizes), wl.iterations)
    return PreparedRun(cfg, sim, backend, system=system, training=training)


def run(config: Mapping[str, Any] | SimConfig, flow_columns: bool = False) -> dict[str, Any]:
    """Run one simulation. Returns rows per table: {"runs": [one row], "flows": [...],
    "collectives": [...], "layers": [...]} (the last two empty for the `flows` workload), and
    "links": [...] when `engine.link_stats` asks for them.

    `flow_columns=True` gives the `flows` table as columns instead, a dict of typed arrays with
    NaN where a row would hold None (`MessageLog.columns`): a DLRM iteration on 1,024 NPUs has
    16.8 million messages, whose row dicts would not fit in memory.

    The run row holds the engine's measurements only; the caller adds run_id, the config columns
    and provenance. `status` is `ok`, or `timeout` if work was left at `engine.max_sim_time_s`.
    Raises `ConfigError` before simulating anything if the config cannot run.
    """
    wall_start = time.perf_counter()
    with cyclic_collector_paused():
        prepared = prepare(config)
        try:
            prepared.start()
            prepared.simulate()
            return prepared.rows(time.perf_counter() - wall_start, flow_columns)
        finally:
            prepared.close()


@contextlib.contextmanager
def cyclic_collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector off (as it was, after).

    A run keeps millions of objects alive (connections, packets in flight, result rows), and each
    full collection that its allocations trigger walks them all: at 256 NPUs that was a fifth of
    an analytical DLRM run and 40 % of a packet one. The engine makes no reference cycles per event
    or message (a few thousand objects per run, collected once the collector is back), so nothing
    is lost meanwhile.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def engine_metrics(sim: Simulation, finished: bool, wall_s: float,
                   flows: Mapping[str, Sequence]) -> tuple[str, str | None, RunMetrics]:
    """The run's status and error, and its metrics as the engine fills them: the simulated time and
    events, the messages, and the counters summed over links and connections; `flows` is the flows
    table by column (`MessageLog.columns`)."""
    links = sim.topology.links
    senders: list[TcpSender | RoceSender] = [connection.sender for connection in sim.connections]
    senders += [queue_pair.sender for queue_pair in sim.queue_pairs]
    events = sim.eventlist.events_run
    fcts = sorted(fct for fct in flows["fct_s"] if fct == fct)  # NaN != NaN: not delivered
    max_queue_bytes = max((port.max_queue_bytes for port in sim.topology.switch_ports), default=0)
    if finished:
        status, error, sim_time_s = "ok", None, ps_to_s(sim.eventlist.now_ps)
    elif sim.time_limit_reached:
        status, error, sim_time_s = "timeout", None, sim.config.engine.max_sim_time_s
    else:  # nothing left to happen, yet work is missing: a bug, never a result
        status, error = "error", "the event list ran empty before the workload finished"
        sim_time_s = ps_to_s(sim.eventlist.now_ps)
    metrics = RunMetrics()
    metrics.fill({
        "sim_time_s": sim_time_s,
        "flows": len(flows["flow_id"]),
        "flows_completed": len(fcts),
        "mean_fct_s": sum(fcts) / len(fcts) if fcts else None,
        "max_fct_s": fcts[-1] if fcts else None,
        "bytes_sent": sum(sender.bytes_sent for sender in senders),
        "packets_sent": sum(sender.packets_sent for sender in senders),
        "retransmits": sum(sender.retransmits for sender in senders),
        "timeouts": sum(sender.timeouts for sender in senders),
        "loss_probes": sum(sender.loss_probes for sender in senders),
        "rack_lost_segments": sum(sender.rack_lost_segments for sender in senders),
        "drops": sum(link.drops for link in links),
        "ecn_marks": sum(link.ecn_marks for link in links),
        "max_queue_kb": max_queue_bytes / 1024,  # KiB, like network.buffer_kb
        "events": events,
        "wall_s": wall_s,
        "events_per_s": events / wall_s if wall_s > 0 else None,
    })
    return status, error, metrics
