"""Every use of Hydra's, OmegaConf's and Ray's private API, in one module.

Each function here reaches one name those libraries do not promise to keep (a `_private` module, an
underscore method, a generated protocol, a copy of part of a grammar), says which and for what, and
has its test in tests/test_internals.py that fails when an upgrade moves it. pyproject.toml pins
the three libraries below their next minor version, so an upgrade is a decision made with those
tests, not a surprise on a user's machine. Where a Ray touch is only a nicety (a clearer error, a
quieter log), it degrades to doing nothing if the name is gone; where it is the sweep's speed (the
value overrides), it fails loudly.

Written against hydra-core 1.3.2-1.3.8, omegaconf 2.3 and Ray 2.60. Imports nothing of them at
import time: the run's side (`sweep.runner`, on Ray's workers) reads `HYDRA_WORDS` from here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override
    from omegaconf import DictConfig, Node

# -- Hydra -----------------------------------------------------------------------------------------

# Hydra's own command-line options (the argument parser of `hydra._internal.utils.get_args_parser`): any
# other `--x` is an override written as an option by mistake (`sweep.cli`)
HYDRA_OPTIONS = frozenset({"--help", "--hydra-help", "--version", "--cfg", "--resolve", "--package", "--run",
                           "--multirun", "--shell-completion", "--config-path", "--config-name", "--config-dir",
                           "--experimental-rerun", "--info"})
# Hydra's grammar reads these unquoted words (any case) as non-strings: True, False, None, inf, nan
HYDRA_WORDS = {"true": True, "false": False, "null": None, "inf": math.inf, "nan": math.nan}
# `key=value` lines whose value Hydra's grammar reads as an int, a float written with a point, or an
# unquoted word (a string unless it is one of `HYDRA_WORDS`): a copy of that part of the grammar, so a
# grid reads them without Hydra's ANTLR parser (about a millisecond a line; a `seed=range(1000)` sweep
# has a thousand distinct lines). Its test compares it with Hydra's parser.
SIMPLE_OVERRIDE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)="
                             r"(?P<value>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?|[A-Za-z_][A-Za-z0-9_]*)")


def simple_override_value(text: str) -> Any:
    """The value Hydra's grammar gives the value part of a `SIMPLE_OVERRIDE` line: a keyword's value,
    an int, a float or the word itself."""
    lowered = text.lower()
    if lowered in HYDRA_WORDS:
        return HYDRA_WORDS[lowered]
    if text[0] == "-" or text[0].isdigit():
        return float(text) if "." in text else int(text)
    return text


def apply_value_overrides(overrides: list[Override], config: DictConfig) -> None:
    """Apply parsed value overrides (`key=value`, `+key=value`, `~key`, ...) to a composed config in
    place, as Hydra's composition does after the defaults list: its own function
    (`ConfigLoaderImpl._apply_overrides_to_config`), so types, errors and edge cases are Hydra's."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(overrides, config)


# -- OmegaConf -------------------------------------------------------------------------------------

def is_interpolation(node: Node) -> bool:
    """Whether this OmegaConf node (a container or a value node) is an interpolation (`${...}`)."""
    return bool(node._is_interpolation())


def child_node(container: Any, key: Any) -> Node:
    """The node (not its value) under `key` of a DictConfig or ListConfig: its type says whether the
    leaf is untyped (`AnyNode`)."""
    node: Node = container._get_node(key)
    return node


# -- Ray -------------------------------------------------------------------------------------------

# Warnings of `ray.init` that are wrong for a sweep, by the logger (a module of Ray's, private ones
# among them) that writes them (Ray 2.5x-2.60): that it turned token authentication on by default,
# and that it set no SIGTERM handler of its own (which `ray_sets_no_sigterm_handler` keeps from being
# set anyway): a `ray://` address's server-side `ray.init` runs in a thread, and the client relays its
# log. `sweep.local_ray.wanted_ray_record` filters them out.
_NO_SIGTERM_HANDLER = "SIGTERM handler is not set because current thread is not the main thread."
RAY_UNWANTED_WARNINGS = {
    "ray._private.authentication.authentication_token_setup": "Token authentication is enabled for this Ray cluster.",
    "ray._private.worker": _NO_SIGTERM_HANDLER,
    "ray.util.client.logsclient": _NO_SIGTERM_HANDLER,
}


