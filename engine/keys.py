"""Which keys of a config can change its simulation, and the identity that follows from it.

`unused_keys` says which keys cannot change a config's simulation (a key of another topology,
congestion control or workload type, or of an option that is off); `identity_mapping` resets them to
their defaults, so two configs that differ only there share one identity (`sweep.runner.run_id`).
Some conditions depend on what the chosen backend models (its class's `MODELS_HOST_STACK`,
`ECN_THRESHOLD_SETS_QUEUE`), so this module sits above the backends' registry, and `engine.config`
below it knows none of this.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping

from .backends import backend_class, backends_with
from .config import FLOW_PATTERNS, SECTIONS, ConfigError, SimConfig

# Every field's default, by config section (every section field has one)
SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    section: {item.name: item.default for item in fields(getattr(SimConfig(), section))} for section in SECTIONS}


def _when(key: str, *values: Any) -> tuple[str, Callable[[SimConfig], bool]]:
    """A condition on one dotted key: it holds when the key has one of `values`."""
    section, name = key.split(".")
    return (f"{key}={'|'.join(str(value).lower() if isinstance(value, bool) else str(value) for value in values)}",
            lambda config: getattr(getattr(config, section), name) in values)


def _both(first: tuple[str, Callable[[SimConfig], bool]],
          second: tuple[str, Callable[[SimConfig], bool]]) -> tuple[str, Callable[[SimConfig], bool]]:
    """Both conditions."""
    return f"{first[0]} with {second[0]}", lambda config: first[1](config) and second[1](config)


_DLRM = _when("workload.type", "dlrm")
# A host's own transmit path exists on the backends that model it, and on every topology but the ring,
# whose NPUs send their own packets through the ports that forward others' (`RingPort`).
_HOST_STACK = (
    f"engine.backend={'|'.join(sorted(backends_with('MODELS_HOST_STACK')))} on a topology other than ring",
    lambda config: backend_class(config.engine.backend).MODELS_HOST_STACK and config.network.topology != "ring")
# Where each key is read: outside its condition a key cannot change the simulation (another
# topology's links, another congestion control's constants, another workload type's sizes, a
# setting of an option that is off). Keys not listed apply to every config.
KEY_CONDITIONS: dict[str, tuple[str, Callable[[SimConfig], bool]]] = {
    "network.bottleneck_gbps": _when("network.topology", "dumbbell"),
    "network.bottleneck_latency_us": _when("network.topology", "dumbbell"),
    "network.hosts_per_leaf": _when("network.topology", "leaf_spine"),
    "network.spines": _when("network.topology", "leaf_spine"),
    "network.uplink_gbps": _when("network.topology", "leaf_spine", "fat_tree"),
    "network.fat_tree_k": _when("network.topology", "fat_tree"),
    "network.npus_per_node": _when("network.topology", "hierarchical"),
    "network.scaleup_gbps": _when("network.topology", "hierarchical"),
    "network.scaleup_latency_us": _when("network.topology", "hierarchical"),
    # Only ECN-capable packets are marked; and on ns3 a threshold without a buffer limit also puts
    # the port's own queue disc in place of ns-3's default device queue, which drops at 100 packets.
    "network.ecn_threshold_kb": (
        "ECN-capable traffic (tcp.cc=dctcp or tcp.ecn=true; on engine.backend="
        f"{'|'.join(backends_with('ECN_THRESHOLD_SETS_QUEUE'))} also network.buffer_kb=null)",
        lambda config: config.tcp.ecn or config.tcp.cc == "dctcp"
        or (backend_class(config.engine.backend).ECN_THRESHOLD_SETS_QUEUE and config.network.buffer_kb is None)),
    **{f"host.{key}": _HOST_STACK for key in ("tsq_bytes", "qdisc", "qdisc_packets", "tx_jitter_ns")},
    "tcp.dctcp_g": _when("tcp.cc", "dctcp"),
    "tcp.cubic_c": _when("tcp.cc", "cubic"),
    "tcp.cubic_beta": _when("tcp.cc", "cubic"),
    "tcp.delayed_ack_timeout_ms": _when("tcp.delayed_ack", True),
    "tcp.pto_slack_ms": _when("tcp.rack_tlp", True),
    "tcp.sack_after_rto": _when("tcp.sack", True),
    "workload.flows": _when("workload.type", "flows"),
    "workload.pattern": _when("workload.type", "flows"),
    "workload.senders": _when("workload.pattern", "incast"),
    "workload.bytes_per_flow": _when("workload.pattern", *FLOW_PATTERNS),
    "workload.rounds": _when("workload.pattern", *FLOW_PATTERNS),
    "workload.iterations": _when("workload.type", "dlrm", "astra", "chakra", "collective"),
    **{f"workload.{key}": _DLRM for key in ("num_tables", "emb_dim", "dense_features", "bottom_mlp", "top_mlp",
                                            "batch_per_npu", "dtype_bytes", "npu_tflops", "hbm_gbps", "interaction",
                                            "multi_hot", "index_bytes")},
    "workload.dcn_layers": _both(_DLRM, _when("workload.interaction", "dcn")),
    "workload.dcn_low_rank": _both(_DLRM, _when("workload.interaction", "dcn")),
    "workload.path": _when("workload.type", "astra", "chakra"),
    "workload.duration_unit": _when("workload.type", "chakra"),
    "workload.cycle_ns": (
        "workload.type=astra, or workload.type=chakra with workload.duration_unit=cycles",
        lambda config: config.workload.type == "astra"
        or (config.workload.type == "chakra" and config.workload.duration_unit == "cycles")),
    "workload.op": _when("workload.type", "collective"),
    "workload.bytes": _when("workload.type", "collective"),
}


def unused_keys(config: SimConfig) -> tuple[str, ...]:
    """The dotted keys (of `KEY_CONDITIONS`) whose value cannot change this config's simulation."""
    return tuple(key for key, (_, applies) in KEY_CONDITIONS.items() if not applies(config))


