"""`engine.fast_forward` (engine/fastforward.py): whole periods of an exactly repeating state skipped.

Each case runs the packet engine with and without fast-forward on a jitter-free, lossless network
(the only ones it covers). Expected times come from the line-rate model with the slow-start stall of
Cardwell, Savage and Anderson (INFOCOM 2000) computed by hand; since a jump moves a state that repeats
exactly, the rows must also be those of the exact run, with fewer events run.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import engine

SEGMENT_BYTES = 1448  # MSS 1460 less the 12-byte timestamp option (the defaults)
PACKET_PS = 1500 * 80  # a full packet on the wire at 100 Gb/s: 80 ps a byte
LINK_PS = 1_000_000  # network.link_latency_us = 1
ACK_PS = 52 * 80  # a pure ACK with the timestamp option


def simulate(workload: dict[str, Any], fast_forward: bool, npus: int = 2, **sections: Any) -> engine.PreparedRun:
    """A run of `workload` on one switch without transmit jitter, simulated to its end."""
    config = {"engine": {"fast_forward": fast_forward}, "host": sections.pop("host", {"tx_jitter_ns": 0}),
              "network": {"npus": npus, **sections.pop("network", {})}, "workload": workload, **sections}
    prepared = engine.prepare(config)
    prepared.start()
    prepared.simulate()
    return prepared


def flows_workload(*flows: tuple[int, int, int, float]) -> dict[str, Any]:
    return {"type": "flows", "flows": [{"src": src, "dst": dst, "bytes": nbytes, "start_us": start_us}
                                       for src, dst, nbytes, start_us in flows]}


def rows_without_wall(prepared: engine.PreparedRun) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The runs row (less the wall-clock and event columns) and the flows rows."""
    rows = prepared.rows(1.0)
    run = {key: value for key, value in rows["runs"][0].items() if key not in ("wall_s", "events", "events_per_s")}
    return run, rows["flows"]


def slow_start_stall_ps(rtt_ps: int, init_cwnd_pkts: int) -> int:
    """Cardwell et al.'s idle time of a sender in slow start (a window per round, doubling from
    `init_cwnd_pkts`, one ACK a segment) before its window fills the path: sum over rounds of
    max(0, RTT + one packet's serialisation - the round's packets' serialisation)."""
    return sum(max(0, rtt_ps + PACKET_PS - init_cwnd_pkts * 2**round_ * PACKET_PS) for round_ in range(32))


def test_one_long_flow_takes_the_line_rate_time_and_fewer_events() -> None:
    nbytes = 30_000_000
    exact = simulate(flows_workload((0, 1, nbytes, 0.0)), False)
    fast = simulate(flows_workload((0, 1, nbytes, 0.0)), True)
    assert fast.sim.fast_forward is not None and fast.sim.fast_forward.jumps >= 1
    # by hand: the NIC sends ceil(B / MSS) full packets back to back after slow start's stall; the last
    # then crosses its link, the switch port and the receiver's link
    packets = math.ceil(nbytes / SEGMENT_BYTES)
    line_rate_ps = packets * PACKET_PS + 2 * LINK_PS + PACKET_PS
    rtt_ps = 2 * (LINK_PS + PACKET_PS) + 2 * (LINK_PS + ACK_PS)
    fct_ps = round(rows_without_wall(fast)[1][0]["fct_s"] * 1e12)
    assert 0 <= fct_ps - line_rate_ps <= slow_start_stall_ps(rtt_ps, 10)
    # a state that repeats exactly, moved ahead: the exact run's rows and TCP state, from a fifth of its events
    assert rows_without_wall(fast) == rows_without_wall(exact)
    exact_sender, fast_sender = exact.sim.connections[0].sender, fast.sim.connections[0].sender
    for name in ("snd_una", "snd_max", "packets_sent", "bytes_sent", "acks_received", "tsq_stops"):
        assert getattr(fast_sender, name) == getattr(exact_sender, name), name
    assert fast_sender.cc.cwnd_bytes == exact_sender.cc.cwnd_bytes  # slow start's credit is exact
    assert fast_sender.rtt.srtt_ps == exact_sender.rtt.srtt_ps
    for exact_link, fast_link in zip(exact.sim.topology.links, fast.sim.topology.links):
        assert (fast_link.packets_sent, fast_link.bytes_sent) == (exact_link.packets_sent, exact_link.bytes_sent)
    assert fast.sim.eventlist.events_run * 3 < exact.sim.eventlist.events_run


def test_two_flows_sharing_their_senders_port_split_it() -> None:
    # host 0 sends to hosts 1 and 2 at once: its NIC is the bottleneck, shared by TCP Small Queues' turns
    workload = flows_workload((0, 1, 15_000_000, 0.0), (0, 2, 15_000_000, 0.0))
    exact = simulate(workload, False, npus=3)
    fast = simulate(workload, True, npus=3)
    assert fast.sim.fast_forward is not None and fast.sim.fast_forward.jumps >= 1
    assert rows_without_wall(fast) == rows_without_wall(exact)
    # by hand: both together take the NIC's time for all their packets (and the path of the last)
    packets = 2 * math.ceil(15_000_000 / SEGMENT_BYTES)
    last_ps = max(round(row["end_s"] * 1e12) for row in rows_without_wall(fast)[1])
    rtt_ps = 2 * (LINK_PS + PACKET_PS) + 2 * (LINK_PS + ACK_PS)
    assert 0 <= last_ps - (packets * PACKET_PS + 2 * LINK_PS + PACKET_PS) <= slow_start_stall_ps(rtt_ps, 20)
    assert fast.sim.eventlist.events_run * 2 < exact.sim.eventlist.events_run


