"""Connections as a training job has them (issue 21 item 1): the packet engine against ns-3 on
timeout-bound all-to-alls, with the handshake's RTT sample and with or without TCP timestamps.

Each case is composed from the Hydra presets as `python -m sweep` composes it (`conf/`, the overrides
below), run on `engine.backend=packet` and `ns3`, and printed as a Markdown row: the duration of every
all-to-all (ms), the mean iteration time, drops, timeouts, wall time. `--variants` picks the TCP
settings compared (`handshake=false` is the packet engine before the handshake; ns-3 always has one).

    python benchmarks/handshake_ns3.py issue                      # the issue's table (48 NPUs, DLRM)
    python benchmarks/handshake_ns3.py incast --npus 16 32 64     # the same DLRM at other sizes, 3 CCs
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import engine
from sweep.cli import CONF_DIR

# the issue's case: ASTRA-sim's DLRM on 48 NPUs, three leaves of 16 hosts under one spine (3:1)
ISSUE = ["workload=astra_dlrm", "workload.iterations=2", "network=leaf_spine", "network.npus=48",
         "network.hosts_per_leaf=16", "network.spines=1"]
VARIANTS = {
    "default": [],
    "timestamps": ["tcp.timestamps=true"],
    "no-timestamps": ["tcp.timestamps=false"],
    "no-handshake": ["tcp.handshake=false"],
    "no-handshake-no-timestamps": ["tcp.handshake=false", "tcp.timestamps=false"],
}


def incast_case(npus: int, cc: str) -> list[str]:
    """The issue's case at another size and congestion control: ASTRA-sim's DLRM for two iterations
    on leaves of up to 16 hosts under one spine (a leaf's hosts share one uplink; 512 KiB buffers).
    Each all-to-all step sends every host's flows to one other leaf at once, into its uplink port."""
    overrides = ["workload=astra_dlrm", "workload.iterations=2", "network=leaf_spine", f"network.npus={npus}",
                 f"network.hosts_per_leaf={min(16, npus // 2)}", "network.spines=1", f"tcp={cc}"]
    if cc == "dctcp":
        overrides.append("network.ecn_threshold_kb=20")
    return overrides


def composed(overrides: list[str]) -> dict[str, Any]:
    """The resolved config of `python -m sweep <overrides>`, as a plain dict."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        config = OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)
    assert isinstance(config, dict)
    config["engine"]["max_sim_time_s"] = 60.0
    return config


def run(overrides: list[str], backend: str) -> str:
    """One run; its Markdown row."""
    start = time.perf_counter()
    # the packet engine with ns-3's exact transmit timing (ns-3 is deterministic): the same phases on both
    exact_timing = ["host.tx_jitter_ns=0"] if backend == "packet" else []
    rows = engine.run(composed(overrides + [f"engine.backend={backend}", *exact_timing]))
    wall_s = time.perf_counter() - start
    runs = rows["runs"][0]
    a2a_ms = [row["duration_s"] for row in rows["collectives"] if row["op"] == "all_to_all"]
    iteration = runs["iteration_time_s"]
    return (f"| {' '.join(overrides)} | {backend} | {runs['status']} | {', '.join(_ms(s) for s in a2a_ms)} | "
            f"{_ms(iteration)} | {runs['drops']:,} | {runs['timeouts']:,} | "
            f"{wall_s:,.0f} |")


def _ms(seconds: float | None) -> str:
    """Seconds as milliseconds for the table; '-' for a collective that did not finish."""
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:,.1f}" if ms >= 100 else f"{ms:.4g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", choices=("issue", "incast"))
    parser.add_argument("--npus", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--cc", nargs="+", default=["newreno", "cubic", "dctcp"])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["default"])
    parser.add_argument("--backends", nargs="+", choices=("packet", "ns3"), default=["packet", "ns3"])
    args = parser.parse_args()
    cases = [ISSUE] if args.cases == "issue" else [incast_case(n, cc) for n in args.npus for cc in args.cc]
    print("| overrides | backend | status | all-to-alls, ms | iteration, ms | drops | timeouts | wall s |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for overrides in cases:
        for variant in args.variants:
            for backend in args.backends:
                if backend == "ns3" and "tcp.handshake=false" in VARIANTS[variant]:
                    continue  # ns-3 always opens its connections with a handshake
                print(run(overrides + VARIANTS[variant], backend), flush=True)


if __name__ == "__main__":
    main()
