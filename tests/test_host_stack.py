"""A host's transmit path below TCP, as Linux's (`host.*`): TCP Small Queues, a bounded qdisc that
stops the sender instead of dropping, and the transmit jitter that breaks drop-tail phase lock-out.

Expected values come from Linux's rules (net/ipv4/tcp_output.c: tcp_small_queue_check,
tcp_update_pacing_rate; Documentation/networking/ip-sysctl.rst: tcp_limit_output_bytes,
tcp_pacing_ss_ratio, tcp_pacing_ca_ratio) computed by hand, and from Floyd and Jacobson, "On Traffic
Phase Effects in Packet-Switched Gateways" (1992) for the jitter.
"""

from __future__ import annotations

from random import Random
from typing import Any

import pytest

import engine
from engine.eventlist import EventList
from engine.links import HostNic, HostSender, Link, Packet
from engine.transport.tcp import tsq_limit_bytes
from sweep.runner import run_id

MIB = 1_048_576
FULL_PACKET_BYTES = 1500  # MTU 1500: 1,448 bytes of payload and 52 of headers with timestamps


def _host_nics(prepared: engine.PreparedRun) -> dict[str, HostNic]:
    return {link.name: link for link in prepared.sim.topology.links if isinstance(link, HostNic)}


def _simulated(config: dict[str, Any]) -> engine.PreparedRun:
    prepared = engine.prepare(config)
    prepared.start()
    prepared.simulate()
    assert prepared.finished
    return prepared


# -- TCP Small Queues' limit, by hand -------------------------------------------------------------

def test_tsq_limit_is_a_millisecond_at_the_pacing_rate_in_slow_start() -> None:
    # cwnd 100 segments of 1,500 bytes, SRTT 1 ms, ssthresh unset: pacing at 200 % of cwnd/SRTT =
    # 2 x 150,000 B / 1 ms = 300e6 B/s; >> 10 = 300e6 / 1024 = 292,968.75 -> 292,968 bytes (< 1 MiB)
    assert tsq_limit_bytes(150_000.0, 0, float("inf"), 1_000_000_000, FULL_PACKET_BYTES, MIB) == 292_968


def test_tsq_limit_after_slow_start_paces_at_120_percent() -> None:
    # ssthresh 200,000 B: cwnd 150,000 >= ssthresh / 2, so 120 %: 1.2 x 150,000 B / 1 ms = 180e6 B/s;
    # / 1024 = 175,781.25 -> 175,781 bytes
    assert tsq_limit_bytes(150_000.0, 0, 200_000.0, 1_000_000_000, FULL_PACKET_BYTES, MIB) == 175_781


def test_tsq_limit_counts_what_is_in_flight_when_it_exceeds_cwnd() -> None:
    # after a window reduction 300,000 B may still be out: max(cwnd, in flight) = 300,000 B;
    # 1.2 x 300,000 / 1 ms / 1024 = 351,562.5 -> 351,562 bytes
    assert tsq_limit_bytes(150_000.0, 300_000, 200_000.0, 1_000_000_000, FULL_PACKET_BYTES, MIB) == 351_562


def test_tsq_limit_is_capped_by_tcp_limit_output_bytes_on_a_datacenter_rtt() -> None:
    # SRTT 10 us: 2 x 150,000 B / 10 us = 30e9 B/s, / 1024 = 29.3 MB: the cap (1 MiB) binds
    assert tsq_limit_bytes(150_000.0, 0, float("inf"), 10_000_000, FULL_PACKET_BYTES, MIB) == MIB
    # and before any RTT sample the pacing rate is unlimited: the cap again
    assert tsq_limit_bytes(14_480.0, 0, float("inf"), 0, FULL_PACKET_BYTES, MIB) == MIB


def test_tsq_limit_is_at_least_two_packets() -> None:
    # cwnd 1,000 B, SRTT 1 ms: 2 x 1,000 / 1 ms / 1024 = 1,953 B, below 2 packets of 1,500 B
    assert tsq_limit_bytes(1_000.0, 0, float("inf"), 1_000_000_000, FULL_PACKET_BYTES, MIB) == 3_000


