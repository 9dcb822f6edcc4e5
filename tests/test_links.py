"""The `links` table (`engine.link_stats`) against hand computations: bytes and packets of one flow
from its MSS and headers, ACKs on the reverse path, utilisation from its definition, drops of an
incast at the receiver's port, conservation at every switch, and the analytical backends' bytes of
a ring all-reduce from the Thakur-Rabenseifner-Gropp volume 2(n-1)/n x S per NIC."""

from __future__ import annotations

import math

import pytest

from engine import ConfigError, load_config, prepare, run
from engine.links import Link

MSS = 1500 - 40  # MTU 1500 minus IPv4 (20) and TCP (20) headers: TCP timestamps off
HEADERS = 40
NO_TIMESTAMPS = {"timestamps": False}  # the hand computations below count 40-byte headers


def _by_name(rows: list[dict]) -> dict[str, dict]:
    return {row["link"]: row for row in rows}


def _dumbbell_flow(nbytes: int) -> dict:
    """One flow from h0 (left) to h1 (right); 100 Gb/s NICs, a 10 Gb/s bottleneck, 1 us per hop."""
    return {"engine": {"link_stats": "all"},
            "network": {"topology": "dumbbell", "npus": 2, "link_gbps": 100, "link_latency_us": 1,
                        "bottleneck_gbps": 10, "bottleneck_latency_us": 1},
            "tcp": NO_TIMESTAMPS,
            "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": nbytes}]}}


def test_one_flow_over_a_dumbbell_by_hand():
    nbytes = 1_000_000
    rows = run(_dumbbell_flow(nbytes))
    links, run_row = _by_name(rows["links"]), rows["runs"][0]
    segments = math.ceil(nbytes / MSS)  # 685: 684 full segments and one of 1,000,000 - 684 x 1460 = 640 bytes
    assert segments == 685
    wire = nbytes + segments * HEADERS  # 1,027,400 bytes: payload plus a 40-byte header per segment
    for name in ("h0->swL", "swL->swR", "swR->h1"):  # the data path, every segment once (no loss)
        assert (links[name]["bytes"], links[name]["packets"]) == (wire, segments), name
    # no delayed ACKs: the receiver sends a pure 40-byte ACK per segment on its NIC
    assert (links["h1->swR"]["bytes"], links["h1->swR"]["packets"]) == (segments * HEADERS, segments)
    assert all(row["drops"] == 0 and row["ecn_marks"] == 0 for row in links.values())
    # utilisation = bytes x 8 / (rate x run duration)
    duration_s = run_row["sim_time_s"]
    bottleneck = links["swL->swR"]
    assert bottleneck["utilisation"] == pytest.approx(wire * 8 / (10e9 * duration_s), rel=1e-12)
    # the same bytes on a 10x faster NIC: a tenth of the bottleneck's utilisation
    assert links["h0->swL"]["utilisation"] == pytest.approx(bottleneck["utilisation"] / 10, rel=1e-12)
    # The window (10 segments) exceeds the bottleneck's BDP (10 Gb/s x ~5 us = 6 kB) from the start,
    # so the bottleneck is never idle: the run lasts its serialisation of the wire bytes (821.92 us)
    # plus at most ~5 us of hops around it (NIC serialisation and propagation on 3 links).
    serialisation_s = wire * 8 / 10e9
    assert serialisation_s / (serialisation_s + 5e-6) <= bottleneck["utilisation"] <= 1
    # the queue builds at the bottleneck (100 Gb/s in, 10 out), nowhere after it
    assert bottleneck["max_queue_kb"] > 0 and links["swR->h1"]["max_queue_kb"] == 0
    assert [row["kind"] for row in rows["links"]] == ["host_nic"] * 2 + ["switch_port"] * 2 + ["bottleneck"] * 2
    assert (bottleneck["src"], bottleneck["dst"], bottleneck["gbps"]) == ("swL", "swR", 10.0)


