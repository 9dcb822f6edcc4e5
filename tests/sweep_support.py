"""Helpers for the sweep tests: compose configs from conf/ with Hydra's compose API."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sweep.cli import CONF_DIR

GROUPS = ("network", "tcp", "system", "workload")


def group_options(group: str) -> list[str]:
    """The presets of a config group: the YAML files in conf/<group>/."""
    return sorted(path.stem for path in (Path(CONF_DIR) / group).glob("*.yaml"))


def compose_config(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved root config with `overrides`, as the plain dict `python -m sweep` builds."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        composed = compose(config_name="config", overrides=list(overrides))
    config = OmegaConf.to_container(composed, resolve=True)
    assert isinstance(config, dict)
    return config


def small_config(tmp_path: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A 2-to-1 incast of a few milliseconds of wall time, writing under `tmp_path`."""
    return compose_config([f"results_dir={tmp_path / 'results'}", "name=test", "workload=incast",
                           "workload.senders=2", "workload.bytes_per_flow=20000", *overrides])