def test_a_flow_starting_and_one_ending_fall_back_to_packets() -> None:
    # a second flow starts while the first is steady, and ends before it: no jump may pass its start, nor
    # either end; the rows are the exact run's (every start and end to the picosecond)
    workload = flows_workload((0, 1, 30_000_000, 0.0), (2, 1, 2_000_000, 1_200.0))
    exact = simulate(workload, False, npus=3, network={"buffer_kb": None})
    fast = simulate(workload, True, npus=3, network={"buffer_kb": None})
    assert fast.sim.fast_forward is not None and fast.sim.fast_forward.jumps >= 2
    assert rows_without_wall(fast) == rows_without_wall(exact)
    second = rows_without_wall(fast)[1][1]
    assert second["start_s"] == pytest.approx(1.2e-3, abs=1e-15)


def test_a_run_with_losses_is_the_exact_one() -> None:
    # two senders into one receiver's port with a 64 KiB buffer: drops and recoveries, never a steady state
    workload = flows_workload((1, 0, 10_000_000, 0.0), (2, 0, 10_000_000, 0.0))
    exact = simulate(workload, False, npus=3, network={"buffer_kb": 64})
    fast = simulate(workload, True, npus=3, network={"buffer_kb": 64})
    run, _ = rows_without_wall(exact)
    assert run["drops"] > 0 and run["retransmits"] > 0
    assert rows_without_wall(fast) == rows_without_wall(exact)


def test_a_ring_all_reduce_of_long_steps_is_the_exact_one() -> None:
    # 4 NPUs, 16 MB steps: each NIC carries its data and the ACKs of the flow coming in; the whole ring repeats
    nbytes, npus = 64_000_000, 4
    workload = {"type": "collective", "op": "all_reduce", "bytes": nbytes, "iterations": 1}
    exact = simulate(workload, False, npus=npus)
    fast = simulate(workload, True, npus=npus)
    assert fast.sim.fast_forward is not None and fast.sim.fast_forward.jumps >= 4
    assert rows_without_wall(fast) == rows_without_wall(exact)
    # never faster than the bandwidth term of the ring (Thakur et al.) at the payload rate MSS / packet
    bandwidth_ps = 2 * (npus - 1) * (nbytes // npus) * PACKET_PS // SEGMENT_BYTES
    assert rows_without_wall(fast)[0]["iteration_time_s"] * 1e12 >= bandwidth_ps
    assert fast.sim.eventlist.events_run * 1.8 < exact.sim.eventlist.events_run


@pytest.mark.parametrize("sections", [
    {"tcp": {"delayed_ack": True}},
    {"tcp": {"delayed_ack": True, "linux_delayed_ack": True}},
    {"tcp": {"timestamps": False, "sack": False}},
    {"tcp": {"rcv_wnd_kb": 512}},  # the receive window, not TCP Small Queues, limits the senders
    {"host": {"tx_jitter_ns": 0, "tsq_bytes": None}},  # the qdisc's 1,000 packets hold TCP back
])
def test_tcp_and_host_options_keep_the_exact_rows(sections: dict[str, Any]) -> None:
    # the ring of 4 with 16 MB steps, and a long flow beside a shorter one starting later: the ring jumps with
    # delayed ACKs and without timestamps and SACK, the flows held back by the receive window or the qdisc
    # jump; where no period is found, looking for one must leave the rows alone
    for workload in ({"type": "collective", "op": "all_reduce", "bytes": 64_000_000, "iterations": 1},
                     flows_workload((0, 1, 32_000_000, 0.0), (2, 3, 20_000_000, 300.0))):
        exact = simulate(workload, False, npus=4, **sections)
        fast = simulate(workload, True, npus=4, **sections)
        assert rows_without_wall(fast) == rows_without_wall(exact)


@pytest.mark.parametrize(("sections", "allowed"), [
    ({"engine": {"fast_forward": "yes"}}, "true or false"),
    ({"engine": {"fast_forward": True, "backend": "analytical"}}, "engine.backend=packet"),
    ({"engine": {"fast_forward": True}}, "host.tx_jitter_ns=0"),  # the default jitter
    ({"engine": {"fast_forward": True}, "host": {"tx_jitter_ns": 0}, "tcp": {"cc": "cubic"}}, "tcp.cc=newreno"),
    ({"engine": {"fast_forward": True}, "host": {"tx_jitter_ns": 0}, "network": {"loss_rate": 0.001}},
     "network.loss_rate=0"),
    ({"engine": {"fast_forward": True}, "host": {"tx_jitter_ns": 0}, "transport": {"protocol": "roce"}},
     "transport.protocol=tcp"),
])
def test_what_fast_forward_cannot_honour_is_refused(sections: dict[str, Any], allowed: str) -> None:
    with pytest.raises(engine.ConfigError) as error:
        engine.check_backend(engine.load_config(sections))
    assert error.value.key == "engine.fast_forward" and allowed in str(error.value)
