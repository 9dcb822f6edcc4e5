"""Every preset of every config group composes and passes the engine's validation."""

from __future__ import annotations

import dataclasses

import pytest

import engine
from engine.config import NetworkConfig, TcpConfig, WorkloadConfig
from sweep_support import GROUPS, compose_config, group_options

ALL_PRESETS = [(group, option) for group in GROUPS for option in group_options(group)]


def test_every_group_has_its_presets() -> None:
    assert group_options("network") == ["dumbbell", "hierarchical", "leaf_spine", "ring", "switch"]
    assert group_options("tcp") == ["cubic", "dctcp", "newreno"]
    assert group_options("workload") == ["all_to_all", "flows", "incast", "permutation"]


def test_default_config() -> None:
    config = compose_config()
    assert config["name"] == "default"
    assert config["results_dir"] == "results"
    assert config["seed"] == 0
    assert config["engine"] == {"backend": "packet", "max_sim_time_s": 10.0}
    assert config["ray"] == {"address": None, "num_cpus": None}
    assert (config["network"]["topology"], config["tcp"]["cc"], config["workload"]["pattern"]) == (
        "switch", "newreno", "incast")
    assert "hydra" not in config


@pytest.mark.parametrize(("group", "option"), ALL_PRESETS)
def test_preset_composes_and_validates(group: str, option: str) -> None:
    config = compose_config([f"{group}={option}"])
    engine.load_config(config)  # raises ConfigError naming the key if a preset is broken


@pytest.mark.parametrize(("group", "section_class"), [("network", NetworkConfig), ("tcp", TcpConfig)])
def test_preset_sets_every_engine_key(group: str, section_class: type) -> None:
    """Every network and tcp preset spells out every key of its engine section, so every run has the
    same columns."""
    engine_keys = {field.name for field in dataclasses.fields(section_class)}
    for option in group_options(group):
        assert set(compose_config([f"{group}={option}"])[group]) == engine_keys, option


def test_workload_presets_of_one_type_share_their_keys() -> None:
    """Workload keys depend on the workload type; presets of one type set the same ones."""
    engine_keys = {field.name for field in dataclasses.fields(WorkloadConfig)}
    keys_by_type: dict[str, set[frozenset[str]]] = {}
    for option in group_options("workload"):
        workload = compose_config([f"workload={option}"])["workload"]
        keys_by_type.setdefault(workload["type"], set()).add(frozenset(workload))
    for workload_type, key_sets in keys_by_type.items():
        assert len(key_sets) == 1, workload_type
        assert next(iter(key_sets)) <= engine_keys


def test_network_presets_name_their_topology() -> None:
    for option in group_options("network"):
        assert compose_config([f"network={option}"])["network"]["topology"] == option


def test_tcp_presets_name_their_algorithm() -> None:
    for option in group_options("tcp"):
        assert compose_config([f"tcp={option}"])["tcp"]["cc"] == option


def test_workload_presets_are_flows() -> None:
    for option in group_options("workload"):
        assert compose_config([f"workload={option}"])["workload"]["type"] == "flows"
