"""One identity per simulation: a key that cannot change a config's simulation is left out of its
run_id (`engine.keys.CONDITIONAL_KEYS`, `identity_mapping`), and a key set where it cannot apply is
refused (`sweep.plan.check_overrides_apply`).

The table of conditions is proved key by key: at a config where the table says a key is unused,
giving it another (valid) value leaves every row of the simulation identical, and the run_id too.
The two base configs make every key matter that could: an incast through a 16 KiB buffer (drops,
retransmissions, timeouts: a congestion-control constant or an ECN threshold in use would show) and
a ring all-reduce, packet backend, NewReno without delayed ACKs or RACK-TLP.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import engine
import engine.keys
from engine.config import NetworkConfig, SwitchNetwork, section_keys
from engine.keys import CONDITIONAL_KEYS, identity_mapping, unused_keys
from sweep.plan import check_overrides_apply
from sweep.runner import run_id

INCAST: dict[str, Any] = {"network": {"npus": 4, "buffer_kb": 16.0},
          "workload": {"type": "flows", "pattern": "incast", "senders": 3, "bytes_per_flow": 60_000}}
ALL_REDUCE: dict[str, Any] = {"network": {"npus": 4},
                              "workload": {"type": "collective", "op": "all_reduce", "bytes": 65_536}}
# The incast on a full mesh: every sender has a link of its own to host 0, no switch port
FULL_MESH_INCAST: dict[str, Any] = {**INCAST, "network": {**INCAST["network"], "topology": "full_mesh"}}
# The all-reduce on a ring: NPUs send their own packets through the ports that forward, no host stack.
RING_ALL_REDUCE: dict[str, Any] = {**ALL_REDUCE, "network": {**ALL_REDUCE["network"], "topology": "ring"}}
# The incast over RoCE without PFC (drops, go-back-N, timeouts), where no TCP or host-stack key is read
ROCE_INCAST: dict[str, Any] = {**INCAST, "transport": {"protocol": "roce"}, "roce": {"rto_us": 50.0},
                               "network": {**INCAST["network"], "pfc": False}}
# Per key: the base config where it is unused, and another valid value for it.
CHANGES: dict[str, tuple[dict[str, Any], Any]] = {
    "host.tsq_bytes": (RING_ALL_REDUCE, 3_000),
    "host.qdisc": (RING_ALL_REDUCE, "pfifo_fast"),  # its only value so far
    "host.qdisc_packets": (RING_ALL_REDUCE, 1),
    "host.tx_jitter_ns": (RING_ALL_REDUCE, 500.0),
    "network.bottleneck_gbps": (INCAST, 1.0),
    "network.bottleneck_latency_us": (INCAST, 50.0),
    "network.hosts_per_leaf": (INCAST, 2),
    "network.spines": (INCAST, 2),
    "network.uplink_gbps": (INCAST, 1.0),
    "network.fat_tree_k": (INCAST, 4),
    "network.npus_per_node": (INCAST, 2),
    "network.scaleup_gbps": (INCAST, 1.0),
    "network.scaleup_latency_us": (INCAST, 50.0),
    "network.scaleout": (INCAST, "leaf_spine"),
    "network.pxn": (INCAST, False),
    "engine.hybrid_rails": (INCAST, "one"),  # the packet backend, one switch: nothing reduced
    "network.buffer_kb": (FULL_MESH_INCAST, 1.0),  # no switch port: nothing queues in a buffer
    "network.ecn_threshold_kb": (INCAST, 1.0),  # the queue reaches 16 KiB: ECN-capable packets would be marked
    "network.pfc": (INCAST, False),  # with tcp, false is what null means
    "network.load_balancing": (INCAST, "spray"),  # one switch: one path between two hosts
    "network.pfc_xoff_kb": (INCAST, 64.0),  # PFC off
    "network.pfc_xon_kb": (INCAST, 8.0),
    **{f"roce.{name}": (INCAST, value) for name, value in (
        ("cc", "dcqcn"), ("payload_bytes", 512), ("rto_us", 10.0), ("dcqcn_kmin_kb", 1.0), ("dcqcn_kmax_kb", 2.0),
        ("dcqcn_pmax", 0.5), ("dcqcn_g", 0.5), ("dcqcn_cnp_interval_us", 1.0), ("dcqcn_alpha_timer_us", 1.0),
        ("dcqcn_increase_timer_us", 1.0), ("dcqcn_byte_counter_bytes", 1000), ("dcqcn_fast_recovery_steps", 1),
        ("dcqcn_ai_mbps", 1.0), ("dcqcn_hai_mbps", 1.0), ("dcqcn_min_rate_mbps", 10.0),
        ("dcqcn_clamp_target_rate", False))},
    **{f"tcp.{name}": (ROCE_INCAST, value) for name, value in (
        ("cc", "cubic"), ("mss_bytes", 1000), ("init_cwnd_pkts", 2), ("min_rto_ms", 1.0), ("max_rto_s", 1.0),
        ("initial_rto_ms", 10.0), ("clock_granularity_us", 10.0), ("delayed_ack", True), ("sack", False),
        ("timestamps", False), ("handshake", False), ("ecn", True), ("rcv_wnd_kb", 64.0),
        ("slow_start_after_idle", False), ("rack_tlp", True), ("prr", True), ("hystart", True), ("dupthresh", 5))},
    "tcp.linux_delayed_ack": ({**ROCE_INCAST, "tcp": {"delayed_ack": True}}, True),
    "tcp.dctcp_g": (INCAST, 1.0),
    "tcp.cubic_c": (INCAST, 4.0),
    "tcp.cubic_beta": (INCAST, 0.2),
    "tcp.delayed_ack_timeout_ms": (INCAST, 1.0),
    "tcp.pto_slack_ms": (INCAST, 5.0),
    "tcp.sack_after_rto": ({**INCAST, "tcp": {"sack": False}}, "discard"),
    "workload.flows": (ALL_REDUCE, [{"src": 0, "dst": 1, "bytes": 10}]),
    "workload.pattern": (ALL_REDUCE, "permutation"),
    "workload.senders": ({**INCAST, "workload": {**INCAST["workload"], "pattern": "all_to_all"}}, 1),
    "workload.bytes_per_flow": (ALL_REDUCE, 5),
    "workload.rounds": (ALL_REDUCE, 3),
    "workload.iterations": (INCAST, 3),
    "workload.num_tables": (ALL_REDUCE, 2),
    "workload.emb_dim": (ALL_REDUCE, 2),
    "workload.dense_features": (ALL_REDUCE, 2),
    "workload.bottom_mlp": (ALL_REDUCE, [2, 2]),
    "workload.top_mlp": (ALL_REDUCE, [2, 1]),
    "workload.batch_per_npu": (ALL_REDUCE, 2),
    "workload.dtype_bytes": (ALL_REDUCE, 2),
    "workload.npu_tflops": (ALL_REDUCE, 1.0),
    "workload.hbm_gbps": (ALL_REDUCE, 1.0),
    "workload.interaction": (ALL_REDUCE, "dcn"),
    "workload.multi_hot": (ALL_REDUCE, [2]),
    "workload.index_bytes": (ALL_REDUCE, 8),
    "workload.dcn_layers": (ALL_REDUCE, 1),
    "workload.dcn_low_rank": (ALL_REDUCE, 2),
    "workload.path": (ALL_REDUCE, "bundled:astra-sim-1.0/microAllReduce.txt"),
    "workload.duration_unit": (ALL_REDUCE, "ns"),
    "workload.cycle_ns": (ALL_REDUCE, 2.0),
    "workload.op": (INCAST, "all_to_all"),
    "workload.bytes": (INCAST, 5),
}
NETWORK_BASE_KEYS = tuple(item.name for item in dataclasses.fields(NetworkConfig))
WALL_CLOCK_COLUMNS = ("wall_s", "events_per_s")  # how long the run took, not what it simulated


def with_value(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`config` with the dotted `key` set to `value` (the sections copied, not changed)."""
    section, name = key.split(".")
    return {**config, section: {**config.get(section, {}), name: value}}


