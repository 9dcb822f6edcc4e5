"""Config validation (DESIGN.md "Config contract"): a config that cannot run is refused before
anything is launched, with a `ConfigError` whose message names the key, the value and what is allowed.
"""

from __future__ import annotations

import copy

import pytest

import engine
from engine import ConfigError, check_backend, load_config
from engine.config import CubicTcp, DctcpTcp

ONE_FLOW = {"workload": {"type": "flows", "flows": [{"src": 0, "dst": 1, "bytes": 10_000}]}}


def with_overrides(**sections) -> dict:
    """A minimal valid mapping (one flow on the default 8-host switch) with sections merged in."""
    mapping = copy.deepcopy(ONE_FLOW)
    for section, values in sections.items():
        if isinstance(values, dict) and isinstance(mapping.get(section), dict):
            mapping[section].update(values)
        else:
            mapping[section] = values
    return mapping


LEAF_SPINE = {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100.0}

# (id, mapping, key the message must name, value it must show, fragment of what is allowed)
BAD_CONFIGS = [
    ("unknown-network-key", with_overrides(network={"link_gbs": 100}),
     "network.link_gbs", "100", "an existing key (did you mean network.link_gbps?): network.topology, "),
    ("unknown-tcp-key", with_overrides(tcp={"congestion": "cubic"}),
     "tcp.congestion", "'cubic'", "an existing key: tcp.cc, tcp.mss_bytes"),
    ("key-of-no-topology", with_overrides(network={"topology": "leaf_spine", "spine": 4}),
     "network.spine", "4", "(did you mean network.spines?)"),
    ("unknown-top-level-key", with_overrides(netwrok={"npus": 4}),
     "netwrok", "npus", "unknown top-level key"),
    ("wrong-type-npus-string", with_overrides(network={"npus": "eight"}),
     "network.npus", "'eight'", "integer"),
    ("wrong-type-npus-fraction", with_overrides(network={"npus": 7.5}),
     "network.npus", "7.5", "integer"),
    ("wrong-type-link-gbps-string", with_overrides(network={"link_gbps": "fast"}),
     "network.link_gbps", "'fast'", "number"),
    ("wrong-type-bool-as-int", with_overrides(network={"npus": True}),
     "network.npus", "true", "integer"),
    ("wrong-type-delayed-ack", with_overrides(tcp={"delayed_ack": "yes"}),
     "tcp.delayed_ack", "'yes'", "true or false"),
    ("negative-link-gbps", with_overrides(network={"link_gbps": -100.0}),
     "network.link_gbps", "-100.0", "> 0"),
    ("zero-link-gbps", with_overrides(network={"link_gbps": 0}),
     "network.link_gbps", "0", "> 0"),
    ("negative-latency", with_overrides(network={"link_latency_us": -1.0}),
     "network.link_latency_us", "-1.0", ">= 0"),
    ("negative-buffer", with_overrides(network={"buffer_kb": -4}),
     "network.buffer_kb", "-4", ">= 0"),
    ("mss-above-mtu-minus-40", with_overrides(tcp={"mss_bytes": 1461}),
     "tcp.mss_bytes", "1461", "1460"),
    ("mss-above-smaller-mtu", with_overrides(network={"mtu_bytes": 1000}, tcp={"mss_bytes": 961}),
     "tcp.mss_bytes", "961", "960"),
    ("npus-not-multiple-of-hosts-per-leaf", with_overrides(network={**LEAF_SPINE, "npus": 10}),
     "network.npus", "10", "multiple of network.hosts_per_leaf = 4"),
    ("flow-to-missing-host", with_overrides(workload={"flows": [{"src": 0, "dst": 8, "bytes": 1000}]}),
     "workload.flows[0].dst", "8", "0..7"),
    ("flow-from-negative-host", with_overrides(workload={"flows": [{"src": -1, "dst": 2, "bytes": 1000}]}),
     "workload.flows[0].src", "-1", "0..7"),
    ("flow-src-equals-dst", with_overrides(workload={"flows": [{"src": 3, "dst": 3, "bytes": 1000}]}),
     "workload.flows[0].dst", "3", "other than src"),
    ("flow-zero-bytes", with_overrides(workload={"flows": [{"src": 0, "dst": 1, "bytes": 0}]}),
     "workload.flows[0].bytes", "0", "> 0"),
    ("flow-missing-bytes", with_overrides(workload={"flows": [{"src": 0, "dst": 1}]}),
     "workload.flows[0].bytes", "null", "required"),
    ("unknown-cc", with_overrides(tcp={"cc": "bbr"}),
     "tcp.cc", "'bbr'", "one of newreno, dctcp, cubic"),
    ("unknown-topology", with_overrides(network={"topology": "torus"}),
     "network.topology", "'torus'", "switch, dumbbell, ring, leaf_spine, fat_tree, hierarchical"),
    ("incast-senders-equal-npus",
     with_overrides(workload={"flows": [], "pattern": "incast", "senders": 8}),
     "workload.senders", "8", "1..7"),
    ("incast-senders-above-npus",
     with_overrides(workload={"flows": [], "pattern": "incast", "senders": 20}),
     "workload.senders", "20", "1..7"),
    ("unknown-pattern", with_overrides(workload={"flows": [], "pattern": "shuffle"}),
     "workload.pattern", "'shuffle'", "incast, permutation, all_to_all"),
    ("loss-rate-one", with_overrides(network={"loss_rate": 1.0}),
     "network.loss_rate", "1.0", "[0, 1)"),
    ("loss-rate-negative", with_overrides(network={"loss_rate": -0.1}),
     "network.loss_rate", "-0.1", "[0, 1)"),
    ("dumbbell-odd-npus", with_overrides(network={"topology": "dumbbell", "npus": 7, "bottleneck_gbps": 10,
                                                  "bottleneck_latency_us": 1}),
     "network.npus", "7", "even"),
    ("dumbbell-without-bottleneck", with_overrides(network={"topology": "dumbbell", "bottleneck_gbps": None}),
     "network.bottleneck_gbps", "null", "a value of type float is required"),
    ("ring-too-small", with_overrides(network={"topology": "ring", "npus": 2}),
     "network.npus", "2", "at least 3"),
    ("hierarchical-npus-not-multiple",
     with_overrides(network={"topology": "hierarchical", "npus": 6, "npus_per_node": 4, "scaleup_gbps": 400,
                             "scaleup_latency_us": 0.1}),
     "network.npus", "6", "multiple of network.npus_per_node = 4"),
    ("fat-tree-k-odd", with_overrides(network={"topology": "fat_tree", "npus": 16, "fat_tree_k": 5}),
     "network.fat_tree_k", "5", "an even integer >= 2 whose k^3/4 hosts hold network.npus = 16"),
    ("fat-tree-k-zero", with_overrides(network={"topology": "fat_tree", "npus": 2, "fat_tree_k": 0}),
     "network.fat_tree_k", "0", "an even integer >= 2"),
    ("fat-tree-k-too-small", with_overrides(network={"topology": "fat_tree", "npus": 17, "fat_tree_k": 4}),
     "network.fat_tree_k", "4", "the smallest is 6"),
    ("fat-tree-uplink-zero", with_overrides(network={"topology": "fat_tree", "npus": 16, "uplink_gbps": 0}),
     "network.uplink_gbps", "0", "> 0"),
    ("alpha-beta-flows", with_overrides(engine={"backend": "alpha_beta"}),
     "engine.backend", "'alpha_beta'", "packet for workload.type=flows"),
    ("rcv-wnd-below-one-mss", with_overrides(tcp={"rcv_wnd_kb": 1}),
     "tcp.rcv_wnd_kb", "1", "one MSS"),
    ("cubic-beta-one", with_overrides(tcp={"cc": "cubic", "cubic_beta": 1.0}),
     "tcp.cubic_beta", "1.0", "(0, 1)"),
    ("dctcp-g-zero", with_overrides(tcp={"cc": "dctcp", "dctcp_g": 0}),
     "tcp.dctcp_g", "0", "(0, 1]"),
    ("rack-without-sack", with_overrides(tcp={"rack_tlp": True, "sack": False}),
     "tcp.rack_tlp", "true", "unless tcp.sack is true"),
    ("prr-without-sack", with_overrides(tcp={"prr": True, "sack": False}),
     "tcp.prr", "true", "unless tcp.sack is true"),
    ("sack-after-rto-unknown", with_overrides(tcp={"sack_after_rto": "forget"}),
     "tcp.sack_after_rto", "'forget'", "one of keep, discard"),
    ("sack-after-rto-discard-with-rack", with_overrides(tcp={"rack_tlp": True, "sack_after_rto": "discard"}),
     "tcp.sack_after_rto", "'discard'", "keep with tcp.rack_tlp=true"),
    ("pto-slack-negative", with_overrides(tcp={"rack_tlp": True, "pto_slack_ms": -2}),
     "tcp.pto_slack_ms", "-2", ">= 0 (0: RFC 8985's probe timeout; Linux adds 2)"),
    ("linux-delack-without-delack", with_overrides(tcp={"linux_delayed_ack": True}),
     "tcp.linux_delayed_ack", "true", "unless tcp.delayed_ack is true"),
    ("zero-init-cwnd", with_overrides(tcp={"init_cwnd_pkts": 0}),
     "tcp.init_cwnd_pkts", "0", ">= 1"),
    ("one-npu", with_overrides(network={"npus": 1}, workload={"flows": [], "pattern": "permutation"}),
     "network.npus", "1", ">= 2"),
    # a section given as a scalar instead of a mapping (e.g. a group name where its options belong)
    ("section-not-a-mapping", with_overrides(network="leaf_spine"),
     "network", "'leaf_spine'", "mapping"),
]


