"""`run(config) -> rows`: one simulation from a plain mapping to plain result rows."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from .config import SimConfig, load_config
from .linkstats import fluid_link_rows, packet_link_rows
from .ns3.transport import Ns3Transport
from .simulation import Simulation
from .system import AlphaBetaSystemLayer, AnalyticalTransport, Dimension, MessageLog, PacketTransport, SystemLayer
from .system.messages import flow_rows
from .system.phase import FluidPhases
from .units import ms_to_ps, ns_to_ps, ps_to_s, s_to_ps
from .workload import FlowsWorkload, TrainingLoop, workload_spec
from .workload.chakra import TraceReplay, duration_ps_per_unit, read_trace


PACKET_ONLY_COLUMNS = ("bytes_sent", "packets_sent", "retransmits", "timeouts", "loss_probes",
                       "rack_lost_segments", "drops", "ecn_marks", "max_queue_kb")
# alpha_beta and phase time whole collective phases: they have no messages to count (and no `flows` rows)
MESSAGE_COLUMNS = ("flows", "flows_completed", "mean_fct_s", "max_fct_s")
PHASE_BACKENDS = ("alpha_beta", "phase")


@dataclass
class PreparedRun:
    """A simulation with its workload wired up and not yet started: `start()`, then run the event
    list (all at once with `simulate()`, or in steps to observe it), then `rows()`. `transport` is
    None on the alpha_beta and phase backends, which send no messages; on the ns3 backend it runs a helper
    process, which `simulate()` ends (or `close()`, for a run not simulated)."""

    config: SimConfig
    sim: Simulation
    transport: PacketTransport | AnalyticalTransport | Ns3Transport | None
    flows: FlowsWorkload | None = None
    system: SystemLayer | None = None
    training: TrainingLoop | TraceReplay | None = None  # a trace replays like a training loop
    fluid: FluidPhases | None = None  # the phase backend's sharing of links among phases

    @property
    def finished(self) -> bool:
        """True once the workload has done all its work."""
        driver = self.flows if self.flows is not None else self.training
        assert driver is not None
        return driver.finished

    def start(self) -> None:
        """Schedule the workload's first actions at time 0."""
        (self.flows if self.flows is not None else self.training).start()

    def simulate(self) -> None:
        """Run the simulation to its end or to `engine.max_sim_time_s`."""
        if isinstance(self.transport, Ns3Transport):
            # ns-3 carries the packets: the two simulations advance together
            until_ps = s_to_ps(self.config.engine.max_sim_time_s)
            self.sim.time_limit_reached = not self.transport.run(until_ps)
        else:
            self.sim.run()

    def close(self) -> None:
        """Release what the run holds outside this process (the ns-3 helper)."""
        if isinstance(self.transport, Ns3Transport):
            self.transport.close()

    def rows(self, wall_s: float, flow_columns: bool = False) -> dict[str, Any]:
        """Result rows per table; `wall_s` is the wall time the caller measured. With
        `flow_columns` the `flows` table comes as `MessageLog.columns()` (a dict of typed arrays)."""
        tables: dict[str, Any] = {"collectives": [], "layers": []}
        workload_summary: dict = {}
        if self.training is not None and self.system is not None:
            tables["collectives"] = [record.row() for record in self.system.records]
            tables["layers"] = self.training.layer_rows()
            workload_summary = self.training.summary()
        flows = (MessageLog() if self.transport is None else self.transport.records).columns()
        tables["flows"] = flows if flow_columns else flow_rows(flows)
        run_row = {**summary_row(self.sim, self.finished, wall_s, flows), **workload_summary}
        if self.config.engine.link_stats != "none":  # else no links table at all (and nothing collected)
            tables["links"] = self.link_rows(s_to_ps(run_row["sim_time_s"]))
        backend = self.config.engine.backend
        if isinstance(self.transport, Ns3Transport):
            # ns-3 counts segments, retransmissions, timeouts, drops and marks; the queue peak is not traced
            run_row.update(self.transport.counters(), max_queue_kb=None)
            run_row["events_per_s"] = run_row["events"] / wall_s if wall_s > 0 else None  # ns-3's events
        elif backend != "packet":
            # the fluid and closed-form models have no packets, queues or losses (and alpha_beta
            # sends no messages): say so instead of reporting zeros
            run_row.update(dict.fromkeys(PACKET_ONLY_COLUMNS + (MESSAGE_COLUMNS if backend in PHASE_BACKENDS else ())))
        if isinstance(self.transport, AnalyticalTransport):
            run_row.update(self.transport.screen_risks(self.sim.eventlist.now_ps, self.sim.topology.switch_ports))
        if self.fluid is not None:
            run_row.update(self.fluid.screen_risks(self.sim.eventlist.now_ps))
        return {"runs": [run_row], **tables}

    def link_rows(self, end_ps: int) -> list[dict[str, Any]]:
        """The `links` table (`engine.link_stats`; none: no rows), from what the backend knows up
        to `end_ps`, the end of the run."""
        link_stats, backend = self.config.engine.link_stats, self.config.engine.backend
        topology = self.sim.topology
        if backend == "packet":
            return packet_link_rows(topology, link_stats, end_ps)
        if isinstance(self.transport, AnalyticalTransport):
            return fluid_link_rows(topology, link_stats, end_ps, self.transport.link_bytes(), host_links_only=False)
        if self.fluid is not None:
            return fluid_link_rows(topology, link_stats, end_ps, self.fluid.link_bytes_by_link(), host_links_only=False)
        assert isinstance(self.system, AlphaBetaSystemLayer)
        return fluid_link_rows(topology, link_stats, end_ps, self.system.host_link_bytes(), host_links_only=True)


