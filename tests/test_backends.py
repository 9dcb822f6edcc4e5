"""The backend registry (engine/backends/): the one list of `engine.backend` values, and every backend
behind the one interface, filling the `runs` columns it says it fills and leaving the others null."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import engine
from engine.backends import BACKEND_NAMES, backend_class
from engine.backends.base import BACKEND_COLUMNS, NetworkBackend
from engine.backends.ns3.build import unavailable_reason
from engine.config import ConfigError
from engine.memory import estimate_messages, process_bytes

ENGINE_ROOT = Path(engine.__file__).resolve().parent
P, N_BYTES, LINK_GBPS = 4, 400_000, 100  # a ring all-reduce of 400 kB per NPU over 4 NPUs on one switch


def tiny_config(backend: str) -> dict:
    return {"engine": {"backend": backend, "link_stats": "none" if backend == "ns3" else "all"},
            "network": {"npus": P, "link_gbps": LINK_GBPS},
            "workload": {"type": "collective", "op": "all_reduce", "bytes": N_BYTES}}


def test_config_allows_exactly_the_registered_backends() -> None:
    with pytest.raises(ConfigError) as refused:
        engine.load_config({"engine": {"backend": "htsim"}})
    assert refused.value.key == "engine.backend"
    assert refused.value.allowed == "one of " + ", ".join(BACKEND_NAMES)
    assert BACKEND_NAMES[0] == engine.SimConfig().engine.backend  # the default comes first
    with pytest.raises(KeyError, match="htsim"):
        backend_class("htsim")


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_registered_backend_implements_the_interface(name: str) -> None:
    backend = backend_class(name)
    assert issubclass(backend, NetworkBackend)
    assert backend.DESCRIPTION, "what it models, for the command line's summary"
    assert backend.FILLS <= set(BACKEND_COLUMNS)
    for method in ("estimate_bytes", "system_layer", "link_rows"):  # the ones with no default
        assert getattr(backend, method) is not getattr(NetworkBackend, method), f"{name} overrides {method}"


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_backend_simulates_and_fills_only_the_columns_it_says(name: str) -> None:
    if name == "ns3" and unavailable_reason() is not None:
        pytest.skip(f"ns3 backend unavailable: {unavailable_reason()}")
    rows = engine.run(tiny_config(name))
    run = rows["runs"][0]
    assert run["status"] == "ok"
    for column in BACKEND_COLUMNS:
        if column in backend_class(name).FILLS:
            assert run[column] is not None, column
        else:
            assert run.get(column) is None, column  # null (or absent: stored as null), never zero
    # no model beats the bandwidth term of a ring all-reduce, 2 (p-1)/p n / B (Thakur et al. 2005),
    # bits over the link's rate (the headers only add to it)
    bandwidth_term_s = 2 * (P - 1) / P * N_BYTES * 8 / (LINK_GBPS * 1e9)
    assert run["iteration_time_s"] >= bandwidth_term_s
    knows_packets = "packets_sent" in backend_class(name).FILLS
    for link in rows.get("links", []):  # packet-level columns where it counts packets, else null
        assert (link["packets"] is not None) == knows_packets
        assert (link["max_queue_kb"] is not None) == knows_packets


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_backend_estimates_at_least_what_every_run_holds(name: str) -> None:
    analytical = engine.load_config(tiny_config("analytical"))  # ns3 validates only with its wheel
    config = dataclasses.replace(analytical, engine=dataclasses.replace(analytical.engine, backend=name))
    messages = 2 * (P - 1) * P  # a ring all-reduce: p messages a step, 2 (p - 1) steps
    assert estimate_messages(config) == messages
    sends_messages = "flows" in backend_class(name).FILLS
    assert engine.estimate_run_bytes(config) >= process_bytes(config, messages if sends_messages else 0)


def test_no_module_outside_the_registry_writes_a_backend_name() -> None:
    """Adding a backend touches engine/backends/ only: no other module of the engine, the sweep or the
    launcher writes a backend's name as a string (to compare `engine.backend` with, to list screens,
    to order a report) or asks which class a backend's message carrier is; they ask the registry and
    the classes' constants."""
    by_class = re.compile(r"isinstance\([^)]*(Messages|Backend|Transport)\b")
    offenders = []
    for package in ("engine", "sweep", "hydra_plugins"):
        for path in (ENGINE_ROOT.parent / package).rglob("*.py"):
            if path.is_relative_to(ENGINE_ROOT / "backends"):
                continue
            where = path.relative_to(ENGINE_ROOT.parent)
            offenders += [f"{where}:{node.lineno} {node.value!r}" for node in ast.walk(ast.parse(path.read_text()))
                          if isinstance(node, ast.Constant) and node.value in BACKEND_NAMES]
            offenders += [f"{where}:{number} isinstance" for number, line in enumerate(path.read_text().splitlines(), 1)
                          if package == "engine" and by_class.search(line)]
    assert offenders == []
