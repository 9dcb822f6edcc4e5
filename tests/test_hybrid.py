"""The hybrid backend (engine/backends/hybrid.py, docs/hybrid-backend.md): phase's fluid model, and
packet-level TCP on a reduced network (the mirrored leaf pair) for the phases that risk loss.

Expected values come from exact identities (at two leaves the pair is the whole network; a lossless
episode leaves phase's figure), from RFC 6298's backoff arithmetic (a phase whose unluckiest
connection waits K timeouts lasts min_rto (2^K - 1) more), and from the packet engine's own runs."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest
from sweep_support import compose_config

import engine
from engine.backends import hybrid
from engine.backends import reduction as reduction_module
from engine.backends.reduction import Reduction
from engine.config import ConfigError, as_written, load_config
from sweep.runner import measure, stored_rows
from sweep.schema import DECLARED_COLUMNS

ASTRA_DLRM = {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 2}
MIN_RTO_MS = 200  # tcp.min_rto_ms's default: the first timeout of a connection with an RTT sample
PACKET_128_ITERATION_MS = 6_000  # packet engine, 128 NPUs, 16 a leaf, 2 spines, 128 KiB (DESIGN.md's table)
PACKET_128_TIMEOUTS = 78_312  # the same run's timeouts (DESIGN.md's table)
TRANSFER_MS = 1.0  # an all-to-all's time besides its RTO waits (98,304 bytes an NPU at 100 Gb/s: microseconds)


def leaf_spine(backend: str, npus: int, workload: dict[str, Any], spines: int = 2, buffer_kb: float = 128,
               exact_timing: bool = False, **engine_keys: Any) -> dict[str, Any]:
    """16 hosts a leaf at 100 Gb/s, 1 us links: the leaf-spine of DESIGN.md's collapse table. With
    `exact_timing`, hosts without transmit jitter (`host.tx_jitter_ns=0`): where a test asserts an exact
    identity between two runs whose packets cross different networks (the reduced one and the full one)
    or different numbers of simulations (memoised or not), which draw the jitter differently."""
    config = {"engine": {"backend": backend, **engine_keys},
              "network": {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": spines,
                          "uplink_gbps": 100, "buffer_kb": buffer_kb},
              "workload": workload}
    if exact_timing:
        config["host"] = {"tx_jitter_ns": 0}
    return config


def rto_chain_ms(waves: int) -> float:
    """How long a phase waits for `waves` timeouts in a row (RFC 6298: the RTO doubles at each)."""
    return MIN_RTO_MS * (2**waves - 1)


def waves_of(duration_ms: float) -> int:
    """The number of RTO waves of an all-to-all that lasted `duration_ms`: it is a whole chain of them
    plus less than `TRANSFER_MS` of transfer (asserted)."""
    waves = min(range(12), key=lambda k: abs(duration_ms - rto_chain_ms(k)))
    assert 0 <= duration_ms - rto_chain_ms(waves) < TRANSFER_MS, duration_ms
    return waves


def all_to_all_ms(rows: dict[str, Any]) -> list[float]:
    return [row["duration_s"] * 1e3 for row in rows["collectives"] if row["op"] == "all_to_all"]


def hybrid_and_packet(network: dict[str, Any], workload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rows of one config on hybrid and on the packet engine."""
    hybrid, packet = (engine.run({"engine": {"backend": backend}, "network": network, "workload": workload})
                      for backend in ("hybrid", "packet"))
    return hybrid, packet


def assert_same_run(hybrid: dict[str, Any], packet: dict[str, Any]) -> None:
    """Every collective's start and end, the iteration time and the packet counters are equal."""
    assert [(c["start_s"], c["end_s"]) for c in hybrid["collectives"]] == \
        [(c["start_s"], c["end_s"]) for c in packet["collectives"]]
    for column in ("iteration_time_s", "timeouts", "retransmits", "drops"):
        assert hybrid["runs"][0][column] == packet["runs"][0][column], column


# -- (a) at two leaves the mirrored pair is the whole network -------------------------------------

