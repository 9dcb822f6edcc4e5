"""Conservation of packets and bytes under random loss, and determinism.

Bookkeeping identities (no model, no tolerance):
  * every byte an application wrote is delivered exactly once, in order: after the run each
    receiver's in-order point `rcv_nxt` equals the bytes written into its connection, and every
    message callback ran exactly once;
  * once the network is quiescent (no packet on any wire), every packet that was sent was either
    received or dropped by some link:
        sum(link.drops) = (data segments sent - data segments received)
                        + (ACKs sent - ACKs received);
  * a dropped data segment has to be sent again for its bytes to arrive, and that later copy is a
    retransmission, so retransmits >= data segments dropped.
"""

from __future__ import annotations

import pytest

import engine
from engine import load_config
from engine.eventlist import EventList
from engine.simulation import Simulation
from engine.workload import FlowsDriver
from engine.workload.flows import pattern_pairs


def loss_config(pattern="permutation", cc="newreno", sack=True, seed=1, loss_rate=0.01, buffer_kb=512,
                bytes_per_flow=300_000, rounds=2, senders=None, ecn_threshold_kb=None):
    return load_config({
        "seed": seed,
        "network": {"topology": "switch", "npus": 8, "link_gbps": 100, "link_latency_us": 1.0,
                    "loss_rate": loss_rate, "buffer_kb": buffer_kb, "ecn_threshold_kb": ecn_threshold_kb},
        "tcp": {"cc": cc, "sack": sack, "min_rto_ms": 1.0},
        "workload": {"type": "flows", "pattern": pattern, "senders": senders,
                     "bytes_per_flow": bytes_per_flow, "rounds": rounds},
    })


CASES = {
    "permutation-newreno-sack": dict(pattern="permutation"),
    "permutation-newreno-nosack": dict(pattern="permutation", sack=False),
    "incast-newreno-shallow-buffer": dict(pattern="incast", senders=7, buffer_kb=32),
    "incast-cubic-nosack-shallow-buffer": dict(pattern="incast", senders=7, buffer_kb=32, cc="cubic",
                                               sack=False),
    "incast-dctcp-ecn": dict(pattern="incast", senders=7, buffer_kb=64, cc="dctcp", ecn_threshold_kb=20),
}


def prepare_flows(config):
    """(simulation, driver with start() and finished, records) of a `flows` run, wired as engine/run.py
    wires it: through `engine.prepare` where the engine has it, else Simulation + FlowsDriver."""
    prepare = getattr(engine, "prepare", None)
    if prepare is not None:
        prepared = prepare(config)
        return prepared.sim, prepared, prepared.backend.message_log()
    sim = Simulation(config, models_host_stack=True)
    workload = FlowsDriver(sim, config.workload)
    return sim, workload, workload.records


def totals(sim: Simulation) -> dict:
    senders = [c.sender for c in sim.connections]
    receivers = [c.receiver for c in sim.connections]
    return {
        "data_sent": sum(s.packets_sent for s in senders),
        "data_received": sum(r.segments_received for r in receivers),
        "acks_sent": sum(r.acks_sent for r in receivers),
        "acks_received": sum(s.acks_received for s in senders),
        "drops": sum(link.drops for link in sim.topology.links),
        "retransmits": sum(s.retransmits for s in senders),
    }


def check_conservation(sim: Simulation, expected_bytes_per_connection: int) -> dict:
    t = totals(sim)
    for connection in sim.connections:
        sender, receiver = connection.sender, connection.receiver
        assert receiver.rcv_nxt == expected_bytes_per_connection, connection.flow_id
        assert sender.stream_end == expected_bytes_per_connection
        assert sender.snd_una == sender.stream_end  # quiescent: everything acknowledged
        assert not receiver.out_of_order
    assert t["drops"] == (t["data_sent"] - t["data_received"]) + (t["acks_sent"] - t["acks_received"]), t
    data_drops = t["data_sent"] - t["data_received"]
    assert t["retransmits"] >= data_drops, t
    return t


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_flows_workload_conserves_packets_and_bytes(case, monkeypatch):
    """FlowsDriver, 2 rounds on persistent connections, 1 % random loss on every link.

    The workload stops the event list as soon as the last message is delivered (packets still on a
    wire are then abandoned, neither received nor dropped); to check the identity we need a quiescent
    network, so for this test `EventList.stop` does nothing and the run drains every event."""
    monkeypatch.setattr(EventList, "stop", lambda self: None)
    config = loss_config(**CASES[case])
    sim, workload, records = prepare_flows(config)
    workload.start()
    sim.run()
    assert not sim.time_limit_reached  # the heap ran empty before max_sim_time_s
    assert workload.finished
    rounds, per_flow = config.workload.rounds, config.workload.bytes_per_flow
    assert all(record.end_ps >= record.start_ps >= 0 for record in records)
    assert len(records) == rounds * len(sim.connections)
    t = check_conservation(sim, rounds * per_flow)
    assert t["drops"] > 0  # the loss really happened (1 % of several thousand packets)
    assert t["retransmits"] > 0


