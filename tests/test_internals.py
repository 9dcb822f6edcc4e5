"""One test per private name of Hydra, OmegaConf and Ray that `sweep.internals` touches: each fails
when an upgrade moves or changes the name (pyproject.toml pins the libraries below their next minor
version; raising a pin means running these first). And nothing outside `sweep/internals.py` touches
a private name of theirs, nor imports another project module's (tests/test_import_graph.py).

None of these starts Ray: the Ray names are checked where they live, with the signatures the sweep
calls them with, in one child process (tests/test_sweep_ray.py and tests/test_faults_ray.py exercise
them on a real Ray).
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import AnyNode, IntegerNode, OmegaConf

from sweep import internals
from sweep.launch import grid_points

PROJECT = Path(__file__).resolve().parent.parent
PARSER = OverridesParser.create()


# -- Hydra -----------------------------------------------------------------------------------------

def test_apply_value_overrides_is_hydras_own_value_step() -> None:
    config = OmegaConf.create({"network": {"npus": 8, "buffer_kb": None}, "seed": 0})
    internals.apply_value_overrides(PARSER.parse_overrides(["network.npus=16", "+extra=1", "~seed"]), config)
    assert OmegaConf.to_container(config) == {"network": {"npus": 16, "buffer_kb": None}, "extra": 1}
    typed = OmegaConf.structured({"npus": IntegerNode(8)})
    with pytest.raises(Exception, match="npus"):  # Hydra's own type check, naming the key
        internals.apply_value_overrides(PARSER.parse_overrides(["npus=many"]), typed)


@pytest.mark.parametrize("line", [
    "seed=0", "seed=12", "seed=-3", "network.link_gbps=100.5", "network.link_gbps=-0.25", "tcp.cc=dctcp",
    "tcp.sack=true", "tcp.sack=False", "network.buffer_kb=null", "network.loss_rate=inf", "x=NaN", "name=my_grid",
])
def test_the_simple_override_copy_reads_values_as_hydras_grammar(line: str) -> None:
    match = internals.SIMPLE_OVERRIDE.fullmatch(line)
    assert match is not None
    ours, hydras = internals.simple_override_value(match["value"]), PARSER.parse_override(line).value()
    assert type(ours) is type(hydras) and (ours == hydras or (math.isnan(ours) and math.isnan(hydras)))
    assert match["key"] == PARSER.parse_override(line).key_or_group


@pytest.mark.parametrize("line", ["seed=007", "seed=1e3", "a=1,2", "a=[1]", "a='x'", "a=${b}", "+a=1", "a=1.", "a=b c"])
def test_the_simple_override_copy_leaves_everything_else_to_hydra(line: str) -> None:
    assert internals.SIMPLE_OVERRIDE.fullmatch(line) is None


def test_hydra_options_are_those_of_hydras_argument_parser() -> None:
    options = {option for action in get_args_parser()._actions for option in action.option_strings
               if option.startswith("--")}
    assert internals.HYDRA_OPTIONS == options


@pytest.mark.parametrize("lines", [
    ["a=1,2,3", "b=x,y"], ["seed=range(3)", "tcp=newreno,cubic", "name=g"], ["a=1", "a=2,3", "b=4"],
    ["network.link_gbps=choice(25,100)", "+x=1"],
])
def test_the_grid_is_what_hydras_basic_sweeper_makes(lines: list[str]) -> None:
    overrides = PARSER.parse_overrides(lines)
    assert grid_points(overrides) == BasicSweeper.split_arguments(overrides, max_batch_size=None)[0]


def test_an_interval_is_no_grid() -> None:
    with pytest.raises(HydraException, match="interval"):
        grid_points(PARSER.parse_overrides(["a=interval(0,1)"]))


# -- OmegaConf -------------------------------------------------------------------------------------

def test_nodes_say_whether_they_interpolate_and_what_type_they_hold() -> None:
    config = OmegaConf.create({"a": 1, "b": "${a}", "c": {"d": [1, "${a}"]}})
    assert not internals.is_interpolation(internals.child_node(config, "a"))
    assert internals.is_interpolation(internals.child_node(config, "b"))
    listed = internals.child_node(config, "c").d
    assert internals.is_interpolation(internals.child_node(listed, 1))
    assert isinstance(internals.child_node(config, "a"), AnyNode)
    assert isinstance(internals.child_node(OmegaConf.structured({"n": IntegerNode(1)}), "n"), IntegerNode)


# -- Ray -------------------------------------------------------------------------------------------
# Checked in a child process: importing Ray here would settle this process's Ray settings (its
# authentication mode, read once) before the tests that start a cluster set theirs.

RAY_CHECKS = r"""
import inspect, json, sys, tempfile
import grpc, ray
from ray._raylet import CoreWorker, GcsClient
from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
from ray._private.authentication.grpc_authentication_client_interceptor import _get_authentication_metadata_tuple
from ray.core.generated import ray_client_pb2
from sweep import internals
facts = {}
facts["attempt_method"] = callable(CoreWorker.get_current_task_attempt_number)
facts["global_worker"] = isinstance(ray._private.worker.global_worker, ray._private.worker.Worker)
facts["attempt_without_ray"] = internals.task_attempt_number(object())
facts["token_setup_parameters"] = list(inspect.signature(maybe_enable_token_auth_if_token_available).parameters)
facts["metadata_parameters"] = list(inspect.signature(_get_authentication_metadata_tuple).parameters)
try:
    GcsClient(address=123)
except TypeError as exc:
    facts["gcs_client_address"] = str(exc)
facts["ping_request"] = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING).type == 6
try:
    internals.ping_client_server("127.0.0.1", 9, timeout_s=0.5)