def test_at_two_leaves_hybrid_all_to_alls_are_the_packet_runs_to_the_picosecond() -> None:
    # 32 NPUs = 2 x 16 a leaf: the reduced network is the network itself, every rank is simulated
    # and no peer is folded. Nothing else runs, so each all-to-all's episode is exactly the full
    # run's, and connection state carries from one to the next in both (three in a row)
    workload = {"type": "collective", "op": "all_to_all", "bytes": 98_304, "iterations": 3}
    hybrid = engine.run(leaf_spine("hybrid", 32, workload))
    packet = engine.run(leaf_spine("packet", 32, workload))
    assert hybrid["runs"][0]["timeouts"] > 0 and hybrid["runs"][0]["hybrid_packet_sims"] == 3
    assert_same_run(hybrid, packet)  # one leaf pair: counters scaled by L / 2 = 1
    assert [waves_of(ms) for ms in all_to_all_ms(hybrid)] == [1, 1, 1]


def test_at_two_leaves_a_dlrm_iteration_is_the_packet_runs_but_for_its_fluid_all_reduces() -> None:
    # astra_dlrm on 32 NPUs: the first all-to-all starts alone on fresh connections, so it is the full
    # run's exactly. The all-reduces are not flagged (they do not overflow a port) and stay fluid:
    # their times part from the packet engine's by microseconds, and the ring messages of those that
    # start during the backward all-to-all's RTO waits do not cross the reduced network, as they do
    # the full one; so the iteration agrees to a few microseconds, not to the picosecond
    hybrid = engine.run(leaf_spine("hybrid", 32, ASTRA_DLRM, exact_timing=True))
    packet = engine.run(leaf_spine("packet", 32, ASTRA_DLRM, exact_timing=True))
    h, p = hybrid["runs"][0], packet["runs"][0]
    first = [c for c in hybrid["collectives"] if c["op"] == "all_to_all"][0]
    first_packet = [c for c in packet["collectives"] if c["op"] == "all_to_all"][0]
    assert (first["start_s"], first["end_s"]) == (first_packet["start_s"], first_packet["end_s"])
    assert [waves_of(ms) for ms in all_to_all_ms(hybrid)] == [waves_of(ms) for ms in all_to_all_ms(packet)]
    assert abs(h["iteration_time_s"] - p["iteration_time_s"]) < 10e-6


