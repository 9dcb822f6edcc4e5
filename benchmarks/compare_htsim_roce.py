"""netsweep's RoCE and PFC side by side with htsim's (Broadcom/csg-htsim, `htsim_roce`), settings aligned.

htsim is not part of netsweep: build it in a scratch folder (docs/roce.md, "Side by side with htsim") and give
the folder of its datacenter binaries. The script writes htsim's connection matrix and topology files into a
temporary folder, runs `htsim_roce` and netsweep (`engine.run`) on each scenario, and writes
benchmarks/compare_htsim_roce.{md,csv}:

    python benchmarks/compare_htsim_roce.py --htsim-bin /path/to/csg-htsim/sim/datacenter [--seeds 20]

Scenarios (100 Gb/s host links, 1 us per link, PFC at every switch ingress port, RoCE without congestion control):
- incast: 8 senders of 1 MB into one host of one switch, 4,096-byte payloads, PFC at 15 and 12 payloads;
  `as_specified` (1,000,000 bytes, 4,096 payload bytes on both sides: htsim's packets are 4,160 bytes, ours
  4,140, and htsim rounds the flow up to whole packets), `wire_aligned` (245 packets of 4,140 wire bytes on both
  sides: htsim's -mtu 4076), and `wire_aligned_topo_file` (htsim's switch from a -topo file, where its pause
  frames arrive with zero latency).
- permutation on a 2:1 leaf-spine (16 hosts, 8 a leaf, 2 spines joined by 200 Gb/s links): host i sends
  2 MB (489 packets, wire-aligned) to host i + 8 mod 16, so every flow crosses a spine; `ecmp` (per flow;
  the two simulators hash differently, so each runs `--seeds` seeds, and a second table compares the runs
  grouped by the split of flows over the uplinks that each drew)
  and `spray` (per packet; htsim's `ecmp_rr`, netsweep's `network.load_balancing=spray`, skipped with a message
  while that key does not exist); `one_way_spray` sprays leaf 0's 8 flows alone (data only on its uplinks).

htsim reports a flow done when its sender has the last ACK; netsweep when the receiver has the last byte, and an
ACK can queue behind data for tens of microseconds on a congested uplink. So the script runs htsim twice: once for
its printout (sender-side FCTs `htsim_tx_*`, pause frames), once with its sinks' cumulative ACK logged every
0.2 us (`-log sink`, decoded by htsim's `parse_output`), whence the receiver-side FCTs (`htsim_rx_*`, to
+-0.1 us) that the table compares.

The htsim build needs two lines added (docs/roce.md): a count of the PAUSE frames its switches send, printed at the
end of `htsim_roce`; and its RoCE and HPCC sources must not reseed the random generator from the wall clock, else
per-flow ECMP runs are not repeatable.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import engine
from engine.config import ConfigError
from engine.links import ROCE_HEADER_BYTES

HERE = Path(__file__).resolve().parent
LINK_GBPS = 100
LINK_LATENCY_US = 1.0
PAYLOAD_BYTES = 4096  # netsweep's roce.payload_bytes in every scenario
OURS_HEADER_BYTES = ROCE_HEADER_BYTES  # 44: IPv4 + UDP + BTH + ICRC
HTSIM_HEADER_BYTES = 64  # htsim's RocePacket::ACKSIZE, added to every -mtu payload and the size of its ACKs
# htsim's -mtu giving packets of netsweep's wire size: 4,076 + 64 = 4,096 + 44 = 4,140 bytes
HTSIM_ALIGNED_MTU = PAYLOAD_BYTES + OURS_HEADER_BYTES - HTSIM_HEADER_BYTES
SPRAY_SEEDS = 10  # netsweep's sprayed connections start on their ECMP path, so the seed matters (htsim's not)
PERMUTATION_HOSTS_PER_LEAF = 8  # 2 leaves of 8 hosts, each sending to its peer on the other leaf
PFC_XOFF_PACKETS, PFC_XON_PACKETS = 15, 12  # htsim_roce's defaults, in multiples of its -mtu (its payload)

FINISHED = re.compile(r"^Flow Roce_(\d+)_(\d+) \d+ finished at ([0-9.e+-]+) total bytes (\d+)", re.MULTILINE)
PAUSES = re.compile(r"^Pause frames: (\d+)", re.MULTILINE)
RETRANSMITS = re.compile(r"^New: \d+ Rtx: (\d+)", re.MULTILINE)
SINK_NAME = re.compile(r"Roce_sink_(\d+)_(\d+)=(\d+)")
SINK_SAMPLE_US = 0.2  # period of htsim's sink logger: receiver-side FCTs to +-0.1 us
OVERFLOW = "LOSSLESS not working"  # htsim's warning where a lossless queue would have dropped

LEAF_SPINE_TOPO = """\
# 16 hosts, leaves of 8, 2 spines, every leaf joined to each spine by one 200 Gb/s link (2:1 at the leaves).
# htsim checks Oversubscribed = Radix_Down / Radix_Up of tier 0 (8 / 2) and counts the uplinks as
# nodes x 100 / (200 x 4) = 2 for the whole pod, so the spines' Radix_Down is 1 to pass its check; it then joins
# every leaf to every spine (a 2-tier tree joins each tier-0 switch to all tier-1 switches).
Nodes 16
Tiers 2
Podsize 16

