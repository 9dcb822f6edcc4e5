"""Which kernel runs the hot path: the same source files compiled by mypyc, or plain CPython.

The modules in `KERNEL_MODULES` are ordinary Python. `pip install` compiles them with mypyc into
C extensions placed beside the sources (setup.py), which Python imports in preference to the
`.py` files; that is the only difference between the two kernels, so both give identical results
(tests/test_kernel.py runs the golden cases under both).

The pure-Python kernel is used instead, for every kernel module at once (compiled modules call
each other natively, so they cannot be mixed with interpreted ones), when:
- the environment sets `NETSWEEP_PURE_PYTHON=1` (at install time it also skips the compilation);
- a module has no compiled extension (an install without a C compiler, or a plain checkout);
- a source file is newer than its extension: an edit not yet rebuilt with `pip install -e .` must
  not be shadowed by the stale compiled copy, so it runs interpreted, with a warning.

This module is imported by `engine/__init__.py` before any kernel module and by setup.py at build
time, so it uses the standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Sequence

# The hot path: event list, links and packets, TCP and its congestion control.
KERNEL_MODULES = (
    "engine.units",
    "engine.eventlist",
    "engine.network",
    "engine.transport.cc",
    "engine.transport.tcp",
)
# mypyc compiles them into one shared library, `engine/_kernel__mypyc.*.so`, holding all their code,
# and a small shim extension per module that loads it.
KERNEL_LIBRARY = "engine._kernel"
PURE_PYTHON_ENV = "NETSWEEP_PURE_PYTHON"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def source_path(module: str) -> Path:
    """The `.py` file of a kernel module."""
    return _PACKAGE_ROOT.joinpath(*module.split(".")).with_suffix(".py")


def extension_path(module: str) -> Path | None:
    """The compiled extension of a module beside where its source would be, or None if there is none."""
    source = source_path(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_name(source.stem + suffix)
        if candidate.exists():
            return candidate
    return None


def stale_modules() -> list[str]:
    """Kernel modules whose source was modified after the kernel library was built (the shims are
    rebuilt only when a module is added, so the library's time is the build's)."""
    library = extension_path(KERNEL_LIBRARY + "__mypyc")
    if library is None:
        return list(KERNEL_MODULES)
    built = library.stat().st_mtime
    return [module for module in KERNEL_MODULES if source_path(module).stat().st_mtime > built]


def choose_kernel() -> str:
    """'compiled' if every kernel module can be imported from its up-to-date extension, else
    'python' (and make sure the `.py` sources are what gets imported)."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        reason = None
    elif any(extension_path(module) is None for module in KERNEL_MODULES):
        return "python"  # nothing compiled to shadow the sources: plain imports load the .py files
    else:
        stale = stale_modules()
        if not stale:
            return "compiled"
        reason = (f"engine: {', '.join(stale)} changed after the compiled kernel was built; running "
                  f"the pure-Python kernel (about 2x slower). Rebuild with `pip install -e .`")
    if reason:
        warnings.warn(reason, RuntimeWarning, stacklevel=3)
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


KERNEL = choose_kernel()
