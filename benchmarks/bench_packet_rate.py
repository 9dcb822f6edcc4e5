"""The packet engine's per-packet speed on TCP (issue 44): packets and events per wall second of the
event loop alone, on three scenarios, each run in a fresh child process, interleaved, medians.

Scenarios:
  bulk       bench_engine.py's bulk flow (the issue's): one TCP NewReno+SACK flow of --bulk-bytes
             (100 MB) over one 10 Gb/s point-to-point link of 10 us each way, no timestamps, 128 KiB
             windows, delayed ACKs; built from engine parts, as htsim's and ns-3's programs are
The others go through the config (`engine.run`'s path), with the engine's TCP defaults (NewReno +
SACK, delayed ACKs) but, as htsim's TCP, no handshake, no timestamps, no host qdisc or TCP Small
Queues and no transmit jitter; 10 Gb/s links of 10 us:
  bulk_switch  the bulk flow between two hosts of one switch (`network.topology=switch`)
  incast1    16 hosts each sending 1 MB to one host through the switch, whose ports hold 100 full
             packets (buffer 100 x 1,500 bytes): drops, SACK recovery, timeouts
  incast10   the same with 10 MB per sender

Each child process runs its scenario a few times (`INNER_RUNS`) and reports its least disturbed
run (the least CPU time: on a shared machine the wall time also counts the others' turns on the
core); the table gives the median over children, and the rates per CPU second. Only the event loop
is timed (`PreparedRun.simulate`; for `bulk`, `bench_engine.bench_bulk`, whose building of two links
and a connection takes microseconds): not the config's validation nor the building of the network. Packets
are the data segments the senders sent, retransmissions included (`packets_sent`; for `bulk`, those
the receiver got: the same 69,061, nothing is lost); events are the event list's (`events`).

`--python A B ...` runs each measurement with every interpreter given in turn (say, a checkout before
an optimisation and one after, each with its own venv): the runs interleave, A B, B A, A B..., so
the machine's load falls on both alike, and the table gives each one's median and the ratio of medians
to the first.

Usage: python benchmarks/bench_packet_rate.py [--scenarios bulk bulk_switch incast1 incast10] [--repeat 5]
                                              [--python PY1 PY2 ...] [--bulk-bytes 1e8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

SCENARIOS = ("bulk", "bulk_switch", "incast1", "incast10")
# runs of a scenario in one child process (the short ones several: each takes tens of milliseconds)
INNER_RUNS = {"bulk": 10, "bulk_switch": 5, "incast1": 20, "incast10": 3}
BUFFER_PACKETS = 100
MTU_BYTES = 1500


def scenario_config(name: str, bulk_bytes: int) -> dict[str, Any]:
    """The engine config of one scenario."""
    lean = {"tcp": {"handshake": False, "timestamps": False},
            "host": {"tsq_bytes": None, "qdisc_packets": None, "tx_jitter_ns": 0}}
    network = {"topology": "switch", "link_gbps": 10, "link_latency_us": 10, "mtu_bytes": MTU_BYTES,
               "buffer_kb": BUFFER_PACKETS * MTU_BYTES / 1024}  # bytes -> KiB
    if name == "bulk_switch":
        return {**lean, "network": {**network, "npus": 2}, "engine": {"max_sim_time_s": 100},
                "workload": {"type": "flows", "flows": [{"src": 1, "dst": 0, "bytes": bulk_bytes}]}}
    per_sender = {"incast1": 1_000_000, "incast10": 10_000_000}[name]
    return {**lean, "network": {**network, "npus": 17}, "engine": {"max_sim_time_s": 100},
            "workload": {"type": "flows", "pattern": "incast", "senders": 16, "bytes_per_flow": per_sender}}


def measure_here(name: str, bulk_bytes: int) -> dict[str, Any]:
    """One run of a scenario in this process: the event loop's wall and CPU time, its packets and events."""
    import engine
    from engine.run import cyclic_collector_paused, prepare

    if name == "bulk":
        from bench_engine import bench_bulk  # this folder is on the path of a script run from it

        with cyclic_collector_paused():
            cpu_start = time.process_time()
            result = bench_bulk(bulk_bytes)  # its two links and connection: microseconds to build
            cpu_s = time.process_time() - cpu_start
        return {"kernel": engine.KERNEL, "packets": result["packets"], "events": result["events"],
                "wall_s": result["wall_s"], "cpu_s": cpu_s, "drops": 0, "timeouts": 0}
    with cyclic_collector_paused():
        prepared = prepare(scenario_config(name, bulk_bytes))
        prepared.start()
        cpu_start = time.process_time()
        start = time.perf_counter()
        prepared.simulate()
        wall_s = time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start
        row = prepared.rows(wall_s)["runs"][0]
        prepared.close()
    return {"kernel": engine.KERNEL, "packets": row["packets_sent"], "events": row["events"],
            "wall_s": wall_s, "cpu_s": cpu_s, "drops": row["drops"], "timeouts": row["timeouts"]}


