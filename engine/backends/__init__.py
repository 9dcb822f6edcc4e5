"""The network backends and their registry: the one list of `engine.backend` values.

Each backend lives in one module of this package (`packet`, `analytical`, `alpha_beta`, `phase`,
`hybrid`, `ns3`) that defines `BACKEND`, a subclass of `base.NetworkBackend`: what it models, how it is built
from a config, how it simulates, the `runs` columns it fills, its `links` rows, its memory estimate,
what it must release at the end, and its facts as class constants (the keys it reads, whether it
screens a two-fidelity sweep, its rank in fidelity). Everything else (config validation, `engine.run`,
the memory estimate, the sweep and its report) asks the registry, never a backend's name. Adding a
backend: a module here and its name in `names.py` (docs/backends.md).

The names live in `names.py`, which imports nothing: `engine.config` reads them there, below the
backends' own modules (which import the config). `backend_class` imports a backend's module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .names import BACKEND_NAMES, DEFAULT_BACKEND

if TYPE_CHECKING:
    from .base import NetworkBackend

__all__ = ["BACKEND_NAMES", "DEFAULT_BACKEND", "backend_class", "backends_with", "extended_backend"]


def backend_class(name: str) -> type[NetworkBackend]:
    """The backend registered as `name` (one of `BACKEND_NAMES`; `KeyError` for any other)."""
    if name not in BACKEND_NAMES:
        raise KeyError(f"no backend {name!r}: one of {', '.join(BACKEND_NAMES)}")
    backend: type[NetworkBackend] = importlib.import_module(f"{__name__}.{name}").BACKEND
    return backend


def backends_with(fact: str) -> tuple[str, ...]:
    """The registered backends whose class sets the boolean constant `fact` (`"CARRIES_FLOWS"`), in
    the registry's order."""
    return tuple(name for name in BACKEND_NAMES if getattr(backend_class(name), fact))


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