@pytest.mark.parametrize(
    "mapping, key, value_text, allowed_fragment",
    [case[1:] for case in BAD_CONFIGS],
    ids=[case[0] for case in BAD_CONFIGS],
)
def test_load_config_refuses_with_key_value_and_allowed(mapping, key, value_text, allowed_fragment):
    """The config's own checks, then what its backend can run (both before any run starts)."""
    with pytest.raises(ConfigError) as info:
        check_backend(load_config(mapping))
    error = info.value
    message = str(error)
    assert error.key == key
    assert message.startswith(f"{key}="), message  # names the key ...
    assert value_text in message, message  # ... the value ...
    assert allowed_fragment in message, message  # ... and what is allowed


RUN_CASES = ["unknown-network-key", "zero-link-gbps", "mss-above-mtu-minus-40", "flow-to-missing-host",
             "unknown-cc", "incast-senders-equal-npus", "loss-rate-one"]


@pytest.mark.parametrize(
    "mapping, key",
    [(case[1], case[2]) for case in BAD_CONFIGS if case[0] in RUN_CASES],
    ids=[case[0] for case in BAD_CONFIGS if case[0] in RUN_CASES],
)
def test_run_refuses_before_simulating(mapping, key):
    with pytest.raises(ConfigError) as info:
        engine.run(mapping)
    assert info.value.key == key


