"""How much memory a run will need, estimated from its config before it runs.

A sweep declares this to its scheduler (Ray's `memory` resource), so that it never starts more big
runs at once than a machine holds, and holds each run to it. What grows with a run is known ahead:
its messages (an entry in the message log and, at the end, a `flows` row in columns), its TCP
connections (packet backend: one per NPU pair that talks) and its links. The constants are upper
ends of what runs measured (peak resident memory of `python -m sweep` on DLRM iterations of 64 to
1,024 NPUs on leaf-spine, packet and analytical backends: 1,024 NPUs, 16.8 million messages, took
3.7 GiB on the packet backend with its 1.05 million connections, 2.8 GiB on the analytical one),
so the estimate errs on the large side. On the ns3 backend the network lives in a helper process
that opens every pair's TCP connection before time 0: its peak resident memory, measured on
all-to-alls over one switch, was 28 MiB at 16 NPUs, 130 MiB at 64 and 415 MiB at 128 (about 24 KiB
a connection), counted here too since the run's machine holds it. The phase backend sends no message
either; it keeps a flow id per ordered pair of NPUs (the packet engine's connection ids, which
ECMP hashes: 4 bytes a pair) and routes a pattern's messages in chunks of `CHUNK_MESSAGES` (about 100 bytes each in
temporary arrays): 423 MiB peak at 9,216 NPUs on leaf_spine, 454 MiB on fat_tree (docs/phase-backend.md).
"""

from __future__ import annotations

from functools import lru_cache

from .config import NetworkConfig, SimConfig, SystemConfig, WorkloadConfig
from .system.algorithms import ALL, TREE_PIPELINE_BLOCKS, symmetric_steps
from .system.phase import CHUNK_MESSAGES
from .workload.flows import pattern_pairs
from .workload.chakra import SEND, read_trace, trace_collectives
from .workload.layers import workload_spec

BASE_BYTES = 400 * 2**20  # a worker process with the engine, pandas and pyarrow loaded, and headroom
BYTES_PER_MESSAGE = 256  # its log entry, its `flows` columns, its share of the messages in flight
BYTES_PER_CONNECTION = 1_536  # a persistent TCP connection (943 bytes idle), its routes and timers
BYTES_PER_LINK = 1_024
NS3_HELPER_BYTES = 64 * 2**20  # the ns-3 helper process with no connection, and headroom
NS3_BYTES_PER_CONNECTION = 32 * 1024  # an ns-3 TCP socket pair with its buffers and routes
PHASE_BYTES_PER_PAIR = 4  # the phase backend's flow id of an ordered pair of NPUs (int32)
PHASE_BYTES_PER_ROUTED_MESSAGE = 128  # its temporary arrays per message of a routing chunk, with headroom


def messages_per_collective(op: str, algorithm: str, npus: int) -> int:
    """Point-to-point messages one collective of `op` over `npus` NPUs sends with `algorithm`."""
    steps = symmetric_steps(op, algorithm, npus, 1)
    if steps is None:  # double binary tree: every non-root node sends each block up and down, in two trees
        return 2 * 2 * TREE_PIPELINE_BLOCKS * (npus - 1)
    return sum(npus * (npus - 1 if step.pattern == ALL else 1) for step in steps)


def estimate_messages(config: SimConfig) -> int:
    """Messages (or flows) the run's workload sends, over all its iterations."""
    return _messages(config.workload, config.system, config.network.npus)


@lru_cache(maxsize=1024)  # a sweep asks again for every seed, TCP setting, link speed, ...
def _messages(wl: WorkloadConfig, system: SystemConfig, npus: int) -> int:
    if wl.type == "flows":
        if wl.pattern is None:
            return len(wl.flows)
        return len(pattern_pairs(wl.pattern, npus, wl.senders, 0)) * wl.rounds  # the seed orders, never counts
    algorithms = {op: getattr(system, op) for op in ("all_reduce", "all_to_all", "all_gather", "reduce_scatter")}
    if wl.type == "chakra":
        assert wl.path is not None
        per_iteration = sum(1 if op == SEND else messages_per_collective(op, algorithms[op], group) * system.splits
                            for op, _, group in trace_collectives(read_trace(wl.path, npus, (npus,))))
        return per_iteration * wl.iterations
    spec = workload_spec(SimConfig(network=NetworkConfig(npus=npus), system=system, workload=wl), (npus,))
    per_iteration = 0
    for comm in [spec.input_comm] + [comm for layer in spec.layers for comm in (layer.fwd_comm, layer.ig_comm,
                                                                            layer.wg_comm)]:
        if comm.op is not None:
            per_iteration += messages_per_collective(comm.op, algorithms[comm.op], npus) * system.splits
    return per_iteration * wl.iterations


def estimate_run_bytes(config: SimConfig) -> int:
    """Peak memory the run will need, in bytes (see the module docstring)."""
    npus = config.network.npus
    backend = config.engine.backend
    messages = estimate_messages(config) if backend not in ("alpha_beta", "phase") else 0  # they send none
    connections = min(npus * (npus - 1), messages) if backend == "packet" else 0
    links = 4 * npus  # every topology has a few links per host
    engine_bytes = BASE_BYTES + messages * BYTES_PER_MESSAGE + connections * BYTES_PER_CONNECTION + links * BYTES_PER_LINK
    if backend == "ns3":  # the helper process, with a connection per ordered pair of NPUs
        return engine_bytes + NS3_HELPER_BYTES + npus * (npus - 1) * NS3_BYTES_PER_CONNECTION
    if backend == "phase":
        return (engine_bytes + npus * npus * PHASE_BYTES_PER_PAIR
                + min(CHUNK_MESSAGES, npus * npus) * PHASE_BYTES_PER_ROUTED_MESSAGE)
    return engine_bytes
