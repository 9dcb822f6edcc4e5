"""The hybrid backend beyond rings and direct steps (engine/backends/hybrid.py, reduction.py; docs/hybrid-backend.md):
halving-doubling (XOR exchanges folded onto the simulated groups as involutions, `XorFold`), double binary trees
(where the whole network is simulated), and Chakra traces' process-group collectives; and what it still refuses.

Expected values: exact identities (a folded XOR exchange is a permutation and an involution; a lossless episode
leaves phase's figure to the picosecond) and, for the lossy case, the packet engine's own run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_chakra import coll, node, write_trace

import engine
from engine.backends.reduction import Reduction, XorFold
from engine.config import ConfigError, load_config
from engine.simulation import Simulation
from engine.system.phase import FluidPhases, StageDemand

HALVING_DOUBLING = {"all_reduce": "halving_doubling", "all_gather": "halving_doubling",
                    "reduce_scatter": "halving_doubling"}
ALL_REDUCE = {"type": "collective", "op": "all_reduce", "bytes": 1 << 20, "iterations": 1}


def leaf_spine(backend: str, system: dict[str, Any], workload: dict[str, Any], spines: int = 16,
               buffer_kb: float = 3_072, npus: int = 128) -> dict[str, Any]:
    """128 NPUs, 16 a leaf (8 leaves: the reduction simulates 4 of them), 100 Gb/s everywhere."""
    return {"engine": {"backend": backend},
            "network": {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": spines,
                        "uplink_gbps": 100, "buffer_kb": buffer_kb},
            "system": system, "workload": workload}


def runs_row(config: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = engine.run(config)["runs"][0]
    return row


@pytest.mark.parametrize("groups", [(0, 1, 2, 3), (0, 1, 5, 9), (2, 7, 8, 13)])
def test_a_folded_xor_exchange_is_a_permutation_and_an_involution(groups: tuple[int, ...]) -> None:
    # 256 NPUs, 16 leaves of 16: at every mask each simulated rank's partner lands on one simulated rank, each
    # simulated rank receives exactly one message, from the rank it sends to; a partner in a simulated group is
    # itself, one in another group lands in another simulated group (its leaf's uplinks crossed, as in the run)
    config = load_config({"engine": {"backend": "hybrid"},
                          "network": {"topology": "leaf_spine", "npus": 256, "hosts_per_leaf": 16, "spines": 2}})
    fold = XorFold(Reduction(config, groups))
    ranks = fold.ranks
    for mask in (1 << bit for bit in range(8)):
        targets = [fold.position(rank, rank ^ mask) for rank in ranks]
        assert sorted(targets) == list(range(len(ranks)))
        for index, (rank, target) in enumerate(zip(ranks, targets)):
            partner = rank ^ mask
            assert fold.position(ranks[target], ranks[target] ^ mask) == index
            if partner in ranks:
                assert ranks[target] == partner
            else:
                assert ranks[target] // 16 != rank // 16 and ranks[target] % 16 == partner % 16


def test_a_stage_s_whole_messages_fill_a_port_they_reach_faster_than_it_drains() -> None:
    # a switch of 5 hosts: 4 messages of 30,000 wire bytes each into host 0's port at once, arriving at 4x its
    # rate: it sends one byte on for every four that come, so 3/4 of the 120,000 bytes queue there (the rule that
    # opens an episode for halving-doubling and trees); a port fed at its own rate holds none
    config = load_config({"network": {"topology": "switch", "npus": 5, "buffer_kb": 64}})
    sim = Simulation(config, False)
    phases = FluidPhases(sim.eventlist, sim.topology, config.segment_bytes)
    port = sim.topology.links.index(sim.topology.down[0])
    link_bytes, arrival = np.zeros(len(sim.topology.links)), np.zeros(len(sim.topology.links))
    link_bytes[port] = 4 * 30_000
    arrival[port] = 4 * phases.capacity_bytes_per_ps[port]
    none = np.zeros(len(link_bytes), dtype=np.int64)
    stage = StageDemand(link_bytes, link_bytes, 1.0, 0, none, np.zeros(len(link_bytes)), arrival)
    assert phases.stage_queue_share(stage) == pytest.approx(0.75 * 120_000 / (64 * 1024))
    arrival[port] /= 4
    assert phases.stage_queue_share(stage) == 0.0


@pytest.mark.parametrize(("system", "npus"), [(HALVING_DOUBLING, 128), ({"all_reduce": "double_binary_tree"}, 64)])
def test_a_lossless_episode_of_halving_doubling_or_a_tree_leaves_phase_s_figure(system: dict[str, Any],
                                                                                npus: int) -> None:
    # 3 MiB buffers: the stages' whole messages fill a port past half its buffer (an episode opens: on 4 of
    # the 8 leaves, on the 4 leaves of 64 NPUs whole), and nothing is dropped there: phase's time to the picosecond
    hybrid = runs_row(leaf_spine("hybrid", system, ALL_REDUCE, npus=npus))
    phase = runs_row(leaf_spine("phase", system, ALL_REDUCE, npus=npus))
    assert hybrid["hybrid_packet_sims"] >= 1 and hybrid["drops"] == 0
    assert hybrid["iteration_time_s"] == phase["iteration_time_s"]


def test_a_lossy_halving_doubling_loses_packets_as_the_packet_engine_does() -> None:
    # 2 spines, 128 KiB: the exchanges across leaves collide on the uplinks; the packet engine times out
    # (0.80 s with 104 timeouts), the hybrid too, within a factor 1.5 of it (0.60 s), phase not at all
    packet = runs_row(leaf_spine("packet", HALVING_DOUBLING, ALL_REDUCE, spines=2, buffer_kb=128))
    hybrid = runs_row(leaf_spine("hybrid", HALVING_DOUBLING, ALL_REDUCE, spines=2, buffer_kb=128))
    phase = runs_row(leaf_spine("phase", HALVING_DOUBLING, ALL_REDUCE, spines=2, buffer_kb=128))
    assert packet["timeouts"] > 0 and hybrid["timeouts"] > 0
    assert 1 / 1.5 <= hybrid["iteration_time_s"] / packet["iteration_time_s"] <= 1.5
    assert phase["iteration_time_s"] < hybrid["iteration_time_s"] / 100


def process_group_trace(folder: Path, npus: int, sends: bool = False) -> str:
    """Each NPU all-reduces 1 MiB over its half of the NPUs (a process group spanning four leaves), then,
    with `sends`, sends 4 KiB to its peer in the other half and receives its peer's."""
    half = npus // 2
    per_rank = []
    for rank in range(npus):
        nodes = [coll(1, "ALL_REDUCE", 1 << 20, pg_name=f"half{rank // half}")]
        if sends:
            peer = (rank + half) % npus
            nodes += [node(2, "COMM_SEND_NODE", deps=(1,), comm_src=rank, comm_dst=peer, comm_size=4_096),
                      node(3, "COMM_RECV_NODE", deps=(1,), comm_src=peer, comm_dst=rank, comm_size=4_096)]
        per_rank.append(nodes)
    return write_trace(folder, per_rank)


