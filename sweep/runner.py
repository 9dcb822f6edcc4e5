"""One run, from a config to result rows with identity and provenance.

`measure(config)` is the unit of work of a sweep, done where the run runs (a Ray worker, or this
process for `python -m sweep`, a sweep of one): it runs the engine within the run's wall-time budget
and returns a `RunResult`, what only running it gives. It never raises for a failing run; the failure
becomes status `error` with the tail of the traceback. `stored_rows(config, result)`, where the rows
are stored, is the one place a `runs` row is built: identity, presets, every config leaf, the
measured values and a command line that reproduces the run. `execute(config)` is both, for
notebooks and tests. This module imports nothing from Hydra, Ray or pandas, so a worker only needs
the engine, this module and `sweep.rows`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import json
import math
import re
import shlex
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Mapping  # not typing's: its isinstance checks are several times slower
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import engine
from engine.backends import DEFAULT_BACKEND
from engine.keys import identity_mapping, own_keys

from .internals import HYDRA_WORDS
from .memory import MIB, MachineMemoryExhausted, MachineWatch, declared_limit, peak_resident_bytes, reset_peak
from .rows import ColumnRows, RunResult, TableRows

# Keys that say where and how a run is executed, not what is simulated: they do not change run_id.
NON_IDENTITY_KEYS = ("name", "results_dir", "ray", "replicate")
# Keys left out of the repro command: a single in-process run does not use Ray.
_NON_REPRO_KEYS = ("ray", "replicate")
# The Hydra config groups of conf/ (sections chosen by a preset in the root defaults list).
CONFIG_GROUPS = ("network", "tcp", "system", "workload")
# Columns of the runs row naming the preset of each config group a run was composed from (`leaf_spine`, ...).
PRESET_COLUMNS = CONFIG_GROUPS
# Lines of the traceback kept in the `error` column: enough for the failing frame and the message.
ERROR_TAIL_LINES = 12

_PLAIN_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")


def _canonical(value: Any) -> Any:
    """`value` with integral floats written as ints, so `link_gbps=100` and `100.0` hash alike."""
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def run_id(config: Mapping[str, Any], sim_config: engine.SimConfig | None = None) -> str:
    """The identity of a run: first 16 hex digits of the SHA-256 of the canonical JSON of the
    resolved config (seed included; `name`, `results_dir` and `ray` left out), with the keys that
    cannot change its simulation at their defaults (`engine.keys.identity_mapping`: another
    topology's, congestion control's or workload type's keys), so no grid runs one simulation twice.
    A config the engine refuses keeps every key: it has no simulation to share. `sim_config` is
    `config` as `engine.load_config` validated it, when the caller has it (not validated again)."""
    if sim_config is None:
        try:
            sim_config = engine.load_config(config)
        except engine.ConfigError:
            pass
    if sim_config is not None:
        config = identity_mapping(config, sim_config)
    identity = {key: value for key, value in config.items() if key not in NON_IDENTITY_KEYS}
    text = json.dumps(_canonical(identity), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def point_id(config: Mapping[str, Any], sim_config: engine.SimConfig | None = None) -> str:
    """The grid point of a run: `run_id` of its config without `engine.backend`, so the run of a
    point on a screening backend and its refined run on another share it (`sweep.fidelity`).
    `sim_config` as for `run_id`: `config` validated (with its own backend)."""
    engine_section = {key: value for key, value in (config.get("engine") or {}).items() if key != "backend"}
    if sim_config is not None:  # what validating the config without its backend gives: the default backend
        sim_config = dataclasses.replace(sim_config, engine=dataclasses.replace(sim_config.engine,
                                                                                backend=DEFAULT_BACKEND))
    return run_id({**config, "engine": engine_section}, sim_config)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Config leaves as `{"network.link_gbps": 100.0, ...}`; lists (and empty mappings) become JSON
    strings so every leaf fits one Parquet column of a scalar type."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, dotted + "."))
        elif isinstance(value, (list, tuple, Mapping)):
            flat[dotted] = json.dumps(value, sort_keys=True)
        else:
            flat[dotted] = value
    return flat


def _override_value(value: Any) -> str:
    """`value` in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{key}:{_override_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(item) for item in value) + "]"
    text = str(value)
    if _PLAIN_STRING.fullmatch(text) and text.lower() not in HYDRA_WORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _leaves(config: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) for every leaf, keeping lists whole (unlike `flatten`, no JSON)."""
    leaves: list[tuple[str, Any]] = []
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            leaves.extend(_leaves(value, f"{prefix}{key}."))
        else:
            leaves.append((f"{prefix}{key}", value))
    return leaves


def repro_command(config: Mapping[str, Any]) -> str:
    """A shell command line that runs exactly this config again: each config group's default preset
    removed (`~workload`, so a key of another preset, e.g. a dlrm key under a flows run, does not
    creep in), then every leaf as a `++key=value` override (add or override); so it does not depend
    on the presets staying as they are."""
    removals = [f"~{group}" for group in CONFIG_GROUPS if group in config]
    overrides = [
        f"++{key}={_override_value(value)}"
        for key, value in _leaves({k: v for k, v in config.items() if k not in _NON_REPRO_KEYS})
    ]
    return shlex.join(["python", "-m", "sweep", *removals, *overrides])


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """HEAD of the repository holding this code (looked up once per process); None outside git."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _error_tail(exc: BaseException) -> str:
    """The last `ERROR_TAIL_LINES` lines of the formatted traceback of `exc`."""
    lines = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:])