def test_a_leaf_spines_four_leaves_receive_what_a_full_runs_leaf_receives_one_sender_leaf_per_distance() -> None:
    # 8 leaves of 2 hosts, leaves 1, 2, 5 and 6 simulated (m = 4). A peer d leaves on from its sender
    # (d = 1..7) lands in simulated leaf (s + 1 + d mod 3) mod 4 at its own position: at each distance
    # the four leaves send to four different leaves (a permutation, as the full run's leaves do), and a
    # leaf takes the other leaves' peers from the three others: d = 1, 4, 7 from s - 2, d = 2, 5 from
    # s - 3 and d = 3, 6 from s - 1 (3 + 2 + 2 = G - 1 = 7 leaves' worth, as in the full run)
    config = load_config({"network": {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 2,
                                                  "spines": 1}})
    reduction = Reduction(config, (1, 2, 5, 6))
    assert reduction.ranks == [2, 3, 4, 5, 10, 11, 12, 13]
    for distance in range(1, 8):
        receivers = sorted(reduction.position(sender, (sender + 2 * distance) % 16) // 2
                           for sender in (2, 4, 10, 12))  # each simulated leaf's first host
        assert receivers == [0, 1, 2, 3]
    senders_into_first: Counter[int] = Counter()  # simulated leaf 0 (leaf 1 of the full run), from the first hosts
    for sender in (4, 10, 12):
        for peer in range(16):
            if peer // 2 != sender // 2 and reduction.position(sender, peer) in (0, 1):
                senders_into_first[sender // 2] += 1
    assert senders_into_first == {5: 3 * 2, 2: 2 * 2, 6: 2 * 2} and sum(senders_into_first.values()) == 7 * 2
    assert reduction.position(2, 3) == reduction.ranks.index(3)  # a peer in the sender's own leaf is itself


def test_a_network_no_larger_than_the_pairs_is_simulated_whole() -> None:
    # 16 NPUs on 4-host leaves: the two pairs would hold all 4 leaves, as many connections as the whole
    # network (each rank to every other NPU), so the whole network is simulated instead, one packet
    # simulation an episode: the packet run itself
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    network = {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 100,
               "buffer_kb": 32}
    hybrid, packet = hybrid_and_packet(network, workload)
    assert hybrid["runs"][0]["drops"] > 0 and hybrid["runs"][0]["hybrid_packet_sims"] == 2  # 2 episodes, 1 network
    assert_same_run(hybrid, packet)


def test_at_two_pods_hybrid_on_a_fat_tree_is_the_packet_run_to_the_picosecond() -> None:
    # k = 4, 8 NPUs: two pods of (k/2)^2 = 4 hosts, the pod pair is the whole fat tree, routed on the
    # full run's ECMP hash (`path_for_hash`); 25 Gb/s switch links (4:1) and 32 KiB buffers lose packets
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    network = {"topology": "fat_tree", "npus": 8, "uplink_gbps": 25, "buffer_kb": 32}
    hybrid, packet = hybrid_and_packet(network, workload)
    assert hybrid["runs"][0]["drops"] > 0 and hybrid["runs"][0]["hybrid_packet_sims"] == 2
    assert_same_run(hybrid, packet)


def test_at_two_edge_switches_hybrid_on_a_fat_tree_is_the_packet_run_to_the_picosecond() -> None:
    # k = 8, 8 NPUs: one pod, two edge switches of k/2 = 4 hosts; with fewer than two pods the reduction's
    # groups are edge switches (engine.hybrid_fat_tree_group=auto), and their pair, in one pod as in the
    # full run, is the whole fat tree
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    network = {"topology": "fat_tree", "npus": 8, "fat_tree_k": 8, "uplink_gbps": 25, "buffer_kb": 32}
    hybrid, packet = hybrid_and_packet(network, workload)
    assert hybrid["runs"][0]["drops"] > 0 and hybrid["runs"][0]["hybrid_packet_sims"] == 2
    assert_same_run(hybrid, packet)


@pytest.mark.parametrize("network", [
    {"topology": "dumbbell", "npus": 8, "bottleneck_gbps": 25, "bottleneck_latency_us": 1, "buffer_kb": 32},
    {"topology": "rail_optimized", "npus": 16, "npus_per_node": 4, "hosts_per_leaf": 2, "spines": 1,
     "uplink_gbps": 25, "buffer_kb": 32},
    # a node's 4 NICs on two leaves of 2: no leaf holds whole nodes, so it is simulated whole
    {"topology": "hierarchical", "npus": 16, "npus_per_node": 4, "scaleout": "leaf_spine", "hosts_per_leaf": 2,
     "spines": 1, "uplink_gbps": 25, "buffer_kb": 32},
])
def test_a_network_not_reduced_in_groups_is_simulated_whole_the_packet_run(network: dict[str, Any]) -> None:
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    hybrid, packet = (engine.run({"engine": {"backend": backend}, "network": network, "host": {"tx_jitter_ns": 0},
                                  "workload": workload}) for backend in ("hybrid", "packet"))
    assert hybrid["runs"][0]["drops"] > 0 and hybrid["runs"][0]["hybrid_packet_sims"] == 2  # 2 episodes, 1 network
    assert_same_run(hybrid, packet)


@pytest.mark.parametrize("scaleout", [
    # 64 NPUs, nodes of 4 on leaves of 8 NICs (two nodes): four leaves simulated together, as a leaf-spine's
    {"scaleout": "leaf_spine", "hosts_per_leaf": 8, "spines": 4, "uplink_gbps": 100},
    # k = 6 with nodes of 3: pods of 9 NICs hold 3 nodes, edge switches of 3 one node
    {"scaleout": "fat_tree", "fat_tree_k": 6, "uplink_gbps": 25},
])
def test_hierarchical_scaleouts_reduce_in_groups_of_whole_nodes(scaleout: dict[str, Any]) -> None:
    per_node = 3 if scaleout["scaleout"] == "fat_tree" else 4
    npus = 54 if scaleout["scaleout"] == "fat_tree" else 64
    network = {"topology": "hierarchical", "npus": npus, "npus_per_node": per_node, "buffer_kb": 32, **scaleout}
    config = load_config({"engine": {"backend": "hybrid"}, "network": network})
    groups = reduction_module.reduced_groups(config)
    assert groups is not None and groups.hosts % per_node == 0
    assert reduction_module.group_size(config) == groups.hosts  # reduced, not simulated whole
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    hybrid, packet = (engine.run({"engine": {"backend": backend}, "network": network, "workload": workload})
                      for backend in ("hybrid", "packet"))
    assert hybrid["runs"][0]["status"] == "ok" and packet["runs"][0]["drops"] > 0
    assert hybrid["runs"][0]["drops"] > 0
    # each all-to-all waits as many RTO waves as the packet run's (RFC 6298's doubling)
    assert [waves_of(ms) for ms in all_to_all_ms(hybrid)] == [waves_of(ms) for ms in all_to_all_ms(packet)]


def test_rails_reduce_to_groups_of_nodes_every_rail_or_one_from_its_relays() -> None:
    # 128 GPUs: 8 groups of 2 nodes of 8 on their 8 rail leaves, 1 spine at 100 Gb/s (2:1 at the rail leaves).
    # A group's GPUs reach the others through its rail leaves' uplinks alone: four groups are simulated
    # together, as a leaf-spine's leaves, 4 x 16 ranks each to every other GPU; each all-to-all waits as many
    # RTO waves as the packet run's
    network = {"topology": "rail_optimized", "npus": 128, "npus_per_node": 8, "hosts_per_leaf": 2, "spines": 1,
               "uplink_gbps": 100, "buffer_kb": 64}
    config = load_config({"engine": {"backend": "hybrid"}, "network": network})
    assert reduction_module.replayed_rails(config) == 1  # `auto`: every rail fits
    assert reduction_module.reduced_connections(config) == 4 * 16 * 127
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    hybrid, packet = hybrid_and_packet(network, workload)
    assert hybrid["runs"][0]["hybrid_packet_sims"] == 2 and packet["runs"][0]["drops"] > 0
    packet_waves = [waves_of(ms) for ms in all_to_all_ms(packet)]
    assert [waves_of(ms) for ms in all_to_all_ms(hybrid)] == packet_waves
    # One rail (`engine.hybrid_rails=one`; `auto` where every rail would pass the connections' limit): with
    # PXN the rails are alike and share no link, so only the messages to rail 0's GPUs are replayed, each from
    # the NIC that relays it, an eighth of the connections (4 x 16 ranks to the 16 GPUs of rail 0), with the
    # same RTO waves
    one = {"backend": "hybrid", "hybrid_rails": "one"}
    assert reduction_module.reduced_connections(load_config({"engine": one, "network": network})) == 4 * 16 * 16
    one_rail = engine.run({"engine": one, "network": network, "workload": workload})
    assert [waves_of(ms) for ms in all_to_all_ms(one_rail)] == packet_waves
    # at 1:1 (2 spines) nothing is lost on the packet engine, nor on one rail from its relays (from each GPU's
    # own scale-up link at its full rate, seven of them filled a relay's scale-up port and dropped packets)
    lossless = {**network, "spines": 2}
    one_rail = engine.run({"engine": one, "network": lossless, "workload": workload})
    packet = engine.run({"engine": {"backend": "packet"}, "network": lossless, "workload": workload})
    assert one_rail["runs"][0]["drops"] == packet["runs"][0]["drops"] == 0
    # without PXN a message leaves by its sender's rail and arrives by its receiver's: every rail, always
    no_pxn = load_config({"engine": one, "network": {**network, "pxn": False}})
    assert reduction_module.replayed_rails(no_pxn) == 1
    # `auto` at 9,216 GPUs with 32 nodes a rail leaf: every rail would be 4 x 256 ranks x 9,215 peers; one rail
    # is 4 x 256 x 1,152, which the limit holds
    cluster = load_config({"engine": {"backend": "hybrid"}, "network": {
        "topology": "rail_optimized", "npus": 9216, "npus_per_node": 8, "hosts_per_leaf": 32, "spines": 8}})
    assert reduction_module.replayed_rails(cluster) == 8
    assert reduction_module.reduced_connections(cluster) == 4 * 256 * 1152 <= reduction_module.REDUCED_CONNECTIONS_MAX


@pytest.mark.parametrize("group", ["pod", "edge"])
def test_a_fat_tree_with_a_partial_pod_folds_it_and_waits_the_packet_runs_rto_waves(group: str) -> None:
    # k = 6, 48 NPUs: five whole pods of 9 and a partial one of 3; sixteen edge switches of 3. The pods'
    # reduction simulates two pairs of whole pods and folds the other pod and the partial one onto them;
    # the edges' simulates two pairs of edge switches (each pair in two pods, as most of a host's peers
    # are) and folds the other twelve. Each all-to-all is a whole RTO chain with as many waves as the full
    # packet run's (RFC 6298's doubling: 200 + 400 ms, twice)
    workload = {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2}
    network = {"topology": "fat_tree", "npus": 48, "uplink_gbps": 25, "buffer_kb": 32}
    hybrid, packet = (engine.run({"engine": {"backend": backend, "hybrid_fat_tree_group": group}, "network": network,
                                  "workload": workload}) for backend in ("hybrid", "packet"))
    assert hybrid["runs"][0]["status"] == "ok" and hybrid["runs"][0]["drops"] > 0
    assert hybrid["runs"][0]["hybrid_packet_sims"] == 4  # 2 episodes, 2 pairs: reduced, not the whole network
    assert [waves_of(ms) for ms in all_to_all_ms(hybrid)] == [waves_of(ms) for ms in all_to_all_ms(packet)] == [2, 2]


# -- (b) lossless: phase's figure, exactly ---------------------------------------------------------

@pytest.mark.parametrize(("spines", "buffer_kb", "episodes"), [
    (16, 128, False),  # 1:1: no port fills past half its buffer, no episode
    (2, 1024, True),  # 1 MiB buffers hold every opening window; more than half full: an episode, lossless
    (4, 296, True),  # ports filled near their buffers; the reduced runs drop nothing (nor does the packet engine)
])
def test_a_lossless_configuration_keeps_phases_iteration_time_exactly(spines: int, buffer_kb: float,
                                                                       episodes: bool) -> None:
    hybrid = engine.run(leaf_spine("hybrid", 64, ASTRA_DLRM, spines, buffer_kb))["runs"][0]
    phase = engine.run(leaf_spine("phase", 64, ASTRA_DLRM, spines, buffer_kb))["runs"][0]
    assert hybrid["drops"] == hybrid["timeouts"] == hybrid["retransmits"] == 0
    assert (hybrid["hybrid_packet_sims"] > 0) == episodes
    assert hybrid["incast_phases"] == phase["incast_phases"]
    for column in ("iteration_time_s", "all_to_all_s", "all_reduce_s", "max_link_utilisation", "max_port_flows"):
        assert hybrid[column] == phase[column], column


def test_a_replay_starts_no_earlier_than_the_replays_of_the_phases_ended_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 spines, 280 KiB: the backward all-to-all's replays outlast its fluid time without a drop, so the
    # phase ends at phase's figure while its packets are still in flight on the reduced networks. A
    # packet run starts the next iteration's all-to-all only once they are in: on each pair, the replay
    # of a phase that starts while the replay of one ended before it still runs starts as much later than
    # the phase as that replay finished after its phase's end (the gap between the two phases in the
    # full run, the endpoint delay here, is kept). Without this order the two all-to-alls overlapped on
    # the reduced networks and lost packets that the full run does not (docs/hybrid-backend.md)
    replays: list[dict[str, Any]] = []  # each pair's replay of each phase: the phase, its start and finish
    replay_phase = hybrid.replay_phase

    def recorded_replay(episodes: Any, groups: Any, programs: Any, symmetric: Any, flow_ids: Any, delay_ps: int,
                        on_finished: Any) -> Any:
        replayed, pair = on_finished.args  # HybridPhases.replay_finished's arguments: the phase and the pair
        record = {"phase": replayed, "pair": pair}
        replays.append(record)
        eventlist = episodes.sim.eventlist

        def finished() -> None:
            record["finish_ps"] = eventlist.now_ps
            on_finished()

        run = replay_phase(episodes, groups, programs, symmetric, flow_ids, delay_ps, finished)

        class Started:  # the run, its start recorded
            def start(self) -> None:
                record["start_ps"] = eventlist.now_ps
                run.start()
        return Started()

    monkeypatch.setattr(hybrid, "replay_phase", recorded_replay)
    config = leaf_spine("hybrid", 64, ASTRA_DLRM, spines=4, buffer_kb=280, exact_timing=True)
    hybrid_run = engine.run(config)["runs"][0]
    lagged = 0
    for ended in {id(r["phase"]): r["phase"] for r in replays if r["phase"].ended_ps >= 0}.values():
        for pair in {r["pair"] for r in replays}:
            finish_ps = next(r["finish_ps"] for r in replays if r["phase"] is ended and r["pair"] == pair)
            after = [r for r in replays
                     if r["pair"] == pair and ended.ended_ps <= r["phase"].start_ps < finish_ps]
            for successor in after:
                lagged += 1
                assert successor["start_ps"] == finish_ps + successor["phase"].start_ps - ended.ended_ps
    assert lagged > 0  # the configuration exercises it
    phase_run = engine.run({**config, "engine": {"backend": "phase"}})["runs"][0]
    assert hybrid_run["drops"] == 0 and hybrid_run["iteration_time_s"] == phase_run["iteration_time_s"]


# -- (c) lossy: within one RTO wave of the packet engine ----------------------------------------

def test_a_lossy_128_npu_iteration_lands_within_one_rto_wave_of_the_packet_run() -> None:
    # the packet engine: 6,000 ms an iteration = two all-to-alls of 3,000 ms = 200 (2^4 - 1): K = 4.
    # 8 leaves: hybrid simulates 4 of them in one network, each standing for 2 of the full run's leaves
    packet_waves = 4
    assert 2 * rto_chain_ms(packet_waves) == PACKET_128_ITERATION_MS
    rows = engine.run(leaf_spine("hybrid", 128, ASTRA_DLRM, max_sim_time_s=60.0))  # two 6 s iterations
    run = rows["runs"][0]
    assert run["status"] == "ok" and run["hybrid_packet_sims"] > 0
    for ms in all_to_all_ms(rows):  # each all-to-all a whole RTO chain, one wave from the packet run's at most
        assert abs(waves_of(ms) - packet_waves) <= 1
    iteration_ms = run["iteration_time_s"] * 1e3
    assert 2 * rto_chain_ms(packet_waves - 1) < iteration_ms < 2 * rto_chain_ms(packet_waves + 1) + 2 * TRANSFER_MS
    # the four leaves' timeouts scaled by the two leaves each stands for, against the full run's count
    assert 0.75 < run["timeouts"] / PACKET_128_TIMEOUTS < 1.25


def test_a_near_threshold_loss_costs_one_rto_as_in_the_packet_run() -> None:
    # 4 spines, 256 KiB: the packet engine drops a few packets once in two iterations, when an
    # all-to-all meets the all-reduces, and that all-to-all waits one RTO (K = 1: 200 ms, RFC 6298's
    # floor). Hybrid simulates the whole network (4 leaves: no more than its 2 pairs would hold), and
    # the all-reduces that start during the all-to-all join its replay: one of its four all-to-alls
    # waits one RTO too
    config = leaf_spine("hybrid", 64, ASTRA_DLRM, spines=4, buffer_kb=256, exact_timing=True)
    hybrid = engine.run(config)
    packet = engine.run({**config, "engine": {"backend": "packet"}})
    assert sorted(waves_of(ms) for ms in all_to_all_ms(packet)) == [0, 0, 0, 1]
    assert sorted(waves_of(ms) for ms in all_to_all_ms(hybrid)) == [0, 0, 0, 1]
    assert hybrid["runs"][0]["drops"] > 0
    assert abs(hybrid["runs"][0]["sim_time_s"] - packet["runs"][0]["sim_time_s"]) < TRANSFER_MS / 1e3


# -- memoisation: an episode that repeats in a settled TCP state is timed from its record -----------

def outcome(record: Any, kind: Any, offset_ps: int, due_ps: int, end_ps: int) -> None:
    phase = record.add(kind, record.open_ps + offset_ps)
    phase.due_ps, phase.end_ps = due_ps, end_ps


@pytest.mark.parametrize(("offset_ps", "due_ps", "end_ps", "alike"), [
    (0, 100, 3_000_000, True),  # the record below, again
    (0, 100, 3_030_000, True),  # 1 % later (MEMO_TOLERANCE)
    (0, 100, 3_030_304, False),  # past 1 % of the longer end: 30,303 ps of 3,030,304
    (0, 3_000_000, 3_000_000, False),  # the same end, at phase's figure this time: not alike
    (1, 100, 3_000_000, False),  # started 1 ps later after the opening: another episode
])
def test_an_episode_settles_when_every_phase_went_as_in_its_previous_occurrence(offset_ps: int, due_ps: int,
                                                                                end_ps: int, alike: bool) -> None:
    kind = (1, "all_to_all", 98_304, None, 1)
    key = (((kind, 0),), 0)
    previous = hybrid._EpisodeRecord(key, 0, {})
    outcome(previous, kind, 0, 100, 3_000_000)  # ended past its fluid end: its packets set it
    record = hybrid._EpisodeRecord(key, 5_000_000, {})
    outcome(record, kind, offset_ps, due_ps, end_ps)
    assert record.alike(previous) == alike
    other_kind = hybrid._EpisodeRecord(key, 5_000_000, {})
    outcome(other_kind, (1, "all_to_all", 2 * 98_304, None, 1), 0, 100, 3_000_000)
    assert not other_kind.alike(previous)


@pytest.mark.parametrize(("workload", "memoised"), [
    ({**ASTRA_DLRM, "iterations": 4}, True),  # its last all-to-all meets a settled state
    # the dlrm preset on 64 NPUs: each all-to-all sets ssthresh on more connections than the one before,
    # so no episode meets its predecessor's state class, and none is timed from a record
    ({**compose_config(["workload=dlrm"])["workload"], "iterations": 4}, False),
])
def test_a_memoised_run_is_the_simulated_one_with_fewer_packet_simulations(workload: dict[str, Any],
                                                                          memoised: bool) -> None:
    # Lossy runs, RTO waves in every all-to-all: an episode timed from a record gives each of its phases
    # the end its simulation gave them, so every collective, the iteration time and the packet counters
    # equal those of the run that simulates every episode; each episode is either simulated (on one
    # reduced network: 4 leaves of 8; at 64 NPUs the whole network) or timed from a record
    npus, spines, buffer_kb = (128, 1, 256) if memoised else (64, 2, 128)
    simulated, memo = (engine.run(leaf_spine("hybrid", npus, workload, spines, buffer_kb, exact_timing=True,
                                             max_sim_time_s=100.0, hybrid_memoise=on))
                       for on in (False, True))
    assert simulated["runs"][0]["timeouts"] > 0 and simulated["runs"][0]["hybrid_memo_episodes"] == 0
    assert_same_run(memo, simulated)
    episodes = simulated["runs"][0]["hybrid_packet_sims"]
    assert memo["runs"][0]["hybrid_packet_sims"] + memo["runs"][0]["hybrid_memo_episodes"] == episodes
    assert (memo["runs"][0]["hybrid_memo_episodes"] > 0) == memoised


def test_a_reduced_run_past_the_time_limit_ends_the_run_as_a_timeout() -> None:
    # one spine: the first all-to-all's RTO chain runs to 12.6 s, past a limit of 1 s
    run = engine.run(leaf_spine("hybrid", 64, ASTRA_DLRM, spines=1, max_sim_time_s=1.0))["runs"][0]
    assert run["status"] == "timeout" and run["timeouts"] > 0


def test_same_config_and_seed_same_result() -> None:
    workload = {"type": "collective", "op": "all_to_all", "bytes": 98_304, "iterations": 2}
    first, second = (engine.run(leaf_spine("hybrid", 64, workload))["runs"][0] for _ in range(2))
    measured = {"wall_s", "events_per_s", "hybrid_packet_wall_s"}
    assert {k: v for k, v in first.items() if k not in measured} == \
        {k: v for k, v in second.items() if k not in measured}


# -- (d) what it does not reduce yet is refused ----------------------------------------------------

@pytest.mark.parametrize(("overrides", "key"), [
    ({"engine": {"backend": "hybrid", "hybrid_fat_tree_group": "pod"},
      "network": {"topology": "fat_tree", "npus": 16, "fat_tree_k": 8}}, "network.npus"),  # one pod of 16
    ({"network": {"topology": "fat_tree", "npus": 4, "fat_tree_k": 8}}, "network.npus"),  # one edge switch of 4
    ({"network": {"topology": "ring", "npus": 8}}, "network.topology"),
    # simulated whole (a node's NICs on leaves of 2), past the connections it may hold
    ({"network": {"topology": "hierarchical", "npus": 2048, "npus_per_node": 4, "scaleout": "leaf_spine",
                  "hosts_per_leaf": 2}}, "network.npus"),
    ({"network": {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": 16, "spines": 2, "uplink_gbps": 100}},
     "network.npus"),
    ({"network": {"topology": "switch", "npus": 1_087}}, "network.npus"),  # 1,087 x 1,086 connections
    ({"engine": {"backend": "hybrid", "incast_rto": True}}, "engine.incast_rto"),  # its RTOs are simulated
    # k = 8 with nodes of 8: an edge switch's 4 NICs hold half a node, so only pods (16 NICs, 2 nodes) reduce
    ({"engine": {"backend": "hybrid", "hybrid_fat_tree_group": "edge"},
      "network": {"topology": "hierarchical", "npus": 128, "npus_per_node": 8, "scaleout": "fat_tree",
                  "fat_tree_k": 8}}, "engine.hybrid_fat_tree_group"),
])
def test_what_it_cannot_reduce_is_refused_naming_the_key(overrides: dict[str, Any], key: str) -> None:
    config = {"engine": {"backend": "hybrid"}, "network": {"topology": "switch", "npus": 8},
              "workload": {"type": "collective", "op": "all_reduce", "bytes": 1_048_576}}
    config.update(overrides)
    with pytest.raises(ConfigError) as refused:
        engine.run(config)
    assert refused.value.key == key
    # one line naming the key, the value and what is allowed (on hybrid, or which backend allows it)
    assert "\n" not in str(refused.value) and f"{key}={as_written(refused.value.value)} " in str(refused.value)
    assert "hybrid" in refused.value.allowed or key == "engine.incast_rto"


def test_every_column_it_writes_is_declared(tmp_path) -> None:
    config = compose_config([f"results_dir={tmp_path}", "name=h", "network=leaf_spine", "network.npus=8",
                             "workload=collective", "engine.backend=hybrid"])
    rows = stored_rows(config, measure(config), presets={"network": "leaf_spine"})
    assert rows["runs"][0]["status"] == "ok"
    for table, table_rows in rows.items():
        produced = {key for row in table_rows for key in row}
        assert produced <= DECLARED_COLUMNS[table].keys(), (table, produced - DECLARED_COLUMNS[table].keys())


def test_a_signal_handler_interrupts_a_long_episode_promptly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The episodes run in the compiled kernel, which runs no bytecode, so Python would defer a signal
    handler (Ctrl-C, a sweep's wall-time budget) to the episode's end; the reduced networks run in
    slices so it fires while they run, with events left before the instant they run to (one lossy
    all-to-all of 500 MB an NPU on two leaves: about 15 s of packet events on the leaf pair, the whole
    network)."""
    class Budget(Exception):
        pass

    interrupted = []  # where the handler ran: the method of the hybrid phase timer, and work left in its run

    def out_of_time(signum: int, frame: Any) -> None:
        while frame is not None and not isinstance(frame.f_locals.get("self"), hybrid.HybridPhases):
            frame = frame.f_back  # up to the hybrid phase timer the signal interrupted, if any
        if frame is None:
            interrupted.append(("elsewhere", False))
        else:  # in `_catch_up`, events left up to the instant it runs the reduced networks to
            until_ps = frame.f_locals.get("until_ps", -1)
            eventlists = [episodes.sim.eventlist for episodes in frame.f_locals["self"].episodes]
            interrupted.append((frame.f_code.co_name, any(eventlist.pending() and eventlist.next_time_ps() <= until_ps
                                                          for eventlist in eventlists)))
        raise Budget

    packet_episodes = hybrid.PacketEpisodes

    def episodes_arming_the_timer(*args: Any) -> Any:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # once the episode opens, whatever the machine's load
        return packet_episodes(*args)

    monkeypatch.setattr(hybrid, "PacketEpisodes", episodes_arming_the_timer)  # the name HybridPhases calls
    previous = signal.signal(signal.SIGALRM, out_of_time)
    try:
        with pytest.raises(Budget):
            engine.run(leaf_spine("hybrid", 32, {"type": "collective", "op": "all_to_all", "bytes": 500_000_000},
                                  max_sim_time_s=100.0))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted == [("_catch_up", True)]  # within a slice's reach, not after the whole run to `until_ps`
