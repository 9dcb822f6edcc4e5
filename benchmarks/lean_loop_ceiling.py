"""The ceiling for a pure-Python packet engine (run by bench_engine.py; a yardstick, not a model): the
bulk transfer reduced to a bare heapq event loop with no TCP logic.

One flow of `bytes` in MSS-size packets over a 10 Gb/s link with 10 us one-way delay, a fixed window
of packets in flight and an ACK per packet. Each data packet costs exactly three events: the sender's
NIC finishes serialising it (it leaves onto the wire), it arrives at the receiver (which sends its ACK
back over the idle reverse link), and its ACK arrives at the sender (the window slides by one packet,
which queues at the NIC). Times are integer picoseconds, heap entries (time, tie-breaker, ...) as in
the engine's event list. Whatever the engine does beyond this -- segments, sequence numbers, RTT
samples, congestion window, delayed ACKs, routes of sinks -- is its model; this loop measures how fast
CPython pops and pushes events at all.

Usage: python benchmarks/lean_loop_ceiling.py [--bytes 1e8] [--window-pkts 90]
Prints one RESULT line: packets delivered, events, simulated seconds (to the last delivery), wall
seconds of the loop, and packets and events per wall second.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from typing import NamedTuple

MSS_BYTES = 1448
HEADER_BYTES = 40  # TCP/IP headers without options, as the engine's
RATE_BPS = 10 * 10**9
LATENCY_PS = 10 * 10**6  # 10 us one way
PS_PER_S = 10**12
WINDOW_PKTS = 131072 // MSS_BYTES  # 90: the engine's 128 KiB receive window in whole segments

# event kinds
SERIALISED, ARRIVED, ACKED = 0, 1, 2


class Outcome(NamedTuple):
    """What one run of the loop did."""

    packets_delivered: int
    events: int
    last_delivery_ps: int


def serialisation_ps(size_bytes: int, rate_bps: int) -> int:
    """Time to put `size_bytes` on a link of `rate_bps`, in picoseconds (bytes -> bits -> ps)."""
    return size_bytes * 8 * PS_PER_S // rate_bps


def simulate(total_bytes: int, window_pkts: int = WINDOW_PKTS) -> Outcome:
    """Moves `total_bytes` in MSS-size packets with at most `window_pkts` unacknowledged."""
    packets = -(-total_bytes // MSS_BYTES)  # ceiling division: the last packet may be short
    data_ps = serialisation_ps(MSS_BYTES + HEADER_BYTES, RATE_BPS)
    ack_return_ps = serialisation_ps(HEADER_BYTES, RATE_BPS) + LATENCY_PS  # reverse link always idle
    heap: list[tuple[int, int, int, int]] = []  # (time_ps, tie-breaker, kind, packet index)
    push, pop = heapq.heappush, heapq.heappop  # local names: no attribute look-up per event
    released = min(window_pkts, packets)  # packets the window has let onto the NIC so far
    nic_backlog = released - 1  # packets waiting behind the one being serialised
    nic_busy = True
    push(heap, (data_ps, 0, SERIALISED, 0))
    entry = 1  # tie-breaker: equal times pop in push order and never compare further
    delivered = events = last_delivery_ps = 0
    while heap:
        now_ps, _, kind, packet = pop(heap)
        events += 1
        if kind == SERIALISED:
            push(heap, (now_ps + LATENCY_PS, entry, ARRIVED, packet))
            entry += 1
            if nic_backlog:  # packets leave the NIC in order: the next one is packet + 1
                nic_backlog -= 1
                push(heap, (now_ps + data_ps, entry, SERIALISED, packet + 1))
                entry += 1
            else:
                nic_busy = False
        elif kind == ARRIVED:
            delivered += 1
            last_delivery_ps = now_ps
            push(heap, (now_ps + ack_return_ps, entry, ACKED, packet))
            entry += 1
        elif released < packets:  # ACKED: the window slides by one packet
            released += 1
            if nic_busy:
                nic_backlog += 1
            else:
                nic_busy = True
                push(heap, (now_ps + data_ps, entry, SERIALISED, released - 1))
                entry += 1
    return Outcome(delivered, events, last_delivery_ps)


def main() -> None:
    """Runs the loop once and prints its RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=float, default=1e8, help="bytes to move (default 1e8)")
    parser.add_argument("--window-pkts", type=int, default=WINDOW_PKTS, help="packets in flight (default 90)")
    args = parser.parse_args()
    total_bytes = int(args.bytes)
    start = time.perf_counter()
    outcome = simulate(total_bytes, args.window_pkts)
    run_s = time.perf_counter() - start
    sim_time_s = outcome.last_delivery_ps / PS_PER_S
    print(f"RESULT sim=heapq-bare-{sys.implementation.name} pkts={outcome.packets_delivered} "
          f"events={outcome.events} sim_time_s={sim_time_s:.6f} "
          f"goodput_gbps={total_bytes * 8 / sim_time_s / 1e9:.3f} run_s={run_s:.4f} "  # bytes -> bits -> Gb/s
          f"pkts_per_s={outcome.packets_delivered / run_s:.0f} events_per_s={outcome.events / run_s:.0f}")


if __name__ == "__main__":
    main()
