"""Runs on Ray: start a local Ray on loopback or join a cluster, keep a bounded window of runs in
flight, and hand back each run's rows as soon as it finishes (completion order, `ray.wait`).

Only a run's validated config (`PlannedRun.sim_config`) goes out and only what it measured comes
back (`sweep.rows.RunResult`: its measurements and its tables' rows, no config leaves); the driver
builds the rows and writes the Parquet. Each Ray task calls `sweep.runner.measure`, which turns any
exception of the run into an error and stops a run past its wall-time budget as `timeout`; a worker
process that dies (killed, out of memory) is retried by Ray `max_retries` times and then recorded as
an error made here. Each runs row says where it ran (`worker_node`, `worker`) and which execution
of the task produced it (`attempt`, 0 unless a worker process or node died under it). Ray is imported on
first use: the single-run command never loads it. A local Ray is started and stopped by `sweep.local_ray`,
so that nothing of it outlives the sweep.

Joining a cluster by address: a head started with `ray start --head` on a machine that has a Ray token
(`~/.ray/auth_token`, or `RAY_AUTH_TOKEN`) requires it, but `ray.init` sends it to an explicit address
only under `RAY_AUTH_MODE=token`, and otherwise retries for 21 s, a log line a second, before an error
that does not say why. So a loopback address gets this machine's token as `auto` does (it is this
machine's own cluster), and before `ray.init` one request asks the cluster whether it accepts this
process: a refusal is one `ConnectionError` line that says what to set.

With a `log_path`, what Ray writes to the process's standard error (its C++ retry lines) and the
messages its driver prints about the cluster (a task retried, a node marked dead) go to that file while Ray is
up; the sweep's own messages (`sys.stderr`: progress bar, summary, errors) still reach the terminal.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import os
import socket
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence, TextIO

from .internals import (
    ask_gcs,
    auto_address,
    client_auth_metadata,
    driver_messages_to,
    ping_client_server,
    send_token_if_available,
    task_attempt_number,
)
from .local_ray import LocalRay, ray_starting, wanted_ray_record
from .rows import RunResult
from .runner import ERROR_TAIL_LINES, MIB, failed_result, measure, measure_within_limits

if TYPE_CHECKING:  # a worker imports this module: not Hydra, which `sweep.plan` needs
    from .plan import PlannedRun

LOOPBACK = "127.0.0.1"
# Ray binds its services to the address other machines would reach this one by, on every interface,
# unless told that the cluster is this machine alone: then every service listens on 127.0.0.1 and
# the node's address is 127.0.0.1. Ray reads this variable when it is imported.
_ONE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# In-flight runs per CPU of the cluster when `max_in_flight` is not given: enough queued work that no
# CPU waits on the round trip to the driver when runs take milliseconds (4 per CPU ran 1,000 such runs
# about 20 % slower on 2 CPUs), and a bound on what a Ctrl-C or a crash leaves unfinished.
IN_FLIGHT_PER_CPU = 16
RAY_LOG = "_ray.log"  # in the sweep's dataset (the "_" keeps Parquet readers off it): what Ray printed on stderr
_AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray's switch: `token` sends this machine's token to the cluster
# Seconds the one request that asks a cluster whether it accepts this process may take.
AUTH_PROBE_TIMEOUT_S = 10.0
# Connections tried to a `ray://` address whose client server fails to start this driver's server.
CLIENT_CONNECT_ATTEMPTS = 3
# What Ray's `Initialization failure from server` says when that server process did not start: its
# message, or a traceback through the proxy's `start_specific_server` (psutil finding it a zombie)
_CLIENT_SERVER_FAILED = ("Starting Ray client server failed", "in start_specific_server")


def machine_memory_bytes() -> int:
    """This machine's physical memory: what a local Ray's one node offers at most."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_local_run_memory(run_memory_mb: float | None, address: str | None) -> None:
    """Raise `engine.ConfigError` if every run declares more memory than a local Ray's node (this
    machine) has: Ray would start and each run would end as an error row."""
    import engine

    if run_memory_mb is not None and address is None and run_memory_mb * MIB > machine_memory_bytes():
        raise engine.ConfigError("hydra.launcher.run_memory_mb", run_memory_mb,
                                 f"at most this machine's memory, {machine_memory_bytes() // MIB:,} MiB, on a local "
                                 "Ray (ray.address null)")


