"""Packet-engine benchmark, side by side with its references in this folder (run on demand).

Scenarios:
  bulk    one TCP NewReno+SACK flow of --bytes over a 10 Gb/s point-to-point link with 10 us one-way
          delay; MSS 1448 (1488-byte packets), 128 KiB windows, delayed ACKs: ns3/ns3_tcp_bulk.cc
          sets ns-3 up the same, so both simulators carry the same packets.
  incast  16 hosts each sending 64 KiB to one host through a switch port with a 64 KiB buffer,
          10 rounds, 200 ms minimum RTO: drops, timeouts and retransmissions on the hot path.

References: ns-3.44 compiled C++ on both scenarios, our programs ns3/ns3_tcp_bulk.cc and
ns3/ns3_tcp_incast.cc (built by ns3/build_ns3.sh DIR; pass --ns3 PATH and --ns3-incast PATH to the
binaries, or --build-ns3 DIR to build both first) -- and, for the bulk transfer, the bare heapq
loop with no TCP logic (lean_loop_ceiling.py), the ceiling for pure Python.

Our engine runs with the kernel this process has (engine/kernel.py: compiled by mypyc, or pure
Python) and, when that is the compiled one, again with the pure-Python kernel in a child process.

Usage: python benchmarks/bench_engine.py [--bytes 1e8] [--repeat 5] [--ns3 /tmp/ns3-bench/ns3_tcp_bulk]
                                         [--ns3-incast /tmp/ns3-bench/ns3_tcp_incast] [--build-ns3 DIR]
Prints one table (each figure the fastest of --repeat runs): packets and events per wall second, and
the ratio to ns-3 on the same scenario (bulk rows to ns-3 bulk, the incast row to ns-3 incast; "-"
without that reference). Packets are data segments delivered (bulk) or sent by the senders,
retransmissions included (incast).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import engine
from engine import run
from engine.eventlist import EventList
from engine.kernel import PURE_PYTHON_ENV
from engine.links import Link
from engine.transport import DEFAULT_TCP_SETTINGS, TcpConnection, make_congestion_control
from engine.units import PS_PER_MS, PS_PER_S, gbps_to_bps, us_to_ps

BENCH_DIR = Path(__file__).resolve().parent
NS3_DIR = BENCH_DIR / "ns3"

# The incast scenario, shared by our engine's run and ns-3's program.
INCAST = {"senders": 16, "bytes": 64 * 1024, "rounds": 10, "buffer_bytes": 64 * 1024, "min_rto_ms": 200,
          "link_gbps": 10, "link_latency_us": 5}


def bench_bulk(nbytes: int) -> dict:
    """One bulk transfer over a point-to-point link, built from engine parts like ns-3's program."""
    eventlist = EventList()
    forward = Link(eventlist, "a->b", gbps_to_bps(10), us_to_ps(10))
    reverse = Link(eventlist, "b->a", gbps_to_bps(10), us_to_ps(10))
    settings = replace(DEFAULT_TCP_SETTINGS, mss_bytes=1448, timestamps=False, rcv_wnd_bytes=131072, delayed_ack=True,
                       delayed_ack_timeout_ps=200 * PS_PER_MS, sack=True)
    connection = TcpConnection(eventlist, settings, make_congestion_control("newreno", 1448, 10),
                               0, 0, 1, (forward,), (reverse,))
    finished_ps: list[int] = []
    connection.send_message(nbytes, lambda: (finished_ps.append(eventlist.now_ps), eventlist.stop()))
    start = time.perf_counter()
    eventlist.run(100 * PS_PER_S)
    wall_s = time.perf_counter() - start
    packets = connection.receiver.segments_received
    return {"sim": "netsweep bulk", "scenario": "bulk", "packets": packets,
            "events": eventlist.events_run, "wall_s": wall_s, "sim_time_s": finished_ps[0] / PS_PER_S}


def bench_incast() -> dict:
    """The 16-host incast through the public `engine.run` (config validation and topology included)."""
    start = time.perf_counter()
    row = run({
        "network": {"topology": "switch", "npus": INCAST["senders"] + 1, "link_gbps": INCAST["link_gbps"],
                    "link_latency_us": INCAST["link_latency_us"], "buffer_kb": INCAST["buffer_bytes"] / 1024},
        "tcp": {"min_rto_ms": INCAST["min_rto_ms"], "timestamps": False},  # as ns3_tcp_incast.cc
        "engine": {"max_sim_time_s": 60},
        "workload": {"type": "flows", "pattern": "incast", "senders": INCAST["senders"],
                     "bytes_per_flow": INCAST["bytes"], "rounds": INCAST["rounds"]},
    })["runs"][0]
    wall_s = time.perf_counter() - start
    return {"sim": "netsweep incast 16->1", "scenario": "incast", "packets": row["packets_sent"],
            "events": row["events"], "wall_s": wall_s, "sim_time_s": row["sim_time_s"],
            "note": f"drops={row['drops']} retransmits={row['retransmits']} timeouts={row['timeouts']}"}


def _result_line(command: list[str]) -> dict[str, str]:
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("RESULT"))
    return dict(re.findall(r"(\w+)=(\S+)", line))


def bench_ns3(binary: str, nbytes: int) -> dict:
    """ns-3's bulk transfer (ns3/ns3_tcp_bulk.cc); packets are the data segments its receiver's
    device received."""
    fields = _result_line([binary, f"--bytes={nbytes}"])
    return {"sim": "ns-3.44 C++ bulk", "scenario": "bulk", "reference": True,
            "packets": int(fields["rx_pkts"]), "events": int(fields["events"]),
            "wall_s": float(fields["run_s"]), "sim_time_s": float(fields["sim_time_s"])}


