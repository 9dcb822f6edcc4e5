"""A run's memory: estimated from its config before it runs (what a sweep reserves with Ray, never a
limit), a declaration that is a limit, and a machine running short that stops the runs past their
reservation: each an error row with the peak it reached instead of a process the machine kills."""

from __future__ import annotations

import dataclasses
import math

import pytest
from sweep_support import compose_config

import engine
import sweep.memory
from engine import estimate_run_bytes
from engine.backends.ns3 import NS3_BYTES_PER_CONNECTION, NS3_HELPER_BYTES
from engine.memory import BASE_BYTES, estimate_messages, messages_per_collective
from sweep.memory import MIB, declared_limit, peak_resident_bytes, reset_peak
from sweep.runner import OUT_OF_MEMORY, execute, failed_result, measure, measure_within_limits

DLRM_FILE = "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"


@pytest.mark.parametrize("op, algorithm, p, expected", [
    ("all_reduce", "ring", 8, 2 * 7 * 8),  # 2(p-1) steps, every rank sends one message a step
    ("all_gather", "ring", 8, 7 * 8),
    ("all_to_all", "direct", 8, 8 * 7),  # every rank to every other once
    ("all_reduce", "direct", 8, 2 * 8 * 7),  # direct reduce-scatter, then direct all-gather
    ("all_reduce", "halving_doubling", 8, 2 * 3 * 8),  # 2 log2(p) exchanges a rank
    ("all_reduce", "double_binary_tree", 8, 2 * 2 * 8 * 7),  # 2 trees x up and down x 8 blocks x 7 edges
    ("all_to_all", "ring", 8, 7 * 8),  # p-1 steps, forwarding the blocks still on their way
])
def test_messages_per_collective_by_hand(op: str, algorithm: str, p: int, expected: int) -> None:
    assert messages_per_collective(op, algorithm, p) == expected


def test_astra_sims_ring_all_to_all_sends_a_message_per_block() -> None:
    # system.astra_compat: p(p-1)/2 steps of one block (ASTRA-sim 1.0's Ring.cc), each rank one message a step
    assert messages_per_collective("all_to_all", "ring", 8, astra_compat=True) == 28 * 8


def test_the_study_workload_counts_its_messages() -> None:
    """DLRM_HybridParallel: per iteration two all-to-alls (embedding forward and backward) and seven
    weight-gradient all-reduces (one per MLP layer): on 16 NPUs, ring all-reduce and direct
    all-to-all, 2 x 16 x 15 + 7 x 2 x 15 x 16 = 3,840 messages, the number the run delivers."""
    config = engine.load_config({"network": {"npus": 16}, "workload": {"type": "astra", "path": DLRM_FILE}})
    assert estimate_messages(config) == 2 * 16 * 15 + 7 * 2 * 15 * 16 == 3840
    rows = engine.run(config)
    assert rows["runs"][0]["flows"] == 3840
    assert estimate_messages(engine.load_config({"network": {"npus": 16}, "system": {"splits": 4},
                                                 "workload": {"type": "astra", "path": DLRM_FILE, "iterations": 2}})) \
        == 3840 * 4 * 2


def test_the_estimate_grows_with_what_the_run_holds() -> None:
    def estimate(backend: str, npus: int) -> int:
        return estimate_run_bytes(engine.load_config({
            "engine": {"backend": backend}, "network": {"npus": npus},
            "workload": {"type": "astra", "path": DLRM_FILE}}))

    assert estimate("alpha_beta", 1024) < estimate("analytical", 64) < estimate("packet", 64) < estimate("packet", 256)
    assert estimate("alpha_beta", 9216) < 2 * BASE_BYTES  # no messages, no connections
    # beyond the base, ~ p^2 messages
    assert math.isclose((estimate("analytical", 256) - BASE_BYTES) / (estimate("analytical", 128) - BASE_BYTES), 4,
                        rel_tol=0.3)


