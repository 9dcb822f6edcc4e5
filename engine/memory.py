"""How much memory a run will need, estimated from its config before it runs.

A sweep reserves this with its scheduler (Ray's `memory` resource), so that it never starts more big runs
at once than a machine holds; it is a guess for scheduling, never a limit (sweep/memory.py). Each backend
gives its estimate (`NetworkBackend.estimate_bytes`, engine/backends/; `engine.estimate_run_bytes` asks the
run's) from the share every run has, `process_bytes`: the process, its messages (an entry in the message
log and, at the end, a `flows` row in columns) and its links, plus what only it holds (the packet
backend's TCP connections, one per NPU pair that talks; the ns3 backend's helper process; the phase
backend's arrays; the hybrid's reduced networks). The constants are fitted to the peaks that
`benchmarks/memory_estimate.py` measured (docs/running.md, "Memory": every backend, 64 to 9,216 NPUs), so
that each estimate is at or above its run's peak and at most twice it.
"""
from __future__ import annotations

from functools import lru_cache

from .config import (
    ChakraWorkload,
    FlowsWorkload,
    IterativeWorkload,
    SimConfig,
    SwitchNetwork,
    SystemConfig,
    WorkloadConfig,
)
from .system.algorithms import ALL, TREE_PIPELINE_BLOCKS, symmetric_steps
from .workload.chakra import SEND, read_trace, trace_collectives
from .workload.flows import pattern_pairs
from .workload.layers import workload_spec

BASE_BYTES = 250 * 2**20  # a process with the engine, pandas and pyarrow loaded (~150 MiB measured), and headroom
BYTES_PER_MESSAGE = 256  # its log entry, its `flows` columns, its share of the messages in flight
BYTES_PER_LINK = 1_024
LINKS_PER_NPU = 4  # every topology has a few links per host


def messages_per_collective(op: str, algorithm: str, npus: int, astra_compat: bool = False) -> int:
    """Point-to-point messages one collective of `op` over `npus` NPUs sends with `algorithm` (ASTRA-sim
    1.0's variant with `astra_compat`: system.astra_compat)."""
    steps = symmetric_steps(op, algorithm, npus, 1, astra_compat)
    if steps is None:  # double binary tree: every non-root node sends each block up and down, in two trees
        return 2 * 2 * TREE_PIPELINE_BLOCKS * (npus - 1)
    return sum(npus * (npus - 1 if step.pattern == ALL else 1) for step in steps)


def estimate_messages(config: SimConfig) -> int:
    """Messages (or flows) the run's workload sends, over all its iterations."""
    return _messages(config.workload, config.system, config.network.npus)


@lru_cache(maxsize=1024)  # a sweep asks again for every seed, TCP setting, link speed, ...
def _messages(wl: WorkloadConfig, system: SystemConfig, npus: int) -> int:
    if isinstance(wl, FlowsWorkload):
        if wl.pattern is None:
            return len(wl.flows)
        return len(pattern_pairs(wl.pattern, npus, wl.senders, 0)) * wl.rounds  # the seed orders, never counts
    algorithms = {op: getattr(system, op) for op in ("all_reduce", "all_to_all", "all_gather", "reduce_scatter")}
    assert isinstance(wl, IterativeWorkload)  # every type but flows
    if isinstance(wl, ChakraWorkload):
        assert wl.path is not None
        per_iteration = sum(1 if op == SEND
                            else messages_per_collective(op, algorithms[op], group, system.astra_compat) * system.splits
                            for op, _, group in trace_collectives(read_trace(wl.path, npus, (npus,))))
        return per_iteration * wl.iterations
    spec = workload_spec(SimConfig(network=SwitchNetwork(npus=npus), system=system, workload=wl), (npus,))
    per_iteration = 0
    for comm in [spec.input_comm] + [comm for layer in spec.layers for comm in (layer.fwd_comm, layer.ig_comm,
                                                                            layer.wg_comm)]:
        if comm.op is not None:
            per_iteration += messages_per_collective(comm.op, algorithms[comm.op], npus,
                                                     system.astra_compat) * system.splits
    return per_iteration * wl.iterations


def process_bytes(config: SimConfig, messages: int) -> int:
    """What every run holds, in bytes: the worker process, `messages` messages and the links."""
    return BASE_BYTES + messages * BYTES_PER_MESSAGE + LINKS_PER_NPU * config.network.npus * BYTES_PER_LINK
