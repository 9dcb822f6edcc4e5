"""The bases Hydra's presets of network, tcp and workload inherit from, registered in Hydra's ConfigStore.

Each topology, congestion control and workload type is a dataclass of `engine.config`
(`VARIANT_SECTIONS`) whose fields are its keys and whose defaults are its values unless a preset says
otherwise; registered here as `base/network/<topology>`, `base/tcp/<cc>` and `base/workload/<type>`,
so a preset (`conf/network/leaf_spine.yaml`) starts from `- /base/network@_here_: leaf_spine` and says
only what differs. Registered as plain nodes, not as structured configs: the engine is the one place values
are checked (`engine.load_config`, whose errors name the key, the value and what is allowed), and
untyped leaves keep the grid composer's fast path (`sweep.plan.Composer`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from engine.config import VARIANT_SECTIONS

# The config group of the bases of section S: base/S
BASE_GROUP = "base"


def _plain(value: Any) -> Any:
    """A default as YAML would spell it: a list for a tuple."""
    return [_plain(item) for item in value] if isinstance(value, tuple) else value


def register_config_bases() -> None:
    """Store every variant's defaults in Hydra's ConfigStore (idempotent: a second call stores the same nodes)."""
    store = ConfigStore.instance()
    for section, (_, classes) in VARIANT_SECTIONS.items():
        for name, cls in classes.items():
            node = OmegaConf.create({item.name: _plain(item.default) for item in fields(cls)})
            # Open to keys it lacks: a grid may set another variant's key at every point
            # (`network=switch,leaf_spine network.spines=2,4`); the engine refuses a key no variant
            # has, and `sweep.plan.check_overrides_apply` one that applies at no point of the grid.
            OmegaConf.set_struct(node, False)
            store.store(group=f"{BASE_GROUP}/{section}", name=name, node=node)
