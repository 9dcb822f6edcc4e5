"""What a valid config must also satisfy to run on the backend it names.

`engine.load_config` checks the config on its own (it is the floor every layer stands on, and knows
the backends only by name); what depends on a backend's abilities is checked here, above it, by the
callers that launch runs (`sweep.plan.validate`, for a single run and every grid point) and by
`engine.prepare` before it builds anything.
"""

from __future__ import annotations

from .backends import backend_class, backends_with
from .config import FlowsWorkload, SimConfig, require


def check_backend(config: SimConfig) -> None:
    """Raise `ConfigError` (naming the key, the value and what is allowed) if the backend that
    `config` names cannot run it."""
    eng = config.engine
    backend = backend_class(eng.backend)
    require(not eng.incast_rto or backend.INCAST_RTO, "engine.incast_rto", eng.incast_rto,
            f"false unless engine.backend={' or '.join(backends_with('INCAST_RTO'))} (the backend that flags "
            "incast phases)")
    if eng.fast_forward:
        _check_fast_forward(config)
    backend.check_config(config)
    require(config.transport.protocol == "tcp" or backend.CARRIES_ROCE, "engine.backend", eng.backend,
            f"{' or '.join(backends_with('CARRIES_ROCE'))} with transport.protocol={config.transport.protocol} "
            "(the other backends model TCP only)")
    if config.transport.protocol == "roce":
        require(config.pfc_on or not backend.ROCE_NEEDS_PFC, "network.pfc", config.network.pfc,
                f"true or null with transport.protocol=roce on engine.backend={eng.backend} (a lossless fluid: "
                "RoCE without PFC loses packets, which only the packet backend models)")
        require(not eng.incast_rto, "engine.incast_rto", eng.incast_rto,
                "false with transport.protocol=roce (it charges TCP's retransmission timeout; phases where PFC "
                "would pause are counted in pfc_pause_phases)")
    balancing = config.network.load_balancing
    require(balancing == "ecmp" or backend.SPRAYS, "network.load_balancing", balancing,
            f"ecmp with engine.backend={eng.backend} (per-packet spraying is modelled on engine.backend="
            f"{' or '.join(backends_with('SPRAYS'))} only)")
    if isinstance(config.workload, FlowsWorkload):
        carriers = " or ".join(backends_with("CARRIES_FLOWS"))
        require(backend.CARRIES_FLOWS, "engine.backend", eng.backend,
                f"{carriers} for workload.type=flows (TCP flows need the {carriers} backend)")



def _check_fast_forward(config: SimConfig) -> None:
    """`engine.fast_forward` (engine/fastforward.py) covers the packet backend's TCP NewReno on a lossless,
    jitter-free network: the keys it cannot honour yet are refused, naming what is allowed."""
    allowed = "false (fast-forward covers only "
    fast_forwards = " or ".join(backends_with("FAST_FORWARDS"))
    require(backend_class(config.engine.backend).FAST_FORWARDS, "engine.fast_forward", True,
            allowed + f"engine.backend={fast_forwards}; the other backends have no packets to skip)")
    require(config.transport.protocol == "tcp", "engine.fast_forward", True, allowed + "transport.protocol=tcp)")
    require(config.tcp.cc == "newreno", "engine.fast_forward", True,
            allowed + f"tcp.cc=newreno, not {config.tcp.cc}: its window credit is NewReno's)")
    require(not config.tcp.rack_tlp and not config.tcp.hystart, "engine.fast_forward", True,
            allowed + "tcp.rack_tlp=false and tcp.hystart=false)")
    require(config.network.loss_rate == 0, "engine.fast_forward", True,
            allowed + "network.loss_rate=0: random losses never repeat)")
    require(config.host.tx_jitter_ns == 0, "engine.fast_forward", True,
            allowed + "host.tx_jitter_ns=0: the jitter's random draws keep any state from repeating exactly)")
    require(config.network.topology != "ring", "engine.fast_forward", True,
            allowed + "network.topology other than ring, whose NPUs forward packets)")
