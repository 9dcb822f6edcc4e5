"""The network backends and their registry: the one list of `engine.backend` values.

Each backend lives in one module of this package (`packet`, `analytical`, `alpha_beta`, `phase`,
`hybrid`, `ns3`) that defines `BACKEND`, a subclass of `base.NetworkBackend`: what it models, how it is built
from a config, how it simulates, the `runs` columns it fills, its `links` rows, its memory estimate
and what it must release at the end. Everything else (config validation, `engine.run`, the memory
estimate, the command line's summary) asks the registry, never a backend's name. Adding a backend:
a module here and its name in `BACKEND_NAMES` (docs/backends.md).

The modules are imported on first use: `engine.config` reads the names at import time, before the
backends' own imports (the simulation, which imports the config) can run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import NetworkBackend

BACKEND_NAMES = ("packet", "analytical", "alpha_beta", "phase", "hybrid", "ns3")  # engine.backend; the first is the default

# Backends on which `network.ecn_threshold_kb` shapes the queue even without ECN-capable traffic:
# ns-3's helper installs the port's queue disc (in place of the device's 100-packet queue) when a
# threshold is set without a buffer limit. Read by the config's key applicability, which sits below
# the backends' modules and so cannot ask their classes.
ECN_THRESHOLD_SETS_QUEUE = frozenset({"ns3"})
# Backends that model a host's transmit path below TCP (`host.*`: TCP Small Queues, the qdisc), the
# packet engine's hosts (hybrid's reduced packet simulation too); read by the config's key applicability, as above.
MODELS_HOST_STACK = frozenset({"packet", "hybrid"})


def backend_class(name: str) -> type[NetworkBackend]:
    """The backend registered as `name` (one of `BACKEND_NAMES`; `KeyError` for any other)."""
    if name not in BACKEND_NAMES:
        raise KeyError(f"no backend {name!r}: one of {', '.join(BACKEND_NAMES)}")
    backend: type[NetworkBackend] = importlib.import_module(f"{__name__}.{name}").BACKEND
    return backend


def extended_backend(name: str) -> str | None:
    """The registered backend that backend `name` extends (its nearest base class registered here:
    `hybrid` extends `phase`, whose model it keeps and adds packet-level TCP to), or None. Where `name`
    refuses a config for what it adds, the backend it extends is the same model without it: the
    two-fidelity launcher screens such points there (sweep/fidelity.py)."""
    for base in backend_class(name).__mro__[1:]:
        module, _, registered = base.__module__.rpartition(".")
        if module == __name__ and registered in BACKEND_NAMES and backend_class(registered) is base:
            return registered
    return None
