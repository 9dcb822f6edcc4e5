"""`python -m sweep [overrides]`: compose a config with Hydra, run it once in process, store the rows.

(`python -m sweep -m [grid overrides]` is a sweep on Ray instead: Hydra hands it to the launcher
selected in conf/config.yaml, `hydra_plugins/netsweep_ray_launcher/`, which does not call `main`.)

Exit codes, the sweep's (docs/running.md): 0 for a run that finished with status `ok` or was already
done; 1 for a run that ended `error` (stored with a repro command) or `timeout` (stored, its partial
measurements with it), or whose rows could not be written; 130 when interrupted; 2 for
a config that cannot run (including a `${...}` that does not resolve, and a `results_dir`/`name`
that is a file or not writable, and a config Hydra cannot compose: an unknown preset, a key that
does not exist, an override it cannot parse), refused before anything is launched with one line
`error: <message>` on stderr.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

import engine
from engine.backends import backend_class

from .driver import InProcessExecutor, run_sweep
from .internals import HYDRA_OPTIONS
from .plan import check_dataset, check_overrides_apply, config_error, hydra_error, planned_run, pop_force, resolved_dict
from .schema import PRESET_COLUMNS

# The configs, installed as the package `sweep.conf` (conf/ of the repository; see setup.py): a
# folder on disk in an editable install and in a wheel alike. An absolute path: given a relative
# one, Hydra would look for it relative to the entry point's module.
CONF_DIR = str(importlib.resources.files("sweep.conf"))


def compose_config(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved root config `python -m sweep` composes from `overrides` (`["network=leaf_spine",
    "tcp=cubic"]`), as a plain dict without Hydra's own node: a preset with every key its variant has,
    for scripts and notebooks (`engine.run(compose_config([...]))`)."""
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        composed = hydra.compose(config_name="config", overrides=list(overrides))
    return resolved_dict(composed)


# Exit codes (see the module docstring).
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_CONFIG = 2


def _number(value: Any, digits: int = 3, scale: float = 1.0) -> str:
    """`value * scale` with `digits` significant digits, or `n/a` if the engine did not report it."""
    return "n/a" if value is None else f"{value * scale:.{digits}g}"


def _count(value: Any) -> str:
    """An integer count with thousands separators, or `n/a`."""
    return "n/a" if value is None else f"{round(value):,}"


def _network_lines(run: Mapping[str, Any]) -> list[str]:
    """Packet counters and engine speed; a backend that counts no packets (analytical, alpha_beta, phase)
    says what it models instead, a backend that reports TCP risk signals (phase) shows them, and one that
    simulates episodes at packet level on a reduced network (hybrid) their count and scaled counters."""
    lines = []
    if run.get("packets_sent") is None:
        backend = str(run.get("engine.backend"))
        lines.append(f"  packets          n/a ({backend} backend: {backend_class(backend).DESCRIPTION})")
    else:
        lines += [
            f"  retransmits      {_count(run.get('retransmits'))}   timeouts {_count(run.get('timeouts'))}",
            f"  drops            {_count(run.get('drops'))}   ecn_marks {_count(run.get('ecn_marks'))}"
            + (f"   pause_frames {_count(run['pause_frames'])}" if run.get("pause_frames") is not None else ""),
            f"  max_queue_kb     {_number(run.get('max_queue_kb'), 4)}",
        ]
    if run.get("hybrid_packet_sims") is not None:  # hybrid: its reduced packet simulation's, scaled to the run
        lines.append(f"  packet episodes  {_count(run.get('hybrid_packet_sims'))} (wall "
                     f"{_number(run.get('hybrid_packet_wall_s'))} s; "
                     f"{_count(run.get('hybrid_memo_episodes'))} more from records)   "
                     f"scaled: timeouts {_count(run.get('timeouts'))}   "
                     f"retransmits {_count(run.get('retransmits'))}   drops {_count(run.get('drops'))}")
    if run.get("incast_phases") is not None:
        lines.append(f"  TCP risk         busiest link {_number(run.get('max_link_utilisation'), 4)}   "
                     f"max_port_flows {_count(run.get('max_port_flows'))}   "
                     f"incast_phases {_count(run.get('incast_phases'))}")
    lines.append(f"  events/s         {_count(run.get('events_per_s'))}   "
                 f"({_count(run.get('events'))} events, wall {_number(run.get('wall_s'))} s)")
    return lines


