"""The analytical backend's signals of where TCP would part from it (the runs columns
`max_link_utilisation`, `max_port_flows`, `slow_start_share`, which a two-fidelity sweep screens
with), against hand computations."""

from __future__ import annotations

import math

import pytest
from sweep_support import compose_config

import engine
from engine.links import wire_bytes
from engine.transport.cc import slow_start_dominates

MSS = 1460
GBPS_100 = 100e9


def _collective(op: str, algorithm: str, npus: int, size_bytes: int, backend: str = "analytical") -> dict:
    config = compose_config([f"engine.backend={backend}", "workload=collective", f"workload.op={op}",
                             f"system.{op}={algorithm}", f"network.npus={npus}", f"workload.bytes={size_bytes}"])
    return engine.run(config)["runs"][0]


def test_slow_start_rounds_against_the_transmission_time() -> None:
    """RFC 5681 slow start from 10 segments (14,600 bytes), doubling every RTT of 10 us on 100 Gb/s
    (BDP 125,000 bytes): 100,000 bytes need 3 doublings (14,600 -> 116,800), 30 us, against 8.2 us
    of transmission: slow start dominates. 10 MB need the window to cover the BDP only: 4 doublings
    (233,600), 40 us, against 822 us of transmission: it does not. A message within the initial
    window needs no doubling at all."""
    init_window_bytes = 10 * MSS
    rtt_ps = 10_000_000

    def transmission_ps(nbytes: int) -> float:
        return wire_bytes(nbytes, MSS) * 8 / GBPS_100 * 1e12

    assert transmission_ps(100_000) == pytest.approx(8.2208e6)  # (100,000 + 69 x 40) bytes at 100 Gb/s
    assert slow_start_dominates(100_000, transmission_ps(100_000), rtt_ps, GBPS_100, init_window_bytes)
    assert not slow_start_dominates(10_000_000, transmission_ps(10_000_000), rtt_ps, GBPS_100, init_window_bytes)
    assert not slow_start_dominates(14_000, transmission_ps(14_000), rtt_ps, GBPS_100, init_window_bytes)
    # 500 kB: the BDP's 4 doublings (40 us) against 41.1 us of transmission: just not
    assert not slow_start_dominates(500_000, transmission_ps(500_000), rtt_ps, GBPS_100, init_window_bytes)


def test_slow_start_share_of_a_ring_all_reduce() -> None:
    """Ring all-reduce on 8 NPUs of one switch sends blocks of n / 8 bytes. The path (NIC, switch
    port) has a one-way latency of 2 us of propagation plus one 1,500-byte packet stored and
    forwarded at 100 Gb/s (0.12 us): RTT 4.24 us, BDP 53,000 bytes. Blocks of 30,000 bytes need 2
    doublings of 14,600 (8.48 us) against 2.47 us of transmission: every message counts. Blocks of
    10,000 bytes fit the initial window: none does. Blocks of 2 MiB: 2 doublings against 172 us:
    none does."""
    assert _collective("all_reduce", "ring", 8, 8 * 30_000)["slow_start_share"] == 1.0
    assert _collective("all_reduce", "ring", 8, 8 * 10_000)["slow_start_share"] == 0.0
    assert _collective("all_reduce", "ring", 8, 8 * 2**21)["slow_start_share"] == 0.0


def test_messages_at_once_into_a_switch_port() -> None:
    """A direct all-to-all on p NPUs sends to every peer in one step: p - 1 messages enter each
    host's switch port at once. A ring all-reduce sends each NPU's blocks to one neighbour: 1."""
    assert _collective("all_to_all", "direct", 8, 2**20)["max_port_flows"] == 7
    assert _collective("all_to_all", "direct", 16, 2**20)["max_port_flows"] == 15
    assert _collective("all_reduce", "ring", 8, 2**20)["max_port_flows"] == 1


def test_load_of_the_busiest_link() -> None:
    """Ring all-reduce of n bytes on p NPUs of one switch: every NIC (and switch port) carries
    2 (p - 1) blocks of n / p bytes, in the run's simulated time: utilisation = 2 (p - 1) x
    wire_bytes(n / p) x 8 / (100 Gb/s x sim_time). The presets have TCP timestamps on: 52 header
    bytes per segment of 1448 payload bytes (MSS 1460 less the 12-byte option)."""
    npus, size = 8, 2**24
    row = _collective("all_reduce", "ring", npus, size)
    block_wire_bytes = size // npus + math.ceil(size / npus / 1448) * 52
    expected = 2 * (npus - 1) * block_wire_bytes * 8 / (GBPS_100 * row["sim_time_s"])
    assert row["max_link_utilisation"] == pytest.approx(expected, rel=1e-9)
    assert 0.95 < row["max_link_utilisation"] <= 1.0  # large blocks: the links are busy nearly all the time


def test_only_the_analytical_backend_reports_them() -> None:
    """The packet engine measures losses itself and alpha_beta has no messages: no such columns."""
    for backend in ("packet", "alpha_beta"):
        row = _collective("all_reduce", "ring", 4, 65536, backend)
        assert not {"max_link_utilisation", "max_port_flows", "slow_start_share"} & set(row)