def prepare(config: Mapping[str, Any] | SimConfig) -> PreparedRun:
    """Validate the config and build the network, transport, system layer and workload."""
    cfg = config if isinstance(config, SimConfig) else load_config(config)
    sim = Simulation(cfg)
    transport: PacketTransport | AnalyticalTransport | Ns3Transport | None = None
    if cfg.engine.backend == "packet":
        transport = PacketTransport(sim.eventlist, sim.open_connection, cfg.network.npus)
    elif cfg.engine.backend == "analytical":
        transport = AnalyticalTransport(sim.eventlist, sim.topology, cfg.segment_bytes, cfg.tcp.init_cwnd_pkts,
                                        cfg.header_bytes)
    elif cfg.engine.backend == "ns3":
        transport = Ns3Transport(sim.eventlist, sim.topology, cfg)
    if cfg.workload.type == "flows":
        assert isinstance(transport, PacketTransport)
        flows = FlowsWorkload(sim.eventlist, transport, cfg.workload, cfg.network.npus, cfg.seed)
        return PreparedRun(cfg, sim, transport, flows=flows)
    fluid = None
    if cfg.engine.backend == "phase":
        fluid = FluidPhases(sim.eventlist, sim.topology, cfg.segment_bytes, cfg.header_bytes, cfg.seed,
                            cfg.tcp.init_cwnd_pkts,
                            (opening_rto_ps(cfg), ms_to_ps(cfg.tcp.min_rto_ms)) if cfg.engine.incast_rto
                            else None)
    system = build_system_layer(cfg, sim, transport, fluid)
    wl = cfg.workload
    # NPUs per group of each network dimension: the readers convert ASTRA-sim's sizes with them
    dimension_sizes = tuple(len(groups[0]) for groups in sim.topology.dimensions())
    if wl.type == "chakra":
        assert wl.path is not None
        replay = TraceReplay(sim.eventlist, system, read_trace(wl.path, cfg.network.npus, dimension_sizes),
                             duration_ps_per_unit(wl.duration_unit, wl.cycle_ns), wl.iterations)
        return PreparedRun(cfg, sim, transport, system=system, training=replay, fluid=fluid)
    training = TrainingLoop(sim.eventlist, system, workload_spec(cfg, dimension_sizes), wl.iterations)
    return PreparedRun(cfg, sim, transport, system=system, training=training, fluid=fluid)


def opening_rto_ps(cfg: SimConfig) -> int:
    """The RTO a connection's first loss waits: the minimum RTO once a handshake has given it an RTT
    sample (a datacenter round trip of microseconds sets RTO = SRTT + 4 RTTVAR far below the floor),
    else the initial RTO (RFC 6298 before any sample)."""
    return ms_to_ps(cfg.tcp.min_rto_ms if cfg.tcp.handshake else cfg.tcp.initial_rto_ms)


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


def build_system_layer(cfg: SimConfig, sim: Simulation,
                       transport: PacketTransport | AnalyticalTransport | Ns3Transport | None,
                       fluid: FluidPhases | None = None) -> SystemLayer:
    """The system layer on the topology's dimensions with the configured algorithms; without a
    transport, the one that times each phase itself: in closed form (alpha_beta), or as fluid
    coflows sharing links when `fluid` times them (phase)."""
    system = cfg.system
    dimensions = [Dimension(f"dim{i}", groups) for i, groups in enumerate(sim.topology.dimensions())]
    node_size = cfg.network.npus_per_node if cfg.network.topology == "hierarchical" else 1
    flat = Dimension("flat", (tuple(range(cfg.network.npus)),), node_size or 1)
    algorithms = {op: getattr(system, op) for op in ("all_reduce", "all_to_all", "all_gather", "reduce_scatter")}
    endpoint_delay_ps = ns_to_ps(system.endpoint_delay_ns)
    if transport is None:
        return AlphaBetaSystemLayer(sim.eventlist, sim.topology, cfg.segment_bytes, dimensions, flat, algorithms,
                                    system.splits, system.scheduling, system.hierarchy, endpoint_delay_ps,
                                    cfg.header_bytes, system.astra_compat, None if fluid is None else fluid.start)
    return SystemLayer(sim.eventlist, transport, dimensions, flat, algorithms, system.splits,
                       system.scheduling, system.hierarchy, endpoint_delay_ps, system.astra_compat)


def summary_row(sim: Simulation, finished: bool, wall_s: float, flows: Mapping[str, Sequence]) -> dict:
    """The engine's part of a `runs` row: counters summed over links and connections; `flows` is
    the flows table by column (`MessageLog.columns`)."""
    links = sim.topology.links
    senders = [connection.sender for connection in sim.connections]
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
    return {
        "status": status,
        "error": error,
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
    }
