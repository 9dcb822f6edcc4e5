"""RoCE on the fluid backends (analytical, phase, alpha_beta): lossless Ethernet as a fluid, by hand.

A queue pair has no window: it sends at line rate from its first packet, so a fluid that shares the
links max-min and cuts messages into RoCE packets (a payload of at most the path MTU, 1,024 bytes at
network.mtu_bytes = 1500, and 44 header bytes) is RoCE on a fabric that PFC keeps lossless, less PFC's
own effects. At 100 Gb/s a byte takes 80 ps.
"""

from __future__ import annotations

import math

import pytest

from engine import ConfigError, run
from engine.links import ROCE_HEADER_BYTES

PS_PER_BYTE = 80  # 100 Gb/s
LATENCY_PS = 1_000_000  # 1 us a link
FLUID_BACKENDS = ("analytical", "phase", "alpha_beta")


def all_to_all(backend: str, network: dict, nbytes: int) -> dict:
    """One direct all-to-all of `nbytes` on RoCE (no endpoint delay), its runs row."""
    config = {"engine": {"backend": backend}, "transport": {"protocol": "roce"}, "network": network,
              "system": {"all_to_all": "direct", "endpoint_delay_ns": 0},
              "workload": {"type": "collective", "op": "all_to_all", "bytes": nbytes}}
    row = run(config)["runs"][0]
    assert row["status"] == "ok", row["error"]
    return row


def roce_wire_bytes(nbytes: int, payload: int = 1024) -> int:
    return nbytes + math.ceil(nbytes / payload) * ROCE_HEADER_BYTES


@pytest.mark.parametrize("backend", FLUID_BACKENDS)
def test_a_direct_all_to_all_on_one_switch_takes_its_injection_time_by_hand(backend: str) -> None:
    # 8 NPUs, 1 MiB: each sends 7 messages of 131,072 bytes (128 RoCE packets, 136,704 bytes on the
    # wire) at once through its own 100 Gb/s link, and receives 7 through its downlink: max-min gives each
    # 1/7 of both, so all end together after 7 x 136,704 x 80 ps, plus the two links' latency and the
    # store-and-forward of one full packet (1,068 bytes) at the switch.
    npus, nbytes = 8, 1 << 20
    message_wire = roce_wire_bytes(nbytes // npus)
    assert message_wire == 136_704
    expected_ps = (npus - 1) * message_wire * PS_PER_BYTE + 2 * LATENCY_PS + (1024 + 44) * PS_PER_BYTE
    row = all_to_all(backend, {"npus": npus}, nbytes)
    assert row["iteration_time_s"] == pytest.approx(expected_ps * 1e-12, rel=1e-9)
    assert row.get("pause_frames") is None  # a fluid has no pause frames to count


def test_the_packet_engine_differs_from_the_fluid_by_its_acks_on_links_carrying_both_ways() -> None:
    # The fluid leaves RoCE's ACKs out: one of 48 bytes for each data packet, which in an all-to-all
    # shares every link with the data going the other way (7 x 128 x 48 = 43,008 bytes a link, 4.5 % of
    # the 956,928 data bytes). With them the injection time is (956,928 + 43,008) x 80 ps; the packet
    # engine's NIC interleaves them with its data, PFC pausing nothing (each port is fed at its rate).
    npus, nbytes = 8, 1 << 20
    data_bytes = (npus - 1) * roce_wire_bytes(nbytes // npus)
    ack_bytes = (npus - 1) * (nbytes // npus // 1024) * (ROCE_HEADER_BYTES + 4)
    with_acks_ps = (data_bytes + ack_bytes) * PS_PER_BYTE + 2 * LATENCY_PS + (1024 + 44) * PS_PER_BYTE
    packet = all_to_all("packet", {"npus": npus}, nbytes)
    assert (packet["drops"], packet["pause_frames"]) == (0, 0)
    # within the spread of a last ACK's or data packet's place in the NIC's round robin: 1 %
    assert packet["iteration_time_s"] == pytest.approx(with_acks_ps * 1e-12, rel=0.01)
    fluid = all_to_all("analytical", {"npus": npus}, nbytes)
    assert packet["iteration_time_s"] > fluid["iteration_time_s"]


def test_phase_flags_where_pfc_would_pause_and_the_packet_engine_pauses_there() -> None:
    # Leaf-spine, 8 NPUs a leaf, 2 spines at 200 Gb/s: the 8 NPUs of a leaf send 8/15 of their all-to-all
    # to the other leaf, 8 x 100 x 8/15 = 426.7 Gb/s into uplinks of 400 Gb/s: the uplink ports queue
    # (64 KiB messages: 8 x 8 x 67,584 wire bytes x (1 - 400/426.7) = 270 KB, far above XOFF's 22,500
    # bytes), so PFC pauses. With 4 spines (800 Gb/s of uplinks) no port is fed above its rate.
    nbytes = 16 * 65_536
    oversubscribed = {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 8, "spines": 2, "uplink_gbps": 200}
    full = dict(oversubscribed, spines=4)
    assert all_to_all("phase", oversubscribed, nbytes)["pfc_pause_phases"] == 1
    assert all_to_all("packet", oversubscribed, nbytes)["pause_frames"] > 0
    assert all_to_all("phase", full, nbytes)["pfc_pause_phases"] == 0
    assert all_to_all("phase", {"npus": 16}, nbytes)["pfc_pause_phases"] == 0
    assert all_to_all("phase", {"npus": 16}, nbytes).get("incast_phases") is None  # nothing is lost with PFC


@pytest.mark.parametrize("backend", FLUID_BACKENDS)
def test_roce_without_pfc_is_refused_on_a_fluid_in_one_line(backend: str) -> None:
    config = {"engine": {"backend": backend}, "transport": {"protocol": "roce"}, "network": {"npus": 4, "pfc": False},
              "workload": {"type": "collective", "op": "all_reduce", "bytes": 4096}}
    with pytest.raises(ConfigError) as error:
        run(config)
    assert error.value.key == "network.pfc" and "\n" not in str(error.value)


def test_phase_refuses_tcps_incast_rto_with_roce() -> None:
    config = {"engine": {"backend": "phase", "incast_rto": True}, "transport": {"protocol": "roce"},
              "network": {"npus": 4}, "workload": {"type": "collective", "op": "all_reduce", "bytes": 4096}}
    with pytest.raises(ConfigError) as error:
        run(config)
    assert error.value.key == "engine.incast_rto" and "\n" not in str(error.value)
