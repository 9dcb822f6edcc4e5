"""Plan a sweep: every grid point as a resolved plain config, all validated before anything runs.

Hydra's sweeper expands the command line (`network.link_gbps=25,100 tcp=newreno,cubic`) and an
experiment's `hydra.sweeper.params` into grid points, each a list of override strings. `GridComposer`
turns a point into the plain dict `python -m sweep` would run for those overrides, composing with
Hydra (about 40 ms) only once per distinct combination of config-group choices (`tcp=cubic`,
`workload=dlrm_large`) and applying the point's value overrides (`network.link_gbps=25`): a plain
value set on a copy of the resolved dict where that is all Hydra would do (tens of microseconds),
else Hydra's own override code on a copy of the composed config (a few milliseconds). `plan`
validates every point, once (`PlannedRun.sim_config` is what a worker gets); the first one that
cannot run is reported with its overrides and nothing is launched.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import AnyNode, DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

import engine
from engine.keys import CONDITIONAL_KEYS, holds_default, unused_key_error, unused_keys

from .config_bases import register_config_bases
from .internals import SIMPLE_OVERRIDE, apply_value_overrides, child_node, is_interpolation, simple_override_value
from .replicate import ReplicatePolicy
from .rows import RunResult, TableRows
from .runner import MIB, point_id, run_id, stored_rows
from .schema import PRESET_COLUMNS

register_config_bases()  # before anything composes a config: the network, tcp and workload presets start from them


def validate(config: Mapping[str, Any]) -> engine.SimConfig:
    """The engine's config of `config`; raise `engine.ConfigError` if it cannot run: the engine's
    checks (the config, what its backend can run, then the workload files it names) plus the sweep's
    own keys (`name` becomes a directory, so it must be one plain path component)."""
    name = config.get("name")
    if not isinstance(name, str) or not name or name in {".", ".."} or "/" in name or "\\" in name:
        raise engine.ConfigError("name", name, "a non-empty dataset name without path separators")
    if not isinstance(config.get("results_dir"), str) or not config["results_dir"]:
        raise engine.ConfigError("results_dir", config.get("results_dir"), "a directory path")
    checked = engine.load_config(config)
    ReplicatePolicy.of(config)
    try:
        engine.check_backend(checked)
    except engine.ConfigError as exc:
        raise BackendRefusal(exc.key, exc.value, exc.allowed) from exc
    engine.check_workload_files(checked)
    return checked


class BackendRefusal(engine.ConfigError):
    """A config that is valid but that the backend it names cannot run (`engine.check_backend`:
    `engine.backend=hybrid network=fat_tree`); a grid may skip such points (`plan`'s `refused`)."""


def check_dataset(config: Mapping[str, Any]) -> None:
    """Raise `engine.ConfigError` if the dataset directory `${results_dir}/${name}` cannot be written:
    a path component that is a file, or a directory this process may not write to. Nothing is
    created; checked before a run is launched, so no run is wasted on results that cannot be kept."""
    results_dir, name = Path(config["results_dir"]), config["name"]
    for key, value, path in (("results_dir", config["results_dir"], results_dir),
                             ("name", name, results_dir / name)):
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise engine.ConfigError(key, value, f"a directory for the results, but {existing} is a file")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise engine.ConfigError(key, value, f"a directory this user can write to, but {existing} is not writable")


def config_error(exc: OmegaConfBaseException) -> engine.ConfigError:
    """An OmegaConf error raised while resolving a config (a bad `${...}` interpolation) as a
    `ConfigError` naming the key."""
    key = getattr(exc, "full_key", None) or "config"
    node = getattr(exc, "child_node", None)
    value = node._value() if node is not None else None  # the text of the interpolation
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return engine.ConfigError(key, value, f"a value or an interpolation that resolves ({reason})")


# Hydra plugin presets that netsweep's extras install: (group, preset) -> the extra
PLUGIN_EXTRAS = {("hydra/launcher", "submitit_local"): "slurm", ("hydra/launcher", "submitit_slurm"): "slurm"}


def hydra_error(exc: HydraException, args: Sequence[str]) -> engine.ConfigError:
    """A mistake Hydra finds while composing the command line `args` (an unknown preset, an override
    of a key that does not exist, an override it cannot parse) as a `ConfigError` naming the key,
    the value and what is allowed, with the closest allowed name when there is one."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, choice = exc.missing_cfg_file.rpartition("/")
        extra = PLUGIN_EXTRAS.get((group, choice))
        if extra is not None:
            return engine.ConfigError(group, choice, f"installed with an extra: pip install 'netsweep[{extra}]' "
                                                     f"(presets here: {', '.join(sorted(exc.options))})")
        return engine.ConfigError(group, choice, f"a preset in conf/{group}/{_closest(choice, exc.options)}: "
                                                 f"{', '.join(sorted(exc.options))}")
    if isinstance(exc, OverrideParseException):
        parser = OverridesParser.create()
        unparsable = next((arg for arg in args if not arg.startswith("-") and not _parses(parser, arg)), " ".join(args))
        return engine.ConfigError("override", unparsable, f"Hydra's override syntax ({lines[0]})")
    # "Could not override 'tcp.min_rto'. To append to your config use +tcp.min_rto=5", and the like
    quoted = re.search(r"'([^']+)'", lines[0])
    key = quoted.group(1) if quoted else "config"
    value = next((arg.split("=", 1)[1] for arg in args if "=" in arg and arg.lstrip("+~").split("=", 1)[0] == key),
                 None)
    cause = exc.__cause__
    parent = getattr(cause, "parent_node", None)
    if isinstance(cause, OmegaConfBaseException) and isinstance(parent, DictConfig) and len(parent):
        prefix = str(getattr(cause, "full_key", "")).rpartition(".")[0]
        where = f"{prefix}." if prefix else ""
        known = [str(name) for name in parent.keys() if str(name) != "hydra"]
        typo = key[len(where):].split(".")[0]
        return engine.ConfigError(key, value, f"an existing key{_closest(typo, known, where)}: "
                                               f"{', '.join(where + name for name in known)}")
    return engine.ConfigError(key, value, " ".join(lines))


def _parses(parser: OverridesParser, arg: str) -> bool:
    """Whether Hydra can parse the single override `arg`."""
    try:
        parser.parse_overrides([arg])
    except OverrideParseException:
        return False
    return True


def _closest(name: str, allowed: Sequence[str], prefix: str = "") -> str:
    """' (did you mean X?)' for the allowed name closest to a mistyped one, or ''."""
    match = difflib.get_close_matches(name, allowed, n=1)
    return f" (did you mean {prefix}{match[0]}?)" if match else ""


def _validate_ray(config: Mapping[str, Any]) -> None:
    """Raise `engine.ConfigError` for `ray` settings a sweep cannot use (a single run ignores them)."""
    ray = config.get("ray") or {}
    address, num_cpus = ray.get("address"), ray.get("num_cpus")
    if address is not None and (not isinstance(address, str) or not address):
        raise engine.ConfigError("ray.address", address, "null (a local Ray), auto, or host:port")
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise engine.ConfigError("ray.num_cpus", num_cpus, "a positive integer, or null for all cores")


def pop_force(config: dict[str, Any]) -> bool:
    """Remove the `force` flag (`+force=true`: rerun even if already done) from `config` and return
    it; it says how to run, not what, so it is no part of the run."""
    force = config.pop("force", False)
    if not isinstance(force, bool):
        raise engine.ConfigError("force", force, "true or false")
    return force


PRESETS_KEY = "presets"


def pop_presets(config: dict[str, Any]) -> dict[str, str | None]:
    """Remove `presets` (what `GridComposer.compose` adds: the preset of each config group the
    config was composed from, `{"network": "leaf_spine", ...}`) from `config` and return it; it
    labels the run's row, and is no part of the run."""
    return config.pop(PRESETS_KEY, None) or {}


@dataclass(frozen=True)
class PlannedRun:
    """One grid point, ready to run: its overrides as the sweeper gave them, the resolved config
    (without `force`), its run_id, whether to run it even if the dataset already has it, the
    presets it was composed from (`sweep.schema.PRESET_COLUMNS` of its runs row), the memory it
    is estimated to need (`engine.estimate_run_bytes`), which a sweep reserves with Ray unless the
    run declares its own (never a limit: `sweep.memory`), and,
    for the refined run of a two-fidelity sweep, why its point was chosen (`sweep.fidelity`)."""

    overrides: tuple[str, ...]
    config: dict[str, Any]
    run_id: str
    force: bool = False
    presets: Mapping[str, str | None] = field(default_factory=dict)
    memory_bytes: int = 0
    refine_reason: str | None = None
    # The engine's validated `config`, set by `planned_run`; `dataclasses.replace` carries it along,
    # so a run copied with another `config` must be made by `planned_run` instead.
    validated: engine.SimConfig | None = field(default=None, repr=False, compare=False)

    @property
    def dataset(self) -> Path:
        """Where the run's rows go: `${results_dir}/${name}`."""
        return Path(self.config["results_dir"]) / self.config["name"]

    @property
    def sim_config(self) -> engine.SimConfig:
        """The engine's validated config, what goes to the worker: validated once, by `planned_run`
        (or here, for a run made by hand)."""
        return self.validated if self.validated is not None else validate(self.config)

    def declared_bytes(self, run_memory_mb: float | None) -> int | None:
        """The memory this run declares (`run_memory_mb` MiB), a limit it is held to; None if undeclared."""
        return None if run_memory_mb is None else int(run_memory_mb * MIB)

    def reserved_bytes(self, run_memory_mb: float | None) -> int | None:
        """The memory this run reserves with its scheduler: its declaration if any, else its estimate,
        which never stops it (`sweep.memory`); None if neither (a run planned by hand)."""
        declared = self.declared_bytes(run_memory_mb)
        return declared if declared is not None else (self.memory_bytes or None)

    def rows(self, result: RunResult) -> TableRows:
        """The rows stored for `result`, this run's outcome (`sweep.runner.stored_rows`)."""
        return stored_rows(self.config, result, self.run_id, self.presets, self.refine_reason, self.sim_config)

    def with_seed(self, seed: int) -> PlannedRun:
        """This run with another `seed` (a replica: `sweep.replicate`), planned anew; itself for its own seed."""
        if seed == self.config["seed"]:
            return self
        overrides = [line for line in self.overrides if not line.lstrip("+~").startswith("seed=")] + [f"seed={seed}"]
        return dataclasses.replace(planned_run({**self.config, "seed": seed}, overrides, self.force, self.presets),
                                   refine_reason=self.refine_reason)

    @property
    def point_id(self) -> str:
        """Its grid point (`sweep.runner.point_id`), which its runs on other backends share."""
        return point_id(self.config, self.sim_config)


class GridError(Exception):
    """A grid point that cannot run; its message names the point's overrides."""

    def __init__(self, index: int, total: int, overrides: Sequence[str], cause: engine.ConfigError) -> None:
        point = " ".join(overrides) or "(no overrides)"
        super().__init__(f"{cause} (grid point {index + 1} of {total}: {point})")


def check_overrides_apply(points: Sequence[tuple[Sequence[str], engine.SimConfig]]) -> None:
    """Raise `engine.ConfigError` for a key the command line sets that cannot change the simulation
    of any of `points` (overrides, validated config): `network=switch network.spines=4`, or
    `tcp=newreno tcp.dctcp_g=0.1,0.2`; a key written with its default (`tcp=newreno
    network.ecn_threshold_kb=null`) is accepted. A grid where the key applies at some points (crossing `tcp`
    with `tcp.dctcp_g`) is fine: at the other points it is left out of their run_id, so each of
    their simulations runs once (`engine.keys.identity_mapping`)."""
    applied: set[str] = set()
    first_values: dict[str, str] = {}  # key -> its value at the first point that sets it
    for overrides, config in points:
        unused = set(unused_keys(config))
        for line in overrides:
            key, _, value = line.lstrip("+~").partition("=")
            if key in CONDITIONAL_KEYS:
                first_values.setdefault(key, value)
                if key not in unused or holds_default(config, key):  # an explicit default changes nothing
                    applied.add(key)
    for key, value in first_values.items():
        if key not in applied:
            raise unused_key_error(key, value, "in every point of this grid" if len(points) > 1 else "here")


def plan(points: Sequence[Sequence[str]], compose: Callable[[Sequence[str]], dict[str, Any]],
         refused: list[tuple[Sequence[str], BackendRefusal]] | None = None) -> list[PlannedRun]:
    """Resolve and validate every grid point with `compose` (overrides -> plain config); raise
    `GridError` for the first point that cannot run, and `engine.ConfigError` for a key set where
    it applies at no point (`check_overrides_apply`). With a `refused` list (the launcher's
    `skip_refused`), a point whose backend refuses it (`BackendRefusal`: a grid crossing
    `engine.backend=phase,hybrid` with `network=leaf_spine,fat_tree`) is not refused: it is left out
    of the plan and appended to `refused` as (its overrides, the refusal)."""
    runs = []
    checked: set[tuple[str, str]] = set()  # datasets already found writable
    validated: list[tuple[Sequence[str], engine.SimConfig]] = []
    for index, overrides in enumerate(points):
        try:
            try:
                config = compose(overrides)
            except OmegaConfBaseException as exc:
                raise config_error(exc) from exc
            force = pop_force(config)
            presets = pop_presets(config)
            _validate_ray(config)
            try:
                run = planned_run(config, overrides, force, presets)
            except BackendRefusal as exc:
                if refused is None:
                    raise
                refused.append((overrides, exc))
                continue
            if (config["results_dir"], config["name"]) not in checked:
                check_dataset(config)
                checked.add((config["results_dir"], config["name"]))
        except engine.ConfigError as exc:
            raise GridError(index, len(points), overrides, exc) from exc
        runs.append(run)
        validated.append((overrides, run.sim_config))
    check_overrides_apply(validated)
    return runs


def format_refused(refused: Sequence[tuple[Sequence[str], BackendRefusal]], points: int) -> str:
    """The launcher's lines on the grid points `plan` left out because their backend refuses them:
    how many of `points`, each refusal once with its count and the first such point's overrides."""
    reasons: dict[str, list[Sequence[str]]] = {}
    for overrides, exc in refused:
        reasons.setdefault(str(exc), []).append(overrides)
    return "\n".join([f"skipped {len(refused)} of {points} grid points: their engine.backend refuses them "
                       "(hydra.launcher.skip_refused)"]
                      + [f"  {len(found)} x {reason} (e.g. {' '.join(found[0]) or '(no overrides)'})"
                         for reason, found in reasons.items()])


def planned_run(config: dict[str, Any], overrides: Sequence[str] = (), force: bool = False,
                presets: Mapping[str, str | None] | None = None) -> PlannedRun:
    """One run of `config` (without `force` and `presets`), validated once (`validate`) with its
    memory estimate; raise `engine.ConfigError` if it cannot run."""
    sim_config = validate(config)
    return PlannedRun(tuple(overrides), config, run_id(config, sim_config), force, presets or {},
                      engine.estimate_run_bytes(sim_config), validated=sim_config)


def resolved_dict(config: DictConfig) -> dict[str, Any]:
    """`config` resolved to plain containers (raises what OmegaConf raises for a `${...}` that does not resolve)."""
    resolved = OmegaConf.to_container(config, resolve=True)
    assert isinstance(resolved, dict)  # what a DictConfig gives
    return cast(dict[str, Any], resolved)  # OmegaConf's keys may be of other types; a config's are strings


class GridComposer:
    """Grid points to plain configs, equal to what Hydra composes for each point on its own.

    Hydra composes in two steps: the defaults list (the root config and the presets the config-group
    overrides choose), then the remaining overrides applied as values to the merged config. The
    first step is the slow one and depends only on the group choices, so it runs once per distinct
    combination of them (`compositions` counts them); the second reuses Hydra's override parser and
    its own value-override code (`sweep.internals.apply_value_overrides`, the very function its
    composition calls) on a copy, so the result is identical, including type checks and errors.
    """

    def __init__(self, config_loader: ConfigLoader, master_config: DictConfig) -> None:
        self._loader = config_loader
        self._master = master_config  # the multirun's config: carries the hydra overrides and config name
        self._parser = OverridesParser.create(config_loader=config_loader)
        self._bases: dict[tuple[str, ...], DictConfig] = {}
        self._plain_bases: dict[tuple[str, ...], _PlainBase | None] = {}  # None: the base has interpolations
        self._groups: dict[str, bool] = {}  # key -> whether it names a config group
        self._parsed: dict[str, Override] = {}  # every point repeats the command line's fixed overrides

    @property
    def compositions(self) -> int:
        """Full Hydra compositions done so far: one per distinct combination of group choices."""
        return len(self._bases)

    def _is_group(self, key: str) -> bool:
        if key not in self._groups:
            parent, _, name = key.rpartition("/")
            self._groups[key] = name in self._loader.list_groups(parent)
        return self._groups[key]

    def _composes(self, override: Override) -> bool:
        """Whether Hydra applies `override` to the defaults list (a group choice, as decided by
        Hydra's defaults list: a group name with a non-dict value) rather than as a value. Hydra's
        own settings always take the full path."""
        if override.is_hydra_override():
            return True
        return self._is_group(override.key_or_group) and not isinstance(override.value(), dict)

    def _base(self, choices: tuple[str, ...]) -> DictConfig:
        """The composed config of these group overrides, without its `hydra` node (as a job sees it)."""
        base = self._bases.get(choices)
        if base is None:
            base = self._loader.load_sweep_config(self._master, list(choices))
            with read_write(base), open_dict(base):
                base[PRESETS_KEY] = {group: base.hydra.runtime.choices.get(group) for group in PRESET_COLUMNS}
                del base["hydra"]
            self._bases[choices] = base
        return base

    def _plain_base(self, choices: tuple[str, ...]) -> _PlainBase | None:
        """The resolved plain dict of a base and its plain leaves, or None if it has interpolations
        (a value override could change what they resolve to: Hydra must apply it)."""
        if choices not in self._plain_bases:
            base = self._base(choices)
            self._plain_bases[choices] = None
            if _interpolation_free(base):
                self._plain_bases[choices] = _PlainBase(resolved_dict(base), frozenset(_plain_leaves(base)))
        return self._plain_bases[choices]

    def compose(self, overrides: Sequence[str]) -> dict[str, Any]:
        """The resolved plain config of one grid point, with the presets it was composed from
        under `presets` (see `pop_presets`)."""
        simple = {}  # line -> (key, value) of `key=<number or word>` lines not parsed by Hydra (yet)
        for line in overrides:
            if line not in self._parsed:
                match = SIMPLE_OVERRIDE.fullmatch(line)
                if match and not match["key"].startswith("hydra.") and not self._is_group(match["key"]):
                    simple[line] = (match["key"], simple_override_value(match["value"]))
                    continue
                (self._parsed[line],) = self._parser.parse_overrides([line])
        parsed = [self._parsed[line] for line in overrides if line not in simple]
        choices = tuple(line for line in overrides if line not in simple and self._composes(self._parsed[line]))
        values = [override for override in parsed if not self._composes(override)]
        plain = self._plain_base(choices)
        if plain is not None and all(key in plain.leaves for key, _ in simple.values()) \
                and all(_sets_a_plain_value(override, plain.leaves) for override in values):
            # What Hydra would do, without its copy of the config (milliseconds): see `_sets_a_plain_value`
            config = _copy_plain(plain.resolved)
            for line in overrides:
                if line in simple:
                    key, value = simple[line]
                elif not self._composes(override := self._parsed[line]):
                    key, value = override.key_or_group, override.value()
                else:
                    continue
                *parents, leaf = key.split(".")
                section = config
                for name in parents:
                    section = section[name]
                section[leaf] = value
            return config
        for line in simple:  # Hydra applies them after all
            (self._parsed[line],) = self._parser.parse_overrides([line])
        values = [self._parsed[line] for line in overrides if not self._composes(self._parsed[line])]
        composed = copy.deepcopy(self._base(choices))
        apply_value_overrides(values, composed)
        return resolved_dict(composed)


@dataclass(frozen=True)
class _PlainBase:
    """A composed base config without interpolations: resolved to plain containers, and the dotted
    keys of its leaves that hold a value of any type (OmegaConf's AnyNode: no conversion)."""

    resolved: dict[str, Any]
    leaves: frozenset[str]


def _interpolation_free(node: Any) -> bool:
    """Whether no node in this OmegaConf node (a container, or a value node) is an interpolation."""
    if is_interpolation(node):
        return False
    if isinstance(node, DictConfig):
        return all(_interpolation_free(child_node(node, key)) for key in node.keys())
    if isinstance(node, ListConfig):
        return all(_interpolation_free(child_node(node, index)) for index in range(len(node)))
    return True


def _plain_leaves(node: DictConfig, prefix: str = "") -> set[str]:
    """The dotted keys of the untyped value leaves (AnyNode) below `node`."""
    leaves = set()
    for key in node.keys():
        child = child_node(node, key)
        if isinstance(child, DictConfig):
            leaves |= _plain_leaves(child, f"{prefix}{str(key)}.")  # a config's keys are strings
        elif isinstance(child, AnyNode):
            leaves.add(f"{prefix}{str(key)}")
    return leaves


def _sets_a_plain_value(override: Override, leaves: frozenset[str]) -> bool:
    """Whether Hydra's whole effect of the value override `override` is to store its value, as it is,
    at an existing untyped leaf: a plain `key=value` (no `+`, `++` or `~`) of a scalar that is not an
    interpolation nor `???`, onto a key of `leaves`. (Hydra's `OmegaConf.update(cfg, key, value,
    merge=True)` then sets the AnyNode to the value; `to_container` gives it back unchanged.)"""
    if override.package is not None or override.is_delete() or override.is_add() or override.is_force_add():
        return False
    if override.is_sweep_override() or override.key_or_group not in leaves:
        return False
    value = override.value()
    if isinstance(value, str):
        return "${" not in value and value != "???"
    return value is None or isinstance(value, (bool, int, float))


def _copy_plain(value: Any) -> Any:
    """A deep copy of plain dicts and lists of scalars (several times faster than `copy.deepcopy`)."""
    if isinstance(value, dict):
        return {key: _copy_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_plain(item) for item in value]
    return value
