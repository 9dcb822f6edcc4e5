"""Faults of a dataset on disk: corrupt or truncated parts, and two writers at once.

A part that cannot be read is moved to `<dataset>/quarantine/<table>/` with one warning line naming
it, by whichever read meets it first (the store's, the loaders', the report's); no read crashes,
nothing is deleted, and a resume runs again exactly the runs whose rows were in it.

Two processes appending to one dataset never tear a part (each part is written under a hidden
temporary name and renamed) nor lose a row (part names carry a timestamp and a random UUID).
A run stored by both is read once by `load_runs`/`load_table`: the rule is the newest attempt,
the latest `started_at` (the later part on a tie).
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from sweep_support import compose_config

import engine
from sweep.cli import EXIT_OK, run_one
from sweep.report import read_dataset
from sweep.runner import run_id
from sweep.store import (
    QUARANTINE,
    ResultStore,
    arrow_dataset,
    load_runs,
    load_table,
    part_files,
    quarantined_parts,
    read_table,
)

_REAL_ENGINE_RUN = engine.run


def _config(tmp_path: Path, seed: int) -> dict[str, Any]:
    """A tiny training run (4 NPUs, a 1 KiB all-reduce, analytical): rows in runs and collectives."""
    return compose_config([f"results_dir={tmp_path / 'results'}", "name=faults", "workload=collective",
                           "workload.bytes=1024", "network.npus=4", "engine.backend=analytical", f"seed={seed}"])


def _dataset_of_three(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    configs = [_config(tmp_path, seed) for seed in range(3)]
    for config in configs:  # one run per flush: one part per table per run
        assert run_one(config, out=io.StringIO()) == EXIT_OK
    dataset = tmp_path / "results" / "faults"
    assert len(part_files(dataset, "runs")) == len(part_files(dataset, "collectives")) == 3
    return dataset, configs


def _part_of(dataset: Path, table: str, identity: str) -> Path:
    (path,) = [path for path in part_files(dataset, table)
               if identity in pq.read_table(path, columns=["run_id"])["run_id"].to_pylist()]
    return path


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning: ")]


def test_corrupt_parts_are_quarantined_and_their_runs_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    dataset, configs = _dataset_of_three(tmp_path)
    ids = [run_id(config) for config in configs]
    truncated = _part_of(dataset, "collectives", ids[1])  # run 1 loses its collectives rows
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    garbage = _part_of(dataset, "runs", ids[2])  # run 2 loses its runs row
    garbage.write_bytes(b"this is not parquet\n" * 50)
    bad_bytes = {truncated.name: truncated.read_bytes(), garbage.name: garbage.read_bytes()}
    capsys.readouterr()

    runs = load_runs(dataset)  # the loader meets the garbage `runs` part
    assert sorted(runs["run_id"]) == sorted(ids[:2])
    (line,) = _warnings(capsys.readouterr().err)
    assert str(garbage) in line and f"{dataset / QUARANTINE / 'runs'}/" in line

    collectives = load_table(dataset, "collectives")  # ... and the truncated `collectives` part
    assert set(collectives["run_id"]) == {ids[0], ids[2]}  # run 2's rows are there, its runs row is not
    (line,) = _warnings(capsys.readouterr().err)
    assert str(truncated) in line

    # moved aside, byte for byte, never deleted; every later read is quiet and does not fail
    assert {path.name: path.read_bytes() for path in quarantined_parts(dataset)} == bad_bytes
    assert len(read_table(dataset, "runs")) == 2 and len(arrow_dataset(dataset, "collectives").to_table()) > 0
    read_dataset(dataset)  # the report's reader
    assert not _warnings(capsys.readouterr().err)

    # resume: exactly the two runs with lost rows run again
    calls: list[Any] = []
    monkeypatch.setattr(engine, "run",
                        lambda config, **options: calls.append(config) or _REAL_ENGINE_RUN(config, **options))
    assert ResultStore(dataset).completed_run_ids() == {ids[0]}
    for config in configs:
        assert run_one(config, out=io.StringIO()) == EXIT_OK
    assert sorted(config.seed for config in calls) == [1, 2]  # the validated configs of the runs of ids[1:]
    assert ResultStore(dataset).completed_run_ids() == set(ids)  # and then never again
    assert sorted(load_runs(dataset)["run_id"]) == sorted(ids)
    assert set(load_table(dataset, "collectives")["run_id"]) == set(ids)
    assert len(quarantined_parts(dataset)) == 2


def test_a_corrupt_part_found_by_the_resume_check_or_the_report(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The resume check looks at every table (not only `runs`); the report survives a corrupt part."""
    dataset, configs = _dataset_of_three(tmp_path)
    lost = _part_of(dataset, "collectives", run_id(configs[0]))
    lost.write_bytes(b"PAR1" + b"\0" * 100)  # the magic bytes, then nothing a reader can use
    capsys.readouterr()
    assert ResultStore(dataset).completed_run_ids() == {run_id(c) for c in configs[1:]}
    (line,) = _warnings(capsys.readouterr().err)
    assert str(lost) in line

    other = tmp_path / "copy"
    dataset2, configs2 = _dataset_of_three(other)
    cut = _part_of(dataset2, "runs", run_id(configs2[1]))
    cut.write_bytes(cut.read_bytes()[:-20])  # the footer cut off
    capsys.readouterr()
    assert len(read_dataset(dataset2).runs) == 2
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_a_part_corrupt_inside_an_intact_footer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes flipped in a column chunk (the footer reads, the data does not): found when read."""
    dataset = tmp_path / "flipped"
    rows = [{"run_id": f"r{i}", "status": "ok", "payload": "x" * 50 + str(i)} for i in range(5000)]
    with ResultStore(dataset) as store:
        store.append({"runs": rows})
    with ResultStore(dataset) as store:
        store.append({"runs": [{"run_id": "other", "status": "ok", "payload": "y"}]})
    first = part_files(dataset, "runs")[0]
    data = bytearray(first.read_bytes())
    row_group = pq.ParquetFile(first).metadata.row_group(0)
    payload = next(row_group.column(i) for i in range(row_group.num_columns)
                   if row_group.column(i).path_in_schema == "payload")
    start = payload.data_page_offset + payload.total_compressed_size // 3  # inside the payload's pages
    data[start: start + 200] = bytes(b ^ 0xFF for b in data[start: start + 200])
    first.write_bytes(bytes(data))
    capsys.readouterr()
    assert list(read_table(dataset, "runs")["run_id"]) == ["other"]
    (line,) = _warnings(capsys.readouterr().err)
    assert str(first) in line and (dataset / QUARANTINE / "runs" / first.name).exists()


def test_a_corrupt_part_in_a_read_only_dataset_is_skipped(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Where nothing can be moved (a read-only copy), reads still work and warn; nothing changes."""
    dataset, configs = _dataset_of_three(tmp_path)
    bad = _part_of(dataset, "runs", run_id(configs[0]))
    bad.write_bytes(b"garbage")
    locked = [dataset, dataset / "runs"]
    try:
        for path in locked:
            subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("chattr +i is not allowed here: no way to make the dataset read-only for root")
    try:
        capsys.readouterr()
        for _ in range(2):
            assert len(load_runs(dataset)) == 2
            (line,) = _warnings(capsys.readouterr().err)
            assert str(bad) in line and "skipped" in line
        assert bad.exists() and not (dataset / QUARANTINE).exists()
    finally:
        for path in reversed(locked):
            subprocess.run(["chattr", "-i", str(path)], check=False)