def is_loopback(address: str) -> bool:
    """Whether a Ray address (`host:port`, `ray://host:port`) names this machine's loopback."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, or `auto`
        return False


_heap_frozen = False  # set in a worker process once Ray's import-time objects are frozen


def _on_worker(run_fn: Callable[[Any, float | None], RunResult], config: Any,
               max_wall_time_s: float | None, declared_bytes: int | None = None,
               reserved_bytes: int | None = None) -> RunResult:
    """The body of a run's Ray task: `run_fn` on the config under the memory rules of `sweep.memory`
    (held to `declared_bytes` if declared; stopped past `reserved_bytes` only if the node runs short:
    an error row that says so, and the worker carries on), then where it ran in its runs row:
    `worker_node` (the Ray node id), `worker` (`host:pid` of the worker process) and `attempt` (0 for
    the first execution, 1 after its worker process or node died once, ...)."""
    import ray  # noqa: PLC0415 - on a worker, where Ray is loaded already

    global _heap_frozen
    if not _heap_frozen:
        # Ray's own objects (hundreds of thousands) would otherwise be traversed by every full
        # garbage collection the engine's allocations trigger: freeze them once per worker process.
        gc.collect()
        gc.freeze()
        _heap_frozen = True
    result = measure_within_limits(run_fn, config, max_wall_time_s, declared_bytes, reserved_bytes)
    try:
        node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - provenance only: never fail a finished run over it
        node = None
    attempt = task_attempt_number(ray)
    result.measured.update(worker_node=node, worker=f"{socket.gethostname()}:{os.getpid()}", attempt=attempt)
    return result


def _host_port(address: str) -> tuple[str, int]:
    """The host and port of a `host:port` or `ray://host:port` address; ConnectionError if it is neither."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConnectionError(f"ray.address={address!r} is not valid: null, auto, host:port or ray://host:port")
    return host.strip("[]"), int(port)


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise ConnectionError if nothing accepts connections at a `host:port` or `ray://host:port`
    address, or where `ray.init` would dial the cluster `auto` finds (`sweep.internals.auto_address`):
    `ray.init` would keep retrying for many minutes (824 s for an `auto` whose head died and left
    Ray's current-cluster file; without end for one found on loopback and dialled at this machine's
    address, where a cluster bound to loopback, as a sweep's own local Ray is, does not listen)."""
    if address == "auto":
        found = auto_address()
        if found is None:  # none found: `ray.init` fails at once, and says so
            return
        named, dialled, where = found
        try:
            socket.create_connection(_host_port(dialled), timeout=timeout_s).close()
        except OSError as exc:
            head = f"ray.address=auto found the Ray cluster at {named} (from {where}), but "
            if dialled == named:
                raise ConnectionError(
                    f"{head}nothing answers there ({exc.strerror or exc}): its head has stopped. Run `ray stop` "
                    "to forget it, or give ray.address=host:port of a running cluster (null: a local Ray)") from None
            raise ConnectionError(
                f"{head}Ray would dial it at {dialled}, where nothing answers ({exc.strerror or exc}): its head has "
                f"stopped, or it listens on loopback only. Give ray.address={named} to join it there, run "
                "`ray stop` to forget a stopped one, or ray.address=null for a local Ray") from None
        return
    try:
        socket.create_connection(_host_port(address), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at ray.address={address}: {exc}") from None


def _token_mode() -> bool:
    return os.environ.get(_AUTH_MODE_ENV, "").lower() == "token"


def _auth_refused(address: str, token_sent: bool) -> str:
    """The one line that says what to set when the cluster at `address` refused this process."""
    if token_sent:
        return (f"the Ray cluster at ray.address={address} refused this machine's Ray token (RAY_AUTH_TOKEN, "
                "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): set RAY_AUTH_TOKEN to its head node's token "
                "(`ray get-auth-token` there prints it)")
    return (f"the Ray cluster at ray.address={address} requires token authentication: export "
            f"{_AUTH_MODE_ENV}=token, with its head node's token in RAY_AUTH_TOKEN or ~/.ray/auth_token "
            "(`ray get-auth-token` there prints it)")


def _client_ping(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
    """One PING of a Ray client server at `address` (`host:port` or `ray://host:port`); raises what
    gRPC raises if none answers (`sweep.internals.ping_client_server`)."""
    host, port = _host_port(address)
    ping_client_server(host, port, AUTH_PROBE_TIMEOUT_S, metadata)


def _check_speaks_ray(address: str) -> None:
    """Raise ConnectionError, in one line, if a `host:port` address is a Ray client server's port
    (it wants `ray://`) or if what answers there is no gRPC server at all (not a Ray head): either
    would cost `ray.init` half a minute of retries and a log full of gRPC errors. A Ray head's GCS
    answers the ping "unimplemented" (or "unauthenticated", left to `_check_accepted`)."""
    try:
        _client_ping(address)
    except ImportError:  # Ray's internals have moved: nothing is checked
        return
    except Exception as exc:  # noqa: BLE001 - classified by its gRPC status below
        code = getattr(exc, "code", None)
        status = getattr(code(), "name", None) if callable(code) else None
        if status in ("UNIMPLEMENTED", "UNAUTHENTICATED"):
            return  # a gRPC server without Ray's client service: a head's GCS
        raise ConnectionError(f"no Ray cluster answers at ray.address={address}: what listens there does not "
                              f"speak Ray's protocol ({status or type(exc).__name__})") from None
    raise ConnectionError(f"ray.address={address} is a Ray client server's port: write ray://{address}")


def _check_accepted(ray: Any, address: str) -> None:
    """Raise ConnectionError, in one line, if the cluster at `address` refuses this process's
    authentication (one request: a GCS client for `host:port`, a ping of the Ray client server for
    `ray://`); any other failure is left to `ray.init` to report (`sweep.internals`: if Ray's
    internals are gone, nothing is checked)."""
    try:
        if address.startswith("ray://"):
            metadata: tuple[tuple[str, str], ...] = ()
            if _token_mode():  # the token, as Ray's client sends it
                metadata = client_auth_metadata()
            _client_ping(address, metadata)
        else:
            ask_gcs(address)  # asks the cluster's id: refused without the token it expects
    except ray.exceptions.AuthenticationError:
        raise ConnectionError(_auth_refused(address, _token_mode())) from None
    except Exception as exc:  # noqa: BLE001 - only a refusal is reported here
        code = getattr(exc, "code", None)
        if callable(code) and getattr(code(), "name", None) == "UNAUTHENTICATED":
            raise ConnectionError(_auth_refused(address, _token_mode())) from None


def _send_token_to_loopback(address: str) -> None:
    """Under `RAY_AUTH_MODE` unset, send this machine's Ray token (if it has one) to a cluster on its
    own loopback, as Ray does for `auto`: `ray start --head` here made that cluster require it."""
    if not is_loopback(address) or _AUTH_MODE_ENV in os.environ:
        return
    send_token_if_available()


def _join(ray: Any, address: str, settings: dict[str, Any]) -> None:
    """`ray.init(address=address, **settings)`, tried again (up to `CLIENT_CONNECT_ATTEMPTS` in all)
    where Ray's client server failed to start this driver's own server process (`ray://`): that
    process can die as it starts (Ray 2.60: `SpecificServer startup failed`, its log "epoll_wait
    error: Bad file descriptor"; or the proxy finds it a zombie), about one connection in five on
    this project's 2-core machine, and a new connection starts another. Any other failure is
    raised at once."""
    for attempt in range(1, CLIENT_CONNECT_ATTEMPTS + 1):
        try:
            ray.init(address=address, **settings)
            return
        except ConnectionAbortedError as exc:
            if not any(sign in str(exc) for sign in _CLIENT_SERVER_FAILED) or attempt == CLIENT_CONNECT_ATTEMPTS:
                raise
            ray.shutdown()  # the half-made client connection
            # to descriptor 2, which is the sweep's Ray log while Ray is up (`stderr_to_log`): Ray's trouble
            print(f"ray: the Ray client server at {address} failed to start a server for this driver; "
                  f"connecting again ({attempt + 1} of {CLIENT_CONNECT_ATTEMPTS})", file=sys.__stderr__, flush=True)


@contextlib.contextmanager
def stderr_to_log(log_path: Path, title: str) -> Iterator[TextIO]:
    """Send what this process writes to file descriptor 2 (Ray's C++ and Python logging) to the end
    of `log_path`, under a line with the time and `title`, while `sys.stderr` (the sweep's own
    messages) keeps writing to where descriptor 2 went before; yields a text stream to the log.
    Restored on leaving; if anything was logged, one line on `sys.stderr` says where. A ConnectionError
    (a cluster that refuses the sweep) leaves nothing written: the log and the directories made for it
    are as they were, and its one line says it all."""
    sys.stderr.flush()
    made = [folder for folder in (log_path.parent, *log_path.parent.parents) if not folder.exists()]
    existed = log_path.exists()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a", buffering=1, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    old_bytes = log.tell()
    log.write(f"=== {datetime.now(UTC).isoformat(timespec='seconds')} pid {os.getpid()}: {title}\n")
    start_bytes = log.tell()
    terminal_fd = os.dup(2)
    terminal = open(terminal_fd, "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",  # noqa: SIM115
                    errors="backslashreplace")
    previous, last_resort = sys.stderr, logging.lastResort
    os.dup2(log.fileno(), 2)
    sys.stderr = terminal
    # records of loggers with no handler (Ray's, from its client threads) go to `lastResort`,
    # which writes to `sys.stderr`: to the log instead
    logging.lastResort = logging.StreamHandler(log)
    logging.lastResort.setLevel(logging.WARNING)
    logging.lastResort.addFilter(wanted_ray_record)
    refused = False
    try:
        yield log
    except ConnectionError:
        refused = True
        raise
    finally:
        sys.stderr, logging.lastResort = previous, last_resort
        os.dup2(terminal_fd, 2)
        terminal.close()  # closes terminal_fd, not descriptor 2
        log.flush()
        logged = not refused and os.fstat(log.fileno()).st_size > start_bytes
        if refused:
            log.truncate(old_bytes)
        log.close()
        if refused and not existed:
            log_path.unlink()
            with contextlib.suppress(OSError):  # one that holds something else now stays
                for folder in made:  # innermost first
                    folder.rmdir()
        if logged:
            print(f"ray: Ray's own messages of this sweep are in {log_path}", file=sys.stderr)


@dataclass
class RayExecutor:
    """Runs planned runs as Ray tasks, `max_in_flight` at a time (None: `IN_FLIGHT_PER_CPU` per CPU).

    A context manager: entering connects, leaving disconnects. `address` None starts a private
    local Ray with `num_cpus` CPUs (None: all cores), bound to 127.0.0.1 with no dashboard, and
    stops it and every process it started on leaving (`sweep.local_ray`); `auto` or `host:port`
    joins an existing cluster (whose nodes must have netsweep installed), which leaving leaves
    running. A Ray session already open in this process is used as it is.
    `run_fn(sim_config, max_wall_time_s)` is the task's body, `sweep.runner.measure` unless a test
    swaps it. `log_path` (the launcher's: `<dataset>/_ray.log`) receives what Ray prints while it is up
    (see `stderr_to_log` and `driver_messages_to`); None leaves Ray's output where Ray puts it.
    """

    address: str | None = None
    num_cpus: int | None = None
    max_in_flight: int | None = None
    max_retries: int = 2
    max_wall_time_s: float | None = None
    run_memory_mb: float | None = None  # every run's memory declaration (a limit); None: each reserves its estimate
    run_fn: Callable[[Any, float | None], RunResult] = measure
    poll_s: float = 1.0
    log_path: Path | None = None

    _ray: Any = field(default=None, init=False, repr=False)  # the Ray module, once connected
    _owned: bool = field(default=False, init=False, repr=False)  # whether __exit__ must shut Ray down
    _local: LocalRay | None = field(default=None, init=False, repr=False)  # the local Ray started here
    _worker_died: bool = field(default=False, init=False, repr=False)  # a run's worker process died
    _stderr: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False, repr=False)

    def __enter__(self) -> RayExecutor:
        """Import and initialise Ray, and say where the runs go (one line on stderr). Whatever
        interrupts this (Ctrl-C included) leaves nothing started behind."""
        if self.address is None or is_loopback(self.address):
            os.environ[_ONE_MACHINE_ENV] = "0"
        import ray  # noqa: PLC0415 - imported on first use, after the environment above

        self._ray = ray
        self._owned = not ray.is_initialized()
        try:
            if self._owned and self.address is not None:
                _check_reachable(self.address)  # before anything is written
                if self.address != "auto" and not self.address.startswith("ray://"):
                    _check_speaks_ray(self.address)
            if self.log_path is not None:
                log = self._stderr.enter_context(stderr_to_log(self.log_path, f"ray.address={self.address}"))
                self._stderr.enter_context(driver_messages_to(ray, log))
            where = self._connect()
            print(f"ray: {where}, {self._cpus()} CPUs", file=sys.stderr)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _connect(self) -> str:
        """Start or join Ray as `address` says; where the runs go, in words."""
        ray = self._ray
        common = {"logging_level": logging.WARNING, "log_to_driver": False}
        if not self._owned:  # the caller's own session (a notebook): use it, leave it open
            return "the running Ray session"
        if self.address is None:
            self._local = LocalRay()
            self._local.start(ray, num_cpus=self.num_cpus, include_dashboard=False, _node_ip_address=LOOPBACK,
                              **common)
            if ray.util.get_node_ip_address() != LOOPBACK:  # Ray was imported before the variable was set
                self._local.stop(ray)
                raise RuntimeError(f"the local Ray did not bind to {LOOPBACK}: set {_ONE_MACHINE_ENV}=0 "
                                   "before Ray is imported")
            return f"a local Ray on {LOOPBACK}"
        with ray_starting(ray):  # (which also keeps Ray's warning that tokens are on off the log)
            if self.address != "auto":
                _send_token_to_loopback(self.address)
                _check_accepted(ray, self.address)
            _join(ray, self.address, common)
        return f"the Ray cluster at {self.address}"

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        """Disconnect; stop the local Ray, keeping its logs if an error ended the sweep or a worker
        process died."""
        if self._local is not None:
            keep_logs = None
            if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
                keep_logs = f"the sweep stopped on {exc_type.__name__}"
            elif self._worker_died:
                keep_logs = "a worker process died during the sweep"
            self._local.stop(self._ray, keep_logs)
        elif self._owned:
            self._ray.shutdown()  # disconnects only: the cluster is not ours
        exc = exc_info[0] if exc_info and isinstance(exc_info[0], BaseException) else None
        self._stderr.__exit__(exc_type, exc, None)  # the log sees the error: see `stderr_to_log`
        self._ray, self._owned, self._local, self._worker_died = None, False, None, False

    def _cpus(self) -> int:
        return int(self._ray.cluster_resources().get("CPU", 1))

    def results(self, runs: Sequence[PlannedRun]) -> Generator[tuple[PlannedRun, RunResult] | None, None, None]:
        """Run `runs` (inside `with executor:`); yield `(run, rows)` as each finishes, or None after
        `poll_s` seconds without one (so the caller can flush on time). Runs still in flight when
        the executor is left end with the Ray session (a job's tasks die with its driver): cancelling
        them one by one after a Ctrl-C, which has also reached the workers, can crash Ray's driver."""
        ray = self._ray
        assert ray is not None, "use the executor as a context manager: with RayExecutor(...) as executor"
        task = ray.remote(num_cpus=1, max_retries=self.max_retries)(_on_worker)
        run_fn = ray.put(self.run_fn) if self.run_fn is not measure else measure  # a test's: shipped once
        window = self.max_in_flight or IN_FLIGHT_PER_CPU * self._cpus()
        largest_node_bytes = max((node["Resources"].get("memory", 0) for node in ray.nodes() if node.get("Alive")),
                                 default=0)
        todo = iter(runs)
        in_flight: dict[Any, PlannedRun] = {}  # ObjectRef -> its run
        while True:
            while len(in_flight) < window and (run := next(todo, None)) is not None:
                declared, reserved = run.declared_bytes(self.run_memory_mb), run.reserved_bytes(self.run_memory_mb)
                if reserved is None:  # nothing declared nor estimated (a run planned by hand)
                    in_flight[task.remote(run_fn, run.sim_config, self.max_wall_time_s)] = run
                elif declared is not None and declared > largest_node_bytes:  # Ray would wait for ever
                    yield run, failed_result(
                        f"the run declares {declared / MIB:,.0f} MiB of memory (hydra.launcher.run_memory_mb), "
                        f"more than any Ray node offers ({largest_node_bytes / MIB:,.0f} MiB)")
                else:  # Ray starts no more runs at once than the nodes' memory holds; an estimate beyond the
                    # largest node (a guess) reserves that node whole rather than wait for one that never comes
                    reserved = min(reserved, largest_node_bytes)
                    ref = task.options(memory=reserved).remote(run_fn, run.sim_config, self.max_wall_time_s,
                                                               declared, reserved)
                    in_flight[ref] = run
            if not in_flight:
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.poll_s)
            if not ready:
                yield None
                continue
            # and whatever else has finished meanwhile, without waiting
            ready, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=0)
            for ref in ready:
                run = in_flight.pop(ref)
                yield run, self._rows(ref, run)

    def _rows(self, ref: Any, run: PlannedRun) -> RunResult:
        """The outcome a task returned, or an error if it raised or its worker kept dying. Notes
        whether a worker process died under it (then the local Ray's logs are kept)."""
        ray = self._ray
        try:
            result: RunResult = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - any failure to get a run's rows becomes its error row
            tail = "\n".join(str(exc).strip().splitlines()[-ERROR_TAIL_LINES:])
            if not isinstance(exc, ray.exceptions.RayTaskError):  # not raised by the task: its process died
                self._worker_died = True
                tail = f"{type(exc).__name__} (the run was retried {self.max_retries} times): {tail}"
                result = failed_result(tail)
                result.measured["attempt"] = self.max_retries  # its last execution, numbered from 0
                return result
            return failed_result(tail)
        self._worker_died = self._worker_died or bool(result.measured.get("attempt"))  # died, then retried
        return result
