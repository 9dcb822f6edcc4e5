"""Sweeps through Hydra's submitit launcher (the optional extra `[slurm]`): `python -m sweep -m ...
hydra/launcher=submitit_local` runs every grid point as a job of its own, each job the single-run
command, which stores its own rows. `submitit_local` runs the jobs as local processes, all at once;
`submitit_slurm` submits the same jobs to SLURM, so what holds here holds there, minus the queue.

Checked: every grid point stored once, with the rows a run in this process gives; the same command
again runs nothing (resume); jobs that write to one dataset at the same moment (held at a barrier
just before they write) each leave whole parts and every row once. The store is what makes that
safe: each flush writes parts under names unique to it (timestamp and uuid) through a temporary file
and a rename, so concurrent writers never touch one file.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sweep_support import compose_config

from sweep.plan import plan
from sweep.runner import execute
from sweep.store import part_files, read_table

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
                       reason="needs the slurm extra (pip install -e '.[slurm]'): hydra-submitit-launcher "
                              "is not installed"),
]

SEEDS = (0, 1, 2)
# Imported first by every Python process of a job (it is on PYTHONPATH as `sitecustomize`): the
# store's flush waits until every job has reached its own flush, so the jobs write at the same moment.
BARRIER = '''
import os, time
if os.environ.get("NETSWEEP_TEST_BARRIER"):
    import sweep.store

    flush = sweep.store.ResultStore.flush

    def flush_together(self):
        folder, count = os.environ["NETSWEEP_TEST_BARRIER"], int(os.environ["NETSWEEP_TEST_JOBS"])
        open(os.path.join(folder, str(os.getpid())), "w").close()
        while len(os.listdir(folder)) < count:  # until every job is here
            time.sleep(0.01)  # paces the polling only
        return flush(self)

    sweep.store.ResultStore.flush = flush_together
'''


def _points(tmp_path: Path) -> list[list[str]]:
    return [[f"seed={seed}", "engine.backend=analytical", "workload=collective", "network.npus=4",
             f"results_dir={tmp_path / 'results'}", "name=slurm"] for seed in SEEDS]


def _submitit_sweep(tmp_path: Path, barrier: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The grid of `_points` with `hydra/launcher=submitit_local`, run from `tmp_path`."""
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    if barrier is not None:
        hook = tmp_path / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(BARRIER)
        barrier.mkdir()
        env.update(NETSWEEP_TEST_BARRIER=str(barrier), NETSWEEP_TEST_JOBS=str(len(SEEDS)),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")])))
    grid = [f"seed={','.join(map(str, SEEDS))}", *_points(tmp_path)[0][1:]]
    return subprocess.run([sys.executable, "-m", "sweep", "-m", *grid, "hydra/launcher=submitit_local"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _job_logs(tmp_path: Path) -> list[str]:
    """What each job printed (`.submitit/<job>/<job>_0_log.out`, in the dataset's `_jobs/`)."""
    return [path.read_text() for path in sorted(_jobs_folder(tmp_path).glob("*/*_log.out"))]


def _jobs_folder(tmp_path: Path) -> Path:
    """Where submitit keeps the jobs' files: in the dataset (conf/config.yaml's `hydra.sweep.dir`)."""
    return tmp_path / "results" / "slurm" / "_jobs" / ".submitit"


def test_every_point_once_then_resume(tmp_path: Path) -> None:
    done = _submitit_sweep(tmp_path, barrier=tmp_path / "barrier")
    assert done.returncode == 0, done.stderr
    # the sweep's summary, as the Ray launcher prints it; nothing of submitit's beside the dataset
    assert f"sweep of 3 grid points -> {tmp_path / 'results' / 'slurm'}/" in done.stdout, done.stdout
    assert "  ok               3" in done.stdout and "  skipped          0" in done.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == ["barrier", "hook", "results"]
    assert len(list(_jobs_folder(tmp_path).iterdir())) == len(SEEDS)  # one folder a job: no `%j` left
    assert len(os.listdir(tmp_path / "barrier")) == len(SEEDS)  # every job waited for the others

    dataset = tmp_path / "results" / "slurm"
    runs = read_table(dataset, "runs")
    planned = plan(_points(tmp_path), compose_config)
    assert sorted(runs["run_id"]) == sorted(run.run_id for run in planned)  # every point, once
    assert len(part_files(dataset, "runs")) == len(SEEDS)  # one part per job: each wrote its own
    for table in ("runs", "collectives", "flows"):
        for path in part_files(dataset, table):
            pq.read_table(path)  # whole
    stored = runs.set_index("run_id")
    flows = read_table(dataset, "flows")
    for run in planned:  # the rows a run in this process gives
        local = execute(run.config)
        assert stored.loc[run.run_id, "status"] == "ok"
        assert stored.loc[run.run_id, "iteration_time_s"] == local["runs"][0]["iteration_time_s"]
        assert (flows["run_id"] == run.run_id).sum() == len(local["flows"])
    assert all("status ok" in log for log in _job_logs(tmp_path))

    for log in _jobs_folder(tmp_path).glob("*/*_log.out"):
        log.unlink()
    again = _submitit_sweep(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "  skipped          3   already done with status ok" in again.stdout, again.stdout
    logs = _job_logs(tmp_path)
    assert len(logs) == len(SEEDS) and all("is already done (status ok)" in log for log in logs)
    resumed = read_table(dataset, "runs")
    assert sorted(resumed["run_id"]) == sorted(runs["run_id"])
    assert resumed.set_index("run_id")["started_at"].to_dict() == stored["started_at"].to_dict()