def test_a_chakra_trace_s_process_group_collectives_are_replayed_and_lossless_equal_phase(tmp_path: Path) -> None:
    workload = {"type": "chakra", "path": process_group_trace(tmp_path / "groups", 128), "duration_unit": "us"}
    hybrid = runs_row(leaf_spine("hybrid", HALVING_DOUBLING, workload))
    phase = runs_row(leaf_spine("phase", HALVING_DOUBLING, workload))
    assert hybrid["hybrid_packet_sims"] >= 1 and hybrid["drops"] == 0
    assert hybrid["iteration_time_s"] == phase["iteration_time_s"]


@pytest.mark.parametrize(("change", "key"), [
    ("sends", "workload.path"),  # point-to-point sends are not phases: never replayed
    ("flows", "workload.type"),  # TCP flows: the packet engine's
    ("pods of 25", "system.all_reduce"),  # halving-doubling's exchanges would split the groups folded whole
    ("folded tree", "system.all_reduce"),  # 128 NPUs, 4 of 8 leaves simulated: a parent's two children folded to one
])
def test_what_it_does_not_reduce_is_refused_in_one_line(change: str, key: str, tmp_path: Path) -> None:
    config = leaf_spine("hybrid", HALVING_DOUBLING, ALL_REDUCE, npus=64)
    if change == "sends":
        config["workload"] = {"type": "chakra", "path": process_group_trace(tmp_path / "sends", 64, sends=True)}
    elif change == "flows":
        config["workload"] = {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 1_000}
    elif change == "folded tree":
        config = leaf_spine("hybrid", {"all_reduce": "double_binary_tree"}, ALL_REDUCE)
    else:
        config["network"] = {"topology": "fat_tree", "npus": 128, "fat_tree_k": 10}
    with pytest.raises(ConfigError) as refused:
        engine.run(config)
    assert refused.value.key == key and "\n" not in str(refused.value) and "engine.backend=hybrid" in str(refused.value)
