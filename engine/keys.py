"""Which keys of a config can change its simulation, and the identity that follows from it.

A key of another variant of its section (`network.spines` on a switch, `workload.op` in a DLRM run)
cannot change a simulation: its variant's class has no such field (`engine.config.VARIANT_SECTIONS`).
Within a variant, a key may matter only with some setting (`KEY_CONDITIONS`: another congestion
control's constants, an option that is off). `unused_keys` lists both; `identity_mapping` resets them,
so two configs that differ only there share one identity (`sweep.runner.run_id`). Some conditions
depend on what the chosen backend models (its class's `MODELS_HOST_STACK`,
`ECN_THRESHOLD_SETS_QUEUE`), so this module sits above the backends' registry, and `engine.config`
below it knows none of this.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .backends import backend_class, backends_with
from .config import (
    FLOW_PATTERNS,
    SECTIONS,
    TOPOLOGY_CONFIGS,
    VARIANT_SECTIONS,
    ChakraWorkload,
    ConfigError,
    DctcpTcp,
    HierarchicalNetwork,
    RailOptimizedNetwork,
    SimConfig,
    field_defaults,
    section_classes,
    section_keys,
)


def _when(key: str, *values: Any) -> tuple[str, Callable[[SimConfig], bool]]:
    """A condition on one dotted key: it holds when the key has one of `values`."""
    section, name = key.split(".")
    return (f"{key}={'|'.join(str(value).lower() if isinstance(value, bool) else str(value) for value in values)}",
            lambda config: getattr(getattr(config, section), name) in values)


def _scaleout(*scaleouts: str) -> tuple[str, Callable[[SimConfig], bool]]:
    """A scale-out network's key: read on `hierarchical` only with one of `scaleouts`."""
    return (f"network.scaleout={'|'.join(scaleouts)} where network.topology=hierarchical",
            lambda config: not isinstance(config.network, HierarchicalNetwork) or config.network.scaleout in scaleouts)


def _both(first: tuple[str, Callable[[SimConfig], bool]],
          second: tuple[str, Callable[[SimConfig], bool]]) -> tuple[str, Callable[[SimConfig], bool]]:
    """Two conditions that must both hold."""
    return f"{first[0]} with {second[0]}", lambda config: first[1](config) and second[1](config)


_TCP = _when("transport.protocol", "tcp")
_ROCE = _when("transport.protocol", "roce")
_PFC = ("PFC on (network.pfc=true, or null with transport.protocol=roce)", lambda config: config.pfc_on)
# A host's own transmit path exists on the backends that model it, and on the topologies whose hosts
# have interfaces of their own (not the ring's NPUs, which send through the ports that forward: `RingPort`)
_HOST_STACK = (
    f"engine.backend={'|'.join(sorted(backends_with('MODELS_HOST_STACK')))} on network.topology="
    f"{'|'.join(name for name, cls in TOPOLOGY_CONFIGS.items() if cls.HOST_INTERFACES)}",
    lambda config: backend_class(config.engine.backend).MODELS_HOST_STACK and config.network.HOST_INTERFACES)
