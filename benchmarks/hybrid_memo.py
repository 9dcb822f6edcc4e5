"""What `engine.hybrid_memoise` saves and what it changes (docs/hybrid-backend.md, "Memoisation").

Each case runs on `hybrid` twice, every episode simulated (`engine.hybrid_memoise=false`) and memoised
(the default), and prints a Markdown row: the iteration time of both and their relative difference,
the scaled timeouts of both, the episodes simulated (one reduced network each on a leaf-spine) and timed
from records, and
the reduced simulations' wall time of both. Leaf-spines of 16 hosts a leaf, 100 Gb/s, 1 us links.

    python benchmarks/hybrid_memo.py
"""

from __future__ import annotations

import time
from typing import Any

import engine
from sweep.cli import compose_config

ASTRA_DLRM = {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt"}
# (label, NPUs, spines, buffer KiB, workload, iterations)
CASES = [
    ("astra_dlrm", 128, 1, 256.0, ASTRA_DLRM, 6),
    ("astra_dlrm", 128, 2, 128.0, ASTRA_DLRM, 6),
    ("astra_dlrm", 128, 4, 264.0, ASTRA_DLRM, 6),
    ("astra_dlrm", 1024, 2, 128.0, ASTRA_DLRM, 4),
    ("astra_dlrm", 1024, 2, 1024.0, ASTRA_DLRM, 4),
    ("astra_dlrm", 1024, 16, 128.0, ASTRA_DLRM, 4),
    ("dlrm", 64, 2, 128.0, "dlrm", 4),
    ("dlrm", 128, 2, 128.0, "dlrm", 6),
    ("dlrm", 128, 4, 256.0, "dlrm", 6),
]


def run(npus: int, spines: int, buffer_kb: float, workload: dict[str, Any], iterations: int,
        memoise: bool) -> dict[str, Any]:
    """One hybrid run's runs row, with its wall time."""
    config = {"seed": 0, "engine": {"backend": "hybrid", "max_sim_time_s": 1000.0, "hybrid_memoise": memoise},
              "network": {"topology": "leaf_spine", "npus": npus, "hosts_per_leaf": 16, "spines": spines,
                          "link_gbps": 100.0, "uplink_gbps": 100.0, "link_latency_us": 1.0, "buffer_kb": buffer_kb},
              "workload": {**workload, "iterations": iterations}}
    start = time.perf_counter()
    row = dict(engine.run(config)["runs"][0])
    row["wall_s"] = time.perf_counter() - start
    return row


def main() -> None:
    print("| case | iterations | iteration s, simulated | memoised | difference | timeouts, simulated | memoised "
          "| episodes simulated / from records | packet wall s, simulated / memoised |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, npus, spines, buffer_kb, workload, iterations in CASES:
        section = compose_config([f"workload={workload}"])["workload"] if isinstance(workload, str) else workload
        simulated, memoised = (run(npus, spines, buffer_kb, section, iterations, memoise) for memoise in (False, True))
        difference = memoised["iteration_time_s"] / simulated["iteration_time_s"] - 1
        print(f"| {label} {npus} s{spines} b{buffer_kb:.0f} | {iterations} | {simulated['iteration_time_s']:.6f} | "
              f"{memoised['iteration_time_s']:.6f} | {100 * difference:+.5f} % | {simulated['timeouts']:,} | "
              f"{memoised['timeouts']:,} | {memoised['hybrid_packet_sims']} / "
              f"{memoised['hybrid_memo_episodes']} (of {simulated['hybrid_packet_sims']}) | "
              f"{simulated['hybrid_packet_wall_s']:.2f} / {memoised['hybrid_packet_wall_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
