"""Build step: compile the engine's hot-path modules (engine/kernel.py, KERNEL_MODULES) with mypyc.

The compiled extensions sit beside the sources and give the same results about twice as fast;
`NETSWEEP_PURE_PYTHON=1 pip install -e .` skips the compilation (no C compiler needed). All other
metadata is in pyproject.toml.
"""

import ast
import os
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def kernel_constant(name: str):
    """A constant of engine/kernel.py (read, not imported: importing the engine package at build
    time would need its run-time dependencies)."""
    tree = ast.parse((ROOT / "engine" / "kernel.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"engine/kernel.py defines no {name}")


def kernel_extensions() -> list:
    if os.environ.get("NETSWEEP_PURE_PYTHON") == "1":
        return []
    from mypyc.build import mypycify

    # Type errors are reported for the compiled modules only; the modules they import are read
    # for their types.
    sources = [str(Path(*module.split(".")).with_suffix(".py")) for module in kernel_constant("KERNEL_MODULES")]
    extensions = mypycify(["--follow-imports=silent", *sources], group_name=kernel_constant("KERNEL_LIBRARY"),
                          opt_level="3")
    for extension in extensions:
        # No fused multiply-add: every float operation rounds as CPython's does, so both kernels
        # give bit-identical results on every processor.
        extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off"]
    return extensions


setup(ext_modules=kernel_extensions())