# The backends where spraying can change a simulation: they spray, and model contention
_CONTENDED_SPRAYS = tuple(name for name in backends_with("SPRAYS") if not backend_class(name).LOWER_BOUND)
# The topologies whose links queue in switch ports (`NetworkConfig.SWITCH_PORTS`)
_WITH_SWITCH_PORTS = f"network.topology={'|'.join(name for name, cls in TOPOLOGY_CONFIGS.items() if cls.SWITCH_PORTS)}"
# Where a key of its variant is read, when it is not read in every config of that variant: outside
# its condition it cannot change the simulation (a setting of an option that is off, a flows pattern,
# a topology without switch ports). Evaluated only for configs whose variant has the key.
_REDUCERS = backends_with("REDUCES_NETWORKS")
KEY_CONDITIONS: dict[str, tuple[str, Callable[[SimConfig], bool]]] = {
    # only a rail-optimized network with PXN carries each message on its receiver's rail alone
    "engine.hybrid_rails": (
        f"engine.backend={'|'.join(_REDUCERS)} on network.topology=rail_optimized with network.pxn=true",
        lambda config: config.engine.backend in _REDUCERS and isinstance(config.network, RailOptimizedNetwork)
        and config.network.pxn),
    # with PFC the switches are lossless: their egress queues are bounded by the pauses, not by a buffer
    "network.buffer_kb": (f"{_WITH_SWITCH_PORTS} with PFC off",
                          lambda config: config.network.SWITCH_PORTS and not config.pfc_on),
    # Only ECN-capable packets are marked; and on ns3 a threshold without a buffer limit also puts
    # the port's own queue disc in place of ns-3's default device queue, which drops at 100 packets.
    "network.ecn_threshold_kb": (
        f"{_WITH_SWITCH_PORTS} with ECN-capable traffic (tcp.cc=dctcp or tcp.ecn=true; on engine.backend="
        f"{'|'.join(backends_with('ECN_THRESHOLD_SETS_QUEUE'))} also network.buffer_kb=null) "
        "with transport.protocol=tcp",
        lambda config: config.network.SWITCH_PORTS and config.transport.protocol == "tcp" and (
            config.tcp.ecn or isinstance(config.tcp, DctcpTcp) or (
                backend_class(config.engine.backend).ECN_THRESHOLD_SETS_QUEUE and config.network.buffer_kb is None))),
    **{f"host.{key}": _both(_HOST_STACK, _TCP) for key in ("tsq_bytes", "qdisc", "qdisc_packets", "tx_jitter_ns")},
    "network.pfc": _ROCE,  # with tcp, false is what null means
    # read by the backends that spray and model contention (alpha_beta accepts it, leaving all contention out)
    "network.load_balancing": (
        f"engine.backend={'|'.join(_CONTENDED_SPRAYS)} on a network with equal-cost paths (leaf_spine with "
        "network.spines > 1, fat_tree, an even ring, or hierarchical and rail_optimized over those)",
        lambda config: config.engine.backend in _CONTENDED_SPRAYS and config.network.has_equal_cost_paths()),
    "network.pfc_xoff_kb": _PFC,
    "network.pfc_xon_kb": _PFC,
    **{f"network.{key}": _scaleout(*scaleouts) for key, scaleouts in (
        ("hosts_per_leaf", ("leaf_spine",)), ("spines", ("leaf_spine",)), ("uplink_gbps", ("leaf_spine", "fat_tree")),
        ("fat_tree_k", ("fat_tree",)))},
    # every tcp key: with transport.protocol=tcp (some under a setting of their own too)
    **{f"tcp.{name}": _TCP for name in section_keys("tcp")},
    "tcp.delayed_ack_timeout_ms": _both(_when("tcp.delayed_ack", True), _TCP),
    "tcp.pto_slack_ms": _both(_when("tcp.rack_tlp", True), _TCP),
    "tcp.sack_after_rto": _both(_when("tcp.sack", True), _TCP),
    **{f"roce.{name}": _both(_ROCE, _when("roce.cc", "dcqcn")) if name.startswith("dcqcn_") else _ROCE
       for name in section_keys("roce")},
    "workload.senders": _when("workload.pattern", "incast"),
    "workload.bytes_per_flow": _when("workload.pattern", *FLOW_PATTERNS),
    "workload.rounds": _when("workload.pattern", *FLOW_PATTERNS),
    "workload.dcn_layers": _when("workload.interaction", "dcn"),
    "workload.dcn_low_rank": _when("workload.interaction", "dcn"),
    "workload.cycle_ns": ("workload.duration_unit=cycles where workload.type=chakra",
                          lambda config: not isinstance(config.workload, ChakraWorkload)
                          or config.workload.duration_unit == "cycles"),
}
# Every key of every section, dotted, in the order of the runs table's columns.
ALL_KEYS = tuple(f"{section}.{name}" for section in SECTIONS for name in section_keys(section))


def _variants_with(key: str) -> list[str]:
    """The names of the variants of `key`'s section whose class has `key` (every one for a plain section)."""
    section, name = key.split(".")
    if section not in VARIANT_SECTIONS:
        return []
    return [variant for variant, cls in VARIANT_SECTIONS[section][1].items()
            if name in field_defaults(cls)]