WRITER = textwrap.dedent("""
    import sys, time
    from datetime import datetime, timezone
    from sweep.store import ResultStore
    dataset, writer, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with ResultStore(dataset, flush_rows=1) as store:  # one part per table per run: many renames
        for i in range(runs):
            run = f"run{i:03d}"  # both writers store the same runs
            stamp = datetime.now(timezone.utc).isoformat()
            store.append({"flows": [{"run_id": run, "flow_id": k, "writer": writer} for k in range(3)],
                          "runs": [{"run_id": run, "status": "ok", "error": None, "writer": writer,
                                    "started_at": stamp}]})
""")

READER = textwrap.dedent("""
    import sys, time
    from sweep.store import read_table
    end = time.monotonic() + float(sys.argv[2])
    reads = 0
    while time.monotonic() < end:
        read_table(sys.argv[1], "runs"); read_table(sys.argv[1], "flows"); reads += 1
    print(reads)
""")


def test_two_writers_at_once_lose_nothing_and_tear_nothing(tmp_path: Path) -> None:
    dataset, runs = tmp_path / "both", 60
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(dataset), name, str(runs)],
                                stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    reader = subprocess.run([sys.executable, "-c", READER, str(dataset), "3"], capture_output=True, text=True,
                            timeout=120)
    for writer in writers:
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
    assert reader.returncode == 0 and "warning" not in reader.stderr, reader.stderr  # never a torn part
    assert int(reader.stdout) > 0

    assert not quarantined_parts(dataset) and not list(dataset.rglob(".*.tmp"))
    all_runs, all_flows = read_table(dataset, "runs"), read_table(dataset, "flows")
    assert len(all_runs) == 2 * runs and len(all_flows) == 2 * 3 * runs  # every row of both
    assert sorted(all_runs.groupby("writer")["run_id"].nunique()) == [runs, runs]
    newest = load_runs(dataset)  # each run once: its newest attempt
    assert sorted(newest["run_id"]) == [f"run{i:03d}" for i in range(runs)]
    flows = load_table(dataset, "flows")
    assert len(flows) == 3 * runs
    # the flows of a run come from the same attempt as its runs row
    merged = flows.merge(newest[["run_id", "writer"]], on="run_id", suffixes=("", "_run"))
    assert (merged["writer"] == merged["writer_run"]).all()


def test_two_single_runs_of_one_config_at_once(tmp_path: Path) -> None:
    """Two `python -m sweep` of the same config started together: both store it; it reads once."""
    args = [sys.executable, "-m", "sweep", f"results_dir={tmp_path}", "name=twice", "workload=collective",
            "workload.bytes=1024", "network.npus=4", "engine.backend=analytical"]
    processes = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    dataset = tmp_path / "twice"
    assert 1 <= len(read_table(dataset, "runs")) <= 2  # the second may find the first already done
    assert len(load_runs(dataset)) == 1
    collectives = load_table(dataset, "collectives")
    assert collectives["run_id"].nunique() == 1
    assert len(collectives) == len(read_table(dataset, "collectives")) / len(read_table(dataset, "runs"))
