"""Finding the `ns3` wheel and building the helper program against it, once per source and version.

The helper (`netsweep_ns3.cc`, shipped beside this module) is compiled with g++ against the headers
and shared libraries inside the wheel (`pip install 'netsweep[ns3]'`), into a per-user cache
directory keyed by the SHA-256 of the source and the wheel's version, so an edit or an upgrade
builds it again and concurrent runs never share a half-written binary (each links to a temporary
name, then renames it into place).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("netsweep_ns3.cc")
NS3_VERSION = "3.44.post0"  # the wheel the helper is written against (pyproject's `ns3` extra)
INSTALL_HINT = "pip install 'netsweep[ns3]'"
# the ns-3 modules the helper uses (their own dependencies are found through the libraries' rpath)
NS3_MODULES = ("core", "network", "internet", "point-to-point", "traffic-control", "bridge", "mobility",
               "stats")


def wheel_directory() -> Path | None:
    """The installed wheel's `ns3` directory holding `include/` and `lib64/`, or None."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:  # a namespace package: no __init__.py
        if (Path(location) / "include" / "ns3").is_dir():
            return Path(location)
    return None


def unavailable_reason() -> str | None:
    """Why the ns3 backend cannot run here (no wheel, wrong version, no g++), or None if it can."""
    wheel = wheel_directory()
    if wheel is None:
        return f"the ns3 wheel is not installed ({INSTALL_HINT})"
    version = importlib.metadata.version("ns3")
    if version != NS3_VERSION:
        return f"ns3 {version} is installed; the helper is written for ns3=={NS3_VERSION} ({INSTALL_HINT})"
    if shutil.which("g++") is None:
        return "g++ is not on PATH (the ns3 backend compiles a small C++ helper against the wheel on first use)"
    return None


def cache_directory() -> Path:
    """Where built helpers live: $NETSWEEP_CACHE_DIR, else $XDG_CACHE_HOME/netsweep, else ~/.cache/netsweep."""
    explicit = os.environ.get("NETSWEEP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "netsweep"


def helper_path() -> Path:
    """The helper binary for this source and wheel, built first if it is not in the cache.

    Raises RuntimeError (with the compiler's output) if it cannot be built."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the ns3 backend cannot run: {reason}")
    wheel = wheel_directory()
    assert wheel is not None
    source_hash = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = cache_directory() / f"ns3-{NS3_VERSION}-{source_hash}" / "netsweep_ns3"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lib_dir = next((wheel / name for name in ("lib64", "lib") if (wheel / name).is_dir()), None)
    if lib_dir is None:
        raise RuntimeError(f"the ns3 wheel at {wheel} has no lib64/ or lib/ directory")
    libraries = []
    for module in NS3_MODULES:
        found = sorted(lib_dir.glob(f"libns3*-{module}.so"))
        if not found:
            raise RuntimeError(f"the ns3 wheel at {wheel} has no library for the {module} module")
        libraries.append(str(found[0]))
    handle, temporary = tempfile.mkstemp(prefix="netsweep_ns3.", dir=target.parent)
    os.close(handle)
    # the macros the wheel's CMake targets export to programs built against it (lib64/cmake/ns3)
    command = ["g++", "-O2", "-std=c++20", "-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE",
               "-DNS3_BUILD_PROFILE_RELEASE", f"-I{wheel / 'include'}", str(SOURCE), "-o", temporary,
               *libraries, f"-Wl,-rpath,{lib_dir}", "-lpthread"]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        os.unlink(temporary)
        raise RuntimeError(f"building the ns-3 helper failed ({' '.join(command)}):\n{built.stderr[-4000:]}")
    os.replace(temporary, target)
    return target