Tier 0
Downlink_speed_Gbps 100
Radix_Down 8
Radix_Up 2
Downlink_Latency_ns 1000
Switch_Latency_ns 0
Oversubscribed 4

Tier 1
Downlink_speed_Gbps 200
Radix_Down 1
Downlink_Latency_ns 1000
Switch_Latency_ns 0
"""

ONE_SWITCH_TOPO = """\
# One 16-port leaf (4 uplinks to 4 spines that the incast never uses): the incast's switch read from a file.
Nodes 16
Tiers 2
Podsize 16

Tier 0
Downlink_speed_Gbps 100
Radix_Down 16
Radix_Up 4
Downlink_Latency_ns 1000
Switch_Latency_ns 0
Oversubscribed 4

Tier 1
Downlink_speed_Gbps 100
Radix_Down 1
Downlink_Latency_ns 1000
Switch_Latency_ns 0
"""


@dataclass(frozen=True)
class Scenario:
    """One comparison: the same flows for both simulators, in each one's units."""

    name: str
    flows: tuple[tuple[int, int], ...]  # (src, dst)
    ours_bytes: int  # netsweep's message per flow
    htsim_bytes: int  # htsim's flow size (whole packets of htsim_mtu)
    htsim_mtu: int
    htsim_args: tuple[str, ...]  # topology and routing arguments
    ours_network: dict[str, Any]
    htsim_topo: str | None = None
    ours_extra: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (1,)


