"""Per-packet load balancing (`network.load_balancing=spray`) on the packet engine, for TCP and RoCE.

The rule (engine/links.py, `RouteDealer`): a connection deals its data packets round robin over its
equal-cost paths, the k-th (a retransmission too) on path k mod P, starting with the path ECMP would
give the whole connection; its ACKs keep that ECMP path's reverse. At 100 Gb/s a byte takes 80 ps.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from engine import ConfigError, load_config, prepare, run
from engine.eventlist import EventList
from engine.links import ROCE_HEADER_BYTES, TCP_IP_HEADER_BYTES, TCP_TIMESTAMP_OPTION_BYTES
from engine.topology import build_topology

PS_PER_BYTE = 80  # 100 Gb/s


def leaf_spine(load_balancing: str, **keys: object) -> dict:
    """16 hosts, 4 a leaf, 2 spines, uplinks at the hosts' 100 Gb/s: oversubscribed 2:1."""
    return {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 4, "spines": 2,
            "load_balancing": load_balancing, **keys}


def shift(nbytes: int) -> dict:
    """Host i sends `nbytes` to host i + 4 (mod 16): a permutation whose flows all leave their leaf."""
    return {"type": "flows", "flows": [{"src": i, "dst": (i + 4) % 16, "bytes": nbytes} for i in range(16)]}


def _links(prepared) -> dict:
    topology = prepared.sim.topology
    return {f"{role.src}->{role.dst}": link for role, link in zip(topology.link_roles, topology.links)}


def test_a_bad_value_is_refused_in_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"network.load_balancing='flowlet' is not valid: one of ecmp, spray"):
        load_config({"network": {"load_balancing": "flowlet"}})


@pytest.mark.parametrize("backend", ["analytical", "phase", "hybrid"])
def test_the_fluid_backends_refuse_spray_in_one_line(backend: str) -> None:
    config = {"engine": {"backend": backend}, "network": leaf_spine("spray"),
              "workload": {"type": "collective", "op": "all_reduce", "bytes": 1_000_000}}
    with pytest.raises(ConfigError, match=r"network.load_balancing='spray' is not valid: ecmp with engine.backend="):
        prepare(config)


def test_alpha_beta_accepts_spray_and_its_answer_does_not_change() -> None:
    # it costs each step on a route of its class, whichever equal-cost path: no contention to spread
    def config(load_balancing: str) -> dict:
        return {"engine": {"backend": "alpha_beta"}, "network": leaf_spine(load_balancing),
                "workload": {"type": "collective", "op": "all_reduce", "bytes": 1_000_000}}
    assert run(config("spray"))["collectives"] == run(config("ecmp"))["collectives"]