def _transport_label(run: Mapping[str, Any]) -> str:
    """The transport in a few words: the tcp preset (or congestion control), or RoCE with its PFC."""
    if run.get("transport.protocol") == "roce":
        return f"transport=roce roce.cc={run.get('roce.cc')}"
    return f"tcp={run.get('tcp') or run.get('tcp.cc')}"


def _workload_label(run: Mapping[str, Any]) -> str:
    """What ran, in a few words: the flow pattern, the astra file or chakra trace, the collective or `dlrm`."""
    kind = run.get("workload.type")
    if kind in ("astra", "chakra") and run.get("workload.path"):
        return f"{kind} {Path(str(run['workload.path'])).name}"
    if kind == "collective":
        return f"collective {run.get('workload.op')}"
    return str(run.get("workload.pattern") or kind)


def _stopped_line(run: Mapping[str, Any]) -> str:
    """Why a run ended `timeout`: its wall-time limit (the error says which), or the simulated-time one."""
    if run.get("error") is not None and run.get("sim_time_s") is None:
        return (f"  stopped          {str(run['error']).strip().splitlines()[-1]} (hydra.launcher.max_wall_time_s):"
                " nothing simulated was measured")
    return (f"  stopped          at engine.max_sim_time_s = {_number(run.get('engine.max_sim_time_s'), 4)} s "
            "of simulated time: what follows is what was measured until then")


def format_summary(rows: Mapping[str, Sequence[Mapping[str, Any]]], dataset: Path) -> str:
    """A short human summary of one run's rows and of where they were stored; the run is named by the
    presets it was composed from (its config's own labels where it was given key by key)."""
    run = rows["runs"][0]
    ms = 1e3  # s -> ms
    lines = [
        f"run {run['run_id']}  status {run['status']}  "
        f"({run.get('engine.backend')} backend, network={run.get('network') or run.get('network.topology')} "
        f"npus={run.get('network.npus')}, {_transport_label(run)}, "
        f"workload={run.get('workload') or _workload_label(run)})",
    ]
    if run["status"] == "timeout":
        lines.append(_stopped_line(run))
    if run["status"] == "error":
        lines += ["  " + line for line in str(run.get("error")).splitlines()]
        lines.append(f"  reproduce with: {run.get('repro')}")
    elif run.get("sim_time_s") is None:  # stopped by its wall time: nothing simulated was measured
        lines.append(f"  wall             {_number(run.get('wall_s'))} s")
    elif run.get("workload.type") == "flows":
        lines += [
            f"  sim_time_s       {_number(run.get('sim_time_s'), 4)}",
            f"  flows completed  {_count(run.get('flows_completed'))}/{_count(run.get('flows'))}",
            f"  FCT mean / max   {_number(run.get('mean_fct_s'), scale=ms)} / "
            f"{_number(run.get('max_fct_s'), scale=ms)} ms",
            *_network_lines(run),
        ]
    elif not run.get("iterations_done"):  # the means of no iteration are no zeros
        lines += [
            f"  iteration time   n/a (0/{_count(run.get('workload.iterations'))} iterations finished; "
            f"sim_time_s {_number(run.get('sim_time_s'), 4)})",
            *([] if run.get("flows") is None else
              [f"  messages         {_count(run.get('flows_completed'))}/{_count(run.get('flows'))} delivered"]),
            *_network_lines(run),
        ]
    else:  # a training workload: per-iteration means
        lines += [
            f"  iteration time   {_number(run.get('iteration_time_s'), 4, ms)} ms   "
            f"(mean of {_count(run.get('iterations_done'))}/{_count(run.get('workload.iterations'))} "
            f"iterations; sim_time_s {_number(run.get('sim_time_s'), 4)})",
            f"  per iteration    compute {_number(run.get('compute_s'), scale=ms)} ms   "
            f"comm {_number(run.get('comm_s'), scale=ms)} ms   "
            f"exposed comm {_number(run.get('exposed_comm_s'), scale=ms)} ms",
            f"                   all-to-all {_number(run.get('all_to_all_s'), scale=ms)} ms   "
            f"all-reduce {_number(run.get('all_reduce_s'), scale=ms)} ms",
            *([] if run.get("flows") is None else  # alpha_beta times whole phases: no messages
              [f"  messages         {_count(run.get('flows_completed'))}/{_count(run.get('flows'))} delivered"]),
            *_network_lines(run),
        ]
    stored = ", ".join(f"{table} +{len(table_rows)}" for table, table_rows in rows.items() if table_rows)
    lines.append(f"rows appended to {dataset}/: {stored}")
    return "\n".join(lines)