# -- TCP Small Queues in a run --------------------------------------------------------------------

def _one_flow_into_its_own_nic(host: dict[str, Any]) -> dict[str, Any]:
    """One 20 MB flow from h1 to h0 through one switch, every link 100 Gb/s: the flow never loses a
    packet and stays in slow start, so its window outgrows the path and the excess waits at its NIC."""
    return {"network": {"npus": 2}, "host": host,
            "workload": {"type": "flows", "flows": [{"src": 1, "dst": 0, "bytes": 20_000_000}]}}


def test_tsq_keeps_a_connections_bytes_below_tcp_within_its_limit() -> None:
    # The path's RTT is ~4.5 us, so from the first sample on the pacing term is tens of MB (the slow
    # start case above, at a 100x shorter SRTT): the limit is host.tsq_bytes, 65,536 bytes. A packet
    # goes down only while the connection's bytes below TCP are within the limit, so the backlog an
    # arriving packet sees at the NIC (bytes of the flow queued ahead of it) never exceeds it.
    limit_bytes = 65_536
    prepared = _simulated(_one_flow_into_its_own_nic({"tsq_bytes": limit_bytes, "qdisc_packets": None}))
    nic = _host_nics(prepared)["h1->sw"]
    assert limit_bytes // 2 < nic.max_queue_bytes <= limit_bytes  # reached, never exceeded
    sender = prepared.sim.connections[0].sender
    assert sender.tsq_stops > 0 and sender.retransmits == 0
    # without TSQ the same flow piles most of its window up at the NIC
    unlimited = _simulated(_one_flow_into_its_own_nic({"tsq_bytes": None, "qdisc_packets": None}))
    assert unlimited.sim.topology.links[1].max_queue_bytes > 10 * limit_bytes


def test_tsq_costs_the_flow_no_throughput() -> None:
    # the NIC is never left idle by TSQ (the sender resumes with half the limit still queued): the
    # flow ends when it would with an unlimited queue, to within the last few packets' timing
    limited = engine.run(_one_flow_into_its_own_nic({"tsq_bytes": 65_536, "qdisc_packets": None}))
    unlimited = engine.run(_one_flow_into_its_own_nic({"tsq_bytes": None, "qdisc_packets": None}))
    assert limited["flows"][0]["end_s"] == pytest.approx(unlimited["flows"][0]["end_s"], rel=1e-3)


# -- the qdisc: backpressure, never a drop --------------------------------------------------------

class _RecordingSender(HostSender):
    """A sender that queues `burst` packets on its NIC whenever it is woken, and records when."""

    def __init__(self, nic: HostNic, name: str, burst: int, log: list[str]) -> None:
        self.nic, self.name, self.burst, self.log = nic, name, burst, log

    def send(self) -> None:
        for _ in range(self.burst):
            if not self.nic.has_room(self, self.nic.eventlist.now_ps):
                self.nic.wait_for_room(self)
                return
            self.nic.receive_packet(Packet((self.nic, _Sink()), 1000, 960, 0, 0, 0, False, False))

    def on_qdisc_room(self) -> None:
        self.log.append(self.name)
        self.send()


class _Sink(HostSender):
    def receive_packet(self, pkt: Packet) -> None:
        pass


def test_a_full_qdisc_stops_senders_and_wakes_them_in_order() -> None:
    eventlist = EventList()
    # 8 ns per 1,000-byte packet at 1 Tb/s; the interface holds 3,000 bytes: 24 ns of backlog
    nic = HostNic(eventlist, "h0->sw", 1_000_000_000_000, 0, qdisc_bytes=3_000, tsq_bytes=0)
    log: list[str] = []
    first, second = (_RecordingSender(nic, name, 4, log) for name in ("a", "b"))
    first.send()  # a: three packets (0, 8, 16 ns of backlog before each); the fourth finds 24 ns: full
    second.send()  # b finds it full too, and waits behind a
    assert nic.sender_stops == 2 and log == []
    eventlist.run(100_000)
    # each 8 ns that drain make room for one more: a (first to stop) sends one and stops again, then b, ...
    assert log[:6] == ["a", "b", "a", "b", "a", "b"]
    assert nic.max_queue_bytes < 3_000  # an arriving packet never found the limit reached
    assert nic.drops == 0


