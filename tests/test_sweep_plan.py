"""Planning a sweep: grid points composed cheaply but exactly as Hydra composes them, every point
validated before anything runs, and the Hydra plugins that put `python -m sweep -m` on Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict, read_write
from sweep_support import compose_config

import engine
from sweep.cli import CONF_DIR
from sweep.plan import BackendRefusal, GridComposer, GridError, format_refused, plan, pop_force, validate
from sweep.runner import run_id


@pytest.fixture(scope="module")
def loader() -> Any:
    """Hydra's config loader for conf/, as a launcher gets it (it outlives the Hydra context, so the
    other tests can open their own)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return GlobalHydra.instance().config_loader()


def _master(loader: Any, overrides: Sequence[str] = ()) -> Any:
    """The config Hydra composes for a multirun (sweep overrides left out), as the launcher gets it."""
    return loader.load_configuration("config", list(overrides), RunMode.MULTIRUN)


def _hydra_job_config(loader: Any, master: Any, point: Sequence[str]) -> dict[str, Any]:
    """What Hydra's basic launcher builds for one job: a full composition of the point, `hydra`
    node removed, resolved; and the presets Hydra chose for it (its `hydra.runtime.choices`)."""
    config = loader.load_sweep_config(master, list(point))
    choices = dict(config.hydra.runtime.choices)
    with read_write(config), open_dict(config):
        del config["hydra"]
    return {**OmegaConf.to_container(config, resolve=True),
            "presets": {group: choices.get(group) for group in ("network", "tcp", "system", "workload")}}


POINTS = [
    ["seed=3"],
    ["network.link_gbps=25", "tcp=cubic", "workload=dlrm_small"],
    ["network.link_gbps=25", "network=leaf_spine", "network.spines=2"],  # a value before its group
    ["experiment=example_grid", "network.link_gbps=400", "tcp=dctcp"],
    ["workload=flows", "workload.flows=[{src:0,dst:3,bytes:100,start_us:1.5}]"],
    ["network.ecn_threshold_kb=20", "tcp=dctcp", "tcp.min_rto_ms=1"],
    ["network.buffer_kb=null", "system=halving_doubling", "system.splits=4"],
    ["+force=true", "seed=1"],
    ["workload=astra_dlrm", "workload.iterations=1"],  # a bundled workload file
    ["network=dumbbell", "++network.bottleneck_gbps=50"],
    # interpolations: Hydra's own override code applies these (a plain value set would not resolve them)
    ["+label=run${seed}", "seed=5"],
    ["name=${results_dir}", "results_dir=elsewhere"],
    ["name='???'"],
    # values read without Hydra's parser: ints, floats, words, keywords (and a key typed by no preset)
    ["seed=12", "network.link_gbps=12.50", "network.ecn_threshold_kb=-3", "tcp.cc=cubic", "name=NULL"],
    ["network.buffer_kb=inf", "tcp.sack=False", "name=True_2"],
]


@pytest.mark.parametrize("point", POINTS, ids=lambda point: " ".join(point))
def test_cheap_composition_equals_hydra_composition(loader: Any, point: list[str]) -> None:
    master = _master(loader)
    assert GridComposer(loader, master).compose(point) == _hydra_job_config(loader, master, point)


def test_cheap_composition_under_an_experiment_and_fixed_overrides(loader: Any) -> None:
    """`-m experiment=example_grid results_dir=x`: the non-sweep overrides are in the master config."""
    master = _master(loader, ["experiment=example_grid", "results_dir=elsewhere", "engine.backend=analytical"])
    composer = GridComposer(loader, master)
    for point in (["network.link_gbps=25", "tcp=newreno"], ["network.link_gbps=400", "tcp=cubic"]):
        point = ["experiment=example_grid", "results_dir=elsewhere", "engine.backend=analytical", *point]
        config = composer.compose(point)
        assert config == _hydra_job_config(loader, master, point)
        assert config["name"] == "example_grid" and config["results_dir"] == "elsewhere"


def test_one_composition_per_combination_of_group_choices(loader: Any) -> None:
    composer = GridComposer(loader, _master(loader))
    points = [[f"network.link_gbps={gbps}", f"tcp={cc}", f"seed={seed}"]
              for gbps in (25, 100, 400) for cc in ("newreno", "cubic") for seed in range(3)]
    configs = [composer.compose(point) for point in points]
    assert composer.compositions == 2  # one per tcp preset; the values are applied to copies
    assert len({run_id(config) for config in configs}) == 18
    assert configs[0]["network"]["link_gbps"] == 25 and configs[-1]["network"]["link_gbps"] == 400
    assert configs[-1]["tcp"]["cc"] == "cubic" and configs[-1]["seed"] == 2


def test_cheap_composition_refuses_what_hydra_refuses(loader: Any) -> None:
    master = _master(loader)
    for point in (["engine.no_such_key=1"], ["+seed=2"], ["network.npus=[1,2"]):
        with pytest.raises(Exception) as hydra_error:
            _hydra_job_config(loader, master, point)
        with pytest.raises(type(hydra_error.value)):
            GridComposer(loader, master).compose(point)
    with pytest.raises(ConfigCompositionException):
        GridComposer(loader, master).compose(["tcp=vegas"])