def simulated(config: dict[str, Any]) -> dict[str, Any]:
    """Every row `engine.run` gives, without the wall-clock columns."""
    rows = engine.run(config)
    rows["runs"] = [{column: value for column, value in row.items() if column not in WALL_CLOCK_COLUMNS}
                    for row in rows["runs"]]
    return rows


def test_every_conditional_key_is_proved() -> None:
    assert set(CHANGES) == set(CONDITIONAL_KEYS)


@pytest.fixture(scope="module")
def base_rows() -> dict[int, dict[str, Any]]:
    """The rows of each base config, by the id of the config's dict."""
    return {}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_an_unused_key_changes_neither_the_simulation_nor_the_run_id(key: str, base_rows: dict) -> None:
    base, value = CHANGES[key]
    changed = with_value(base, key, value)
    assert key in unused_keys(engine.load_config(changed)), key
    if id(base) not in base_rows:
        base_rows[id(base)] = simulated(base)
    assert simulated(changed) == base_rows[id(base)]
    section, name = key.split(".")
    values = getattr(engine.load_config(base), section)
    if hasattr(values, name):
        default = next(item.default for item in dataclasses.fields(values) if item.name == name)
        at_default = with_value(base, key, list(default) if isinstance(default, tuple) else default)
    else:  # a key of another topology, congestion control or workload type: as if it were not written
        at_default = {**changed, section: {key: value for key, value in changed[section].items() if key != name}}
    assert run_id(changed) == run_id(at_default)