except grpc.RpcError as exc:
    facts["ping_nobody"] = type(exc).__name__
worker = ray._private.worker
facts["print_parameters"] = list(inspect.signature(worker.print_to_stdstream).parameters)
original = worker.print_to_stdstream
with tempfile.TemporaryFile("w+") as log:
    with internals.driver_messages_to(ray, log):
        worker.print_to_stdstream({"lines": ["a task failed"], "pid": 1, "ip": "127.0.0.1", "is_err": True,
                                   "job": "", "actor_name": "", "task_name": ""}, False)
    log.seek(0)
    facts["driver_message_logged"] = "a task failed" in log.read()
facts["print_restored"] = worker.print_to_stdstream is original
utils = ray._private.utils
setter = utils.set_sigterm_handler
facts["sigterm_parameters"] = list(inspect.signature(setter).parameters)
with internals.ray_sets_no_sigterm_handler(ray):
    facts["sigterm_replaced"] = utils.set_sigterm_handler is not setter and utils.set_sigterm_handler(print) is None
facts["sigterm_restored"] = utils.set_sigterm_handler is setter
import os
with tempfile.TemporaryDirectory() as tmp:  # Ray's current-cluster file, of this check's own
    os.makedirs(os.path.join(tmp, "ray"))
    with open(os.path.join(tmp, "ray", "ray_current_cluster"), "w") as current:
        current.write("127.0.0.1:9")
    os.environ["RAY_TMPDIR"] = tmp
    os.environ.pop("RAY_ADDRESS", None)
    ray._private.services._find_address_from_flag = lambda flag: set()  # no Ray running here
    found = internals.auto_address()
    facts["auto_from_file"] = [found[0], found[2]] == ["127.0.0.1:9", current.name] and found[1].endswith(":9")
    os.environ["RAY_ADDRESS"] = "10.0.0.1:6379"
    facts["auto_from_env"] = internals.auto_address()
import importlib.util
facts["missing_loggers"] = [name for name in internals.RAY_UNWANTED_WARNINGS if importlib.util.find_spec(name) is None]
json.dump(facts, sys.stdout)
"""


@pytest.fixture(scope="module")
def ray_facts() -> dict[str, Any]:
    """What the child process running `RAY_CHECKS` found."""
    child = subprocess.run([sys.executable, "-c", RAY_CHECKS], capture_output=True, text=True, timeout=300,
                           cwd=PROJECT, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    facts: dict[str, Any] = json.loads(child.stdout)
    return facts


def test_the_task_attempt_number_lives_on_the_core_worker(ray_facts: dict[str, Any]) -> None:
    assert ray_facts["attempt_method"] and ray_facts["global_worker"]
    assert ray_facts["attempt_without_ray"] is None  # where it is gone: no number, no error


def test_the_client_token_metadata_and_the_token_setup_are_where_the_sweep_reads_them(
        ray_facts: dict[str, Any]) -> None:
    assert "warn_if_disabled" in ray_facts["token_setup_parameters"]
    assert ray_facts["metadata_parameters"] == []


def test_the_gcs_client_and_the_client_protocol_are_where_the_sweep_asks_them(ray_facts: dict[str, Any]) -> None:
    assert "'address'" in ray_facts["gcs_client_address"]  # it takes `address` (a str): refused before connecting
    assert ray_facts["ping_request"]
    assert ray_facts["ping_nobody"]  # nothing listens on port 9 (discard): gRPC's error, raised


def test_driver_messages_are_printed_through_a_function_the_sweep_can_replace(ray_facts: dict[str, Any]) -> None:
    assert ray_facts["print_parameters"] == ["data", "ignore_prefix"]
    assert ray_facts["driver_message_logged"] and ray_facts["print_restored"]


def test_ray_sets_its_sigterm_handler_through_a_function_the_sweep_can_replace(ray_facts: dict[str, Any]) -> None:
    assert ray_facts["sigterm_parameters"] == ["sigterm_handler"]
    assert ray_facts["sigterm_replaced"] and ray_facts["sigterm_restored"]


def test_auto_is_found_where_ray_finds_it(ray_facts: dict[str, Any]) -> None:
    assert ray_facts["auto_from_file"]
    assert ray_facts["auto_from_env"] == ["10.0.0.1:6379", "10.0.0.1:6379", "RAY_ADDRESS"]


def test_the_unwanted_warnings_come_from_loggers_of_existing_modules(ray_facts: dict[str, Any]) -> None:
    assert ray_facts["missing_loggers"] == []


# -- nothing else touches them ---------------------------------------------------------------------

PRIVATE_PARTS = ("_internal", "_private", "_raylet")


def private_library_touches() -> list[str]:
    """`file:line what` for every import of a private module or name of another package, and every
    attribute `_private` / `_internal` / `_raylet`, outside sweep/internals.py."""
    found = []
    for path in itertools.chain(*((PROJECT / package).rglob("*.py") for package in ("engine", "sweep",
                                                                                     "hydra_plugins"))):
        if path == PROJECT / "sweep" / "internals.py":
            continue
        where = path.relative_to(PROJECT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module != "__future__":
                parts = (node.module or "").split(".")
                if any(part.startswith("_") for part in parts) or any(
                        alias.name.startswith("_") for alias in node.names):
                    found.append(f"{where}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import):
                found += [f"{where}:{node.lineno} import {alias.name}" for alias in node.names
                          if any(part.startswith("_") for part in alias.name.split("."))]
            elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_PARTS:
                found.append(f"{where}:{node.lineno} .{node.attr}")
    return found


def test_only_sweep_internals_touches_private_library_names() -> None:
    assert private_library_touches() == []