def _fan_out(host: dict[str, Any]) -> dict[str, Any]:
    """Host 0 sends 1 MB to each of hosts 1..7 at once through one switch."""
    return {"network": {"npus": 8}, "host": host,
            "workload": {"type": "flows", "flows": [{"src": 0, "dst": d, "bytes": 1_000_000} for d in range(1, 8)]}}


def test_a_full_qdisc_holds_tcp_back_and_nothing_is_dropped_at_the_host() -> None:
    qdisc_packets = 16
    prepared = _simulated(_fan_out({"tsq_bytes": None, "qdisc_packets": qdisc_packets}))
    nic = _host_nics(prepared)["h0->sw"]
    assert nic.sender_stops > 0  # seven windows of 10 segments at once: more than the qdisc holds
    # no packet found 16 full packets' worth (MTU 1500) queued ahead of it, but some nearly did
    assert (qdisc_packets - 1) * FULL_PACKET_BYTES < nic.max_queue_bytes < qdisc_packets * FULL_PACKET_BYTES
    rows = prepared.rows(0.0)
    assert rows["runs"][0]["drops"] == 0 and rows["runs"][0]["retransmits"] == 0
    assert sorted(flow["bytes"] for flow in rows["flows"]) == [1_000_000] * 7
    # with no limit the same windows wait at the NIC, far more than 16 packets
    unlimited = _simulated(_fan_out({"tsq_bytes": None, "qdisc_packets": None}))
    assert unlimited.sim.topology.links[0].max_queue_bytes > 4 * qdisc_packets * FULL_PACKET_BYTES


# -- transmit jitter ------------------------------------------------------------------------------

def test_jitter_delays_each_packet_within_its_bound_and_keeps_the_order() -> None:
    eventlist = EventList()
    jitter_ps = 30_000
    link = Link(eventlist, "h0->sw", 100_000_000_000, 1_000_000, jitter_ps=jitter_ps, jitter_rng=Random(7))
    arrivals: list[int] = []

    class Record(HostSender):
        def receive_packet(self, pkt: Packet) -> None:
            arrivals.append(eventlist.now_ps)

    sink = Record()
    sizes = [1500, 64, 64, 1500, 64, 1500]  # ACK-sized packets: 5.12 ns each, less than the jitter
    for size in sizes:
        link.receive_packet(Packet((link, sink), size, 0, 0, 0, 0, False, False))
    eventlist.run(10**9)
    # without jitter each arrives at its end of serialisation (80 ps a byte at 100 Gb/s) + 1 us
    exact, end = [], 0
    for size in sizes:
        end += size * 80
        exact.append(end + 1_000_000)
    assert arrivals == sorted(arrivals)  # never overtaking
    assert all(at >= exact_ps for at, exact_ps in zip(arrivals, exact))
    assert all(at < exact_ps + jitter_ps for at, exact_ps in zip(arrivals, exact))
    assert arrivals != exact


def _two_senders(nbytes: int, host: dict[str, Any]) -> dict[str, Any]:
    """The issue's case: two CUBIC senders into one 100 Gb/s port with 512 KiB of buffer."""
    return {"network": {"npus": 3, "buffer_kb": 512}, "tcp": {"cc": "cubic"}, "host": host,
            "engine": {"link_stats": "all"},
            "workload": {"type": "flows", "flows": [{"src": 1, "dst": 0, "bytes": nbytes},
                                                    {"src": 2, "dst": 0, "bytes": nbytes}]}}


