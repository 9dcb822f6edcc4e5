"""`engine.backend=alpha_beta`: each collective phase timed in closed form, no contention in the fabric.

The system layer (`engine.system.alpha_beta.AlphaBetaSystemLayer`) keeps the collectives, chunks,
phases and scheduling of the other backends but ends each phase after its alpha-beta duration: one
event a phase, no message sent, so a phase never slows another down. The lower bound of `analytical`
and the cheapest screen, its cost independent of the bytes sent (docs/backends.md).
"""

from __future__ import annotations

from typing import Any

from ..config import SimConfig
from ..linkstats import fluid_link_rows
from ..memory import process_bytes
from ..simulation import Simulation
from ..system.alpha_beta import AlphaBetaSystemLayer
from ..system.collectives import SystemLayer
from .base import NetworkBackend, phase_system_layer


class AlphaBetaBackend(NetworkBackend):
    """Closed-form phases (`AlphaBetaSystemLayer`); no messages, so no `flows` rows."""

    DESCRIPTION = "collective steps in closed form, no contention"
    FIDELITY_RANK = 0
    CARRIES_ROCE = True
    ROCE_NEEDS_PFC = True
    LOWER_BOUND = True
    SCREENS = True
    # it costs a route by its class, whichever equal-cost path it takes: spraying changes nothing it models
    SPRAYS = True

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(config, sim)
        self.system: AlphaBetaSystemLayer | None = None

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """The engine's share (`engine.memory`) with no message."""
        return process_bytes(config, 0)

    def system_layer(self) -> SystemLayer:
        """The system layer that times each phase in closed form; with system.astra_compat, on ASTRA-sim
        1.0's analytical network (each message alone, whole, cut-through: docs/astra-compat.md)."""
        self.system = phase_system_layer(self.config, self.sim, None, astra_network=self.config.system.astra_compat)
        return self.system

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """Wire bytes of the phases that ended on the links that join a host to its first switch only
        (it routes no message, so it cannot say which link between switches one would take)."""
        assert self.system is not None, "link rows of a run that built no system layer"
        return fluid_link_rows(self.sim.topology, link_stats, end_ps, self.system.host_link_bytes(),
                               host_links_only=True)


BACKEND = AlphaBetaBackend