class WallTimeExceeded(BaseException):
    """Raised inside a run by the wall-time alarm of `execute`. A BaseException, so that no
    `except Exception` in the engine can swallow it."""


@contextlib.contextmanager
def _wall_time_alarm(max_wall_time_s: float | None) -> Iterator[None]:
    """Raise `WallTimeExceeded` in this (main) thread once `max_wall_time_s` seconds have passed.

    A SIGALRM timer: the engine is pure Python, so the handler runs between two bytecodes wherever
    the run is. Ray runs a task in its worker's main thread; elsewhere (a thread) there is no alarm.
    """
    if max_wall_time_s is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise WallTimeExceeded(f"wall-time budget of {max_wall_time_s:g} s exceeded")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max_wall_time_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# The `error` of a run stopped for using more memory than it may (`sweep.memory`), before what says why.
OUT_OF_MEMORY = "MemoryError: the run needed more memory than it may use"


def stored_rows(config: Mapping[str, Any], result: RunResult, identity: str | None = None,
                presets: Mapping[str, str | None] | None = None,
                refine_reason: str | None = None, sim_config: engine.SimConfig | None = None) -> TableRows:
    """The rows stored for `result`, the outcome of the run of `config` (whose run_id is `identity`,
    computed if None), by table: its `runs` row (run_id, point_id, status and error first, then the
    preset of each config group it was composed from (`network`: `leaf_spine`, ...; null where
    unknown or given key by key), why its point was refined (two-fidelity sweeps), every config leaf
    flattened with dots (another topology's or workload type's keys left out: null in the table), the
    measured values and `repro`), and the rows of its other tables, each with `run_id` (empty tables
    kept: an empty table writes no part; `flows` kept as columns). `sim_config`: `config` validated,
    if at hand (`run_id`)."""
    if sim_config is None:
        with contextlib.suppress(engine.ConfigError):  # a config the engine refuses is stored as it was given
            sim_config = engine.load_config(config)
    identity = identity or run_id(config, sim_config)
    measured = result.measured
    runs_row = {
        "run_id": identity,
        "point_id": point_id(config, sim_config),
        "status": measured["status"],
        "error": measured.get("error"),
        **{group: (presets or {}).get(group) for group in PRESET_COLUMNS},
        "refine_reason": refine_reason,
        **flatten(config if sim_config is None else own_keys(config, sim_config)),
        **{key: value for key, value in measured.items() if key not in ("status", "error")},
        "repro": repro_command(config),
    }
    rows: TableRows = {"runs": [runs_row]}
    for table, table_rows in result.tables.items():
        if isinstance(table_rows, ColumnRows):  # millions of rows at scale: no dict per row
            rows[table] = ColumnRows(table_rows.columns, {"run_id": identity, **table_rows.constants})
        else:
            rows[table] = [{"run_id": identity, **row} for row in table_rows]
    return rows


def _provenance(started_at: str) -> dict[str, Any]:
    """When the run started (UTC, ISO 8601) and which code ran it."""
    return {"started_at": started_at, "engine_version": engine.ENGINE_VERSION, "git_commit": git_commit()}


def failed_result(error: str) -> RunResult:
    """The outcome of a run that could not report its own (its worker process died, or no node
    can hold it), made where it was supervised: status `error`, no `wall_s`, `started_at` now."""
    return RunResult({"status": "error", "error": error, "wall_s": None,
                      **_provenance(datetime.now(UTC).isoformat())})


