"""How far one message reaches in the analytical backend's max-min fair sharing (run on demand).

Every ordered pair of NPUs has one flow active (a direct all-to-all in full swing); then one more
flow starts between NPUs 0 and 1 (a ring neighbour's message) and later finishes. The script prints
how many of the all-to-all's rates each of the two changes, which no incremental max-min algorithm
can avoid updating: it is the work the exact model needs per message where collectives overlap.

    python benchmarks/maxmin_coupling.py [--npus 128 256] [--topologies fat_tree leaf_spine]

The networks are bench_scale.py's: 100 Gb/s links; the leaf-spine has 16 hosts a leaf and 4 spines
(4:1 oversubscribed uplinks), the fat tree k from the NPUs (full bisection).
"""

from __future__ import annotations

import argparse
import time

from bench_scale import TOPOLOGIES

from engine.config import load_config
from engine.eventlist import EventList
from engine.links import Link
from engine.system.maxmin import Flow, MaxMinSharing, SharedLink
from engine.topology import build_topology


def coupling(topology_name: str, npus: int) -> dict:
    """Flows, distinct rates, and the rates one extra flow changes when it starts and when it ends."""
    network = load_config({"network": {**TOPOLOGIES[topology_name], "npus": npus}}).network
    topology = build_topology(EventList(), network, 1)
    shared: dict[Link, SharedLink] = {}

    def flow(src: int, dst: int, flow_id: int) -> Flow:
        links = topology.path(src, dst, flow_id)
        return Flow(tuple(shared.setdefault(link, SharedLink(float(link.rate_bps))) for link in links))

    all_to_all = [flow(src, dst, src * npus + dst) for src in range(npus) for dst in range(npus) if src != dst]
    sharing = MaxMinSharing()
    sharing.update([], all_to_all)
    extra = flow(0, 1, npus * npus)
    cpu_start_s = time.process_time()
    changed_at_start, _ = sharing.update([], [extra])
    changed_at_end, _ = sharing.update([extra], [])
    return {"topology": topology_name, "npus": npus, "flows": len(all_to_all),
            "distinct_rates": len({f.rate_bps for f in all_to_all}),
            "changed_at_start": len(changed_at_start) - 1,  # the extra flow itself is not the all-to-all's
            "changed_at_end": len(changed_at_end),
            "cpu_ms": round((time.process_time() - cpu_start_s) * 1e3, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--npus", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--topologies", nargs="+", default=["fat_tree", "leaf_spine"], choices=sorted(TOPOLOGIES))
    args = parser.parse_args()
    print("topology    NPUs   flows  distinct rates  changed at start  changed at end  CPU ms (both)")
    for topology_name in args.topologies:
        for npus in args.npus:
            row = coupling(topology_name, npus)
            print(f"{row['topology']:<10} {row['npus']:>5} {row['flows']:>7} {row['distinct_rates']:>15} "
                  f"{row['changed_at_start']:>17} {row['changed_at_end']:>15} {row['cpu_ms']:>14}")


if __name__ == "__main__":
    main()
