"""RoCEv2 and PFC on the packet engine (`transport.protocol=roce`) against hand computations.

At 100 Gb/s a byte takes 80 ps on the wire. A RoCE packet is its payload and 44 header bytes (IPv4 20,
UDP 8, BTH 12, ICRC 4); with network.mtu_bytes = 1500 a full packet carries 1024 bytes (the largest IB
path MTU that fits) in 1,068 bytes on the wire: 85.44 ns. A NIC sends a connection's packets back to
back (line rate); every switch stores and forwards a packet whole.
"""

from __future__ import annotations

import math

import pytest

from engine import ConfigError, load_config, prepare, run
from engine.links import ROCE_HEADER_BYTES, PausableLink

PS_PER_BYTE = 80  # 100 Gb/s
LATENCY_PS = 1_000_000  # 1 us a link


def roce(network: dict, workload: dict, roce_keys: dict | None = None) -> dict:
    """A RoCE run of `workload` on `network` (100 Gb/s, 1 us links unless it says otherwise)."""
    return {"transport": {"protocol": "roce"}, "roce": roce_keys or {}, "network": network, "workload": workload}


def flows(*specs: tuple[int, int, int]) -> dict:
    return {"type": "flows", "flows": [{"src": src, "dst": dst, "bytes": nbytes} for src, dst, nbytes in specs]}


def wire_bytes(nbytes: int, payload: int = 1024) -> int:
    """A message's bytes on the wire: a header per packet of at most `payload` bytes."""
    return nbytes + math.ceil(nbytes / payload) * ROCE_HEADER_BYTES


def test_the_path_mtu_is_the_largest_ib_mtu_that_fits_the_ethernet_mtu() -> None:
    for mtu, payload in ((1500, 1024), (4096, 2048), (4140, 4096), (9000, 4096), (1067, 512)):
        config = load_config(roce({"mtu_bytes": mtu}, flows((1, 0, 10))))
        assert config.roce.path_mtu_bytes(config.network) == payload, mtu


def test_one_flow_completes_in_its_serialisation_and_the_hops_by_hand() -> None:
    # 100,000 bytes: 97 packets of 1,024 and one of 672. The NIC sends them back to back (104,312 bytes
    # on the wire). The switch forwards each after it has arrived whole: the 97th (1,068 bytes) leaves it
    # 1 us + 85.44 ns after leaving the NIC, and the last (716 bytes, arrived meanwhile) right after it.
    nbytes = 100_000
    assert wire_bytes(nbytes) == 104_312
    before_last_ps = (104_312 - 716) * PS_PER_BYTE  # the NIC has sent the first 97
    expected_ps = before_last_ps + LATENCY_PS + 1_068 * PS_PER_BYTE + 716 * PS_PER_BYTE + LATENCY_PS
    row = run(roce({"npus": 2}, flows((1, 0, nbytes))))["runs"][0]
    assert row["status"] == "ok"
    assert row["max_fct_s"] == pytest.approx(expected_ps * 1e-12, rel=1e-12)
    assert (row["packets_sent"], row["bytes_sent"], row["retransmits"], row["pause_frames"]) == (98, 104_312, 0, 0)


def test_an_incast_with_pfc_is_lossless_and_keeps_the_port_busy() -> None:
    # 8 senders of 1 MB into one host of one switch. From the first packet's arrival at the switch
    # (1 us + 85.44 ns) the receiver's port never idles (PFC resumes a sender when its ingress port
    # holds 12 packets, 8 x 12 packets take 8.2 us to drain: longer than a pause's 2 us round trip),
    # so the last byte arrives after the port has serialised every byte, and one more link latency.
    senders, nbytes = 8, 1_000_000
    total_wire = senders * wire_bytes(nbytes)
    assert total_wire == 8_343_904
    expected_ps = LATENCY_PS + 1_068 * PS_PER_BYTE + total_wire * PS_PER_BYTE + LATENCY_PS
    config = roce({"npus": senders + 1}, {"type": "flows", "pattern": "incast", "senders": senders,
                                          "bytes_per_flow": nbytes})
    rows = run(config)
    row = rows["runs"][0]
    assert (row["status"], row["drops"], row["retransmits"], row["timeouts"]) == ("ok", 0, 0, 0)
    assert row["pause_frames"] > 0
    assert row["max_fct_s"] == pytest.approx(expected_ps * 1e-12, rel=1e-9)
    # An ingress port holds at most XOFF (15 packets of 1,500 bytes), what its sender sends while the
    # PAUSE travels (1 us at 100 Gb/s: 12,500 bytes), what is on its wire then (as much) and the packet
    # being serialised; the receiver's port queues at most the 8 ingress ports' worth.
    per_ingress = 15 * 1500 + 2 * 12_500 + 1_068
    assert 0 < row["max_queue_kb"] * 1024 <= senders * per_ingress


def test_the_links_table_counts_each_port_s_pauses_and_time_paused() -> None:
    # 2 senders of 200 KB into h0: the senders' NICs are paused (their rows count the PAUSEs the switch
    # sent them and the time they stood), the receiver's port never is (a host never pauses its switch),
    # and every pause a NIC received is one the run counts.
    config = roce({"npus": 3}, flows((1, 0, 200_000), (2, 0, 200_000)))
    config["engine"] = {"link_stats": "all"}
    rows = run(config)
    links = {row["link"]: row for row in rows["links"]}
    for sender in ("h1->sw", "h2->sw"):
        assert links[sender]["pause_frames"] > 0
        assert 0 < links[sender]["paused_s"] < rows["runs"][0]["sim_time_s"]
    assert (links["sw->h0"]["pause_frames"], links["sw->h0"]["paused_s"]) == (0, 0.0)
    assert sum(row["pause_frames"] for row in links.values()) == rows["runs"][0]["pause_frames"]


