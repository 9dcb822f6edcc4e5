"""Which kernel runs the hot path: the same source files compiled by mypyc, or plain CPython.

The modules in `KERNEL_MODULES` are ordinary Python. `pip install` compiles them with mypyc into C
extensions placed beside the sources (setup.py), which Python imports in preference to the `.py`
files; that is the only difference between the two kernels, so both give identical results
(tests/test_kernel.py runs the golden cases under both). The build also writes `BUILD_RECORD`: the
SHA-256 of each source it compiled.

`choose_kernel()` (called by `engine/__init__.py` before any kernel module is imported) selects the
pure-Python kernel instead, for every kernel module at once (compiled modules call each other
natively, so they cannot be mixed with interpreted ones), when:
- the environment sets `NETSWEEP_PURE_PYTHON=1` (at install time it also skips the compilation);
- there is no compiled kernel (an install without a C compiler, or a plain checkout);
- a source differs from the one that was compiled: an edit not yet rebuilt with `pip install -e .`
  must not be shadowed by the stale compiled copy, so it runs interpreted, with a warning.

Standard library only: setup.py loads this file on its own at build time.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Sequence

# The hot path: event list, links and packets, TCP and its congestion control; the system layer; the
# backends that carry its messages (with their interface, which they subclass natively).
KERNEL_MODULES = (
    "engine.units",
    "engine.eventlist",
    "engine.links",
    "engine.topology",
    "engine.transport.cc",
    "engine.transport.sack",
    "engine.transport.recovery",
    "engine.transport.tcp",
    "engine.transport.roce",
    "engine.system.algorithms",
    "engine.system.collectives",
    "engine.system.maxmin",
    "engine.system.messages",
    "engine.system.alpha_beta",
    "engine.backends.base",
    "engine.backends.packet",
    "engine.backends.analytical",
    "engine.backends.reduction",
)
# mypyc compiles them into one shared library, `engine/_kernel__mypyc.*.so`, holding all their code,
# and a small shim extension per module that loads it.
KERNEL_LIBRARY = "engine._kernel"
BUILD_RECORD = "_kernel_sources.json"  # in the engine package, beside the library
PURE_PYTHON_ENV = "NETSWEEP_PURE_PYTHON"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def source_path(module: str, root: Path = _PACKAGE_ROOT) -> Path:
    """The `.py` file of a kernel module."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digests(root: Path = _PACKAGE_ROOT) -> dict[str, str]:
    """SHA-256 of each kernel module's source: what a build records and an import compares."""
    return {module: hashlib.sha256(source_path(module, root).read_bytes()).hexdigest()
            for module in KERNEL_MODULES}


def extension_path(module: str) -> Path | None:
    """The compiled extension of a module beside where its source would be, or None if there is none."""
    source = source_path(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_name(source.stem + suffix)
        if candidate.exists():
            return candidate
    return None


def stale_modules() -> list[str]:
    """Kernel modules whose source is not the one the installed kernel was compiled from."""
    try:
        compiled = json.loads((_PACKAGE_ROOT / "engine" / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        compiled = {}
    return [module for module, digest in source_digests().items() if compiled.get(module) != digest]


def choose_kernel() -> str:
    """'compiled' if every kernel module can be imported from an up-to-date extension, else
    'python' (and make sure the `.py` sources are what gets imported)."""
    if os.environ.get(PURE_PYTHON_ENV) != "1":
        if extension_path(KERNEL_LIBRARY + "__mypyc") is None:
            return "python"  # nothing compiled to shadow the sources: plain imports load the .py files
        stale = stale_modules()
        if not stale:
            return "compiled"
        warnings.warn(f"engine: {', '.join(stale)} changed since the compiled kernel was built; running "
                      f"the pure-Python kernel (about 3x slower). Rebuild with `pip install -e .`",
                      RuntimeWarning, stacklevel=2)
    if not any(isinstance(finder, _SourceFirstFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirstFinder())
    return "python"


class _SourceFirstFinder(importlib.abc.MetaPathFinder):
    """Imports the kernel modules from their `.py` files even where a compiled extension exists."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in KERNEL_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))
