"""Fixed-seed scenarios whose complete result rows are stored in tests/golden/: any change meant
only to make the engine faster must leave them identical (`python tests/golden_cases.py --write`
regenerates them after a deliberate change of behaviour, to be explained in the commit)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import engine

GOLDEN_DIR = Path(__file__).parent / "golden"
VOLATILE = {"wall_s", "events_per_s"}  # wall-clock measurements differ run to run

CASES = {
    "incast_loss_sack": {
        "seed": 7,
        "network": {"topology": "switch", "npus": 9, "link_gbps": 10, "link_latency_us": 5, "buffer_kb": 32,
                    "loss_rate": 0.002},
        "workload": {"type": "flows", "pattern": "incast", "senders": 8, "bytes_per_flow": 200_000, "rounds": 2},
    },
    "dumbbell_cubic_delack": {
        "seed": 3,
        "network": {"topology": "dumbbell", "npus": 4, "link_gbps": 10, "link_latency_us": 10, "buffer_kb": 64,
                    "bottleneck_gbps": 2, "bottleneck_latency_us": 20},
        "tcp": {"cc": "cubic", "delayed_ack": True, "delayed_ack_timeout_ms": 1},
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 2, "bytes": 3_000_000},
                                                {"src": 1, "dst": 3, "bytes": 2_000_000, "start_us": 300}]},
    },
    "leaf_spine_dctcp_permutation": {
        "seed": 11,
        "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "uplink_gbps": 25,
                    "link_gbps": 25, "link_latency_us": 2, "buffer_kb": 128, "ecn_threshold_kb": 30},
        "tcp": {"cc": "dctcp"},
        "workload": {"type": "flows", "pattern": "permutation", "bytes_per_flow": 500_000, "rounds": 2},
    },
    "newreno_nosack_loss": {
        "seed": 5,
        "network": {"topology": "switch", "npus": 4, "link_gbps": 10, "link_latency_us": 20, "loss_rate": 0.005},
        "tcp": {"sack": False, "min_rto_ms": 5},
        "workload": {"type": "flows", "pattern": "all_to_all", "bytes_per_flow": 100_000},
    },
    "astra_dlrm_hierarchical": {
        "network": {"topology": "hierarchical", "npus": 8, "npus_per_node": 4, "scaleup_gbps": 400,
                    "scaleup_latency_us": 0.5, "link_gbps": 100, "link_latency_us": 1},
        "system": {"hierarchy": "local_bw_aware", "splits": 2},
        "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 2},
    },
    # a ring's ports: own packets in host queues, forwarded ones under a 16 KiB buffer (drops, RTOs)
    "ring_all_to_all_shallow": {
        "seed": 2,
        "network": {"topology": "ring", "npus": 6, "link_gbps": 100, "link_latency_us": 1, "buffer_kb": 16},
        "tcp": {"min_rto_ms": 1, "initial_rto_ms": 1},
        "workload": {"type": "collective", "op": "all_to_all", "bytes": 2**20, "iterations": 2},
    },
    "astra_dlrm_leaf_spine_phase": {  # 8:1 uplinks: the all-to-alls flagged as incasts and charged an RTO
        "engine": {"backend": "phase", "incast_rto": True, "link_stats": "switch_ports"},
        "network": {"topology": "leaf_spine", "npus": 64, "hosts_per_leaf": 16, "spines": 2, "uplink_gbps": 100},
        "workload": {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 2},
    },
    "dlrm_ring_analytical": {
        "engine": {"backend": "analytical"},
        "network": {"topology": "ring", "npus": 6, "link_gbps": 50, "link_latency_us": 1},
        "workload": {"type": "dlrm", "iterations": 2, "num_tables": 6, "emb_dim": 32, "bottom_mlp": [64, 32],
                     "top_mlp": [64, 1], "batch_per_npu": 32},
    },
    # RoCE on lossless Ethernet with DCQCN: an incast over a dumbbell's bottleneck, pauses spreading to
    # the left switch's senders, RED marks and CNPs
    "roce_dcqcn_dumbbell_pfc": {
        "seed": 4,
        "engine": {"link_stats": "all"},
        "transport": {"protocol": "roce"},
        "roce": {"cc": "dcqcn"},
        "network": {"topology": "dumbbell", "npus": 6, "pfc_xoff_kb": 40, "pfc_xon_kb": 30},
        "workload": {"type": "flows", "flows": [{"src": 0, "dst": 3, "bytes": 600_000},
                                                {"src": 1, "dst": 3, "bytes": 600_000},
                                                {"src": 4, "dst": 3, "bytes": 600_000, "start_us": 20}]},
    },
    # RoCE without PFC through shallow buffers: drops, NAKs, go-back-N and the retransmission timer
    "roce_gobackn_leaf_spine": {
        "seed": 6,
        "transport": {"protocol": "roce"},
        "roce": {"rto_us": 100},
        "network": {"topology": "leaf_spine", "npus": 8, "hosts_per_leaf": 4, "spines": 2, "pfc": False,
                    "buffer_kb": 24},
        "workload": {"type": "collective", "op": "all_to_all", "bytes": 262_144, "iterations": 2},
    },
}


def stable_rows(case: str) -> dict:
    """The rows of one case with the wall-clock columns removed."""
    rows = engine.run(CASES[case])
    for row in rows["runs"]:
        for key in VOLATILE:
            row.pop(key, None)
    return rows


def golden_path(case: str) -> Path:
    return GOLDEN_DIR / f"{case}.json"


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/golden_cases.py --write   (regenerates tests/golden/*.json)")
    GOLDEN_DIR.mkdir(exist_ok=True)
    for name in CASES:
        golden_path(name).write_text(json.dumps(stable_rows(name), sort_keys=True, indent=1) + "\n")
        print("wrote", golden_path(name))
