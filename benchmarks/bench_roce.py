"""The packet engine's speed on RoCE against TCP, per packet (issue 43: RoCE at least as many packets a
second as TCP). A benchmark to run on demand, not a test.

Scenarios (packet backend, 100 Gb/s, 1 us links, MTU 1,500):
  incast       16 hosts each send --incast-bytes (20 MB) to host 0 of one switch.
  permutation  a random permutation (every host sends --permutation-bytes to one other) on a 1:1
               leaf-spine of 32 hosts, 16 a leaf, 2 spines of 800 Gb/s uplinks; ECMP per flow.
Settings: `tcp` (NewReno, the default), `roce` (PFC on), `roce_nopfc` (PFC off: drop-tail 512 KiB
ports, go-back-N) and `roce_dcqcn` (PFC on, DCQCN).

Each run is a fresh Python process (no warm caches, no garbage carried from one run to the next), and
the runs are interleaved: round r runs every (scenario, setting) once before round r + 1, so a change
in the machine's load falls on all of them alike. Reported: medians over the rounds of the run's wall
time and CPU time (`time.process_time`: on a machine shared with other jobs it moves far less with
the load than the wall time does), packets and events per CPU second (packets: data packets the
senders sent, retransmissions included: `runs.packets_sent`), events a packet, the ratio of each RoCE
setting's packets per CPU second to TCP's on the same scenario, and the load average before and after
(`os.getloadavg()`).

Usage: python benchmarks/bench_roce.py [--rounds 5] [--scenarios incast,permutation]
                                       [--settings tcp,roce,roce_nopfc,roce_dcqcn]
Set NETSWEEP_PURE_PYTHON=1 to time the pure-Python kernel (engine/kernel.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SCENARIOS = ("incast", "permutation")
SETTINGS = ("tcp", "roce", "roce_nopfc", "roce_dcqcn")


def config(scenario: str, setting: str, incast_bytes: int, permutation_bytes: int) -> dict:
    """The engine config of one (scenario, setting)."""
    if scenario == "incast":
        cfg: dict = {"network": {"npus": 17},
                     "workload": {"type": "flows", "pattern": "incast", "senders": 16, "bytes_per_flow": incast_bytes}}
    elif scenario == "permutation":
        cfg = {"network": {"topology": "leaf_spine", "npus": 32, "hosts_per_leaf": 16, "spines": 2,
                           "uplink_gbps": 800.0},
               "workload": {"type": "flows", "pattern": "permutation", "bytes_per_flow": permutation_bytes}}
    else:
        raise ValueError(f"scenario {scenario!r} is not one of {SCENARIOS}")
    if setting == "tcp":
        return cfg
    if setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {SETTINGS}")
    cfg["transport"] = {"protocol": "roce"}
    if setting == "roce_nopfc":
        cfg["network"]["pfc"] = False
    if setting == "roce_dcqcn":
        cfg["roce"] = {"cc": "dcqcn"}
    return cfg


def run_child(cfg: dict) -> dict:
    """Run `cfg` once in this process and return what the table needs."""
    import time

    import engine

    start = time.perf_counter()
    start_cpu = time.process_time()
    row = engine.run(cfg)["runs"][0]
    cpu_s = time.process_time() - start_cpu
    wall_s = time.perf_counter() - start
    assert row["status"] == "ok", row["error"]
    return {"wall_s": wall_s, "cpu_s": cpu_s, "packets": row["packets_sent"], "events": row["events"],
            "drops": row["drops"], "pause_frames": row.get("pause_frames"), "sim_time_s": row["sim_time_s"]}


def main() -> None:
    """Run the rounds, each (scenario, setting) in a fresh process, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--incast-bytes", type=int, default=20_000_000)
    parser.add_argument("--permutation-bytes", type=int, default=4_000_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one run, config as JSON
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return
    cases = [(scenario, setting) for scenario in args.scenarios.split(",") for setting in args.settings.split(",")]
    results: dict[tuple[str, str], list[dict]] = {case: [] for case in cases}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for case in cases:
            cfg = config(*case, args.incast_bytes, args.permutation_bytes)
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], check=True,
                                 capture_output=True, text=True).stdout
            results[case].append(json.loads(out.strip().splitlines()[-1]))
    load_after = os.getloadavg()
    kernel = "pure Python" if os.environ.get("NETSWEEP_PURE_PYTHON") == "1" else "as installed (compiled if built)"
    print(f"kernel: {kernel}; {args.rounds} rounds, medians; load average before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print("| scenario | setting | packets | events | events/packet | pause frames | drops | wall s | CPU s "
          "| packets/CPU s | events/CPU s | packets/CPU s vs tcp |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    tcp_pps: dict[str, float] = {}
    for scenario, setting in cases:
        runs = results[(scenario, setting)]
        last = runs[-1]  # the counts are the same in every run (deterministic)
        wall_s = statistics.median(r["wall_s"] for r in runs)
        cpu_s = statistics.median(r["cpu_s"] for r in runs)
        pps = statistics.median(r["packets"] / r["cpu_s"] for r in runs)
        eps = statistics.median(r["events"] / r["cpu_s"] for r in runs)
        if setting == "tcp":
            tcp_pps[scenario] = pps
        ratio = f"{pps / tcp_pps[scenario]:.2f}" if scenario in tcp_pps else "-"
        pauses = "-" if last["pause_frames"] is None else f"{last['pause_frames']:,}"
        print(f"| {scenario} | {setting} | {last['packets']:,} | {last['events']:,} | "
              f"{last['events'] / last['packets']:.2f} | {pauses} | {last['drops']:,} | {wall_s:.3f} | {cpu_s:.3f} | "
              f"{pps / 1e6:.3f} M | {eps / 1e6:.2f} M | {ratio} |")


if __name__ == "__main__":
    main()