def task_attempt_number(ray: Any) -> int | None:
    """Inside a Ray task: 0 for its first execution, 1 after its worker or node died once, ...;
    None if Ray's worker no longer says (`ray._private.worker.global_worker.core_worker`)."""
    try:
        return int(ray._private.worker.global_worker.core_worker.get_current_task_attempt_number())
    except Exception:  # noqa: BLE001 - provenance only: never fail a finished run over it
        return None


def client_auth_metadata() -> tuple[tuple[str, str], ...]:
    """The gRPC metadata with this machine's Ray token, as Ray's client sends it (its interceptor's
    `_get_authentication_metadata_tuple`); ImportError on a Ray without token authentication."""
    from ray._private.authentication.grpc_authentication_client_interceptor import (
        _get_authentication_metadata_tuple,
    )

    return tuple(_get_authentication_metadata_tuple())


def auto_address() -> tuple[str, str, str] | None:
    """What `ray.init(address="auto")` would join: the `host:port` Ray finds, the one it dials (a
    loopback host becomes this machine's address, unless Ray was imported as for one machine: see
    `sweep.cluster`), and where it found it (`RAY_ADDRESS`, the current-cluster file a `ray start`
    wrote, or a GCS process of this machine), as Ray finds them
    (`ray._private.services.get_ray_address_from_environment`, `canonicalize_bootstrap_address`); None
    if it finds none (`ray.init` says so at once) or if its internals have moved."""
    try:
        from ray._common.utils import get_ray_address_file
        from ray._private.services import canonicalize_bootstrap_address, get_ray_address_from_environment
    except ImportError:
        return None
    # it warns (on its logger) when it finds several Ray clusters here: the sweep says which it chose
    services_log = logging.getLogger("ray._private.services")
    level = services_log.level
    services_log.setLevel(logging.ERROR)
    try:
        address = get_ray_address_from_environment("auto", None)
        dialled = canonicalize_bootstrap_address(address, None) if isinstance(address, str) else None
    except (ConnectionError, ValueError):
        return None
    finally:
        services_log.setLevel(level)
    if not isinstance(address, str) or not isinstance(dialled, str) or address == "auto":
        return None
    if os.environ.get("RAY_ADDRESS") not in (None, "", "auto"):
        return address, dialled, "RAY_ADDRESS"
    current = get_ray_address_file(None)
    if os.path.exists(current):
        return address, dialled, current
    return address, dialled, "a Ray process running on this machine"


def ask_gcs(address: str) -> None:
    """Open a GCS client on a head's `host:port` (it asks the cluster's id): raises what Ray raises
    when the cluster refuses this process (`ray._raylet.GcsClient`)."""
    # Ray's _raylet.pyi lists only the ID types of the compiled module, which has GcsClient too
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    GcsClient(address=address)


def send_token_if_available() -> None:
    """Turn on token authentication in this process if this machine has a Ray token, as Ray does for
    `ray.init(address="auto")` (`ray._private.authentication.authentication_token_setup`); nothing on
    a Ray without token authentication."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def ping_client_server(host: str, port: int, timeout_s: float, metadata: tuple[tuple[str, str], ...] = ()) -> None:
    """One PING of a Ray client server (Ray's generated client protocol, `ray.core.generated`);
    raises what gRPC raises if none answers, ImportError if the protocol has moved."""
    import grpc  # Ray's dependency
    from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=timeout_s, metadata=metadata)


@contextlib.contextmanager
def driver_messages_to(ray: Any, log: TextIO) -> Iterator[None]:
    """Write the messages Ray's driver prints about the cluster (a task failed and is retried, a
    node was marked dead) to `log` instead of `sys.stdout`. They go through
    `ray._private.worker.print_to_stdstream`: if it is gone, they stay on the terminal."""
    worker: Any = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    print_worker_logs = getattr(worker, "print_worker_logs", None)
    if original is None or print_worker_logs is None:
        yield
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        print_worker_logs(data, log, ignore_prefix)

    worker.print_to_stdstream = to_log
    try:
        yield
    finally:
        worker.print_to_stdstream = original


@contextlib.contextmanager
def ray_sets_no_sigterm_handler(ray: Any) -> Iterator[None]:
    """Keep `ray.init` from installing its own SIGTERM handler (which raises SystemExit at whatever
    point of its start-up it is in) while this context lasts; it does so through
    `ray._private.utils.set_sigterm_handler`: if that is gone, Ray's handler is in place during
    `ray.init` only."""
    utils: Any = getattr(getattr(ray, "_private", None), "utils", None)
    set_sigterm_handler: Callable[..., Any] | None = getattr(utils, "set_sigterm_handler", None)
    if set_sigterm_handler is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = set_sigterm_handler
