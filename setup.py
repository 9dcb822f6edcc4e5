"""Build step: compile the engine's hot-path modules (engine/kernel.py, KERNEL_MODULES) with mypyc.

The compiled extensions sit beside the sources and give the same results about three times as
fast; `NETSWEEP_PURE_PYTHON=1 pip install -e .` skips the compilation (no C compiler needed). The
package list is here too (conf/ is installed as `sweep.conf`); all other metadata is in pyproject.toml.
"""

import importlib.util
import json
import os
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def load_kernel_module():
    """engine/kernel.py on its own: importing the engine package at build time would need its
    run-time dependencies."""
    spec = importlib.util.spec_from_file_location("netsweep_kernel", ROOT / "engine" / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kernel = load_kernel_module()


class BuildKernel(build_ext):
    """build_ext that, once the extensions are built, records which sources they were built from."""

    def run(self) -> None:
        digests = kernel.source_digests(ROOT)  # read before compiling: an edit during the build counts as stale
        super().run()
        targets = [Path(self.build_lib) / "engine"]  # what a wheel packs
        if self.inplace:  # editable installs and `build_ext --inplace`: the extensions sit in the tree
            targets.append(ROOT / "engine")
        for target in targets:
            if target.is_dir():
                (target / kernel.BUILD_RECORD).write_text(json.dumps(digests, indent=1) + "\n")


def kernel_extensions() -> list:
    if os.environ.get(kernel.PURE_PYTHON_ENV) == "1":
        return []
    from mypyc.build import mypycify

    sources = [str(kernel.source_path(module, Path("."))) for module in kernel.KERNEL_MODULES]
    # Type errors are reported for the compiled modules only; the modules they import are read
    # for their types.
    extensions = mypycify(["--follow-imports=silent", *sources], group_name=kernel.KERNEL_LIBRARY, opt_level="3")
    for extension in extensions:
        # No fused multiply-add: every float operation rounds as CPython's does, so both kernels
        # give bit-identical results on every processor.
        # And no semantic interposition: the kernel's functions and mypyc's runtime helpers (list
        # indexing, ...) are in one shared library, exported; without it every call between them goes
        # through the PLT and none is inlined (a list item read in the event heap's sift was a call).
        extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off",
                                        "-fno-semantic-interposition"]
    return extensions


# The configs live in conf/ at the top of the repository and are installed as the package
# `sweep.conf`, so `python -m sweep` finds them from any folder, in an editable install or a wheel.
PACKAGES = [*find_namespace_packages(include=["engine*", "sweep*", "hydra_plugins*"],
                                    exclude=["engine.workloads*"]), "sweep.conf"]

setup(packages=PACKAGES, package_dir={"sweep.conf": "conf"}, ext_modules=kernel_extensions(),
      cmdclass={"build_ext": BuildKernel})