def test_without_pfc_a_shallow_buffer_drops_and_go_back_n_recovers_every_loss() -> None:
    config = roce({"npus": 5, "pfc": False, "buffer_kb": 16.0},
                  {"type": "flows", "pattern": "incast", "senders": 4, "bytes_per_flow": 200_000},
                  {"rto_us": 100.0})
    rows = run(config)
    row = rows["runs"][0]
    assert row["status"] == "ok" and row["flows_completed"] == 4
    assert row["drops"] > 0 and row["retransmits"] > 0 and row["pause_frames"] == 0
    assert all(flow["end_s"] is not None for flow in rows["flows"])


def test_a_lost_tail_is_recovered_by_the_timer() -> None:
    # Two senders into one port through a buffer of 1 KiB: a tail packet lost with no packet behind it
    # draws no NAK, only the retransmission timer (10 us here) sends it again.
    config = roce({"npus": 3, "pfc": False, "buffer_kb": 1.0}, flows((1, 0, 20_000), (2, 0, 20_000)),
                  {"rto_us": 10.0})
    row = run(config)["runs"][0]
    assert row["status"] == "ok" and row["flows_completed"] == 2
    assert row["drops"] > 0 and row["timeouts"] > 0


def _links(prepared) -> dict[str, PausableLink]:
    links = {link.name: link for link in prepared.sim.topology.links}
    assert all(isinstance(link, PausableLink) for link in links.values())
    return links


def test_a_paused_port_backs_up_its_switch_which_pauses_its_own_senders() -> None:
    # A dumbbell: h0, h1, h2 on the left switch, h3, h4, h5 on the right. h4 and h5 send to h3 from the
    # right; h0 and h1 from the left, over the bottleneck. h3's port is the only one oversubscribed
    # (4 senders), yet the PAUSEs it causes stop the bottleneck, whose queue at the left switch grows
    # until the left switch pauses h0 and h1 too: congestion spreading, PFC's known hazard.
    network = {"topology": "dumbbell", "npus": 6}
    prepared = prepare(roce(network, flows((0, 3, 2_000_000), (1, 3, 2_000_000), (4, 3, 2_000_000),
                                           (5, 3, 2_000_000))))
    prepared.start()
    prepared.simulate()
    links = _links(prepared)
    xoff = 15 * 1500
    assert links["swL->swR"].pause_frames > 0 and links["swL->swR"].max_queue_bytes > xoff
    assert links["h0->swL"].pause_frames > 0 and links["h1->swL"].pause_frames > 0
    assert links["h4->swR"].pause_frames > 0
    assert sum(link.drops for link in links.values()) == 0
    end_ps = prepared.sim.eventlist.now_ps
    assert all(0 < links[name].time_paused_ps(end_ps) < end_ps for name in ("h0->swL", "swL->swR"))
    assert links["swR->h3"].pause_frames == 0  # hosts never pause their switch


@pytest.mark.parametrize("backend", ["analytical", "alpha_beta", "phase", "hybrid"])
def test_the_backends_that_model_tcp_only_refuse_roce_in_one_line(backend: str) -> None:
    config = roce({"npus": 4}, {"type": "collective", "op": "all_reduce", "bytes": 4096})
    config["engine"] = {"backend": backend}
    with pytest.raises(ConfigError, match="engine.backend=.* packet with transport.protocol=roce") as error:
        run(config)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("overrides", "key"), [
    ({"transport": {"protocol": "udp"}}, "transport.protocol"),
    ({"network": {"pfc": True}}, "network.pfc"),  # with tcp
    ({"transport": {"protocol": "roce"}, "roce": {"cc": "dcqcn"}}, "roce.cc"),
    ({"transport": {"protocol": "roce"}, "roce": {"payload_bytes": 2048}}, "roce.payload_bytes"),
    ({"transport": {"protocol": "roce"}, "network": {"pfc_xoff_kb": 10.0, "pfc_xon_kb": 10.0}}, "network.pfc_xon_kb"),
    ({"transport": {"protocol": "roce"}, "network": {"pfc_xoff_kb": -1.0}}, "network.pfc_xoff_kb"),
    ({"transport": {"protocol": "roce"}, "network": {"topology": "ring"}}, "network.topology"),
    ({"transport": {"protocol": "roce"}, "roce": {"rto_us": 0.0}}, "roce.rto_us"),
    ({"transport": {"protocol": "roce"}, "roce": {"dcqcn_kmax_kb": 1.0}}, "roce.dcqcn_kmax_kb"),
])
def test_bad_values_are_refused_in_one_line_naming_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(overrides)
    assert error.value.key == key and "\n" not in str(error.value)


def test_pfc_defaults_to_the_transport() -> None:
    assert not load_config({}).pfc_on
    assert load_config({"transport": {"protocol": "roce"}}).pfc_on
    assert not load_config({"transport": {"protocol": "roce"}, "network": {"pfc": False}}).pfc_on
    assert load_config({}).network.pfc_thresholds_bytes() == (15 * 1500, 12 * 1500)  # htsim's main_roce
