"""What the Linux host stack costs at scale (run on demand): one DLRM iteration at packet level with
the default host (TCP Small Queues 1 MiB, pfifo_fast of 1,000 packets) and with the host of before
(`host.tsq_bytes=null host.qdisc_packets=null`), each run in a child process, as a user would:

    python -m sweep network=leaf_spine network.npus=N network.hosts_per_leaf=32 network.spines=8
        workload=astra_dlrm workload.iterations=1 hydra.launcher.run_memory_mb=14000 [host keys]

Per run it prints the child's peak resident memory (`ru_maxrss` of that child: the whole command,
Hydra and the Parquet write included), the command's wall time and the engine's own (`wall_s`), its
CPU time, the load average before it, and the simulated results (iteration time, events,
retransmits, timeouts), which must be the same for both hosts where neither holds a sender back
(it says so, or which differ). The two hosts alternate, `--repeat` times each, so that a change in
the machine's load falls on both.

Usage: python benchmarks/host_stack_memory.py [--npus 256] [--repeat 1] [--run-memory-mb 14000]
(at 1,024 NPUs a run needs about 4 GiB and 2-3 minutes; run no two at once)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parents[1]
HOSTS = {"default": [], "before": ["host.tsq_bytes=null", "host.qdisc_packets=null"]}
# what both hosts must agree on, from the runs row
SIMULATED = ("iteration_time_s", "events", "retransmits", "timeouts", "drops")


def command(npus: int, host: str, run_memory_mb: int, results_dir: str) -> list[str]:
    """The single-run command of one measurement."""
    return [sys.executable, "-m", "sweep", "network=leaf_spine", f"network.npus={npus}",
            "network.hosts_per_leaf=32", "network.spines=8", "workload=astra_dlrm", "workload.iterations=1",
            f"hydra.launcher.run_memory_mb={run_memory_mb}", *HOSTS[host], "name=host_stack_memory",
            f"results_dir={results_dir}", "+force=true"]


def measure(npus: int, host: str, run_memory_mb: int) -> dict:
    """One run in a child process: its peak RSS, wall and CPU time, and its runs row."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as results_dir:
        started = time.perf_counter()
        child = subprocess.Popen(command(npus, host, run_memory_mb, results_dir), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = child.stdout.read() if child.stdout else ""
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak RSS, its CPU time
        wall_s = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"npus={npus} host={host} failed:\n{output}")
        from sweep.store import load_runs  # the row the command just wrote

        row = load_runs(Path(results_dir) / "host_stack_memory").iloc[-1]
    return {"host": host, "load": load, "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
            "wall_s": wall_s, "engine_wall_s": float(row["wall_s"]), "cpu_s": usage.ru_utime + usage.ru_stime,
            **{key: row[key] for key in SIMULATED}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npus", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--run-memory-mb", type=int, default=14000,
                        help="declared to the run, above its peak, so that the run's memory limit never stops it")
    args = parser.parse_args()
    print(f"{engine.KERNEL} kernel, {os.cpu_count()} cores; {args.npus} NPUs; command: "
          f"python {' '.join(command(args.npus, 'default', args.run_memory_mb, 'DIR')[1:])}", flush=True)
    print(f"{'host':>8} {'load':>5} {'peak RSS MiB':>13} {'wall s':>7} {'engine s':>9} {'cpu s':>7} "
          f"{'iteration ms':>13} {'events':>12} {'retransmits':>11} {'timeouts':>9}", flush=True)
    results = []
    for _ in range(args.repeat):
        for host in HOSTS:
            result = measure(args.npus, host, args.run_memory_mb)
            results.append(result)
            print(f"{host:>8} {result['load']:5.2f} {result['peak_rss_mib']:13,.0f} {result['wall_s']:7.1f} "
                  f"{result['engine_wall_s']:9.1f} {result['cpu_s']:7.1f} {result['iteration_time_s'] * 1e3:13.3f} "
                  f"{result['events']:12,d} {result['retransmits']:11,d} {result['timeouts']:9,d}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    differ = [key for key in SIMULATED if len({result[key] for result in results}) > 1]
    print("simulated results: " + (f"differ in {', '.join(differ)} (a sender was held back)" if differ
                                   else "identical for both hosts"))
    for host in HOSTS:
        peaks = [result["peak_rss_mib"] for result in results if result["host"] == host]
        print(f"{host}: smallest peak {min(peaks):,.0f} MiB, fastest wall "
              f"{min(result['wall_s'] for result in results if result['host'] == host):.1f} s")


if __name__ == "__main__":
    main()