def test_the_ns3_estimate_counts_its_helper_and_every_pairs_connection() -> None:
    # the ns3 backend's network is a helper process that opens a TCP connection per ordered pair of
    # NPUs before time 0 (128 NPUs: 128 x 127 = 16,256), on top of what the engine's side holds,
    # which is the analytical backend's (the same system layer and message log, no connections)
    # (the config is validated as analytical, then switched: validating ns3 needs the wheel)
    analytical = engine.load_config({"engine": {"backend": "analytical"}, "network": {"npus": 128},
                                     "workload": {"type": "astra", "path": DLRM_FILE}})
    ns3 = dataclasses.replace(analytical, engine=dataclasses.replace(analytical.engine, backend="ns3"))
    assert estimate_run_bytes(ns3) - estimate_run_bytes(analytical) == \
        NS3_HELPER_BYTES + 16_256 * NS3_BYTES_PER_CONNECTION


def test_a_run_beyond_its_limit_is_an_error_row_and_the_process_carries_on(tmp_path) -> None:
    # a GiB of connections and messages (its first all-to-all opens 261,632 connections at once): more
    # than the memory this process has mapped and freed before, so the limit stops it early
    big = compose_config([f"results_dir={tmp_path}", "name=m", "workload=astra_dlrm", "workload.iterations=1",
                          "network.npus=512", "engine.backend=packet"])
    with declared_limit(2**20):  # 1 MiB more than this process holds now
        rows = execute(big)
    assert rows["runs"][0]["status"] == "error" and rows["runs"][0]["error"] == OUT_OF_MEMORY
    assert set(rows) == {"runs"}
    small = compose_config([f"results_dir={tmp_path}", "name=m", "workload=dlrm_small", "network.npus=8"])
    assert execute(small)["runs"][0]["status"] == "ok"  # the limit is gone with the block


def _holds_64_mib_and_works(config, max_wall_time_s):
    """A run that holds 64 MiB and uses CPU time until something stops it (the watch's timer counts CPU
    time), then would run `config`."""
    held = bytearray(64 * MIB)  # zeroed: resident
    for _ in range(10**9):  # the watch looks every quarter second of CPU: it raises long before the end
        sum(range(100))
    return measure(config, max_wall_time_s) if held else failed_result("unreachable")


def test_a_run_far_past_its_estimate_finishes_while_the_machine_has_room(tmp_path) -> None:
    # the estimate (1 MiB reserved) is a guess: a run past it on a machine with room is not stopped
    config = compose_config([f"results_dir={tmp_path}", "name=m", "workload=dlrm_small", "network.npus=8"])
    result = measure_within_limits(measure, config, None, declared_bytes=None, reserved_bytes=MIB)
    assert result.measured["status"] == "ok"
    assert result.measured["reserved_memory_mb"] == 1 and result.measured["peak_memory_mb"] > 1


def test_a_run_past_its_reservation_on_a_machine_running_short_is_stopped(tmp_path, monkeypatch) -> None:
    config = compose_config([f"results_dir={tmp_path}", "name=m", "workload=incast", "workload.senders=1"])
    # a machine of 16 GiB with 1 GiB left: below the floor (8 %, 1.3 GiB)
    monkeypatch.setattr(sweep.memory, "machine_memory", lambda: (16 * 2**30, 2**30))
    stopped = measure_within_limits(_holds_64_mib_and_works, config, None, declared_bytes=None, reserved_bytes=MIB)
    error = stopped.measured["error"]
    assert stopped.measured["status"] == "error" and error.startswith(f"{OUT_OF_MEMORY}: it reached ")
    peak = stopped.measured["peak_memory_mb"]
    assert peak > 64 and ", past its estimate of 1 MiB, when the machine had 1,024 MiB left; " in error
    # the declaration it advises: a quarter above the peak, rounded up to hundreds of MiB
    assert f"declare hydra.launcher.run_memory_mb={math.ceil(1.25 * peak / 100) * 100} or more" in error
    # within its reservation, a run on the same short machine is not stopped by the watch
    within = measure_within_limits(measure, config, None, declared_bytes=None, reserved_bytes=2**40)
    assert within.measured["status"] == "ok"


def test_the_peak_is_the_runs_own() -> None:
    reset_peak()
    before = peak_resident_bytes()
    held = bytearray(128 * MIB)
    assert peak_resident_bytes() - before >= 120 * MIB
    del held
    reset_peak()
    assert peak_resident_bytes() < before + 64 * MIB