DUMBBELL = {**INCAST, "network": {**INCAST["network"], "topology": "dumbbell", "bottleneck_gbps": 100.0,
                                   "bottleneck_latency_us": 1.0}}
LEAF_SPINE = {**ALL_REDUCE, "network": {"npus": 4, "topology": "leaf_spine", "hosts_per_leaf": 2, "spines": 2,
                                        "uplink_gbps": 10.0}}
FAT_TREE = {**ALL_REDUCE, "network": {"npus": 4, "topology": "fat_tree", "uplink_gbps": 10.0}}
HIERARCHICAL = {**ALL_REDUCE, "network": {"npus": 4, "topology": "hierarchical", "npus_per_node": 2,
                                          "scaleup_gbps": 400.0, "scaleup_latency_us": 0.5}}
DCTCP = with_value(with_value(INCAST, "tcp.cc", "dctcp"), "network.ecn_threshold_kb", 4.0)


@pytest.mark.parametrize(("key", "value"), [("network.hosts_per_leaf", 2), ("network.spines", 1),
                                            ("network.uplink_gbps", 1.0), ("network.fat_tree_k", 4)])
def test_a_scaleout_key_of_another_scaleout_changes_neither_simulation_nor_run_id(key: str, value: Any) -> None:
    # on one scale-out switch (hierarchical's default) a leaf-spine's or fat tree's key is not read; and the
    # run_id is the one the hierarchical presets had before the topology had those keys
    changed = with_value(HIERARCHICAL, key, value)
    assert key in unused_keys(engine.load_config(changed))
    assert simulated(changed) == simulated(HIERARCHICAL)
    assert run_id(changed) == run_id(HIERARCHICAL)
ASTRA = {"network": {"npus": 4}, "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/microAllReduce.txt",
                                              "iterations": 1}}
DLRM = {"network": {"npus": 4}, "engine": {"backend": "analytical"},
        "workload": {"type": "dlrm", "num_tables": 4, "emb_dim": 16, "bottom_mlp": [32, 16], "top_mlp": [32, 1],
                     "batch_per_npu": 64}}
