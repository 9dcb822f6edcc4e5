"""Packet engine at scale (run on demand): one DLRM training iteration on a leaf-spine network of
growing size, and the memory an idle persistent TCP connection costs.

Each size runs the single-run command of the README in a child process, as a user would:

    python -m sweep workload=astra_dlrm workload.iterations=1 network=leaf_spine network.npus=N
        network.hosts_per_leaf=16 network.spines=4 engine.backend=packet name=... results_dir=...

(16 hosts a leaf, 4 spines, 100 Gb/s, TCP NewReno+SACK; the all-to-all opens N(N-1) persistent
connections). Per size it prints the events the engine ran, its wall time (the `wall_s` the engine
measured, the fastest of --repeat runs) and events per second, the child's CPU time and its peak
resident memory (`ru_maxrss` of that child: the whole command, Hydra and the Parquet write
included).

Bytes per idle connection: tracemalloc's count of the memory that `--idle-npus` x (`--idle-npus` - 1)
connections (`Simulation.open_connection`) still hold once each has delivered one 16 KiB message,
measured while the simulation runs on (the connections keep their windows, RTT estimates and
pending timers), divided by their number.

Usage: python benchmarks/bench_packet_scale.py [--npus 16 64 256] [--repeat 3] [--idle-npus 64]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import engine
from engine import load_config
from engine.simulation import Simulation
from engine.units import PS_PER_US

ROOT = Path(__file__).resolve().parents[1]

IDLE_MESSAGE_BYTES = 16 * 1024


def leaf_spine(npus: int) -> dict:
    """The network of every measurement: leaves of 16 hosts, 4 spines, 100 Gb/s links."""
    return {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": min(16, npus), "spines": 4,
            "link_gbps": 100, "uplink_gbps": 100, "link_latency_us": 1, "buffer_kb": 512}


def run_iteration(npus: int, results_dir: str) -> dict:
    """One DLRM iteration through the single-run command, in a child process."""
    command = [sys.executable, "-m", "sweep", "workload=astra_dlrm", "workload.iterations=1",
               "network=leaf_spine", f"network.npus={npus}", f"network.hosts_per_leaf={min(16, npus)}",
               "network.spines=4", "engine.backend=packet", "name=bench_packet_scale",
               f"results_dir={results_dir}", "+force=true"]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak RSS, its CPU time
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"npus={npus} failed:\n{output}")
    from sweep.store import load_runs  # the row the command just wrote: the engine's own counters

    row = load_runs(Path(results_dir) / "bench_packet_scale").iloc[-1]
    return {"npus": npus, "events": int(row["events"]), "wall_s": float(row["wall_s"]),
            "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
            "iteration_ms": float(row["iteration_time_s"]) * 1e3}


def bytes_per_idle_connection(npus: int) -> float:
    """tracemalloc bytes held per connection once each of the npus x (npus - 1) pairs has delivered
    one message, the messages sent one after another (no loss), timers pending as in a run."""
    sim = Simulation(load_config({"network": leaf_spine(npus)}), models_host_stack=True)
    delivered = [0]

    def on_delivered() -> None:
        delivered[0] += 1

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    until_ps = 0
    for src in range(npus):
        for dst in range(npus):
            if src != dst:
                sim.open_connection(src, dst).send_message(IDLE_MESSAGE_BYTES, on_delivered)
                while delivered[0] < len(sim.connections):  # in steps, so that timers stay pending
                    until_ps += PS_PER_US
                    sim.eventlist.run(until_ps)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / len(sim.connections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npus", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle-npus", type=int, default=64)
    args = parser.parse_args()
    print(f"{engine.KERNEL} kernel; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"fastest of {args.repeat} runs per size", flush=True)
    print(f"{'npus':>5} {'events':>11} {'wall s':>8} {'events/s':>10} {'us/event':>9} {'cpu s':>8} "
          f"{'peak RSS MiB':>13} {'iteration ms':>13}", flush=True)
    with tempfile.TemporaryDirectory() as results_dir:
        for npus in args.npus:
            best = min((run_iteration(npus, results_dir) for _ in range(args.repeat)),
                       key=lambda result: result["wall_s"])
            print(f"{npus:5d} {best['events']:11,d} {best['wall_s']:8.2f} {best['events'] / best['wall_s']:10,.0f} "
                  f"{best['wall_s'] / best['events'] * 1e6:9.3f} {best['cpu_s']:8.2f} {best['peak_rss_mib']:13,.0f} "
                  f"{best['iteration_ms']:13.4f}", flush=True)
    started = time.perf_counter()
    idle = bytes_per_idle_connection(args.idle_npus)
    print(f"bytes per idle connection: {idle:,.0f} ({args.idle_npus} x {args.idle_npus - 1} connections, "
          f"{time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
