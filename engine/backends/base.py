"""The one interface every network backend offers (`NetworkBackend`), and what they share.

A backend is built from a validated config and the `Simulation` (event list, topology, and the TCP
connections of the packet engine), gives the system layer that runs the collectives over it, runs
the simulation, adds to the `runs` row what it counted, gives its `links` rows, estimates its memory
before the run and releases what it holds outside the process. `engine.run` drives it without ever
asking which backend it is.

A kernel module (engine/kernel.py): the packet and analytical backends, compiled with it, subclass
`NetworkBackend` natively; the others are Python subclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from mypy_extensions import mypyc_attr

from ..metrics import EVENT_RATE, MESSAGE, PACKET, SCREEN_RISK, columns_of
from ..system.alpha_beta import AlphaBetaSystemLayer, PhaseTimer
from ..system.collectives import Dimension, MessageSender, SystemLayer
from ..system.messages import MessageLog
from ..units import ns_to_ps

if TYPE_CHECKING:
    from ..config import SimConfig
    from ..simulation import Simulation
    from ..workload.flows import FlowSender

# `runs` columns that depend on the backend (groups of `engine.metrics.RunMetrics`): a backend fills some
# (`NetworkBackend.FILLS`), and the others are null in its rows (the counters `engine.run.engine_metrics`
# sums) or absent (the screen risks), never zero.
PACKET_COLUMNS = columns_of(PACKET)
MESSAGE_COLUMNS = columns_of(MESSAGE)
SCREEN_RISK_COLUMNS = columns_of(SCREEN_RISK)
EVENT_RATE_COLUMNS = columns_of(EVENT_RATE)
BACKEND_COLUMNS = PACKET_COLUMNS + MESSAGE_COLUMNS + SCREEN_RISK_COLUMNS + EVENT_RATE_COLUMNS


@mypyc_attr(allow_interpreted_subclasses=True)
class NetworkBackend:
    """A network behind netsweep's workload and system layers (docs/backends.md).

    A subclass sets the class constants and overrides `estimate_bytes`, `system_layer` and
    `link_rows`; the other methods have the behaviour most backends want.
    """

    DESCRIPTION: ClassVar[str] = ""  # what it models, in a few words (the command line's summary)
    FILLS: ClassVar[frozenset[str]] = frozenset()  # the `BACKEND_COLUMNS` its `runs` rows hold
    CARRIES_FLOWS: ClassVar[bool] = False  # runs the `flows` workload (TCP flows): `flow_sender`
    CARRIES_ROCE: ClassVar[bool] = False  # models RoCEv2 and PFC (transport.protocol=roce)
    # carries RoCE only on lossless Ethernet (PFC on): a fluid without loss, where go-back-N would never run
    ROCE_NEEDS_PFC: ClassVar[bool] = False
    SPRAYS: ClassVar[bool] = False  # models per-packet load balancing (network.load_balancing=spray)
    INCAST_RTO: ClassVar[bool] = False  # flags incast phases, and charges them an RTO if `engine.incast_rto`
    REDUCES_NETWORKS: ClassVar[bool] = False  # replays phases on reduced packet networks (`engine.hybrid_rails`)
    FAST_FORWARDS: ClassVar[bool] = False  # can skip repeating periods of its packets (`engine.fast_forward`)
    # Models a host's transmit path below TCP (`host.*`: TCP Small Queues, the qdisc): the packet engine's hosts
    MODELS_HOST_STACK: ClassVar[bool] = False
    # `network.ecn_threshold_kb` shapes the queue even without ECN-capable traffic (ns-3's helper installs the
    # port's queue disc, in place of the device's 100-packet queue, when a threshold is set without a buffer limit)
    ECN_THRESHOLD_SETS_QUEUE: ClassVar[bool] = False
    # How much of the network it models, for ordering backends from the closed form up (the report's order)
    FIDELITY_RANK: ClassVar[int] = 0
    # Its iteration time bounds every other backend's from below (it leaves all contention out): the report's
    # cost of contention is the gap to it
    LOWER_BOUND: ClassVar[bool] = False
    # May screen a two-fidelity sweep (sweep/fidelity.py); the default screen of a grid is the screening backend
    # with the largest DEFAULT_SCREEN_FROM_NPUS not above the grid's largest NPU count
    SCREENS: ClassVar[bool] = False
    DEFAULT_SCREEN_FROM_NPUS: ClassVar[int | None] = None

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        self.config = config
        self.sim = sim

    @classmethod
    def check_config(cls, config: SimConfig) -> None:
        """Raise `ConfigError` (naming the key) for what this backend cannot run in a config that is
        otherwise valid. None by default."""

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """Peak memory the run will need on this backend, in bytes (`engine.memory`)."""
        raise NotImplementedError(f"{cls.__name__} does not estimate its memory")

    def system_layer(self) -> SystemLayer:
        """The system layer that runs the workload's collectives on this backend."""
        raise NotImplementedError(f"{type(self).__name__} runs no collectives")

    def flow_sender(self) -> FlowSender:
        """What the `flows` workload sends its TCP flows through (`CARRIES_FLOWS` backends only)."""
        raise NotImplementedError(f"{type(self).__name__} carries no TCP flows")

    def message_log(self) -> MessageLog:
        """The messages sent (the `flows` table); empty where the backend sends none."""
        return MessageLog()

    def simulate(self) -> None:
        """Run the simulation to its end or to `engine.max_sim_time_s`."""
        self.sim.run()

    def counters(self) -> dict[str, Any]:
        """What the backend counted, for the `runs` row, over what `engine.run.engine_metrics` sums from
        the packet engine's links and connections (none by default)."""
        return {}

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """The `links` table's rows of the links `link_stats` selects, up to `end_ps` (the run's end)."""
        raise NotImplementedError(f"{type(self).__name__} gives no link rows")

    def close(self) -> None:
        """Release what the run holds outside this process (nothing by default). Idempotent."""


