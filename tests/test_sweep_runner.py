"""`sweep.runner.execute`: identity, flattened config columns, provenance, errors as rows."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from sweep_support import compose_config, small_config

import engine
from sweep.runner import execute, flatten, point_id, repro_command, run_id


def test_run_id_ignores_where_and_how_a_run_executes(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    moved = {**config, "name": "other", "results_dir": "elsewhere", "ray": {"address": "auto", "num_cpus": 4}}
    assert run_id(moved) == run_id(config)
    assert len(run_id(config)) == 16 and int(run_id(config), 16) >= 0


def test_run_id_changes_with_what_is_simulated(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    assert run_id({**config, "seed": 1}) != run_id(config)
    assert run_id({**config, "network": {**config["network"], "link_gbps": 40.0}}) != run_id(config)


def test_run_id_treats_integral_floats_as_ints(tmp_path: Path) -> None:
    """`network.link_gbps=100` on the command line is the run the preset's 100.0 describes."""
    config = small_config(tmp_path)
    assert run_id({**config, "network": {**config["network"], "link_gbps": 100}}) == run_id(config)


@pytest.mark.parametrize("overrides", [
    ["engine.backend=analytical", "network=switch", "network.ecn_threshold_kb=32"],  # ECN keys unused on both
    ["engine.backend=ns3", "network=leaf_spine", "network.buffer_kb=null", "network.ecn_threshold_kb=32"],
    ["engine.backend=phase", "tcp=dctcp", "workload=dlrm_small"],
])
def test_ids_from_the_validated_config_are_the_ids_from_the_mapping(overrides: list[str]) -> None:
    """A sweep hands `run_id` and `point_id` the config it validated when it planned the run, so
    they do not validate it again: the ids are the same as from the mapping alone, also for
    `point_id` where whether a key applies depends on the backend it leaves out (ns3 reads an ECN
    threshold without a buffer limit; the default backend, packet, does not)."""
    config = compose_config(overrides)
    validated = engine.load_config(config)
    assert run_id(config, validated) == run_id(config)
    assert point_id(config, validated) == point_id(config)


def test_flatten_dots_keys_and_turns_lists_into_json() -> None:
    flows = [{"src": 0, "dst": 1, "bytes": 10, "start_us": 0.0}]
    flat = flatten({"seed": 0, "network": {"npus": 4, "buffer_kb": None}, "workload": {"flows": flows}})
    assert flat == {"seed": 0, "network.npus": 4, "network.buffer_kb": None,
                    "workload.flows": json.dumps(flows, sort_keys=True)}


def test_execute_adds_identity_config_and_provenance(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    rows = execute(config)
    (run,) = rows["runs"]
    assert run["status"] == "ok" and run["error"] is None
    assert run["run_id"] == run_id(config)
    assert all(row["run_id"] == run["run_id"] for row in rows["flows"]) and len(rows["flows"]) == 2
    for key, value in flatten(config).items():
        assert run[key] == value
    assert run["network.link_gbps"] == 100.0 and json.loads(run["workload.flows"]) == []
    assert run["wall_s"] > 0
    assert run["engine_version"] == engine.ENGINE_VERSION
    assert run["git_commit"] is None or len(run["git_commit"]) == 40
    assert run["started_at"].endswith("+00:00")  # UTC
    assert run["repro"].startswith("python -m sweep ")


def test_engine_error_becomes_an_error_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_engine(config: Any, **options: Any) -> dict:
        raise ZeroDivisionError("the engine divided by zero")

    monkeypatch.setattr(engine, "run", broken_engine)
    config = small_config(tmp_path)
    rows = execute(config)
    assert list(rows) == ["runs"]
    (run,) = rows["runs"]
    assert run["status"] == "error"
    assert run["run_id"] == run_id(config)
    assert "broken_engine" in run["error"]  # the failing frame is kept
    assert run["error"].splitlines()[-1] == "ZeroDivisionError: the engine divided by zero"
    assert run["repro"].startswith("python -m sweep ")
    assert run["network.npus"] == config["network"]["npus"] and run["wall_s"] >= 0


def test_invalid_config_becomes_an_error_row(tmp_path: Path) -> None:
    """execute never raises, even for a config the CLI would have refused."""
    (run,) = execute(small_config(tmp_path, ["network.link_gbps=-5"]))["runs"]
    assert run["status"] == "error" and "network.link_gbps" in run["error"]


def test_repro_command_composes_the_same_config(tmp_path: Path) -> None:
    """Pasting the repro command gives back exactly the config that ran (Ray settings aside)."""
    config = compose_config([
        f"results_dir={tmp_path / 'a dir'}", 'name="it\'s a test"', "seed=7", "network=dumbbell",
        "network.ecn_threshold_kb=null", "tcp=dctcp", "tcp.delayed_ack=true", "workload=flows",
        "workload.flows=[{src:0,dst:9,bytes:5000,start_us:2.5},{src:3,dst:1,bytes:100,start_us:0}]",
        "engine.max_sim_time_s=1e-3",
    ])
    argv = shlex.split(repro_command(config))
    assert argv[:3] == ["python", "-m", "sweep"]
    recomposed = compose_config(argv[3:])
    assert recomposed == {**config, "ray": recomposed["ray"]}
    assert run_id(recomposed) == run_id(config)


def test_flatten_handles_system_keys_and_mlp_lists() -> None:
    config = compose_config(["workload=dlrm_large", "system=halving_doubling"])
    flat = flatten(config)
    assert flat["system.all_reduce"] == "halving_doubling" and flat["system.endpoint_delay_ns"] == 10.0
    assert json.loads(flat["workload.bottom_mlp"]) == [512, 64]
    assert json.loads(flat["workload.top_mlp"]) == [1024, 1024, 1024, 1]
    assert all(not isinstance(value, (list, dict)) for value in flat.values())


@pytest.mark.parametrize("workload", ["dlrm_small", "astra_dlrm", "collective"])
def test_repro_command_composes_training_configs(workload: str, tmp_path: Path) -> None:
    """MLP lists and absolute astra paths survive the repro command."""
    config = compose_config([f"results_dir={tmp_path}", f"workload={workload}", "system=local_bw_aware"])
    recomposed = compose_config(shlex.split(repro_command(config))[3:])
    assert recomposed == {**config, "ray": recomposed["ray"]}
    assert run_id(recomposed) == run_id(config)