def measure_child(python: str, name: str, bulk_bytes: int) -> dict[str, Any]:
    """A fresh process of `python` (its own checkout's engine) runs the scenario `INNER_RUNS[name]`
    times; its least disturbed run (the least CPU time) counts."""
    command = [python, os.path.abspath(__file__), "--one", name, "--bulk-bytes", str(bulk_bytes)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    runs = [json.loads(line) for line in output.strip().splitlines()]
    return min(runs, key=lambda run: run["cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--repeat", type=int, default=5, help="runs of each scenario per interpreter (median)")
    parser.add_argument("--python", nargs="+", default=[sys.executable],
                        help="interpreters to compare, each with its own checkout's engine installed")
    parser.add_argument("--bulk-bytes", type=float, default=1e8, help="the bulk flow's size (default 1e8)")
    parser.add_argument("--one", choices=SCENARIOS, help=argparse.SUPPRESS)  # a child's single run
    args = parser.parse_args()
    bulk_bytes = int(args.bulk_bytes)
    if args.one:
        for _ in range(INNER_RUNS[args.one]):
            print(json.dumps(measure_here(args.one, bulk_bytes)))
        return
    loads = [os.getloadavg()[0]]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in args.scenarios:
        for repeat in range(args.repeat):
            # interleaved, in turn first: A B, B A, A B ... (the run just after another is often slower)
            for python in (args.python if repeat % 2 == 0 else args.python[::-1]):
                results.setdefault((name, python), []).append(measure_child(python, name, bulk_bytes))
        loads.append(os.getloadavg()[0])
    print(f"median of {args.repeat} runs each, interleaved; load average (1 min) {min(loads):.1f} to "
          f"{max(loads):.1f}; rates per CPU second of the event loop")
    print(f"{'scenario':11} {'python':40} {'kernel':8} {'packets':>9} {'events':>10} {'ev/pkt':>6} "
          f"{'cpu_s':>7} {'wall_s':>7} {'M pkts/s':>9} {'M ev/s':>8} {'x first':>7}")
    for name in args.scenarios:
        first_rate = 0.0
        for python in args.python:
            runs = results[(name, python)]
            cpu_s = statistics.median(run["cpu_s"] for run in runs)
            wall_s = statistics.median(run["wall_s"] for run in runs)
            run = runs[0]
            rate = run["packets"] / cpu_s
            first_rate = first_rate or rate
            print(f"{name:11} {python[-40:]:40} {run['kernel']:8} {run['packets']:9d} {run['events']:10d} "
                  f"{run['events'] / run['packets']:6.2f} {cpu_s:7.4f} {wall_s:7.4f} {rate / 1e6:9.3f} "
                  f"{run['events'] / cpu_s / 1e6:8.3f} {rate / first_rate:7.2f}")


if __name__ == "__main__":
    main()