def test_plan_validates_every_point_and_names_the_bad_one(tmp_path: Path) -> None:
    points = [[f"network.link_gbps={gbps}", f"tcp={cc}", f"results_dir={tmp_path}"]
              for gbps in (25, -5, 400) for cc in ("newreno", "cubic")]
    with pytest.raises(GridError) as refused:
        plan(points, compose_config)
    assert str(refused.value).startswith("network.link_gbps=-5")
    assert str(refused.value).endswith(f"(grid point 3 of 6: network.link_gbps=-5 tcp=newreno results_dir={tmp_path})")
    assert not any(tmp_path.iterdir())

    runs = plan([["seed=1", "+force=true"], ["seed=2"]], compose_config)
    assert [run.force for run in runs] == [True, False]
    assert "force" not in runs[0].config and runs[0].run_id == run_id(runs[0].config)
    assert runs[1].dataset == Path("results") / "default"


def test_a_grid_may_skip_the_points_their_backend_refuses(tmp_path: Path) -> None:
    """`engine.backend=phase,hybrid` x `network=leaf_spine,fat_tree`: hybrid refuses the fat tree of 32
    NPUs with k = 10 reduced to pod pairs (pods of 25: not two whole pods for its pod pair). The
    grid is refused (naming the point) unless a `refused` list is given (`hydra.launcher.skip_refused`):
    then the point is left out and listed with its refusal; an invalid config is refused either way."""
    networks = {"leaf_spine": ["network=leaf_spine"],
                "fat_tree": ["network=fat_tree", "network.fat_tree_k=10", "engine.hybrid_fat_tree_group=pod"]}
    points = [[f"engine.backend={backend}", *networks[topology], "network.npus=32", "workload=collective",
               f"results_dir={tmp_path}"] for backend in ("phase", "hybrid") for topology in ("leaf_spine", "fat_tree")]
    with pytest.raises(GridError, match=r"network.npus=32 .*\(grid point 4 of 4: engine.backend=hybrid"):
        plan(points, compose_config)
    refused: list[Any] = []
    runs = plan(points, compose_config, refused)
    assert [(r.config["engine"]["backend"], r.config["network"]["topology"]) for r in runs] == [
        ("phase", "leaf_spine"), ("phase", "fat_tree"), ("hybrid", "leaf_spine")]
    assert [overrides for overrides, _ in refused] == [points[3]] and isinstance(refused[0][1], BackendRefusal)
    assert format_refused(refused, 4).splitlines()[0].startswith("skipped 1 of 4 grid points")
    with pytest.raises(GridError, match="network.link_gbps"):
        plan([[*points[0], "network.link_gbps=-5"]], compose_config, [])


def test_pop_force_and_ray_keys_are_checked() -> None:
    config = compose_config(["+force=yes"])
    with pytest.raises(engine.ConfigError, match="force"):
        pop_force(config)
    for override, key in (("ray.num_cpus=0", "ray.num_cpus"), ("ray.num_cpus=1.5", "ray.num_cpus"),
                          ("ray.address=''", "ray.address")):
        with pytest.raises(GridError, match=key.replace(".", r"\.")):
            plan([[override]], compose_config)
        validate(compose_config([override]))  # a single run does not use Ray: no reason to refuse it
    plan([["ray.num_cpus=2", "ray.address=auto"]], compose_config)


def test_example_grid_is_a_named_3_x_2_sweep() -> None:
    params = OmegaConf.load(Path(CONF_DIR) / "experiment" / "example_grid.yaml").hydra.sweeper.params
    assert {key: str(value).split(",") for key, value in params.items()} == {
        "network.link_gbps": ["25", "100", "400"], "tcp": ["newreno", "cubic"]}
    assert compose_config(["experiment=example_grid"])["name"] == "example_grid"


def test_plugins_are_selected_and_importable() -> None:
    from hydra_plugins.netsweep_ray_launcher import ray_launcher

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        from hydra import compose

        hydra_node = compose(config_name="config", return_hydra_config=True).hydra
    assert hydra_node.launcher._target_.endswith("ray_launcher.RayNetsweepLauncher")
    assert hydra_node.sweeper._target_.endswith("ray_launcher.NetsweepSweeper")
    assert issubclass(ray_launcher.RayNetsweepLauncher, ray_launcher.Launcher)


@pytest.mark.parametrize(("overrides", "message"), [
    (["network.link_gbps=25,-5,400", "tcp=newreno,cubic"],
     "error: network.link_gbps=-5.0 is not valid: a number > 0 "
     "(grid point 3 of 6: network.link_gbps=-5 tcp=newreno name=bad"),
    (["seed=1,2", "hydra.launcher.max_retries=-1"],
     "error: hydra.launcher.max_retries=-1 is not valid: an integer >= 0"),
])
def test_a_bad_grid_is_refused_before_anything_runs(tmp_path: Path, overrides: list[str], message: str) -> None:
    """One line naming the point (or the setting), exit code 2, no dataset, no Ray started."""
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    refused = subprocess.run([sys.executable, "-m", "sweep", "-m", *overrides, "name=bad",
                              f"results_dir={tmp_path / 'results'}"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.startswith(message)
    assert len(refused.stderr.strip().splitlines()) == 1 and refused.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no results/, no multirun.yaml, no outputs/


def test_a_launcher_of_an_extra_not_installed_names_the_extra() -> None:
    """`hydra/launcher=submitit_slurm` without the slurm extra: Hydra finds no such preset; the line says
    what to install (the test's environment has the extra, so Hydra's exception is made here)."""
    from hydra.errors import MissingConfigException

    from sweep.plan import hydra_error

    missing = MissingConfigException("Could not find 'hydra/launcher/submitit_slurm'",
                                     missing_cfg_file="hydra/launcher/submitit_slurm",
                                     options=["basic", "ray_netsweep"])
    error = hydra_error(missing, ["hydra/launcher=submitit_slurm", "seed=1,2"])
    assert str(error) == ("hydra/launcher='submitit_slurm' is not valid: installed with an extra: "
                          "pip install 'netsweep[slurm]' (presets here: basic, ray_netsweep)")