def test_config_error_is_a_value_error():
    # callers that catch ValueError for bad input still catch it
    assert issubclass(ConfigError, ValueError)


def test_defaults_are_valid_and_match_design():
    # With only a workload given, every other key takes its DESIGN.md default and validates.
    config = load_config(ONE_FLOW)
    net, tcp = config.network, config.tcp
    assert config.engine.backend == "packet"
    assert net.topology == "switch"
    assert net.mtu_bytes == 1500
    assert net.loss_rate == 0.0
    assert net.ecn_threshold_kb is None
    assert tcp.cc == "newreno"
    assert tcp.mss_bytes is None and config.mss_bytes == 1500 - 40  # null = mtu - 40
    assert tcp.init_cwnd_pkts == 10
    assert tcp.min_rto_ms == 200
    assert tcp.sack is True
    assert tcp.sack_after_rto == "keep"  # as Linux and ns-3 (RFC 6675 with erratum 1610)
    assert tcp.rcv_wnd_kb is None
    assert tcp.slow_start_after_idle is True
    # Linux's loss recovery and slow-start exit are options, off unless asked for (tcp=linux)
    assert not (tcp.rack_tlp or tcp.prr or tcp.hystart or tcp.linux_delayed_ack)
    assert tcp.pto_slack_ms == 0  # RFC 8985's probe timeout when tcp.rack_tlp is turned on alone
    assert DctcpTcp().dctcp_g == 1 / 16 and (CubicTcp().cubic_c, CubicTcp().cubic_beta) == (0.4, 0.7)
    assert config.workload.flows[0].src == 0 and config.workload.flows[0].dst == 1


def test_sack_after_rto_has_no_effect_without_sack():
    # without SACK there is no scoreboard to keep or discard: either value is accepted
    for value in ("keep", "discard"):
        assert load_config(with_overrides(tcp={"sack": False, "sack_after_rto": value})).tcp.sack_after_rto == value


def test_empty_mapping_is_valid():
    # every key has a default (DESIGN.md: workload group `dlrm` by default, network `switch`, ...)
    config = load_config({})
    assert config.workload.type == "dlrm"
    assert config.network.topology == "switch"
    assert config.tcp.cc == "newreno"
    assert config.engine.backend == "packet"


def test_mss_follows_mtu_when_null():
    # jumbo frames: MSS = 9000 - 40 = 8960
    config = load_config(with_overrides(network={"mtu_bytes": 9000}))
    assert config.mss_bytes == 8960


@pytest.mark.parametrize(
    "network",
    [
        {"topology": "switch", "npus": 2},
        {"topology": "dumbbell", "npus": 4, "bottleneck_gbps": 10, "bottleneck_latency_us": 5},
        {"topology": "ring", "npus": 3},
        LEAF_SPINE,
        {"topology": "fat_tree", "npus": 2},
        {"topology": "hierarchical", "npus": 8, "npus_per_node": 4, "scaleup_gbps": 400,
         "scaleup_latency_us": 0.1},
    ],
    ids=lambda net: net["topology"],
)
def test_minimal_topology_configs_are_valid(network):
    config = load_config(with_overrides(network=network))
    assert config.network.topology == network["topology"]


@pytest.mark.parametrize("pattern, senders", [("incast", 7), ("incast", 1), ("permutation", None),
                                              ("all_to_all", None)])
def test_valid_patterns(pattern, senders):
    # senders = npus - 1 = 7 is the largest incast (hosts 1..7 into host 0)
    config = load_config(with_overrides(workload={"flows": [], "pattern": pattern, "senders": senders}))
    assert config.workload.pattern == pattern


def test_integral_float_accepted_for_int_and_hydra_extras_ignored():
    # Hydra/YAML may give 8.0 for an int; the sweep's own keys (name, results_dir, ray) are not the
    # engine's business and must not be refused.
    config = load_config(with_overrides(network={"npus": 8.0}, name="x", results_dir="results",
                                        ray={"address": None}))
    assert config.network.npus == 8 and isinstance(config.network.npus, int)
