"""Helpers for the sweep tests: configs composed from conf/ (`sweep.cli.compose_config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from sweep.cli import CONF_DIR, compose_config

__all__ = ["GROUPS", "compose_config", "group_options", "small_config"]

GROUPS = ("network", "tcp", "transport", "system", "workload")


def group_options(group: str) -> list[str]:
    """The presets of a config group: the YAML files in conf/<group>/."""
    return sorted(path.stem for path in (Path(CONF_DIR) / group).glob("*.yaml"))


def small_config(tmp_path: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A 2-to-1 incast of a few milliseconds of wall time, writing under `tmp_path`."""
    return compose_config([f"results_dir={tmp_path / 'results'}", "name=test", "workload=incast",
                           "workload.senders=2", "workload.bytes_per_flow=20000", *overrides])