def bench_ns3_incast(binary: str) -> dict:
    """ns-3's incast (ns3/ns3_tcp_incast.cc) on the same scenario; packets are the data segments its
    senders' devices sent, retransmissions included, as the engine counts them."""
    fields = _result_line([
        binary, f"--rounds={INCAST['rounds']}", f"--senders={INCAST['senders']}", f"--bytes={INCAST['bytes']}",
        f"--minRto={INCAST['min_rto_ms']}", f"--buffer={INCAST['buffer_bytes']}",
        f"--rate={INCAST['link_gbps']}Gbps", f"--delay={INCAST['link_latency_us']}us",
    ])
    return {"sim": "ns-3.44 C++ incast 16->1", "scenario": "incast", "reference": True,
            "packets": int(fields["tx_data_pkts"]), "events": int(fields["events"]),
            "wall_s": float(fields["run_s"]), "sim_time_s": float(fields["sim_time_s"]),
            "note": f"drops={fields['drops']} retransmits={fields['retransmits']} timeouts={fields['timeouts']}"}


def bench_bare_loop(nbytes: int) -> dict:
    """The pure-Python ceiling: a bare heapq loop with no TCP logic (lean_loop_ceiling.py), moving the
    same packets as the bulk transfer, in a child process of its own."""
    fields = _result_line([sys.executable, str(BENCH_DIR / "lean_loop_ceiling.py"), "--bytes", str(nbytes)])
    return {"sim": "bare heapq loop (no TCP)", "scenario": "bulk", "packets": int(fields["pkts"]),
            "events": int(fields["events"]), "wall_s": float(fields["run_s"]),
            "sim_time_s": float(fields["sim_time_s"])}


def best_of(repeat: int, measure: Callable[[], dict]) -> dict:
    """The run with the least wall time out of `repeat` (the least disturbed by the machine)."""
    return min((measure() for _ in range(repeat)), key=lambda result: result["wall_s"])


def engine_rows(nbytes: int, repeat: int) -> list[dict]:
    """Our engine on both scenarios, with the kernel this process runs (engine/kernel.py)."""
    label = "compiled kernel" if engine.KERNEL == "compiled" else "pure-Python kernel"
    rows = [best_of(repeat, lambda: bench_bulk(nbytes)), best_of(repeat, bench_incast)]
    for row in rows:
        row["sim"] = f"{row['sim']} ({label})"
    return rows


def pure_python_rows(nbytes: int, repeat: int) -> list[dict]:
    """The same rows from the pure-Python kernel, measured in a child process that selects it."""
    command = [sys.executable, __file__, "--bytes", str(nbytes), "--repeat", str(repeat), "--engine-rows-json"]
    output = subprocess.run(command, capture_output=True, text=True, check=True,
                            env={**os.environ, PURE_PYTHON_ENV: "1"}).stdout
    return json.loads(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=float, default=1e8, help="bulk transfer size (default 1e8)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement; the fastest counts")
    parser.add_argument("--ns3", help="path to the built ns3_tcp_bulk binary")
    parser.add_argument("--ns3-incast", metavar="PATH", help="path to the built ns3_tcp_incast binary")
    parser.add_argument("--build-ns3", metavar="DIR", help="build ns3_tcp_bulk and ns3_tcp_incast into DIR first")
    parser.add_argument("--engine-rows-json", action="store_true", help=argparse.SUPPRESS)  # for pure_python_rows
    args = parser.parse_args()
    nbytes = int(args.bytes)
    if args.engine_rows_json:
        print(json.dumps(engine_rows(nbytes, args.repeat)))
        return
    ns3_binary, ns3_incast_binary = args.ns3, args.ns3_incast
    if args.build_ns3:
        subprocess.run(["sh", str(NS3_DIR / "build_ns3.sh"), args.build_ns3], check=True)
        ns3_binary = str(Path(args.build_ns3) / "ns3_tcp_bulk")
        ns3_incast_binary = str(Path(args.build_ns3) / "ns3_tcp_incast")

    results = engine_rows(nbytes, args.repeat)
    if engine.KERNEL == "compiled":
        results += pure_python_rows(nbytes, args.repeat)
    results.append(best_of(args.repeat, lambda: bench_bare_loop(nbytes)))
    if ns3_binary:
        results.append(best_of(args.repeat, lambda: bench_ns3(ns3_binary, nbytes)))
    if ns3_incast_binary:
        results.append(best_of(args.repeat, lambda: bench_ns3_incast(ns3_incast_binary)))
    # the reference packet rate of each scenario: ns-3 on that same scenario
    ns3_rates = {r["scenario"]: r["packets"] / r["wall_s"] for r in results if r.get("reference")}

    print(f"best of {args.repeat} runs each")
    print(f"{'simulator':41} {'packets':>9} {'events':>10} {'sim_s':>9} {'wall_s':>8} "
          f"{'pkts/s':>10} {'events/s':>11} {'x ns-3':>7}")
    for r in results:
        rate = r["packets"] / r["wall_s"]
        ns3_rate = ns3_rates.get(r["scenario"])
        ratio = f"{rate / ns3_rate:7.2f}" if ns3_rate else "      -"
        print(f"{r['sim']:41} {r['packets']:9d} {r['events']:10d} {r['sim_time_s']:9.4f} {r['wall_s']:8.3f} "
              f"{rate:10.0f} {r['events'] / r['wall_s']:11.0f} {ratio}  {r.get('note', '')}")


if __name__ == "__main__":
    main()
