"""`engine.backend=phase`: collective phases as fluid coflows sharing links max-min fairly, with
TCP-risk signals; the contention-aware answer at 1,000-10,000 NPUs.

The system layer is alpha_beta's (`AlphaBetaSystemLayer`), with `engine.system.phase.FluidPhases`
as its phase timer: each phase lasts alpha_beta's fixed part plus a fluid part shared with the
phases active at once, solved per phase with numpy, never per message (that module's docstring;
docs/phase-backend.md). No messages, so no `flows` rows.

Memory: besides the engine's share, a flow id per ordered pair of NPUs (the packet engine's
connection ids, which ECMP hashes: 4 bytes a pair) and the temporary arrays of one routing chunk of
`CHUNK_MESSAGES` messages (about 100 bytes each): 423 MiB peak at 9,216 NPUs on leaf_spine, 454 MiB
on fat_tree (docs/phase-backend.md).
"""

from __future__ import annotations

from typing import Any

from ..config import SimConfig
from ..linkstats import fluid_link_rows
from ..memory import process_bytes
from ..simulation import Simulation
from ..system.collectives import SystemLayer
from ..system.phase import CHUNK_MESSAGES, FluidPhases
from ..units import ms_to_ps
from .base import SCREEN_RISK_COLUMNS, NetworkBackend, phase_system_layer

PHASE_BYTES_PER_PAIR = 4  # the flow id of an ordered pair of NPUs (int32)
PHASE_BYTES_PER_ROUTED_MESSAGE = 128  # its temporary arrays per message of a routing chunk, with headroom


class PhaseBackend(NetworkBackend):
    """Phases timed by `FluidPhases` (links shared among the phases active at once)."""

    DESCRIPTION = "collective phases as fluid coflows sharing links"
    FILLS = frozenset(SCREEN_RISK_COLUMNS)
    INCAST_RTO = True
    CARRIES_ROCE = True
    ROCE_NEEDS_PFC = True
    FIDELITY_RANK = 2
    SCREENS = True

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(config, sim)
        self.fluid = self.fluid_phases()

    def fluid_phases(self) -> FluidPhases:
        """The phase timer: `FluidPhases` on the run's topology (a subclass's own, in `hybrid`)."""
        config, sim = self.config, self.sim
        return FluidPhases(sim.eventlist, sim.topology, config.packet_payload_bytes, config.packet_header_bytes,
                           config.seed, config.opening_window_pkts,
                           (opening_rto_ps(config), ms_to_ps(config.tcp.min_rto_ms))
                           if config.engine.incast_rto else None,
                           config.network.pfc_thresholds_bytes()[0] if config.pfc_on else None)

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """The engine's share (`engine.memory`) with no message, the pairs' flow ids and a routing chunk."""
        npus = config.network.npus
        return (process_bytes(config, 0) + npus * npus * PHASE_BYTES_PER_PAIR
                + min(CHUNK_MESSAGES, npus * npus) * PHASE_BYTES_PER_ROUTED_MESSAGE)

    def system_layer(self) -> SystemLayer:
        """alpha_beta's system layer, its phases timed by `FluidPhases`."""
        return phase_system_layer(self.config, self.sim, self.fluid.start)

    def counters(self) -> dict[str, Any]:
        """The TCP-risk signals (`FluidPhases.screen_risks`)."""
        return self.fluid.screen_risks(self.sim.eventlist.now_ps)

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """Wire bytes of the phases' fluid parts on every link that carried any; packet columns null."""
        return fluid_link_rows(self.sim.topology, link_stats, end_ps, self.fluid.link_bytes_by_link(),
                               host_links_only=False)


def opening_rto_ps(cfg: SimConfig) -> int:
    """The RTO a connection's first loss waits: the minimum RTO once a handshake has given it an RTT
    sample (a datacenter round trip of microseconds sets RTO = SRTT + 4 RTTVAR far below the floor),
    else the initial RTO (RFC 6298 before any sample)."""
    return ms_to_ps(cfg.tcp.min_rto_ms if cfg.tcp.handshake else cfg.tcp.initial_rto_ms)


BACKEND = PhaseBackend