DCN = with_value(DLRM, "workload.interaction", "dcn")
# The same change where the key applies, to show that the bases above could reveal it. Missing:
# CUBIC's C, the delayed-ACK timer, PTO slack, SACK after an RTO (their effect needs congestion
# avoidance over many RTTs, a delayed ACK the next segment does not release, a tail loss probe or an
# RTO: longer runs than a unit test's), the chakra keys (a trace per NPU count) and
# workload.emb_dim (valid only with a bottom MLP ending at the same width: two keys change).
APPLIED_CHANGES: dict[str, tuple[dict[str, Any], Any]] = {
    "host.tsq_bytes": (INCAST, 3_000),
    "host.qdisc_packets": (INCAST, 1),
    "host.tx_jitter_ns": (INCAST, 500.0),
    "network.bottleneck_gbps": (DUMBBELL, 10.0),
    "network.bottleneck_latency_us": (DUMBBELL, 50.0),
    "network.hosts_per_leaf": (LEAF_SPINE, 4),
    "network.spines": (LEAF_SPINE, 1),
    "network.uplink_gbps": (LEAF_SPINE, 1.0),
    "network.load_balancing": (LEAF_SPINE, "spray"),
    "network.fat_tree_k": (FAT_TREE, 6),
    "network.npus_per_node": (HIERARCHICAL, 4),
    "network.scaleup_gbps": (HIERARCHICAL, 10.0),
    "network.scaleup_latency_us": (HIERARCHICAL, 50.0),
    "network.buffer_kb": (INCAST, 8.0),
    "network.ecn_threshold_kb": (DCTCP, 1.0),
    "tcp.dctcp_g": (DCTCP, 1.0),
    "tcp.cubic_beta": (with_value(INCAST, "tcp.cc", "cubic"), 0.2),
    "workload.flows": ({"network": {"npus": 4}, "workload": {"type": "flows", "flows": [{"src": 0, "dst": 1,
                                                                                           "bytes": 10_000}]}},
                       [{"src": 0, "dst": 1, "bytes": 20_000}]),
    "workload.pattern": (INCAST, "all_to_all"),
    "workload.senders": (INCAST, 2),
    "workload.bytes_per_flow": (INCAST, 5_000),
    "workload.rounds": (INCAST, 2),
    "workload.iterations": (ALL_REDUCE, 2),
    "workload.op": (ALL_REDUCE, "all_to_all"),
    "workload.bytes": (ALL_REDUCE, 1_000),
    "workload.path": (ASTRA, "bundled:astra-sim-1.0/microAllToAll.txt"),
    "workload.cycle_ns": (ASTRA, 1000.0),
    "workload.num_tables": (DLRM, 8),
    "workload.dense_features": (DLRM, 512),
    "workload.bottom_mlp": (DLRM, [64, 16]),
    "workload.top_mlp": (DLRM, [64, 1]),
    "workload.batch_per_npu": (DLRM, 128),
    "workload.dtype_bytes": (DLRM, 2),
    "workload.npu_tflops": (DLRM, 0.001),
    "workload.hbm_gbps": (DLRM, 1.0),
    "workload.interaction": (DLRM, "dcn"),
    "workload.multi_hot": (with_value(DLRM, "workload.index_bytes", 8), [2, 2, 2, 2]),
    "workload.index_bytes": (DLRM, 8),
    "workload.dcn_layers": (DCN, 1),
    "workload.dcn_low_rank": (DCN, 2),
}


@pytest.mark.parametrize("key", sorted(APPLIED_CHANGES))
def test_where_a_key_applies_the_same_kind_of_change_shows(key: str) -> None:
    base, value = APPLIED_CHANGES[key]
    assert key not in unused_keys(engine.load_config(base))
    assert simulated(with_value(base, key, value)) != simulated(base)


def test_a_key_that_applies_keeps_its_value_in_the_identity() -> None:
    dctcp = with_value(INCAST, "tcp.cc", "dctcp")
    for key, value in (("tcp.dctcp_g", 0.5), ("network.ecn_threshold_kb", 10.0)):
        changed = with_value(dctcp, key, value)
        identity = identity_mapping(changed, engine.load_config(changed))
        section, name = key.split(".")
        assert (identity["tcp"], identity[section][name]) == (changed["tcp"], value)
        assert run_id(changed) != run_id(dctcp)