@pytest.mark.parametrize("topology, pairs", [
    ({"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 4, "spines": 3}, {(0, 1): 1, (0, 5): 3}),
    # k = 4: two aggregation switches in a pod, two cores above each: 2 paths in a pod, 4 across pods
    ({"topology": "fat_tree", "npus": 16}, {(0, 1): 1, (0, 2): 2, (0, 4): 4, (3, 12): 4}),
    ({"topology": "ring", "npus": 6}, {(0, 1): 1, (0, 3): 2, (4, 1): 2}),
    ({"topology": "hierarchical", "npus": 16, "npus_per_node": 2, "scaleout": "leaf_spine", "hosts_per_leaf": 4,
      "spines": 2}, {(0, 1): 1, (0, 2): 1, (0, 8): 2}),
])
def test_spray_routes_are_every_equal_cost_path_once_from_the_ecmp_one(topology: dict, pairs: dict) -> None:
    config = load_config({"network": {**topology, "load_balancing": "spray"}})
    net = build_topology(EventList(), config.network, config.seed)
    for (src, dst), paths in pairs.items():
        for flow_id in range(4):
            routes = net.spray_routes(src, dst, flow_id)
            if paths == 1:
                assert routes == (), (src, dst)
                continue
            assert len(routes) == len(set(routes)) == paths, (src, dst)
            assert routes[0] == net.routes(src, dst, flow_id)[0], (src, dst, flow_id)  # starts on ECMP's path
            # each the same length as the ECMP route: equal cost
            assert {len(route) for route in routes} == {len(routes[0])}


@pytest.mark.parametrize("transport", ["tcp", "roce"])
def test_one_connection_deals_its_packets_round_robin_and_acks_keep_the_ecmp_path(transport: str) -> None:
    # 8 hosts, 4 a leaf, 4 spines; one connection from host 0 to host 4 of 43 full packets on an idle
    # network: nothing is lost or reordered, so each spine carries its turn's packets and nothing else.
    # From the ECMP spine s on, spines s, s+1, s+2 carry 11 packets and s+3 carries 10; the ACKs all go
    # back through s.
    payload = 1024 if transport == "roce" else 1448  # TCP: MSS 1460 less the timestamp option
    packets = 43
    config = {"transport": {"protocol": transport}, "tcp": {"delayed_ack": False},
              "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 4,
                          "load_balancing": "spray"},
              "workload": {"type": "flows", "flows": [{"src": 0, "dst": 4, "bytes": payload * packets}]}}
    if transport == "roce":
        del config["tcp"]
    prepared = prepare(config)
    prepared.start()
    prepared.simulate()
    row = prepared.rows(0.0)["runs"][0]
    assert row["status"] == "ok" and row["retransmits"] == 0
    links = _links(prepared)
    connection = (prepared.sim.queue_pairs or prepared.sim.connections)[0]
    ecmp_spine = int(prepared.sim.topology.path(0, 4, connection.flow_id)[1].name.split("spine")[1])
    for turn, expected in enumerate((11, 11, 11, 10)):
        spine = (ecmp_spine + turn) % 4
        assert links[f"leaf0->spine{spine}"].packets_sent == expected, spine
        assert links[f"spine{spine}->leaf1"].packets_sent == expected, spine
        # every ACK goes back through the ECMP spine (the last may be on its way when the run ends)
        acks = links[f"leaf1->spine{spine}"].packets_sent
        assert (0 < acks <= packets) if spine == ecmp_spine else acks == 0, spine


@pytest.mark.parametrize("load_balancing", ["spray", "ecmp"])
def test_one_flow_over_two_half_rate_uplinks_by_hand(load_balancing: str) -> None:
    # RoCE, 200 full packets (1,068 bytes on the wire, 85.44 ns at 100 Gb/s) from host 0 to host 4 of a
    # leaf-spine whose 2 uplinks run at 50 Gb/s (160 ps a byte). Sprayed, each uplink gets a packet every
    # 170.88 ns and sends it in 170.88 ns: no queue, no reordering, the flow runs at the NIC's 100 Gb/s;
    # the last packet leaves the NIC after 200 x 1,068 bytes, then crosses the two 50 Gb/s hops, the
    # leaf's port and four link latencies. With ECMP one uplink carries all 200 back to back (PFC's
    # thresholds wide enough that a pause never idles it).
    packets, size, latency_ps = 200, 1024 + ROCE_HEADER_BYTES, 1_000_000
    config = {"transport": {"protocol": "roce"},
              "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 50,
                          "load_balancing": load_balancing, "pfc_xoff_kb": 100, "pfc_xon_kb": 80},
              "workload": {"type": "flows", "flows": [{"src": 0, "dst": 4, "bytes": 1024 * packets}]}}
    row = run(config)["runs"][0]
    full_rate_ps, half_rate_ps = size * PS_PER_BYTE, size * 2 * PS_PER_BYTE  # one packet at 100, at 50 Gb/s
    if load_balancing == "spray":
        expected_ps = packets * full_rate_ps + 2 * half_rate_ps + full_rate_ps
    else:
        expected_ps = full_rate_ps + packets * half_rate_ps + half_rate_ps + full_rate_ps
    assert row["max_fct_s"] == pytest.approx((expected_ps + 4 * latency_ps) * 1e-12, rel=1e-12)
    assert (row["retransmits"], row["drops"]) == (0, 0)


def test_a_two_to_one_fabric_sprayed_splits_every_flow_evenly_and_beats_ecmp_s_collisions() -> None:
    # Host i < 8 sends 2 MB to host i + 8: the 4 flows of each of leaves 0 and 1 leave by its 2 uplinks
    # (2:1), which carry data only (the ACKs go up from leaves 2 and 3). TCP with deep buffers (no drop)
    # and a duplicate-ACK threshold no reordering reaches, so nothing is sent twice and the rule alone
    # sets what each uplink carries: flow f's k-th segment crosses spine (s_f + k) mod 2 from its ECMP
    # spine s_f on. Its ACKs all go back through s_f.
    nbytes, mss = 2_000_000, 1448  # MSS 1460 less the timestamp option
    segments = math.ceil(nbytes / mss)
    wire = nbytes + segments * (TCP_IP_HEADER_BYTES + TCP_TIMESTAMP_OPTION_BYTES)
    rows = {}
    ecmp_uplink_flows: Counter = Counter()
    for load_balancing in ("spray", "ecmp"):
        workload = {"type": "flows", "flows": [{"src": i, "dst": i + 8, "bytes": nbytes} for i in range(8)]}
        prepared = prepare({"network": leaf_spine(load_balancing, buffer_kb=1_000_000),
                            "tcp": {"dupthresh": 1_000_000}, "workload": workload})
        prepared.start()
        prepared.simulate()
        row = rows[load_balancing] = prepared.rows(0.0)["runs"][0]
        assert (row["flows_completed"], row["retransmits"], row["drops"]) == (8, 0, 0)
        topology = prepared.sim.topology
        data: Counter = Counter()
        ack_spines = set()
        for connection in prepared.sim.connections:
            src_leaf, dst_leaf = connection.src // 4, connection.dst // 4
            uplink = topology.path(connection.src, connection.dst, connection.flow_id)[1].name
            ecmp = int(uplink[-1])  # leaf<l>->spine<s>
            ecmp_uplink_flows[uplink] += load_balancing == "ecmp"
            ack_spines.add((dst_leaf, ecmp))
            for turn in range(segments):
                data[f"leaf{src_leaf}->spine{(ecmp + turn) % 2 if load_balancing == 'spray' else ecmp}"] += 1
        links = _links(prepared)
        uplinks = [f"leaf{leaf}->spine{spine}" for leaf in (0, 1) for spine in (0, 1)]
        assert [links[name].packets_sent for name in uplinks] == [data[name] for name in uplinks], load_balancing
        for leaf in (2, 3):
            for spine in (0, 1):
                assert (links[f"leaf{leaf}->spine{spine}"].packets_sent > 0) == ((leaf, spine) in ack_spines)
    # The uplinks' share: sprayed, each uplink carries half of 4 flows, 2 flows' wire bytes at 100 Gb/s,
    # and the last flow cannot end sooner. With this seed ECMP puts leaf 1's 4 flows on one uplink, so it
    # cannot end before twice that: spraying ends sooner.
    share_s = 2 * wire * PS_PER_BYTE * 1e-12
    assert max(ecmp_uplink_flows.values()) == 4
    assert rows["spray"]["max_fct_s"] > share_s
    assert rows["ecmp"]["max_fct_s"] > 2 * share_s > rows["spray"]["max_fct_s"]


