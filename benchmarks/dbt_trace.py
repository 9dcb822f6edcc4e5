"""Why a lossless double-binary-tree all-reduce takes longer on TCP than in the fluid model (run on
demand; docs/topologies.md reads its output).

One all-reduce (`system.all_reduce=double_binary_tree`) on a switch with deep buffers (nothing
drops), on the packet, analytical and alpha_beta backends; then, from the packet run:

- the messages into NPU `--receiver` (the `flows` table: start, end, goodput), beside the same
  messages in the analytical run, where links are shared max-min fairly;
- every `--interval-us`, the backlog of NPU `--sender`'s NIC queue and, for each of its TCP
  connections, cwnd (segments), smoothed RTT and the bytes delivered so far.

    python benchmarks/dbt_trace.py [--npus 8] [--bytes 8388608] [--receiver 1] [--sender 3]
                                   [--rcv-wnd-kb 64] [--interval-us 25]

Samples are taken by a callback on the event list between packets, outside the hot path.
"""

from __future__ import annotations

import argparse

import engine
from engine.links import Link
from engine.run import prepare
from engine.units import PS_PER_US, bytes_in_duration

KIB = 1024
MIB = 1024 * KIB


def config(backend: str, npus: int, size_bytes: int, rcv_wnd_kb: float | None) -> dict:
    """The all-reduce: 100 Gb/s, 1 us links, 16 MiB switch buffers, no endpoint delay."""
    return {
        "engine": {"backend": backend},
        "network": {"topology": "switch", "npus": npus, "link_gbps": 100, "link_latency_us": 1, "buffer_kb": 16384},
        "tcp": {"rcv_wnd_kb": rcv_wnd_kb},
        "system": {"all_reduce": "double_binary_tree", "endpoint_delay_ns": 0},
        "workload": {"type": "collective", "op": "all_reduce", "bytes": size_bytes, "iterations": 1},
    }


def messages_into(rows: list[dict], receiver: int) -> list[str]:
    """One line per message into `receiver`, in order of start."""
    return [f"  {row['src']:>3} -> {row['dst']:<3} {row['bytes']:>8} B  start {row['start_s'] * 1e6:8.2f} us"
            f"  end {row['end_s'] * 1e6:8.2f} us  goodput {row['goodput_gbps']:6.1f} Gb/s"
            for row in sorted(rows, key=lambda row: (row["start_s"], row["end_s"])) if row["dst"] == receiver]


def sender_samples(cfg: dict, sender: int, interval_ps: int) -> list[str]:
    """Run the packet backend, sampling `sender`'s NIC backlog and connections every `interval_ps`."""
    run = prepare(cfg)
    run.start()
    sim, eventlist = run.sim, run.sim.eventlist
    nic: Link = sim.topology.path(sender, (sender + 1) % sim.topology.npus, 0)[0]
    lines: list[str] = []

    def sample() -> None:
        backlog_ps = max(0, nic.busy_until_ps - eventlist.now_ps)
        parts = [f"{eventlist.now_ps / PS_PER_US:7.0f} us  "
                 f"NIC {bytes_in_duration(backlog_ps, nic.rate_bps) / KIB:6.0f} KiB"]
        for connection in sim.connections:
            if connection.src == sender:
                tcp = connection.sender
                parts.append(f"{sender}->{connection.dst}: cwnd {tcp.cc.cwnd_bytes / tcp.mss_bytes:5.0f}"
                             f" srtt {tcp.rtt.srtt_ps / PS_PER_US:6.1f} us"
                             f" delivered {connection.receiver.rcv_nxt / MIB:4.2f} MiB")
        lines.append("  ".join(parts))
        if not run.finished:
            eventlist.call_at(eventlist.now_ps + interval_ps, sample)

    eventlist.call_at(0, sample)
    run.simulate()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npus", type=int, default=8)
    parser.add_argument("--bytes", type=int, default=8 * MIB, help="per NPU")
    parser.add_argument("--receiver", type=int, default=1)
    parser.add_argument("--sender", type=int, default=3)
    parser.add_argument("--rcv-wnd-kb", type=float, default=None, help="tcp.rcv_wnd_kb (default: unlimited)")
    parser.add_argument("--interval-us", type=float, default=25.0)
    args = parser.parse_args()
    results = {backend: engine.run(config(backend, args.npus, args.bytes, args.rcv_wnd_kb))
               for backend in ("packet", "analytical", "alpha_beta")}
    analytical_s = results["analytical"]["runs"][0]["iteration_time_s"]
    for backend, result in results.items():
        row = result["runs"][0]
        print(f"{backend:>10}: {row['iteration_time_s'] * 1e3:.3f} ms ({row['iteration_time_s'] / analytical_s:.2f}"
              f" x analytical), drops {row['drops']}")
    for backend in ("packet", "analytical"):
        print(f"messages into NPU {args.receiver}, {backend}:")
        print("\n".join(messages_into(results[backend]["flows"], args.receiver)))
    print(f"NPU {args.sender}'s NIC queue and connections, packet:")
    cfg = config("packet", args.npus, args.bytes, args.rcv_wnd_kb)
    print("\n".join(sender_samples(cfg, args.sender, round(args.interval_us * PS_PER_US))))


if __name__ == "__main__":
    main()