def test_two_senders_share_a_port_with_the_default_host() -> None:
    # Floyd and Jacobson (1992): with equal-rate senders whose arrivals keep a fixed phase to the
    # port's departures, a full drop-tail queue takes every freed place for the same sender; a random
    # component in the senders' timing removes the bias, and the default host has one
    # (`host.tx_jitter_ns`, 30 ns). Two equal CUBIC flows then each get half the port (CUBIC's
    # fairness between flows of one RTT) and, each of 10 MB (0.83 ms alone at 100 Gb/s), end together.
    nbytes = 10_000_000
    rows = engine.run(_two_senders(nbytes, {}))
    ends = sorted(flow["end_s"] for flow in rows["flows"])
    assert ends[0] >= 0.75 * ends[1]  # within 25 % of each other
    # and both together take about what 20 MB through one 100 Gb/s port takes: 20e6 x 1500/1448 x 8 / 100e9
    assert ends[1] == pytest.approx(2 * nbytes * 1500 / 1448 * 8 / 100e9, rel=0.1)
    run_row = rows["runs"][0]
    assert run_row["timeouts"] == 0
    nics = [link for link in rows["links"] if link["kind"] == "host_nic"]
    assert max(link["max_queue_kb"] for link in nics) <= 1024  # TSQ's 1 MiB at most


def test_without_jitter_the_phase_lock_shuts_one_sender_out() -> None:
    # jitter 0 (ns-3's exact timing): the same sender loses every freed place, the other its window
    rows = engine.run(_two_senders(10_000_000, {"tx_jitter_ns": 0}))
    ends = sorted(flow["end_s"] for flow in rows["flows"])
    assert ends[0] < 0.75 * ends[1] and rows["runs"][0]["timeouts"] >= 1


def test_the_same_jitter_seed_gives_the_same_run() -> None:
    config = _two_senders(2_000_000, {"tx_jitter_ns": 100})
    first, second = engine.run(config), engine.run(config)
    assert first["flows"] == second["flows"]
    other_seed = engine.run({**config, "seed": 1})
    assert other_seed["flows"] != first["flows"]


# -- config -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("tsq_bytes", 0, "an integer >= 1"),
    ("qdisc", "fq", "one of pfifo_fast (fq, per-flow fair queueing with pacing, is not modelled yet)"),
    ("qdisc_packets", 0, "an integer >= 1"),
    ("tx_jitter_ns", -1.0, "a number >= 0"),
])
def test_bad_host_values_are_refused_naming_the_key(key: str, value: Any, allowed: str) -> None:
    with pytest.raises(engine.ConfigError) as error:
        engine.load_config({"host": {key: value}})
    assert error.value.key == f"host.{key}" and allowed in str(error.value)


def test_the_host_section_leaves_the_identity_of_runs_it_cannot_change() -> None:
    # run_ids computed by sweep.runner.run_id at commit 06b1fed, before the host section existed: the
    # fluid backends and the ring (whose NPUs send through the ports that forward) are unchanged, so
    # their datasets resume; a packet run on a switch is a new simulation, with a new identity
    base = {"seed": 0, "workload": {"type": "collective", "op": "all_reduce", "bytes": 1_048_576}}
    host = {"tsq_bytes": 1_048_576, "qdisc": "pfifo_fast", "qdisc_packets": 1000, "tx_jitter_ns": 0}
    for backend, topology, before in (("analytical", "switch", "85fafbc52acd5394"),
                                      ("phase", "ring", "228a4ee154f34681"),
                                      ("packet", "ring", "4caffe5ab065ac05")):
        config = {**base, "engine": {"backend": backend}, "network": {"topology": topology, "npus": 8}, "host": host}
        assert run_id(config) == before, (backend, topology)
    packet_switch = {**base, "engine": {"backend": "packet"}, "network": {"topology": "switch", "npus": 8},
                     "host": host}
    assert run_id(packet_switch) != "4524b38272d6dcae"
