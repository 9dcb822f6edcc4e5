"""netsweep's packet engine beside htsim on TCP, per packet (issue 44): the same three scenarios on
both, each run in a fresh process, the two simulators interleaved, medians.

Scenarios (netsweep's side: bench_packet_rate.py's `bulk`, `incast1`, `incast10`):
  bulk      one TCP flow of 100 MB over a 10 Gb/s point-to-point link with 10 us each way
  incast1   16 senders x 1 MB to one host through a switch port of 100 full packets, 10 Gb/s, 10 us links
  incast10  the same with 10 MB per sender

The htsim side is a small program of your own (not part of this repository) built against htsim's
library (github.com/Broadcom/csg-htsim, `sim/`: `make` there builds `libhtsim.a`). It must take
`bulk BYTES` or `incast BYTES_PER_SENDER` and print one line
`RESULT pkts=P events=E cpu_s=C` (the data packets its senders sent, the events it ran, the CPU
seconds of its event loop). Ours set htsim's packet size to 1,488 bytes (netsweep's 1,448-byte
payload and 40-byte headers) and built, with htsim's `TcpSrc`, `TcpSink`, `Queue` and `Pipe`:
for `bulk`, the route sender -> a `Queue` of 10 Gb/s (the NIC, unbounded) -> a `Pipe` of 10 us ->
sink, ACKs back through a `Queue` and a `Pipe` likewise, the source's `_maxcwnd` at 128 KiB
(netsweep's receive window); for `incast`, 16 such senders each with its NIC `Queue` and a 10 us
`Pipe` to one shared switch `Queue` of 10 Gb/s and 100 packets (`memFromPkt(100)`), a 10 us `Pipe`
to the sinks, the ACKs back through the receiver's NIC `Queue`, a `Pipe`, a 100-packet switch
`Queue` per sender and a `Pipe`; a `TcpRtxTimerScanner` of 10 ms with every source registered. Its
loop counts `EventList::doNextEvent()` calls until every source's `_last_acked` has reached the
flow size (checked every 64 events), timed by `std::clock()`. htsim's TCP ACKs every packet; so
does netsweep's by default, but its bulk flow here delays ACKs (bench_engine.py's scenario), so
events per packet differ: the table compares packets per CPU second.

Usage: python benchmarks/compare_htsim_speed.py --htsim-bin PATH [--repeat 5] [--scenarios bulk incast1 incast10]
Prints, per scenario, both sides' packets, events, median CPU seconds, million packets and events
per CPU second, and netsweep's packets per second over htsim's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from typing import Any

from bench_packet_rate import measure_here

SCENARIOS = ("bulk", "incast1", "incast10")
HTSIM_ARGS = {"bulk": ["bulk", "100000000"], "incast1": ["incast", "1000000"], "incast10": ["incast", "10000000"]}


def netsweep_once(name: str) -> dict[str, Any]:
    """One run of netsweep in a fresh process (cold, as htsim's run is)."""
    command = [sys.executable, os.path.abspath(__file__), "--one", name]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def htsim_once(binary: str, name: str) -> dict[str, Any]:
    """One run of the htsim program."""
    output = subprocess.run([binary, *HTSIM_ARGS[name]], capture_output=True, text=True, check=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("RESULT"))
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    return {"packets": int(fields["pkts"]), "events": int(fields["events"]), "cpu_s": float(fields["cpu_s"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--htsim-bin", help="the htsim program (see above)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side per scenario (median)")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--one", choices=SCENARIOS, help=argparse.SUPPRESS)  # a child's single run
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_here(args.one, 10**8)))
        return
    if not args.htsim_bin:
        parser.error("--htsim-bin PATH is required (the htsim program this docstring describes)")
    loads = [os.getloadavg()[0]]
    print(f"{'scenario':9} {'simulator':9} {'packets':>9} {'events':>9} {'ev/pkt':>6} {'cpu_s':>8} "
          f"{'M pkts/s':>9} {'M ev/s':>8} {'netsweep/htsim':>14}")
    for name in args.scenarios:
        ours: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for repeat in range(args.repeat):  # interleaved, in turn first
            if repeat % 2 == 0:
                ours.append(netsweep_once(name))
                theirs.append(htsim_once(args.htsim_bin, name))
            else:
                theirs.append(htsim_once(args.htsim_bin, name))
                ours.append(netsweep_once(name))
        loads.append(os.getloadavg()[0])
        rates = {}
        for label, runs in (("netsweep", ours), ("htsim", theirs)):
            cpu_s = statistics.median(run["cpu_s"] for run in runs)
            packets, events = runs[0]["packets"], runs[0]["events"]
            rates[label] = packets / cpu_s
            ratio = f"{rates['netsweep'] / rates['htsim']:14.2f}" if label == "htsim" else ""
            print(f"{name:9} {label:9} {packets:9d} {events:9d} {events / packets:6.2f} {cpu_s:8.4f} "
                  f"{packets / cpu_s / 1e6:9.3f} {events / cpu_s / 1e6:8.3f} {ratio}")
    print(f"median of {args.repeat} runs each, one simulation per process, CPU time of the event loop; "
          f"load average (1 min) {min(loads):.1f} to {max(loads):.1f}")


if __name__ == "__main__":
    main()
