"""One halving-doubling all-reduce on a 256-NPU fat tree with unlimited buffers, on one backend: the
phase backend's worst case against `analytical` (docs/phase-backend.md, Accuracy).

    python benchmarks/phase_halving_doubling_case.py RATIO BACKEND MIB     # e.g. 4 packet 8

RATIO: edge oversubscription (uplinks at 100 / RATIO Gb/s); prints the iteration time and wall time.
"""

from __future__ import annotations

import sys
import time

import engine


def main() -> None:
    ratio, backend, mib = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    config = {"engine": {"backend": backend, "max_sim_time_s": 60.0},
              "network": {"topology": "fat_tree", "npus": 256, "uplink_gbps": 100.0 / ratio, "link_gbps": 100.0,
                          "link_latency_us": 1.0, "buffer_kb": None},
              "system": {"all_reduce": "halving_doubling"},
              "workload": {"type": "collective", "op": "all_reduce", "bytes": mib * 2**20}}
    start = time.perf_counter()
    row = engine.run(config, flow_columns=True)["runs"][0]
    print(f"{ratio}:1 {backend} {mib} MiB: {row['status']}, iteration {row['iteration_time_s']} s, "
          f"timeouts {row.get('timeouts')}, wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
