"""Every preset of every config group composes and passes the engine's validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from sweep_support import GROUPS, compose_config, group_options

import engine
from engine.config import VARIANT_SECTIONS, EngineConfig, HostConfig, NewRenoTcp, SwitchNetwork, SystemConfig
from engine.workload.layers import bundled_workloads, workload_file
from sweep.cli import CONF_DIR

ALL_PRESETS = [(group, option) for group in GROUPS for option in group_options(group)]

# Sections whose presets start from a variant's base (sweep.config_bases): network, workload
VARIANT_GROUPS = [(group, option) for group in VARIANT_SECTIONS for option in group_options(group)]


def keys_of(values: object) -> set[str]:
    """The field names of a config dataclass (or of an instance of one)."""
    return {item.name for item in dataclasses.fields(values)}  # type: ignore[arg-type]


def test_every_group_has_its_presets() -> None:
    assert group_options("network") == ["dumbbell", "fat_tree", "full_mesh", "hierarchical", "leaf_spine",
                                        "rail_optimized", "ring", "switch"]
    assert group_options("tcp") == ["cubic", "dctcp", "linux", "newreno"]
    assert group_options("system") == ["default", "halving_doubling", "local_bw_aware"]
    assert group_options("workload") == [
        "all_to_all", "astra_dlrm", "astra_micro_allreduce", "astra_micro_alltoall", "chakra", "collective", "dlrm",
        "dlrm_dcnv2", "dlrm_large", "dlrm_medium", "dlrm_small", "flows", "incast", "permutation"]


def test_default_config() -> None:
    config = compose_config()
    assert config["name"] == "default"
    assert config["results_dir"] == "results"
    assert config["seed"] == 0
    assert config["engine"] == {"backend": "packet", "max_sim_time_s": 10.0, "link_stats": "none", "incast_rto": False,
                                "hybrid_fat_tree_group": "auto", "hybrid_rails": "auto",
                                "hybrid_memoise": True, "fast_forward": False}
    assert config["ray"] == {"address": None, "num_cpus": None}
    assert (config["network"]["topology"], config["tcp"]["cc"], config["workload"]["type"]) == (
        "switch", "newreno", "dlrm")
    assert config["system"] == compose_config(["system=default"])["system"]
    assert config["workload"] == compose_config(["workload=dlrm_medium"])["workload"]
    assert "hydra" not in config


@pytest.mark.parametrize(("group", "option"), ALL_PRESETS)
def test_preset_composes_and_validates(group: str, option: str) -> None:
    config = compose_config([f"{group}={option}"])
    engine.load_config(config)  # raises ConfigError naming the key if a preset is broken


@pytest.mark.parametrize("option", group_options("system"))
@pytest.mark.parametrize("network", group_options("network"))
def test_system_presets_validate_on_every_network(network: str, option: str) -> None:
    """halving_doubling needs power-of-two groups: every network preset must offer them."""
    engine.load_config(compose_config([f"network={network}", f"system={option}"]))


def test_system_presets_set_every_engine_key() -> None:
    """Every system preset spells out every key of its engine section."""
    for option in group_options("system"):
        assert set(compose_config([f"system={option}"])["system"]) == keys_of(SystemConfig), option


@pytest.mark.parametrize(("group", "option"), VARIANT_GROUPS)
def test_a_variant_preset_composes_to_exactly_its_variants_keys(group: str, option: str) -> None:
    """A network or workload preset composes to the keys of its topology's or workload type's class,
    no other variant's (no padding: the runs table has a column for every key of every variant all the
    same, `sweep.schema`)."""
    section = compose_config([f"{group}={option}"])[group]
    name_key, classes = VARIANT_SECTIONS[group]
    assert set(section) == keys_of(classes[section[name_key]])


@pytest.mark.parametrize(("group", "option"), VARIANT_GROUPS)
def test_a_variant_preset_says_only_what_differs_from_its_base(group: str, option: str) -> None:
    """Read as written, a preset names its base and sets only keys whose value differs from the base's
    default (the engine's dataclass): one home per default."""
    written = yaml.safe_load((Path(CONF_DIR) / group / f"{option}.yaml").read_text())
    (base,) = [entry for entry in written.pop("defaults") if entry != "_self_"]
    name_key, classes = VARIANT_SECTIONS[group]
    assert list(base) == [f"/base/{group}@_here_"] and name_key not in written
    defaults = dataclasses.asdict(classes[_base_of(group, option)]())
    for key, value in written.items():
        assert value != (list(defaults[key]) if isinstance(defaults[key], tuple) else defaults[key]), (option, key)


def test_system_default_is_the_engine_default() -> None:
    assert compose_config(["system=default"])["system"] == dataclasses.asdict(SystemConfig())


def test_the_default_config_spells_the_engines_defaults() -> None:
    """The config dataclasses are the one home of every default (the engine's TCP settings are built
    from them, `TcpSettings.from_config`); the root config and the default presets only repeat them,
    so a run composed by Hydra and one given to `engine.run` without a key mean the same. The switch
    preset's 16 NPUs is that preset's own choice (the engine's default network is 8 NPUs)."""
    config = compose_config()
    for section, section_class in (("tcp", NewRenoTcp), ("host", HostConfig), ("engine", EngineConfig)):
        assert config[section] == dataclasses.asdict(section_class()), section
    assert {**config["network"], "npus": SwitchNetwork().npus} == dataclasses.asdict(SwitchNetwork())


def _base_of(group: str, option: str) -> str:
    """The variant a preset starts from, as its file names it (`/base/network@_here_: leaf_spine`)."""
    written = yaml.safe_load((Path(CONF_DIR) / group / f"{option}.yaml").read_text())
    (base,) = [entry for entry in written["defaults"] if entry != "_self_"]
    return str(next(iter(base.values())))


def test_every_topology_congestion_control_and_workload_type_has_a_preset() -> None:
    for group, (_, classes) in VARIANT_SECTIONS.items():
        assert {_base_of(group, option) for option in group_options(group)} == set(classes), group


def test_workload_preset_types() -> None:
    """The flow presets stay `flows`; the others are named after their type."""
    for option in group_options("workload"):
        prefix = option.split("_")[0]
        expected = prefix if prefix in ("dlrm", "astra", "chakra", "collective") else "flows"
        assert compose_config([f"workload={option}"])["workload"]["type"] == expected, option


@pytest.mark.parametrize("option", [o for o in group_options("workload") if o.startswith("astra_")])
def test_astra_presets_name_a_bundled_file_from_any_directory(option: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The astra presets name a workload shipped inside the package, the same text on every machine
    (so run_id does not depend on where netsweep is installed), found from any working directory."""
    monkeypatch.chdir(tmp_path)
    path = compose_config([f"workload={option}"])["workload"]["path"]
    assert path.startswith("bundled:astra-sim-1.0/") and path in bundled_workloads()
    file = workload_file(path)
    assert file.is_file() and file.parent.name == "astra-sim-1.0"
    assert (file.parent / "LICENSE").read_text().startswith("MIT License")  # ASTRA-sim's, beside its files


def test_bundled_workloads_and_their_errors(tmp_path: Path) -> None:
    assert bundled_workloads() == ["bundled:astra-sim-1.0/DLRM_HybridParallel.txt",
                                   "bundled:astra-sim-1.0/microAllReduce.txt",
                                   "bundled:astra-sim-1.0/microAllToAll.txt"]
    for wrong in ("bundled:astra-sim-1.0/LICENSE", "bundled:astra-sim-1.0/../../config.py", "bundled:nothing.txt"):
        with pytest.raises(engine.ConfigError, match="one of the bundled workloads: bundled:astra-sim-1.0/DLRM"):
            workload_file(wrong)
    with pytest.raises(engine.ConfigError, match="an existing ASTRA-sim 1.0 workload file, or one of the bundled"):
        workload_file(str(tmp_path / "missing.txt"))
    own = tmp_path / "mine.txt"
    own.write_text("MICRO\n1\nl -1 0 NONE 0 0 NONE 0 0 ALLREDUCE 1024 0\n")
    assert workload_file(str(own)) == own


def test_dlrm_presets_grow_in_size() -> None:
    """small < medium < large in weight-gradient bytes; dlrm is medium."""
    def weights(option: str) -> int:
        wl = compose_config([f"workload={option}"])["workload"]
        bottom = [wl["dense_features"], *wl["bottom_mlp"]]
        top = [wl["emb_dim"] + (wl["num_tables"] + 1) * wl["num_tables"] // 2, *wl["top_mlp"]]
        return sum(a * b + b for widths in (bottom, top) for a, b in zip(widths, widths[1:]))

    assert weights("dlrm_small") < weights("dlrm_medium") == weights("dlrm") < weights("dlrm_large")
    for option in ("dlrm", "dlrm_small", "dlrm_medium", "dlrm_large"):
        wl = compose_config([f"workload={option}"])["workload"]
        assert wl["bottom_mlp"][-1] == wl["emb_dim"], option  # the dot interaction needs equal widths


def test_network_presets_name_their_topology() -> None:
    for option in group_options("network"):
        assert compose_config([f"network={option}"])["network"]["topology"] == option


def test_tcp_presets_name_their_algorithm() -> None:
    # every preset is named after its algorithm, except `linux`: Linux's defaults, whose is CUBIC
    for option in group_options("tcp"):
        assert compose_config([f"tcp={option}"])["tcp"]["cc"] == {"linux": "cubic"}.get(option, option)


def test_the_linux_preset_turns_on_linux_defaults_and_the_others_do_not() -> None:
    linux = compose_config(["tcp=linux"])["tcp"]
    assert linux["cc"] == "cubic" and linux["sack"] and linux["min_rto_ms"] == 200 and linux["init_cwnd_pkts"] == 10
    assert (linux["rack_tlp"] and linux["prr"] and linux["hystart"] and linux["delayed_ack"]
            and linux["linux_delayed_ack"])
    assert linux["pto_slack_ms"] == 2.0  # Linux's TCP_TIMEOUT_MIN_US
    for option in ("newreno", "cubic", "dctcp"):
        tcp = compose_config([f"tcp={option}"])["tcp"]
        assert not (tcp["rack_tlp"] or tcp["prr"] or tcp["hystart"] or tcp["linux_delayed_ack"])
        assert tcp["pto_slack_ms"] == 0.0  # RFC 8985's probe timeout, should rack_tlp be turned on
