"""Hierarchical all-reduce on multi-GPU nodes against its closed form, computed by hand.

`system.hierarchy=local_bw_aware` (ASTRA-sim's multi-dimensional scheduling): a ring reduce-scatter
inside every node, a ring all-reduce across the nodes rail by rail (the NPUs of one local index, each
ring on its own NICs), then a ring all-gather inside every node. With p_l NPUs a node, p_a nodes and
n bytes per NPU, ring steps of one message each:

    T = 2 (p_l - 1) m_up(n / p_l) + 2 (p_a - 1) m_out(n / (p_l p_a))

where m(b) is the time of a b-byte message through two store-and-forward links of one rate and
latency (NPU -> switch -> NPU: the scale-up switch inside a node; NIC -> rail leaf (or the one
scale-out switch) -> NIC across nodes). A message of segments s_i with h header bytes each takes
(s_0 + h) / B + L + sum(s_i + h) / B + L: the second link starts when the first segment is in, then
(equal rates) serialises back to back. The bandwidth terms alone are
2 (p_l - 1) / p_l n / B_up + 2 (p_a - 1) / p_a (n / p_l) / B_out (Thakur, Rabenseifner and Gropp 2005).
"""

from __future__ import annotations

import pytest

import engine

MSS = 1448  # 1500-byte MTU less IPv4 and TCP headers and the 12-byte timestamps option
HEADER_BYTES = 52
P_LOCAL, P_ACROSS = 4, 4  # 4 nodes of 4 NPUs
UP_PS_PER_BYTE, UP_LATENCY_PS = 20, 500_000  # 400 Gb/s, 0.5 us
OUT_PS_PER_BYTE, OUT_LATENCY_PS = 80, 1_000_000  # 100 Gb/s, 1 us
NODES = {"npus": 16, "npus_per_node": P_LOCAL, "link_gbps": 100, "link_latency_us": 1, "scaleup_gbps": 400,
         "scaleup_latency_us": 0.5, "buffer_kb": 16384}  # deep buffers: nothing is lost
NETWORKS = {
    "one switch": {"topology": "hierarchical", **NODES},
    "leaf-spine": {"topology": "hierarchical", "scaleout": "leaf_spine", "hosts_per_leaf": 16, "spines": 2, **NODES},
    # the four nodes on one rail leaf per rail: each rail's ring on its own leaf
    "rails": {"topology": "rail_optimized", "hosts_per_leaf": 4, "spines": 2, **NODES},
}


def message_ps(payload_bytes: int, ps_per_byte: int, latency_ps: int) -> int:
    """One message through two store-and-forward links of equal rate (module docstring)."""
    segments = [MSS] * (payload_bytes // MSS) + ([payload_bytes % MSS] if payload_bytes % MSS else [])
    wire = [size + HEADER_BYTES for size in segments]
    return wire[0] * ps_per_byte + latency_ps + sum(wire) * ps_per_byte + latency_ps


def closed_form_s(size_bytes: int) -> float:
    """T of the module docstring."""
    scale_up = 2 * (P_LOCAL - 1) * message_ps(size_bytes // P_LOCAL, UP_PS_PER_BYTE, UP_LATENCY_PS)
    scale_out = 2 * (P_ACROSS - 1) * message_ps(size_bytes // P_LOCAL // P_ACROSS, OUT_PS_PER_BYTE, OUT_LATENCY_PS)
    return (scale_up + scale_out) / 1e12


def all_reduce_s(network: dict, backend: str, size_bytes: int) -> float:
    row = engine.run({
        "engine": {"backend": backend},
        "network": network,
        "host": {"tx_jitter_ns": 0},  # exact transmit timing: the hand computation assumes it
        "system": {"hierarchy": "local_bw_aware", "endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_reduce", "bytes": size_bytes, "iterations": 1},
    })["runs"][0]
    assert row["status"] == "ok" and row["drops"] in (0, None)
    return row["iteration_time_s"]


def test_the_closed_form_by_hand() -> None:
    # n = 4 KiB: 3 scale-up steps of 1,024 bytes each way = 1,076 wire bytes: 2 x (1,076 x 20 ps + 0.5 us)
    # = 1.04304 us; 6 scale-out steps of 256 bytes = 308 wire bytes: 2 x (308 x 80 ps + 1 us) = 2.04928 us
    assert message_ps(1024, UP_PS_PER_BYTE, UP_LATENCY_PS) == 1_043_040
    assert message_ps(256, OUT_PS_PER_BYTE, OUT_LATENCY_PS) == 2_049_280
    assert closed_form_s(4096) == pytest.approx((6 * 1_043_040 + 6 * 2_049_280) / 1e12, rel=1e-12)


@pytest.mark.parametrize("network", NETWORKS.values(), ids=NETWORKS.keys())
@pytest.mark.parametrize("backend", ["packet", "analytical", "alpha_beta", "phase"])
def test_a_small_hierarchical_all_reduce_is_its_closed_form(network: dict, backend: str) -> None:
    # one segment a message: every backend is exact, to the picosecond
    assert all_reduce_s(network, backend, 4096) == pytest.approx(closed_form_s(4096), rel=1e-9)


@pytest.mark.parametrize("network", NETWORKS.values(), ids=NETWORKS.keys())
def test_a_large_hierarchical_all_reduce_is_its_closed_form(network: dict) -> None:
    # 8 MiB: 512 KiB messages inside a node, 128 KiB across. The fluid backends and the closed form
    # agree exactly (they charge the same store-and-forward of the first segment); TCP adds the slow
    # start of each phase's first messages, as on one switch (tests/test_collectives.py: within 10 %)
    size = 8 * 2**20
    expected = closed_form_s(size)
    bandwidth = (2 * (P_LOCAL - 1) / P_LOCAL * size * UP_PS_PER_BYTE
                 + 2 * (P_ACROSS - 1) / P_ACROSS * size / P_LOCAL * OUT_PS_PER_BYTE) * (MSS + HEADER_BYTES) / MSS / 1e12
    assert 1.0 < expected / bandwidth < 1.04  # the latency and first-segment terms: a few percent
    for backend in ("analytical", "alpha_beta", "phase"):
        assert all_reduce_s(network, backend, size) == pytest.approx(expected, rel=1e-9), backend
    assert 1.0 <= all_reduce_s(network, "packet", size) / expected <= 1.10