def measure(config: Mapping[str, Any] | engine.SimConfig, max_wall_time_s: float | None = None) -> RunResult:
    """Run one simulation here and return its outcome: status, error, the engine's metrics, `wall_s`,
    provenance, and the other tables' rows (`flows` as `ColumnRows`; empty tables included).

    `config` is a plain config or, validated already (`sweep.plan`), the engine's `SimConfig`. An
    exception from the engine (including an invalid config) becomes status `error` with the tail of
    its traceback and no table rows; a run still going after `max_wall_time_s` seconds of wall time
    (if given; main thread only) is stopped and becomes status `timeout`. Nothing is raised.
    """
    started_at = datetime.now(UTC).isoformat()
    git_commit()  # looked up once per process, before a run: one stopped by `memory_limit` leaves no room
    wall_start = time.perf_counter()
    tables: dict[str, Any] = {}
    try:
        with _wall_time_alarm(max_wall_time_s):
            rows = engine.run(config, flow_columns=True)
        measured = dict(rows["runs"][0])
        tables = {table: table_rows for table, table_rows in rows.items() if table != "runs"}
    except WallTimeExceeded as exc:
        measured = {"status": "timeout", "error": str(exc)}
    except MemoryError:  # past its declaration, or outgrown while the machine ran short (`sweep.memory`)
        measured = {"status": "error", "error": OUT_OF_MEMORY}
    except Exception as exc:  # noqa: BLE001 - any engine failure must become a row, not kill a sweep
        measured = {"status": "error", "error": _error_tail(exc)}
    if measured.get("error") == OUT_OF_MEMORY:
        # the run's objects, let go with the engine's frames, are freed once the collector has broken
        # their cycles (links and their event entries, connections and their routes): the rows need room
        gc.collect()
    # The engine times its own run (events_per_s is based on it); keep that figure when present.
    measured.setdefault("wall_s", time.perf_counter() - wall_start)
    measured.update(_provenance(started_at))
    if "flows" in tables:  # columns (`engine.run(..., flow_columns=True)`): millions of rows at scale
        tables["flows"] = ColumnRows(tables["flows"], {})
    return RunResult(measured, tables)


def measure_within_limits(run_fn: Callable[[Any, float | None], RunResult], config: Any,
                          max_wall_time_s: float | None, declared_bytes: int | None,
                          reserved_bytes: int | None) -> RunResult:
    """`run_fn(config, max_wall_time_s)` (`measure`, unless a test swaps it) under the run's memory rules
    (`sweep.memory`): held to `declared_bytes` if the run declared memory, and stopped past its reservation
    (`reserved_bytes`: its declaration or estimate; None: nothing reserved) only if the machine runs
    short. A run stopped either way ends as an error that says what stopped it, the peak it reached and
    what to declare. Its row keeps its peak resident memory (`peak_memory_mb`) and what it reserved
    (`reserved_memory_mb`)."""
    reset_peak()
    watch = MachineWatch(reserved_bytes or 0)
    with declared_limit(declared_bytes), watch:
        try:
            result = run_fn(config, max_wall_time_s)
        except MemoryError:  # the watch stopped it outside what `run_fn` catches (a test's run_fn)
            result = failed_result(OUT_OF_MEMORY)
    peak = peak_resident_bytes()
    peak_mib = None if peak is None else peak / MIB
    if result.measured.get("error") == OUT_OF_MEMORY:
        result.measured["error"] = _out_of_memory_error(watch.stopped, declared_bytes, reserved_bytes, peak)
    result.measured.update(peak_memory_mb=peak_mib,
                           reserved_memory_mb=None if reserved_bytes is None else reserved_bytes / MIB)
    return result


def _out_of_memory_error(stopped: MachineMemoryExhausted | None, declared_bytes: int | None,
                         reserved_bytes: int | None, peak_bytes: int | None) -> str:
    """The one line that says why a run ran out of memory, the peak it reached and what it could declare."""
    peak_bytes = max(peak_bytes or 0, stopped.resident_bytes if stopped is not None else 0)
    # what to declare, in whole hundreds of MiB: it needed more than it reached, so a quarter above the
    # peak, and where a declaration stopped it, half above that declaration at least
    advise_bytes = max(1.25 * peak_bytes, 1.5 * declared_bytes if stopped is None and declared_bytes else 0)
    advice = (f"declare hydra.launcher.run_memory_mb={math.ceil(advise_bytes / MIB / 100) * 100} or more "
              "(Ray then runs fewer at once)")
    if stopped is not None:
        reserved = (f"its declaration of {declared_bytes / MIB:,.0f} MiB" if declared_bytes is not None
                    else f"its estimate of {(reserved_bytes or 0) / MIB:,.0f} MiB")
        return (f"{OUT_OF_MEMORY}: it reached {peak_bytes / MIB:,.0f} MiB, past {reserved}, when the machine had "
                f"{stopped.available_bytes / MIB:,.0f} MiB left; {advice}")
    if declared_bytes is not None:
        return (f"{OUT_OF_MEMORY}: {declared_bytes / MIB:,.0f} MiB (its declaration: hydra.launcher.run_memory_mb), "
                f"peak {peak_bytes / MIB:,.0f} MiB resident; {advice}")
    return f"{OUT_OF_MEMORY}: the allocator refused at {peak_bytes / MIB:,.0f} MiB resident; {advice}"


def execute(config: Mapping[str, Any], max_wall_time_s: float | None = None) -> TableRows:
    """`measure` and `stored_rows`: run `config` here and return its rows by table, as a sweep stores
    them (presets null: `config` alone does not say which presets it came from)."""
    return stored_rows(config, measure(config, max_wall_time_s))