def test_simulation_api_every_message_delivered_once():
    """The same identities with connections opened through `Simulation.open_connection` and three
    messages per connection; every message callback runs exactly once, in order."""
    config = loss_config(pattern="permutation", seed=7)
    sim = Simulation(config, models_host_stack=True)
    pairs = pattern_pairs("permutation", 8, None, config.seed)
    assert sorted(src for src, _ in pairs) == list(range(8))  # a permutation: each host sends once
    assert sorted(dst for _, dst in pairs) == list(range(8))  # ... and receives once
    sizes = [100_000, 1, 50_001]
    delivered: list[tuple[int, int]] = []
    for src, dst in pairs:
        connection = sim.open_connection(src, dst)
        for index, size in enumerate(sizes):
            connection.send_message(size, lambda fid=connection.flow_id, i=index: delivered.append((fid, i)))
    sim.run()
    assert not sim.time_limit_reached
    assert sorted(delivered) == [(fid, i) for fid in range(8) for i in range(3)]
    for fid in range(8):
        assert [i for f, i in delivered if f == fid] == [0, 1, 2]  # in stream order
    t = check_conservation(sim, sum(sizes))
    assert t["drops"] > 0


def test_run_with_loss_completes_every_flow():
    # the engine's own run (with its early stop): every flow finishes and is counted
    mapping = {
        "seed": 3,
        "network": {"npus": 8, "loss_rate": 0.01},
        "tcp": {"min_rto_ms": 1.0},
        "workload": {"type": "flows", "pattern": "permutation", "bytes_per_flow": 150_000, "rounds": 2},
    }
    rows = engine.run(mapping)
    run = rows["runs"][0]
    assert run["status"] == "ok"
    assert run["flows"] == run["flows_completed"] == 16
    assert all(row["fct_s"] is not None and row["fct_s"] > 0 for row in rows["flows"])
    assert run["drops"] > 0 and run["retransmits"] > 0


VOLATILE = {"wall_s", "events_per_s"}


def _stable(rows: dict) -> dict:
    return {
        "runs": [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows["runs"]],
        "flows": rows["flows"],
    }


def _incast_mapping(seed: int) -> dict:
    return {
        "seed": seed,
        "network": {"npus": 8, "loss_rate": 0.01, "buffer_kb": 32},
        "tcp": {"min_rto_ms": 1.0},
        "workload": {"type": "flows", "pattern": "incast", "senders": 7, "bytes_per_flow": 100_000},
    }


def test_same_config_and_seed_give_identical_rows():
    first = _stable(engine.run(_incast_mapping(seed=11)))
    second = _stable(engine.run(_incast_mapping(seed=11)))
    assert first == second


def test_two_simulations_in_one_process_do_not_interact():
    # DESIGN: the event list is an instance, never a global. Interleave two simulations step by step:
    # the results must equal those of running each alone.
    alone = _stable(engine.run(_incast_mapping(seed=5)))
    from engine.run import engine_metrics

    sims = []
    for seed in (5, 6):
        sim, workload, records = prepare_flows(load_config(_incast_mapping(seed)))
        workload.start()
        sims.append((sim, workload, records))
    horizon = 0
    step = 10_000_000  # 10 us of simulated time per slice
    while not all(w.finished for _, w, _ in sims):
        horizon += step
        for sim, workload, _ in sims:
            if not workload.finished:
                sim.eventlist.run(horizon)
    sim, workload, records = sims[0]
    status, error, metrics = engine_metrics(sim, workload.finished, 1.0, records.columns())
    interleaved = _stable({"runs": [{"status": status, "error": error, **metrics.row()}], "flows": records.rows()})
    # the stepped run stops at slice boundaries, so only the simulated end time may differ; compare
    # everything else
    for row in (alone["runs"][0], interleaved["runs"][0]):
        row.pop("sim_time_s")
        row.pop("events")
    assert interleaved == alone


def test_different_seed_with_loss_gives_a_different_result():
    a = _stable(engine.run(_incast_mapping(seed=11)))
    b = _stable(engine.run(_incast_mapping(seed=12)))
    assert a != b
    # and the difference is in what the random loss did, not only in bookkeeping
    keys = ("drops", "retransmits", "sim_time_s", "packets_sent")
    assert tuple(a["runs"][0][k] for k in keys) != tuple(b["runs"][0][k] for k in keys)