def holds_default(config: SimConfig, key: str) -> bool:
    """Whether dotted `key` of `config` holds its field's default: set so, it changes nothing wherever it
    is written (an explicit default is accepted even where the key does not apply)."""
    section, name = key.split(".")
    values = getattr(config, section)
    return bool(getattr(values, name) == SECTION_DEFAULTS[section][name])


def unused_key_error(key: str, value: Any, scope: str = "here") -> ConfigError:
    """The error for setting `key` (of `KEY_CONDITIONS`) where it cannot change the simulation."""
    return ConfigError(key, value, f"set only with {KEY_CONDITIONS[key][0]}; {scope} it would change nothing")


def identity_mapping(mapping: Mapping[str, Any], config: SimConfig) -> dict[str, Any]:
    """`mapping` (what `load_config` turned into `config`) with every key of `unused_keys(config)`
    that it sets put back to its default: configs that differ only in keys that cannot change their
    simulation map to one identity. Defaults, not deletion, so a config whose unused keys hold
    their defaults (every preset's) keeps the identity it had."""
    identity = {key: dict(value) if isinstance(value, Mapping) else value for key, value in mapping.items()}
    unused = unused_keys(config)
    for key in unused:
        section, name = key.split(".")
        values = identity.get(section)
        if isinstance(values, dict) and name in values:
            values[name] = _default(section, name)
    # A section none of whose keys can change this simulation (`host` off the packet backend) is left
    # out, so such configs keep the identity they had before the section was added.
    for section in SECTIONS:
        if all(f"{section}.{name}" in unused for name in SECTION_DEFAULTS[section]):
            identity.pop(section, None)
    return identity


def _default(section: str, name: str) -> Any:
    """The default of field `name` of config section `section`, as a mapping would spell it (a list
    for a tuple)."""
    value = SECTION_DEFAULTS[section][name]
    return list(value) if isinstance(value, tuple) else value