def test_unused_keys_go_back_to_their_defaults_and_absent_ones_stay_absent() -> None:
    """A key of the config's own variant goes back to its default; one of another variant is left out,
    but in a section composed from a preset (it spells every key its variants share), which spells what
    the presets of before spelled: every other topology's key null, every congestion control's constant
    at its default (tests/test_run_id_pins.py proves it on every bundled preset and experiment)."""
    config = {"tcp": {"cc": "cubic", "cubic_beta": 0.5, "dctcp_g": 0.5, "delayed_ack_timeout_ms": 1.0},
              "network": {"topology": "switch", "spines": 4}, "workload": {"type": "collective", "num_tables": 3}}
    assert identity_mapping(config, engine.load_config(config)) == {
        "tcp": {"cc": "cubic", "cubic_beta": 0.5, "delayed_ack_timeout_ms": 40.0}, "network": {"topology": "switch"},
        "workload": {"type": "collective"}}
    composed = {"network": {**dataclasses.asdict(SwitchNetwork()), "spines": 4}}
    # (the keys of before: one added since is left out, `network.scaleout` or `network.pxn`)
    other_topologies = [key for key in section_keys("network")
                        if key not in NETWORK_BASE_KEYS and f"network.{key}" in engine.keys.IDENTITY_KEYS_2026_12]
    # (and the keys every topology has gained since at their defaults, `network.pfc`: left out too)
    keys_of_before = {key: value for key, value in dataclasses.asdict(SwitchNetwork()).items()
                      if f"network.{key}" in engine.keys.IDENTITY_KEYS_2026_12}
    assert identity_mapping(composed, engine.load_config(composed)) == {
        "network": {**keys_of_before, **dict.fromkeys(other_topologies)}}


def test_a_key_set_where_it_never_applies_is_refused() -> None:
    newreno, dctcp = ({"cc": cc, "dctcp_g": 0.1} for cc in ("newreno", "dctcp"))
    newreno_g1, newreno_g2, dctcp_g1 = (engine.load_config({"tcp": tcp}) for tcp in
                                        (newreno, {**newreno, "dctcp_g": 0.2}, dctcp))
    with pytest.raises(engine.ConfigError) as error:
        check_overrides_apply([(["tcp.dctcp_g=0.1"], newreno_g1)])
    assert str(error.value) == ("tcp.dctcp_g='0.1' is not valid: set only with tcp.cc=dctcp with "
                                "transport.protocol=tcp; here it would change nothing")
    with pytest.raises(engine.ConfigError, match="in every point of this grid"):
        check_overrides_apply([(["tcp.dctcp_g=0.1"], newreno_g1), (["tcp.dctcp_g=0.2"], newreno_g2)])
    # crossed with the congestion control, the key applies at the dctcp points: a grid that must run
    check_overrides_apply([(["tcp=newreno", "tcp.dctcp_g=0.1"], newreno_g1), (["tcp=dctcp", "tcp.dctcp_g=0.1"],
                                                                            dctcp_g1)])
    newreno_default = engine.load_config({"tcp": {"cc": "newreno"}})
    check_overrides_apply([(["+force=true", "tcp=newreno", "network.npus=4"], newreno_default)])  # always apply


def test_a_key_written_with_its_default_is_accepted_where_it_does_not_apply() -> None:
    """`tcp=newreno network.ecn_threshold_kb=null`, the default written out, changes nothing, as the key
    left unset does: accepted, while a value other than the default is refused."""
    newreno = engine.load_config({"tcp": {"cc": "newreno"}})
    assert "network.ecn_threshold_kb" in unused_keys(newreno)
    check_overrides_apply([(["tcp=newreno", "network.ecn_threshold_kb=null"], newreno)])
    marking = engine.load_config({"tcp": {"cc": "newreno"}, "network": {"ecn_threshold_kb": 64}})
    with pytest.raises(engine.ConfigError, match="network.ecn_threshold_kb"):
        check_overrides_apply([(["tcp=newreno", "network.ecn_threshold_kb=64"], marking)])


def test_a_key_added_later_is_left_out_of_the_identity_at_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key that was not in `IDENTITY_KEYS_2026_12` (tcp.hystart, as if added after it) leaves the run_id
    of a config as it was before the key existed while it holds its default, and changes it otherwise;
    so adding a key keeps every dataset resumable."""
    monkeypatch.setattr(engine.keys, "IDENTITY_KEYS_2026_12", engine.keys.IDENTITY_KEYS_2026_12 - {"tcp.hystart"})
    before = {**INCAST, "tcp": {"cc": "cubic"}}
    assert run_id(with_value(before, "tcp.hystart", False)) == run_id(before)
    assert run_id(with_value(before, "tcp.hystart", True)) != run_id(before)