def test_link_stats_none_collects_nothing_and_switch_ports_leaves_out_the_nics():
    config = _dumbbell_flow(100_000)
    config["engine"]["link_stats"] = "none"
    assert "links" not in run(config)
    config["engine"]["link_stats"] = "switch_ports"
    rows = run(config)["links"]
    assert sorted(row["link"] for row in rows) == ["swL->h0", "swL->swR", "swR->h1", "swR->swL"]
    # the run itself is the same whatever is recorded
    config["engine"]["link_stats"] = "all"
    with_links, without = run(config)["runs"][0], run({**config, "engine": {"link_stats": "none"}})["runs"][0]
    for row in (with_links, without):
        row.pop("wall_s"), row.pop("events_per_s")
    assert with_links == without


def test_link_stats_is_validated():
    with pytest.raises(ConfigError, match=r"engine.link_stats='ports' is not valid: one of none, switch_ports, all"):
        load_config({"engine": {"link_stats": "ports"}})


@pytest.mark.parametrize("tcp, network", [
    ({}, {"buffer_kb": 32}),  # drop-tail: the port overflows
    ({"cc": "dctcp"}, {"buffer_kb": 64, "ecn_threshold_kb": 16}),  # marks (and maybe drops) instead
])
def test_incast_losses_and_marks_are_all_at_the_receivers_port(tcp, network):
    """8 senders into host 0 of a switch: every drop and every CE mark of the run happens where
    the 8 flows meet, the switch's port to host 0; the runs row's counters are that port's."""
    rows = run({"engine": {"link_stats": "all"}, "tcp": {"min_rto_ms": 1, **tcp},
                "network": {"topology": "switch", "npus": 9, **network},
                "workload": {"type": "flows", "pattern": "incast", "senders": 8, "bytes_per_flow": 200_000}})
    links, run_row = _by_name(rows["links"]), rows["runs"][0]
    port = links["sw->h0"]
    assert port["drops"] == run_row["drops"] and port["ecn_marks"] == run_row["ecn_marks"]
    assert port["drops"] + port["ecn_marks"] > 0
    assert sum(row["drops"] + row["ecn_marks"] for name, row in links.items() if name != "sw->h0") == 0
    assert port["max_queue_kb"] == run_row["max_queue_kb"]  # the largest queue of the run is there
    assert port["max_queue_kb"] <= network["buffer_kb"] + 1500 / 1024  # a packet on the wire beyond the buffer
    # what the senders sent, retransmissions included, entered their NICs
    assert sum(links[f"h{i}->sw"]["bytes"] for i in range(1, 9)) >= 8 * (200_000 + math.ceil(200_000 / MSS) * 40)


def _still_on(link: Link) -> tuple[int, int]:
    """Packets and bytes a link accepted that have not reached its next hop yet (its wire list)."""
    packets = size = 0
    pkt = link._wire_head
    while pkt is not None:
        packets, size = packets + 1, size + pkt.size_bytes
        pkt = pkt.next_on_wire
    return packets, size


def test_conservation_at_every_switch_of_a_leaf_spine():
    """Every packet that reaches a switch is offered to one of its egress ports, which accepts or
    drops it: per switch, packets in = packets out + drops, and, with no drops, bytes in = bytes
    out. "In" is what its ingress links accepted, less what is still on their wires at the end."""
    for buffer_kb in (None, 16):  # no loss; then shallow ports that drop
        prepared = prepare({
            "engine": {"link_stats": "all"}, "tcp": {"min_rto_ms": 1}, "seed": 3,
            "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100,
                        "buffer_kb": buffer_kb},
            "workload": {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 50_000}})
        prepared.start()
        prepared.sim.run()
        rows = prepared.rows(wall_s=1.0)["links"]
        in_flight = {link.name: _still_on(link) for link in prepared.sim.topology.links}
        switches = {row["src"] for row in rows if not row["src"].startswith("h")}
        assert switches == {"leaf0", "leaf1", "spine0", "spine1"}
        dropped = 0
        for switch in switches:
            ingress = [row for row in rows if row["dst"] == switch]
            egress = [row for row in rows if row["src"] == switch]
            packets_in = sum(row["packets"] - in_flight[row["link"]][0] for row in ingress)
            bytes_in = sum(row["bytes"] - in_flight[row["link"]][1] for row in ingress)
            assert packets_in == sum(row["packets"] + row["drops"] for row in egress), switch
            if buffer_kb is None:
                assert bytes_in == sum(row["bytes"] for row in egress), switch
            dropped += sum(row["drops"] for row in egress)
        assert (dropped > 0) == (buffer_kb is not None)
        assert dropped == prepared.rows(wall_s=1.0)["runs"][0]["drops"]