def message_system_layer(config: SimConfig, sim: Simulation, sender: MessageSender) -> SystemLayer:
    """The system layer on the topology's dimensions with the configured algorithms, sending every
    message through `sender`."""
    dimensions, flat, algorithms = _dimensions(config, sim)
    system = config.system
    return SystemLayer(sim.eventlist, sender, dimensions, flat, algorithms, system.splits, system.scheduling,
                       system.hierarchy, ns_to_ps(system.endpoint_delay_ns), system.astra_compat)


def phase_system_layer(config: SimConfig, sim: Simulation, phase_timer: PhaseTimer | None,
                       astra_network: bool = False) -> AlphaBetaSystemLayer:
    """The system layer that times each phase itself: in closed form, or when `phase_timer` says.
    `astra_network`: cost messages as ASTRA-sim 1.0's analytical network does (alone, whole,
    cut-through; `engine.system.alpha_beta`), the alpha_beta backend's network under astra_compat."""
    dimensions, flat, algorithms = _dimensions(config, sim)
    system = config.system
    return AlphaBetaSystemLayer(sim.eventlist, sim.topology, config.packet_payload_bytes, dimensions, flat,
                                algorithms, system.splits, system.scheduling, system.hierarchy,
                                ns_to_ps(system.endpoint_delay_ns), config.packet_header_bytes, system.astra_compat,
                                phase_timer, astra_network)


def _dimensions(config: SimConfig, sim: Simulation) -> tuple[list[Dimension], Dimension, dict[str, str]]:
    """The topology's dimensions, the flat one over all NPUs, and the algorithm of each collective."""
    dimensions = [Dimension(f"dim{i}", groups) for i, groups in enumerate(sim.topology.dimensions())]
    flat = Dimension("flat", (tuple(range(config.network.npus)),), config.network.node_npus)
    algorithms = {op: getattr(config.system, op) for op in ("all_reduce", "all_to_all", "all_gather",
                                                            "reduce_scatter")}
    return dimensions, flat, algorithms
