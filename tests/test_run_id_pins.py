"""The run_ids of the bundled configurations are pinned: a dataset written before a change of the
config's code or presets still resumes after it (its finished runs are found, none runs twice).

For every experiment of conf/experiment/ the test hashes the sorted run_ids of its grid's points;
for every preset of every group it pins the run_id of the default config with that preset. The
pinned values are in tests/golden/run_ids.json, written by `PYTHONPATH=tests python tests/test_run_id_pins.py` when a
change is meant to give new identities (say so in the commit: old datasets then run again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from sweep_support import GROUPS, compose_config, group_options
from test_sweep_experiments import EXPERIMENTS, build_points

from sweep.runner import run_id

PINS_PATH = Path(__file__).parent / "golden" / "run_ids.json"


def experiment_digest(experiment: str) -> dict[str, Any]:
    """How many distinct run_ids the experiment's grid has, and the SHA-256 of their sorted list."""
    ids = sorted({run_id(config) for config in build_points(experiment)})
    return {"run_ids": len(ids), "sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}


def preset_run_ids() -> dict[str, str]:
    """`group=preset` -> the run_id of the default config with that preset ("default": with none)."""
    pins = {"default": run_id(compose_config())}
    for group in GROUPS:
        for preset in group_options(group):
            pins[f"{group}={preset}"] = run_id(compose_config([f"{group}={preset}"]))
    return pins


def current_pins() -> dict[str, Any]:
    """What the pins file holds, computed from the code and presets as they are."""
    return {"presets": preset_run_ids(),
            "experiments": {experiment: experiment_digest(experiment) for experiment in EXPERIMENTS}}


@pytest.fixture(scope="module")
def pins() -> dict[str, Any]:
    return json.loads(PINS_PATH.read_text())


def test_every_preset_keeps_its_run_id(pins: dict[str, Any]) -> None:
    assert preset_run_ids() == pins["presets"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_keeps_its_run_ids(experiment: str, pins: dict[str, Any]) -> None:
    assert experiment in pins["experiments"], f"{experiment} is new: pin it (see the module docstring)"
    assert experiment_digest(experiment) == pins["experiments"][experiment]


if __name__ == "__main__":
    PINS_PATH.write_text(json.dumps(current_pins(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINS_PATH}")