def scenarios(seeds: int) -> list[Scenario]:
    """The scenarios of the table (module docstring)."""
    incast = tuple((src, 0) for src in range(1, 9))
    aligned_packets = -(-1_000_000 // PAYLOAD_BYTES)  # 245
    one_switch = {"topology": "switch", "npus": 9}
    # without a -topo file a 2-tier htsim tree has K^2/2 hosts, K/2 a leaf: K = 18 puts the 9 hosts on leaf 0
    generated = ("-nodes", "162", "-tiers", "2", "-hop_latency", str(LINK_LATENCY_US), "-strat", "ecmp_host",
                 "-paths", "1")
    from_file = ("-nodes", "16", "-strat", "ecmp_host", "-paths", "1")
    perm = tuple((src, (src + PERMUTATION_HOSTS_PER_LEAF) % 16) for src in range(16))
    perm_packets = -(-2_000_000 // PAYLOAD_BYTES)  # 489
    leaf_spine = {"topology": "leaf_spine", "npus": 16, "hosts_per_leaf": PERMUTATION_HOSTS_PER_LEAF, "spines": 2,
                  "uplink_gbps": 200}
    return [
        Scenario("incast_as_specified", incast, 1_000_000, 1_000_000, PAYLOAD_BYTES, generated, one_switch),
        Scenario("incast_wire_aligned", incast, aligned_packets * PAYLOAD_BYTES, aligned_packets * HTSIM_ALIGNED_MTU,
                 HTSIM_ALIGNED_MTU, generated, one_switch),
        Scenario("incast_wire_aligned_topo_file", incast, aligned_packets * PAYLOAD_BYTES,
                 aligned_packets * HTSIM_ALIGNED_MTU, HTSIM_ALIGNED_MTU, from_file, one_switch,
                 htsim_topo=ONE_SWITCH_TOPO),
        Scenario("permutation_ecmp", perm, perm_packets * PAYLOAD_BYTES, perm_packets * HTSIM_ALIGNED_MTU,
                 HTSIM_ALIGNED_MTU, ("-nodes", "16", "-strat", "ecmp_host", "-paths", "1"), leaf_spine,
                 htsim_topo=LEAF_SPINE_TOPO, seeds=tuple(range(1, seeds + 1))),
        Scenario("permutation_spray", perm, perm_packets * PAYLOAD_BYTES, perm_packets * HTSIM_ALIGNED_MTU,
                 HTSIM_ALIGNED_MTU, ("-nodes", "16", "-strat", "ecmp_rr"), leaf_spine,
                 htsim_topo=LEAF_SPINE_TOPO, ours_extra={"load_balancing": "spray"},
                 seeds=tuple(range(1, SPRAY_SEEDS + 1))),
        # half of it: leaf 0's hosts to leaf 1's, so that leaf 0's uplinks carry data alone (the ACKs go back
        # over leaf 1's)
        Scenario("one_way_spray", perm[:PERMUTATION_HOSTS_PER_LEAF], perm_packets * PAYLOAD_BYTES,
                 perm_packets * HTSIM_ALIGNED_MTU, HTSIM_ALIGNED_MTU, ("-nodes", "16", "-strat", "ecmp_rr"),
                 leaf_spine, htsim_topo=LEAF_SPINE_TOPO, ours_extra={"load_balancing": "spray"}),
    ]


def run_htsim(bin_dir: Path, scenario: Scenario, seed: int, folder: Path) -> dict[str, Any]:
    """Run `htsim_roce` on the scenario: its flows' FCTs at the sender (last ACK) and at the receiver (last byte),
    pause frames, retransmits. htsim prints only the former: a second run samples its sinks' cumulative ACK
    every `SINK_SAMPLE_US` until just after the last flow (`-log sink`, read back with `parse_output`)."""
    matrix = folder / f"{scenario.name}.cm"
    lines = [f"Nodes {int(scenario.htsim_args[scenario.htsim_args.index('-nodes') + 1])}",
             f"Connections {len(scenario.flows)}"]
    lines += [f"{src}->{dst} start 0 size {scenario.htsim_bytes}" for src, dst in scenario.flows]
    matrix.write_text("\n".join(lines) + "\n")
    logfile = folder / "logout.dat"
    args = [str(bin_dir / "htsim_roce"), "-tm", str(matrix), *scenario.htsim_args, "-linkspeed",
            str(LINK_GBPS * 1000), "-mtu", str(scenario.htsim_mtu), "-pfc_thresholds", str(PFC_XON_PACKETS),
            str(PFC_XOFF_PACKETS), "-q", "10000", "-seed", str(seed), "-o", str(logfile)]
    if scenario.htsim_topo is not None:
        topo = folder / f"{scenario.name}.topo"
        topo.write_text(scenario.htsim_topo)
        args += ["-topo", str(topo)]
    start = time.perf_counter()
    out = subprocess.run([*args, "-end", "1000000"], capture_output=True, text=True, cwd=folder, check=True).stdout
    wall_s = time.perf_counter() - start
    finished = {(int(src), int(dst)): float(t) for src, dst, t, _ in FINISHED.findall(out)}
    if len(finished) != len(scenario.flows):
        raise RuntimeError(f"htsim finished {len(finished)} of {len(scenario.flows)} flows: {' '.join(args)}")
    pauses = PAUSES.search(out)
    if pauses is None:
        raise RuntimeError("htsim printed no 'Pause frames:' line: is its pause counter patched in (docs/roce.md)?")
    retransmits = RETRANSMITS.search(out)
    # the sink logger's period is in ms; it logs until -end, so stop just after the last ACK
    end_us = math.ceil(max(finished.values())) + 1
    subprocess.run([*args, "-end", str(end_us), "-log", "sink", "-logtime", str(SINK_SAMPLE_US / 1000)],
                   capture_output=True, text=True, cwd=folder, check=True)
    received = sink_completions(bin_dir.parent / "parse_output", logfile, scenario.htsim_bytes)
    return {"fcts_us": [finished[flow] for flow in scenario.flows],
            "rx_fcts_us": [received[flow] for flow in scenario.flows], "pause_frames": int(pauses.group(1)),
            "retransmits": int(retransmits.group(1)) if retransmits else None,
            "drops": 0, "overflow_warnings": out.count(OVERFLOW), "wall_s": wall_s}


def sink_completions(parse_output: Path, logfile: Path, flow_bytes: int) -> dict[tuple[int, int], float]:
    """When each htsim sink had all `flow_bytes` (us; the middle of the sampling period in which its cumulative
    ACK reached them), by (src, dst), from a `-log sink` log file."""
    names = {int(sink_id): (int(src), int(dst))
             for src, dst, sink_id in SINK_NAME.findall(logfile.read_bytes().decode("latin-1"))}
    text = subprocess.run([str(parse_output), str(logfile), "-ascii"], capture_output=True, text=True,
                          check=True).stdout
    done: dict[tuple[int, int], float] = {}
    for line in text.splitlines():
        fields = line.split()  # time_s Type ROCE_SINK ID <id> Ev RATE CAck <bytes> Rate <rate>
        if len(fields) >= 9 and fields[2] == "ROCE_SINK" and int(fields[8]) >= flow_bytes:
            flow = names[int(fields[4])]
            if flow not in done:
                done[flow] = float(fields[0]) * 1e6 - SINK_SAMPLE_US / 2
    if len(done) != len(names):
        raise RuntimeError(f"{logfile}: {len(done)} of {len(names)} sinks logged complete")
    return done


def run_ours(scenario: Scenario, seed: int) -> dict[str, Any] | str:
    """Run netsweep on the scenario (or the reason it cannot: a key it does not have yet)."""
    # PFC thresholds in bytes as htsim's (multiples of its -mtu), given in KiB (exact: a multiple of 1/1024)
    network = {"link_gbps": LINK_GBPS, "link_latency_us": LINK_LATENCY_US,
               "mtu_bytes": PAYLOAD_BYTES + OURS_HEADER_BYTES,
               "pfc_xoff_kb": PFC_XOFF_PACKETS * scenario.htsim_mtu / 1024,
               "pfc_xon_kb": PFC_XON_PACKETS * scenario.htsim_mtu / 1024,
               **scenario.ours_network, **scenario.ours_extra}
    flows = [{"src": src, "dst": dst, "bytes": scenario.ours_bytes} for src, dst in scenario.flows]
    cfg = {"seed": seed, "engine": {"link_stats": "all"}, "transport": {"protocol": "roce"},
           "roce": {"payload_bytes": PAYLOAD_BYTES}, "network": network, "workload": {"type": "flows", "flows": flows}}
    start = time.perf_counter()
    try:
        out = engine.run(cfg)
    except ConfigError as error:
        if scenario.ours_extra and any(key in str(error) for key in scenario.ours_extra):
            return f"skipped: netsweep has no {', '.join(f'network.{key}' for key in scenario.ours_extra)} yet"
        raise
    wall_s = time.perf_counter() - start
    row = out["runs"][0]
    if row["status"] != "ok":
        raise RuntimeError(f"netsweep run failed: {row['error']}")
    fct_us = {(flow["src"], flow["dst"]): flow["fct_s"] * 1e6 for flow in out["flows"]}
    # flows on each leaf's busiest uplink: its bytes over one flow's (ACKs add about 1 %)
    busiest: dict[int, int] = {}
    for link in out["links"]:
        if link["kind"] == "leaf_uplink":
            leaf = int(link["src"].removeprefix("leaf"))
            busiest[leaf] = max(busiest.get(leaf, 0), round(link["bytes"] / wire_bytes(scenario)))
    return {"fcts_us": [fct_us[flow] for flow in scenario.flows], "pause_frames": row["pause_frames"],
            "retransmits": row["retransmits"], "timeouts": row["timeouts"], "drops": row["drops"], "wall_s": wall_s,
            "busiest_uplinks": "+".join(str(n) for n in sorted(busiest.values(), reverse=True)) or None}


def wire_bytes(scenario: Scenario) -> int:
    """One flow's bytes on the wire (netsweep's packets, as htsim's in the wire-aligned scenarios)."""
    return scenario.ours_bytes + -(-scenario.ours_bytes // PAYLOAD_BYTES) * OURS_HEADER_BYTES


def busiest_uplinks_from_fcts(scenario: Scenario, fcts_us: list[float]) -> str:
    """The flows on each leaf's busiest uplink, read from the FCTs of the flows leaving the leaf: n flows sharing
    an uplink of `uplink_gbps` finish after n x their wire bytes at its rate (plus a few microseconds), so each
    flow's FCT tells how many shared its uplink, and the leaf's latest flow its busiest."""
    per_leaf = scenario.ours_network["hosts_per_leaf"]
    bytes_per_us = scenario.ours_network["uplink_gbps"] * 1e3 / 8
    busiest: dict[int, int] = {}
    for (src, _), fct in zip(scenario.flows, fcts_us):
        sharing = round(fct * bytes_per_us / wire_bytes(scenario))
        busiest[src // per_leaf] = max(busiest.get(src // per_leaf, 0), sharing)
    return "+".join(str(n) for n in sorted(busiest.values(), reverse=True))


def summarise(scenario: Scenario, seed: int, ours: dict[str, Any], htsim: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: both sides' FCTs (max, median), pause frames, drops, and their ratios."""
    name = scenario.name
    row = {"scenario": name, "seed": seed,
           "ours_max_fct_us": max(ours["fcts_us"]), "ours_median_fct_us": statistics.median(ours["fcts_us"]),
           "htsim_rx_max_fct_us": max(htsim["rx_fcts_us"]),
           "htsim_rx_median_fct_us": statistics.median(htsim["rx_fcts_us"]),
           "htsim_tx_max_fct_us": max(htsim["fcts_us"]), "htsim_tx_median_fct_us": statistics.median(htsim["fcts_us"]),
           "ours_pause_frames": ours["pause_frames"], "htsim_pause_frames": htsim["pause_frames"],
           "ours_drops": ours["drops"], "htsim_drops": htsim["drops"],
           "ours_retransmits": ours["retransmits"], "htsim_retransmits": htsim["retransmits"],
           "ours_timeouts": ours["timeouts"],
           "htsim_overflow_warnings": htsim["overflow_warnings"],
           "ours_busiest_uplinks": ours["busiest_uplinks"], "ours_busiest_uplinks_from_fcts": None,
           "htsim_busiest_uplinks_from_fcts": None,
           "ours_wall_s": round(ours["wall_s"], 3), "htsim_wall_s": round(htsim["wall_s"], 3)}
    row["max_fct_ratio"] = row["ours_max_fct_us"] / row["htsim_rx_max_fct_us"]
    row["median_fct_ratio"] = row["ours_median_fct_us"] / row["htsim_rx_median_fct_us"]
    row["pause_ratio"] = ours["pause_frames"] / htsim["pause_frames"] if htsim["pause_frames"] else None
    if ours["busiest_uplinks"] is not None:
        row["ours_busiest_uplinks_from_fcts"] = busiest_uplinks_from_fcts(scenario, ours["fcts_us"])
        row["htsim_busiest_uplinks_from_fcts"] = busiest_uplinks_from_fcts(scenario, htsim["rx_fcts_us"])
    return row


def markdown(rows: list[dict[str, Any]], skipped: dict[str, str], command: str, load: str, build: str) -> str:
    """The table: one line per single-seed scenario; over seeds the mean, min and max of each column."""
    def cell(values: list[float], digits: int = 1) -> str:
        if len(values) == 1:
            return f"{values[0]:,.{digits}f}"
        return f"{statistics.mean(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"

    head = ("| scenario | seeds | max FCT ours (us) | max FCT htsim (us) | ratio | median FCT ours (us) "
            "| median FCT htsim (us) | ratio | pause frames ours | pause frames htsim | ratio "
            "| drops ours/htsim | retransmits ours/htsim | timeouts ours (htsim has no timer) |")
    lines = [f"Command: `{command}`", "", f"htsim: {build}", "", f"Load: {load}", "", head,
             "|" + " --- |" * 2 + " ---: |" * 12]
    for name in dict.fromkeys(row["scenario"] for row in rows):
        group = [row for row in rows if row["scenario"] == name]

        def col(key: str, group: list[dict[str, Any]] = group) -> list[float]:
            return [row[key] for row in group]

        def ratio(num: str, den: str, group: list[dict[str, Any]] = group) -> str:
            return f"{statistics.mean(col(num, group)) / statistics.mean(col(den, group)):.4f}"

        lines.append(
            f"| {name} | {len(group)} | {cell(col('ours_max_fct_us'))} | {cell(col('htsim_rx_max_fct_us'))} "
            f"| {ratio('ours_max_fct_us', 'htsim_rx_max_fct_us')} | {cell(col('ours_median_fct_us'))} "
            f"| {cell(col('htsim_rx_median_fct_us'))} | {ratio('ours_median_fct_us', 'htsim_rx_median_fct_us')} "
            f"| {cell(col('ours_pause_frames'), 0)} | {cell(col('htsim_pause_frames'), 0)} "
            f"| {ratio('ours_pause_frames', 'htsim_pause_frames')} "
            f"| {sum(col('ours_drops')):.0f} / {sum(col('htsim_drops')):.0f} "
            f"| {cell(col('ours_retransmits'), 0)} / {cell(col('htsim_retransmits'), 0)} "
            f"| {sum(col('ours_timeouts')):.0f} |")
    for name, reason in skipped.items():
        lines.append(f"| {name} | - | {reason} |" + " |" * 11)
    lines += ["", "Over seeds: the mean (min-max); drops and timeouts summed. Ratios are netsweep over htsim (over "
              "seeds: of the means). FCTs are at the receiver on both sides (htsim's from its sinks' log; the module "
              "docstring of benchmarks/compare_htsim_roce.py)."]
    ecmp = [row for row in rows if row["ours_busiest_uplinks"] is not None and row["scenario"].endswith("ecmp")]
    if ecmp:
        lines += ["", by_busiest_uplinks(ecmp)]
    return "\n".join(lines) + "\n"


def split_probability(split: str, per_leaf: int) -> float:
    """The chance of this split ("a+b": the flows on each leaf's busiest uplink, largest first) when each of the
    `per_leaf` flows leaving a leaf hashes to one of its 2 uplinks evenly and independently (binomial)."""
    def busiest(m: int) -> float:  # P(the leaf's busier uplink carries m flows)
        return math.comb(per_leaf, m) * (1 if 2 * m == per_leaf else 2) / 2 ** per_leaf

    a, b = (int(n) for n in split.split("+"))
    return busiest(a) * busiest(b) * (1 if a == b else 2)


def by_busiest_uplinks(rows: list[dict[str, Any]]) -> str:
    """Per-flow ECMP runs grouped by the flows on each leaf's busiest uplink (both sides read from the FCTs, as
    `busiest_uplinks_from_fcts`): how often each split came up, and the mean FCTs and pause frames given it."""
    lines = ["| flows on each leaf's busiest uplink | runs expected | runs ours | runs htsim | max FCT ours (us) "
             "| max FCT htsim (us) | ratio | median FCT ours (us) | median FCT htsim (us) | ratio | pause frames ours "
             "| pause frames htsim | ratio |", "| --- |" + " ---: |" * 12]
    splits = sorted({row["ours_busiest_uplinks_from_fcts"] for row in rows}
                    | {row["htsim_busiest_uplinks_from_fcts"] for row in rows})
    for split in splits:
        ours = [row for row in rows if row["ours_busiest_uplinks_from_fcts"] == split]
        htsim = [row for row in rows if row["htsim_busiest_uplinks_from_fcts"] == split]

        def mean(group: list[dict[str, Any]], key: str) -> float | None:
            return statistics.mean(row[key] for row in group) if group else None

        pairs = [(mean(ours, "ours_max_fct_us"), mean(htsim, "htsim_rx_max_fct_us")),
                 (mean(ours, "ours_median_fct_us"), mean(htsim, "htsim_rx_median_fct_us")),
                 (mean(ours, "ours_pause_frames"), mean(htsim, "htsim_pause_frames"))]
        cells = [split, f"{len(rows) * split_probability(split, PERMUTATION_HOSTS_PER_LEAF):.1f}", str(len(ours)),
                 str(len(htsim))]
        for ours_value, htsim_value in pairs:
            cells += ["-" if value is None else f"{value:,.1f}" for value in (ours_value, htsim_value)]
            cells.append(f"{ours_value / htsim_value:.4f}" if ours_value and htsim_value else "-")
        lines.append("| " + " | ".join(cells) + " |")
    agree = sum(row["ours_busiest_uplinks"] == row["ours_busiest_uplinks_from_fcts"] for row in rows)
    lines += ["", f"netsweep's split read from its FCTs equals the one counted on its links in {agree} of "
              f"{len(rows)} runs."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--htsim-bin", type=Path, required=True, help="folder holding htsim_roce")
    parser.add_argument("--seeds", type=int, default=20, help="seeds of the per-flow ECMP scenario (each side)")
    parser.add_argument("--out", type=Path, default=HERE / "compare_htsim_roce", help="output path without suffix")
    parser.add_argument("--build", default="htsim_roce", help="what the htsim build is (written into the table)")
    args = parser.parse_args()
    for needed in (args.htsim_bin / "htsim_roce", args.htsim_bin.parent / "parse_output"):
        if not needed.is_file():
            parser.error(f"--htsim-bin {args.htsim_bin}: no {needed} (in sim/: make libhtsim.a parse_output, "
                         "then make -C datacenter)")
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="htsim_roce_") as tmp:
        for scenario in scenarios(args.seeds):
            for seed in scenario.seeds:
                ours = run_ours(scenario, seed)
                if isinstance(ours, str):
                    skipped[scenario.name] = ours
                    print(f"{scenario.name}: {ours}")
                    break
                htsim = run_htsim(args.htsim_bin, scenario, seed, Path(tmp))
                rows.append(summarise(scenario, seed, ours, htsim))
                print({key: round(value, 4) if isinstance(value, float) else value
                       for key, value in rows[-1].items()})
    wall_s = time.perf_counter() - start
    with open(args.out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({key: round(value, 4) if isinstance(value, float) else value for key, value in row.items()}
                         for row in rows)
    out = args.out.resolve()
    out_arg = out.relative_to(HERE.parent) if out.is_relative_to(HERE.parent) else out
    command = (f"python benchmarks/compare_htsim_roce.py --htsim-bin <htsim>/sim/datacenter --seeds {args.seeds} "
               f"--out {out_arg} --build '{args.build}'")
    load = f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores, {wall_s:.0f} s in all"
    table = markdown(rows, skipped, command, load, args.build)
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
