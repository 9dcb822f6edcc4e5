"""Two CUBIC senders into one 100 Gb/s switch port with 512 KiB of buffer (issue 29's case), on the
host of before (an unbounded NIC queue), on Linux's transmit path (`host.*`: TCP Small Queues and a
1,000-packet qdisc), each with exact transmit timing (`host.tx_jitter_ns=0`, as ns-3) and with the
default 30 ns of transmit jitter, and with 120 ns. Prints one Markdown row per
case: when each flow ended, the later over the earlier, the largest host NIC queue, retransmissions
per packet sent, timeouts. docs/hosts.md shows the table.

    python benchmarks/two_senders.py              # 1 GB each (2-3 s a case, compiled)
    python benchmarks/two_senders.py --bytes 1e8
    python benchmarks/two_senders.py --jitters 2 5 10 20 30 --seeds 0 1 2   # the default host at each jitter
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import engine

UNBOUNDED_HOST = {"tsq_bytes": None, "qdisc_packets": None}
CASES: dict[str, dict[str, Any]] = {
    "unbounded NIC queue, jitter 0 (the host of before)": {**UNBOUNDED_HOST, "tx_jitter_ns": 0},
    "unbounded NIC queue, jitter 30 ns": UNBOUNDED_HOST,
    "Linux: TSQ 1 MiB, pfifo_fast 1,000, jitter 0": {"tx_jitter_ns": 0},
    "Linux, jitter 30 ns (the default host)": {},
    "Linux, jitter 120 ns (one packet at 100 Gb/s)": {"tx_jitter_ns": 120},
}


def two_senders(nbytes: int, host: dict[str, Any], seed: int) -> dict[str, Any]:
    """Hosts 1 and 2 each send `nbytes` to host 0 at once, CUBIC, one switch, 512 KiB buffers."""
    return {"seed": seed, "network": {"npus": 3, "buffer_kb": 512}, "tcp": {"cc": "cubic"}, "host": host,
            "engine": {"link_stats": "all", "max_sim_time_s": 30},
            "workload": {"type": "flows", "flows": [{"src": 1, "dst": 0, "bytes": nbytes},
                                                    {"src": 2, "dst": 0, "bytes": nbytes}]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=float, default=1e9, help="bytes each sender sends (default 1e9)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jitters", type=float, nargs="+", help="instead of the cases: the default host with each "
                        "host.tx_jitter_ns (ns), for each of --seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    if args.jitters:
        print(f"kernel: {engine.KERNEL}; {int(args.bytes):,} bytes per flow\n")
        print("| jitter (ns) | seed | earlier ends (ms) | later ends (ms) | later / earlier | timeouts |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for jitter_ns in args.jitters:
            for seed in args.seeds:
                rows = engine.run(two_senders(int(args.bytes), {"tx_jitter_ns": jitter_ns}, seed))
                early_s, late_s = sorted(flow["end_s"] for flow in rows["flows"])
                print(f"| {jitter_ns:g} | {seed} | {early_s * 1e3:,.2f} | {late_s * 1e3:,.2f} | {late_s / early_s:.2f} "
                      f"| {rows['runs'][0]['timeouts']} |", flush=True)
        return
    print(f"kernel: {engine.KERNEL}; {int(args.bytes):,} bytes per flow; seed {args.seed}\n")
    print("| case | flow 1 ends (ms) | flow 2 ends (ms) | later / earlier | max host NIC queue (KiB) "
          "| retransmits / packets | timeouts | wall (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, host in CASES.items():
        started = time.perf_counter()
        rows = engine.run(two_senders(int(args.bytes), host, args.seed))
        wall_s = time.perf_counter() - started
        run = rows["runs"][0]
        ends_s = [flow["end_s"] for flow in sorted(rows["flows"], key=lambda flow: flow["src"])]
        nic_queue_kb = max(link["max_queue_kb"] for link in rows["links"] if link["kind"] == "host_nic")
        print(f"| {name} | {ends_s[0] * 1e3:,.2f} | {ends_s[1] * 1e3:,.2f} | {max(ends_s) / min(ends_s):.2f} "
              f"| {nic_queue_kb:,.0f} | {run['retransmits'] / run['packets_sent']:.2%} | {run['timeouts']} "
              f"| {wall_s:.1f} |")


if __name__ == "__main__":
    main()
