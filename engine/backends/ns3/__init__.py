"""`engine.backend=ns3`: ns-3's TCP/IP (the `ns3` wheel, optional extra `netsweep[ns3]`) as the network
behind netsweep's own workload and system layer, as the 2020 study put ASTRA-sim on ns-3.

`build` finds the wheel and compiles the C++ helper (`netsweep_ns3.cc`); `helper.Ns3Messages` drives
it over a pipe, the two simulations advancing together. ns-3 counts segments, retransmissions,
timeouts, drops and marks; the queue peak is not traced (null), and it keeps no per-link counters.

Memory: the helper process opens every pair's TCP connection before time 0: its peak resident
memory, measured on all-to-alls over one switch, was 28 MiB at 16 NPUs, 130 MiB at 64 and 415 MiB at
128 (about 24 KiB a connection), counted in the run's estimate since the run's machine holds it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ...config import ConfigError, FlowsWorkload, SimConfig, require
from ...memory import estimate_messages, process_bytes
from ...simulation import Simulation
from ...system.collectives import SystemLayer
from ...system.messages import MessageLog
from ...units import s_to_ps
from ..base import EVENT_RATE_COLUMNS, MESSAGE_COLUMNS, PACKET_COLUMNS, NetworkBackend, message_system_layer
from ..names import BACKEND_NAMES
from . import build
from .helper import NS3_TCP_KEYS, Ns3Messages

# Why ns-3 cannot take another value of a `tcp.*` key its helper does not map, where there is more
# to say than that
_NS3_FIXED_TCP = {
    "max_rto_s": "ns-3 caps the RTO at 60 s, not settable",
    "handshake": "ns-3 opens every connection with its handshake before time 0",
    "sack_after_rto": "ns-3 keeps the SACK scoreboard across an RTO; discarding it is not settable",
}
NS3_MAX_NPUS = 128  # it opens a connection per ordered pair of NPUs before time 0
NS3_HELPER_BYTES = 64 * 2**20  # the helper process with no connection, and headroom
NS3_BYTES_PER_CONNECTION = 32 * 1024  # an ns-3 TCP socket pair with its buffers and routes


def _as_written(value: Any) -> str:
    """A default as a config spells it: `true`, `60`, `keep`."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


class Ns3Backend(NetworkBackend):
    """Messages over ns-3 TCP connections (`Ns3Messages`), one per ordered pair of NPUs."""

    DESCRIPTION = "ns-3's TCP/IP behind netsweep's system layer"
    FILLS = frozenset(PACKET_COLUMNS + MESSAGE_COLUMNS + EVENT_RATE_COLUMNS) - {"max_queue_kb"}
    ECN_THRESHOLD_SETS_QUEUE = True
    FIDELITY_RANK = 5

    def __init__(self, config: SimConfig, sim: Simulation) -> None:
        super().__init__(config, sim)
        self.messages = Ns3Messages(sim.eventlist, sim.topology, config)

    @classmethod
    def check_config(cls, config: SimConfig) -> None:
        """What ns-3 cannot express, refused on the key that asks for it; then whether ns-3 is here."""
        net, tcp = config.network, config.tcp
        require(net.loss_rate == 0.0, "network.loss_rate", net.loss_rate,
                "0 with engine.backend=ns3 (random loss is not mapped to ns-3)")
        for item in fields(tcp):  # a key the helper does not map: ns-3 behaves as its default
            value = getattr(tcp, item.name)
            if item.name not in NS3_TCP_KEYS and value != item.default and not (item.name == "sack_after_rto"
                                                                                 and not tcp.sack):
                raise ConfigError(f"tcp.{item.name}", value, f"{_as_written(item.default)} with engine.backend=ns3 "
                                  f"({_NS3_FIXED_TCP.get(item.name, 'its helper does not map this key to ns-3')})")
        require(net.npus <= NS3_MAX_NPUS, "network.npus", net.npus,
                f"at most {NS3_MAX_NPUS} with engine.backend=ns3 (it opens a TCP connection per ordered pair "
                "of NPUs before time 0)")
        require(config.mss_bytes <= 65535, "tcp.mss_bytes", tcp.mss_bytes, "at most 65535 with engine.backend=ns3")
        require(config.engine.link_stats == "none", "engine.link_stats", config.engine.link_stats,
                "none with engine.backend=ns3 (its helper reports no per-link counters)")
        if not isinstance(config.workload, FlowsWorkload):  # flows are refused with their own message
            reason = build.unavailable_reason()
            others = [name for name in BACKEND_NAMES if name != "ns3"]
            require(reason is None, "engine.backend", "ns3", f"{', '.join(others[:-1])} or {others[-1]} here: {reason}")

    @classmethod
    def estimate_bytes(cls, config: SimConfig) -> int:
        """The engine's share (`engine.memory`) and the helper, with a connection per ordered pair."""
        npus = config.network.npus
        return (process_bytes(config, estimate_messages(config)) + NS3_HELPER_BYTES
                + npus * (npus - 1) * NS3_BYTES_PER_CONNECTION)

    def system_layer(self) -> SystemLayer:
        """The collectives' messages over ns-3's connections."""
        return message_system_layer(self.config, self.sim, self.messages)

    def message_log(self) -> MessageLog:
        """Every message sent, with ns-3's retransmissions, timeouts and marks."""
        return self.messages.records

    def simulate(self) -> None:
        """ns-3 carries the packets: the two simulations advance together."""
        until_ps = s_to_ps(self.config.engine.max_sim_time_s)
        self.sim.time_limit_reached = not self.messages.run(until_ps)

    def counters(self) -> dict[str, Any]:
        """What ns-3 counted (segments, retransmissions, timeouts, drops, marks and its events)."""
        return dict(self.messages.counters())

    def link_rows(self, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
        """None: `check_config` refuses `engine.link_stats` other than none."""
        return []

    def close(self) -> None:
        """End the helper process (idempotent)."""
        self.messages.close()


BACKEND = Ns3Backend