@pytest.mark.parametrize("backend", ["analytical", "alpha_beta"])
def test_ring_all_reduce_puts_its_volume_on_every_nic(backend):
    """A ring all-reduce of S bytes on n NPUs: 2(n-1) steps, each sending one block of S/n bytes
    to the next NPU, so every NIC carries 2(n-1)/n x S bytes of payload, plus 40 bytes of headers
    per MSS segment of each block (engine.links.wire_bytes); so does the switch port into each
    NPU. Utilisation: those bytes x 8 / (100 Gb/s x the run's length)."""
    n, size = 4, 1_000_000
    rows = run({"engine": {"backend": backend, "link_stats": "all"}, "network": {"topology": "switch", "npus": n},
                "tcp": NO_TIMESTAMPS, "workload": {"type": "collective", "op": "all_reduce", "bytes": size}})
    block = size // n  # 250,000 bytes
    per_block = block + math.ceil(block / MSS) * HEADERS  # 172 segments: 256,880 bytes on the wire
    per_nic = 2 * (n - 1) * per_block  # 1,541,280 bytes
    assert per_nic == 1_541_280
    duration_s = rows["runs"][0]["sim_time_s"]
    for row in rows["links"]:
        assert row["bytes"] == per_nic, row
        assert row["utilisation"] == pytest.approx(per_nic * 8 / (100e9 * duration_s), rel=1e-12)
        assert row["packets"] is None and row["drops"] is None and row["max_queue_kb"] is None


def test_fluid_backends_on_a_leaf_spine():
    """On a leaf-spine, analytical routes every message (ECMP per message) and fills every link;
    alpha_beta routes none: it knows the host links (the same bytes as analytical, which the two
    NPUs of a message fix) and leaves the uplinks null. A direct all-to-all of S per NPU sends
    S/p to each of the p-1 others: every NIC carries (p-1) x wire(S/p), and the uplinks carry the
    cross-leaf part: per leaf, 4 NPUs x 4 peers on the other leaf x wire(S/p)."""
    p, size = 8, 800_000
    results = {backend: _by_name(run({
        "engine": {"backend": backend, "link_stats": "all"},
        "network": {"topology": "leaf_spine", "npus": p, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100},
        "tcp": NO_TIMESTAMPS, "workload": {"type": "collective", "op": "all_to_all", "bytes": size}})["links"])
        for backend in ("analytical", "alpha_beta")}
    piece = size // p + math.ceil(size // p / MSS) * HEADERS  # 100,000 bytes in 69 segments: 102,760
    analytical, alpha_beta = results["analytical"], results["alpha_beta"]
    for name, row in analytical.items():
        if row["kind"] in ("host_nic", "switch_port"):
            assert row["bytes"] == (p - 1) * piece == alpha_beta[name]["bytes"], name
        else:
            assert alpha_beta[name]["bytes"] is None and alpha_beta[name]["utilisation"] is None, name
    for leaf in ("leaf0", "leaf1"):
        assert sum(row["bytes"] for row in analytical.values() if row["src"] == leaf
                   and row["kind"] == "leaf_uplink") == 4 * 4 * piece