def _shift_by_a_leaf(transport: str, load_balancing: str, nbytes: int):
    """Host i sends `nbytes` to host i + 4 (mod 16) on the 2:1 leaf-spine, with buffers deep enough for no
    drop: each uplink carries its leaf's data and the ACKs of the flows into its leaf."""
    config = {"transport": {"protocol": transport}, "network": leaf_spine(load_balancing, buffer_kb=1_000_000),
              "workload": shift(nbytes)}
    prepared = prepare(config)
    prepared.start()
    prepared.simulate()
    return prepared.rows(0.0)["runs"][0], prepared


def test_tcp_takes_a_sprayed_reordering_for_loss_and_retransmits_for_nothing() -> None:
    # Nothing is dropped, so every retransmission is spurious: per flow, the packets of one connection
    # never pass one another; sprayed, those on the emptier uplink (the ACKs keep to their flows' ECMP
    # spines, so the two differ) overtake those queued on the other, and three duplicate ACKs (RFC 5681's
    # DupThresh) start a fast retransmit of a segment that was on its way.
    ecmp, ecmp_run = _shift_by_a_leaf("tcp", "ecmp", 2_000_000)
    spray, spray_run = _shift_by_a_leaf("tcp", "spray", 2_000_000)
    assert ecmp["drops"] == spray["drops"] == 0
    assert ecmp["retransmits"] == 0 and sum(c.sender.fast_retransmits for c in ecmp_run.sim.connections) == 0
    assert spray["retransmits"] > 0 and sum(c.sender.fast_retransmits for c in spray_run.sim.connections) > 0


def test_roce_go_back_n_naks_a_sprayed_reordering_and_resends_what_was_on_its_way() -> None:
    # PFC: lossless. Per flow RoCE's responder sees every packet in order; sprayed, a packet that overtook
    # another is dropped and NAKed, and the requester sends everything again from the gap.
    ecmp, ecmp_run = _shift_by_a_leaf("roce", "ecmp", 200_000)
    spray, spray_run = _shift_by_a_leaf("roce", "spray", 200_000)
    assert ecmp["drops"] == spray["drops"] == 0
    assert ecmp["retransmits"] == 0 and sum(q.receiver.naks_sent for q in ecmp_run.sim.queue_pairs) == 0
    naks = sum(q.receiver.naks_sent for q in spray_run.sim.queue_pairs)
    assert naks > 0 and spray["retransmits"] >= naks
    assert sum(q.receiver.out_of_order_dropped for q in spray_run.sim.queue_pairs) >= naks


def test_ecmp_named_explicitly_is_the_default_bit_for_bit() -> None:
    config = {"network": leaf_spine("ecmp"), "workload": shift(200_000)}
    explicit = run(config)
    del config["network"]["load_balancing"]
    implicit = run(config)
    for rows in (explicit, implicit):
        rows["runs"][0].pop("wall_s")
        rows["runs"][0].pop("events_per_s")
    assert explicit == implicit


@pytest.mark.parametrize("network", [
    {"topology": "fat_tree", "npus": 16},
    {"topology": "ring", "npus": 6},
    {"topology": "hierarchical", "npus": 16, "npus_per_node": 2, "scaleout": "fat_tree"},
    {"topology": "rail_optimized", "npus": 16, "npus_per_node": 2, "hosts_per_leaf": 2, "spines": 2, "pxn": False},
])
@pytest.mark.parametrize("transport", ["tcp", "roce"])
def test_every_topology_with_equal_cost_paths_runs_sprayed(network: dict, transport: str) -> None:
    if transport == "roce" and network["topology"] == "ring":
        return  # RoCE refuses the ring
    config = {"transport": {"protocol": transport}, "network": {**network, "load_balancing": "spray"},
              "workload": {"type": "collective", "op": "all_to_all", "bytes": 64_000}}
    row = run(config)["runs"][0]
    assert row["status"] == "ok", row["error"]
    if transport == "roce":
        assert row["drops"] == 0  # PFC: lossless, sprayed or not