def run_one(config: Mapping[str, Any], force: bool = False, out: TextIO | None = None,
            err: TextIO | None = None, presets: Mapping[str, str | None] | None = None,
            max_wall_time_s: float | None = None, run_memory_mb: float | None = None,
            overrides: Sequence[str] = ()) -> int:
    """Validate, resume-check, run and store one resolved config: a sweep of one, run in this
    process through the sweep's own path (`sweep.driver.run_sweep`), held to the same limits
    (`max_wall_time_s`, and `run_memory_mb` MiB or else the run's estimate); print a summary and
    return the exit code. A run already stored with status `ok` is skipped unless `force`;
    `presets` (the preset of each config group it was composed from) label its runs row; each of
    `overrides` (the command line's) must set a key that applies to the run (`check_overrides_apply`)."""
    out = out or sys.stdout
    err = err or sys.stderr
    config = dict(config)
    try:
        run = planned_run(config, overrides, force, presets)
        check_overrides_apply([(overrides, run.sim_config)])
        check_dataset(config)
    except engine.ConfigError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_BAD_CONFIG

    executor = InProcessExecutor(max_wall_time_s, run_memory_mb)
    try:
        summary = run_sweep([run], executor, show_progress=False)
    except OSError as exc:  # the disk filled up, the directory went away or read-only meanwhile
        print(f"error: cannot write the results to {run.dataset}/: {exc}", file=err)
        return EXIT_RUN_FAILED
    if summary.interrupted:
        raise KeyboardInterrupt  # `python -m sweep` says so and exits 130; nothing was stored
    if summary.skipped:
        print(f"run {run.run_id} is already done (status ok) in {run.dataset}/; not running it again "
              "(add +force=true to rerun)", file=out)
        return EXIT_OK
    assert executor.last is not None  # it ran
    rows = run.rows(executor.last[1])
    print(format_summary(rows, run.dataset), file=out)
    return EXIT_OK if rows["runs"][0]["status"] == "ok" else EXIT_RUN_FAILED


def main() -> None:
    """`python -m sweep [-m] [overrides]`. Mistakes Hydra finds while composing the config (an
    unknown preset, a key that does not exist) are reported like every other bad input: one line
    `error: ...` on stderr, exit 2. `HYDRA_FULL_ERROR=1` still shows Hydra's own traceback."""
    for arg in sys.argv[1:]:  # `--network=leaf_spine`: Hydra's argument parser would print its usage
        if arg.startswith("--") and arg.split("=", 1)[0] not in HYDRA_OPTIONS:
            print(f"error: {arg} is not an option of python -m sweep: settings are key=value, without dashes "
                  f"({arg[2:]}); the options are in python -m sweep --help", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises its errors instead of printing them and exiting 1
    try:
        _hydra_main()
    except (MissingConfigException, ConfigCompositionException, OverrideParseException) as exc:
        if full_error == "1":
            raise
        print(f"error: {hydra_error(exc, sys.argv[1:])}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    finally:
        if full_error is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    """Hydra entry point of `python -m sweep`; `+force=true` reruns a run that is already done."""
    try:
        try:
            config = resolved_dict(cfg)
        except OmegaConfBaseException as exc:  # a `${...}` that does not resolve
            raise config_error(exc) from None
        force = pop_force(config)
    except engine.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    hydra_config = HydraConfig.get()
    grid = hydra_config.sweeper.get("params") or {}
    if grid:  # an experiment's grid, which only a multirun expands: one run of its base would be a surprise
        print(f"error: this command names a grid (hydra.sweeper.params: {', '.join(grid)}) but runs one "
              f"configuration: add -m to sweep it (python -m sweep -m {' '.join(sys.argv[1:])})", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    choices = hydra_config.runtime.choices
    launcher = hydra_config.launcher  # the sweep's limits hold a single run too
    code = run_one(config, force=force, presets={group: choices.get(group) for group in PRESET_COLUMNS},
                   max_wall_time_s=launcher.get("max_wall_time_s"), run_memory_mb=launcher.get("run_memory_mb"),
                   overrides=hydra_config.overrides.task)
    if code != EXIT_OK:
        sys.exit(code)  # SystemExit passes through Hydra's error reporting untouched