def key_condition(key: str) -> str:
    """When dotted `key` can change a simulation ('' for always): its variants, then `KEY_CONDITIONS`."""
    section = key.split(".")[0]
    parts = []
    variants = _variants_with(key)
    if section in VARIANT_SECTIONS and len(variants) < len(VARIANT_SECTIONS[section][1]):
        parts.append(f"{section}.{VARIANT_SECTIONS[section][0]}={'|'.join(variants)}")
    if key in KEY_CONDITIONS:
        parts.append(KEY_CONDITIONS[key][0])
    return " with ".join(parts)


# Every key a run_id spelled when run_ids were last allowed to change (2026-12-05). A key added
# since is left out of a run_id while it holds its default (what every run before it simulated), so
# adding a key, a topology or a workload type keeps every dataset resumable (tests/test_run_id_pins.py).
IDENTITY_KEYS_2026_12 = frozenset(f"{section}.{name}" for section, names in {
    "engine": "backend max_sim_time_s link_stats incast_rto",
    "network": "topology npus link_gbps link_latency_us buffer_kb ecn_threshold_kb mtu_bytes loss_rate bottleneck_gbps "
               "bottleneck_latency_us hosts_per_leaf spines uplink_gbps fat_tree_k npus_per_node scaleup_gbps "
               "scaleup_latency_us",
    "tcp": "cc mss_bytes init_cwnd_pkts min_rto_ms max_rto_s initial_rto_ms clock_granularity_us delayed_ack "
           "delayed_ack_timeout_ms linux_delayed_ack sack sack_after_rto timestamps handshake ecn rcv_wnd_kb "
           "slow_start_after_idle rack_tlp pto_slack_ms prr hystart dctcp_g cubic_c cubic_beta",
    "host": "tsq_bytes qdisc qdisc_packets tx_jitter_ns",
    "system": "all_reduce all_to_all all_gather reduce_scatter splits scheduling hierarchy endpoint_delay_ns "
              "astra_compat",
    "workload": "type flows pattern senders bytes_per_flow rounds iterations num_tables emb_dim dense_features "
                "bottom_mlp top_mlp batch_per_npu dtype_bytes npu_tflops hbm_gbps interaction dcn_layers "
                "dcn_low_rank multi_hot index_bytes path cycle_ns duration_unit op bytes",
}.items() for name in names.split())

# The keys that can be unused: of some variants only, or under a condition
CONDITIONAL_KEYS = tuple(key for key in ALL_KEYS if key_condition(key))


def _owns(config: SimConfig, key: str) -> bool:
    """Whether `config`'s class for `key`'s section has the key (a key of another variant: not)."""
    section, name = key.split(".")
    return name in field_defaults(getattr(config, section).__class__)


def unused_keys(config: SimConfig) -> tuple[str, ...]:
    """The dotted keys (of `CONDITIONAL_KEYS`) whose value cannot change this config's simulation:
    those of its sections' other variants, and those whose condition does not hold."""
    return tuple(key for key in CONDITIONAL_KEYS
                 if not _owns(config, key) or (key in KEY_CONDITIONS and not KEY_CONDITIONS[key][1](config)))


def holds_default(config: SimConfig, key: str) -> bool:
    """Whether dotted `key` of `config` holds its field's default: set so, it changes nothing wherever it
    is written (an explicit default is accepted even where the key does not apply). A key of another
    variant has no value here: it holds none."""
    if not _owns(config, key):
        return False
    section, name = key.split(".")
    values = getattr(config, section)
    return bool(getattr(values, name) == _default(values, name))


def unused_key_error(key: str, value: Any, scope: str = "here") -> ConfigError:
    """The error for setting `key` (of `CONDITIONAL_KEYS`) where it cannot change the simulation."""
    return ConfigError(key, value, f"set only with {key_condition(key)}; {scope} it would change nothing")


