"""The project stands on its own: nothing in it reads a folder beside the checkout (developers have
one named `shared` there, users do not), and what it needs at run time ships inside the package."""

from __future__ import annotations

import re
from pathlib import Path

import sweep
from engine.workload.layers import bundled_workloads, workload_file
from sweep.cli import CONF_DIR

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = ("conf", "engine", "sweep", "hydra_plugins", "tests", "benchmarks", ".ci")
# A path that leaves the checkout for its sibling `shared`: parent-folder dots then the name, or
# parents[k] joined with that name (the pattern is spelled in pieces so this file does not match itself)
SIBLING = "shared"
OUTSIDE = re.compile(r"\.\./" + SIBLING + r"""|parents\[\d\]\s*/\s*["']""" + SIBLING + r"""["']|\.\.\s*/\s*["']"""
                     + SIBLING + r"""["']""")


def test_nothing_reads_a_folder_beside_the_checkout() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{number}"
                 for folder in SOURCE_FOLDERS for path in sorted((ROOT / folder).rglob("*"))
                 if path.is_file() and path.suffix in {".py", ".yaml", ".sh", ".cc", ".h", ".toml", ""}
                 for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert offenders == []


def test_configs_and_workloads_come_from_the_installed_package() -> None:
    conf = Path(CONF_DIR)
    assert (conf / "config.yaml").is_file() and (conf / "experiment" / "quickstart.yaml").is_file()
    assert conf.resolve() == (Path(sweep.__file__).parent / "conf").resolve() or conf.resolve() == ROOT / "conf"
    for name in bundled_workloads():
        assert workload_file(name).read_text().split()[0] in {"DATA", "HYBRID_DLRM", "MICRO"}