def identity_mapping(mapping: Mapping[str, Any], config: SimConfig) -> dict[str, Any]:
    """`mapping` (what `load_config` turned into `config`) with every key of `unused_keys(config)`
    that it sets put back to its default: configs that differ only in keys that cannot change their
    simulation map to one identity. Defaults, not deletion, so a config whose unused keys hold
    their defaults (every preset's) keeps the identity it had. A key of another variant is left out;
    but a section composed from a preset (it spells every key its variants share) spells what the
    presets of before spelled (`_PRESETS_SPELLED`), so their datasets resume. A key added since
    `IDENTITY_KEYS_2026_12` is left out while it holds its default, and so is a section added since whose
    keys all hold theirs."""
    identity = {key: dict(value) if isinstance(value, Mapping) else value for key, value in mapping.items()}
    unused = unused_keys(config)
    for key in unused:
        section, name = key.split(".")
        values = identity.get(section)
        if not isinstance(values, dict) or name not in values:
            continue
        if _owns(config, key) and key not in _gained_since(section, values):
            values[name] = _listed(_default(getattr(config, section), name))
        else:
            del values[name]
    for section, spelled in _PRESETS_SPELLED.items():
        values = identity.get(section)
        if isinstance(values, dict) and set(_shared_keys(section)) <= set(values):
            for name in section_keys(section):
                key = f"{section}.{name}"
                if name not in values and key in IDENTITY_KEYS_2026_12 and (
                        spelled == "default" or not _owns(config, key) or key in _gained_since(section, values)):
                    values[name] = None if spelled == "null" else _listed(_owner_default(section, name))
    for section in SECTIONS:  # keys (and sections) added since IDENTITY_KEYS_2026_12, at their defaults
        values = identity.get(section)
        if isinstance(values, dict):
            config_values = getattr(config, section)
            for name in [name for name in values if f"{section}.{name}" not in IDENTITY_KEYS_2026_12
                         and _owns(config, f"{section}.{name}")
                         and values[name] == _listed(_default(config_values, name))]:
                del values[name]
            if not values and not any(key.startswith(f"{section}.") for key in IDENTITY_KEYS_2026_12):
                del identity[section]  # a section added since (`transport`), at its defaults: as if absent
    # A section none of whose keys can change this simulation (`host` off the packet backend) is left
    # out, so such configs keep the identity they had before the section was added.
    for section in SECTIONS:
        if all(f"{section}.{name}" in unused for name in section_keys(section)):
            identity.pop(section, None)
    return identity


# Keys of IDENTITY_KEYS_2026_12 a variant has had since, which it did not have then (another variant's: its
# presets spelled them null), by the variant's name: while unused they are left out of its identity as
# another variant's keys are
_GAINED_SINCE_2026_12 = {"hierarchical": frozenset(
    f"network.{name}" for name in ("hosts_per_leaf", "spines", "uplink_gbps", "fat_tree_k"))}


def _gained_since(section: str, values: Mapping[str, Any]) -> frozenset[str]:
    """The keys `values`' variant of `section` gained since IDENTITY_KEYS_2026_12 (`_GAINED_SINCE_2026_12`)."""
    if section not in VARIANT_SECTIONS:
        return frozenset()
    return _GAINED_SINCE_2026_12.get(str(values.get(VARIANT_SECTIONS[section][0])), frozenset())


# What the presets of before spelled for a key of IDENTITY_KEYS_2026_12 they did not set, which the
# run_ids of their runs hash: a network preset every other topology's key null, a tcp preset every
# key at its default (the constants of every congestion control); a workload preset nothing.
_PRESETS_SPELLED = {"network": "null", "tcp": "default"}


def _shared_keys(section: str) -> tuple[str, ...]:
    """The keys every variant of a section has."""
    classes = section_classes(section)
    return tuple(name for name in section_keys(section)
                 if all(name in field_defaults(cls) for cls in classes))


def _owner_default(section: str, name: str) -> Any:
    """The default of key `name` in the first of its section's classes that has it."""
    return next(field_defaults(cls)[name] for cls in section_classes(section) if name in field_defaults(cls))


def own_keys(mapping: Mapping[str, Any], config: SimConfig) -> dict[str, Any]:
    """`mapping` (what `load_config` turned into `config`) without the keys of its sections' other
    variants (`network.spines` on a switch): what the runs table records of it."""
    own = dict(mapping)
    for section in VARIANT_SECTIONS:
        values = mapping.get(section)
        if isinstance(values, Mapping):
            names = field_defaults(getattr(config, section).__class__)
            own[section] = {name: value for name, value in values.items() if name in names}
    return own


def _default(values: Any, name: str) -> Any:
    """The default of field `name` of `values`' class (a config section)."""
    return field_defaults(values.__class__)[name]


def _listed(value: Any) -> Any:
    """`value` as a mapping spells it: a list for a tuple."""
    return list(value) if isinstance(value, tuple) else value
