"""Validation of the packet engine against ns-3 (engine.backend=ns3), the system layer held fixed.

Every case runs one collective (or one iteration of ASTRA-sim's DLRM_HybridParallel workload) on
four backends: `packet` (netsweep's TCP/IP engine), `ns3` (ns-3.44's TCP/IP behind the same system
layer), `analytical` (fluid max-min fair sharing) and `alpha_beta` (closed form, no contention).
The matrix: op x bytes per NPU x NPUs x topology x switch buffer (deep: no loss; shallow: losses)
x congestion control. Writes benchmarks/validate_ns3.csv and benchmarks/validate_ns3.md, prints
the table and the error summary against the targets (packet vs ns3: deep buffers median |error|
<= 2 % and worst <= 5 %; shallow buffers completion within 25 %, and in the cases with losses
(drops on either side) drops and timeouts within 30 %).

    python benchmarks/validate_ns3.py            # the reduced matrix (about 25 minutes on 2 busy cores)
    python benchmarks/validate_ns3.py --full     # bytes up to 64 MB, 32 NPUs, CUBIC too (hours; validate_ns3_full.*)
    python benchmarks/validate_ns3.py --full --max-bytes 4194304   # the same without 64 MiB
    python benchmarks/validate_ns3.py --corners  # 8 cases at the full matrix's extremes (minutes)
    python benchmarks/validate_ns3.py --timeout-bound [--timestamps]  # the 5 timeout-bound cases
    python benchmarks/validate_ns3.py --summarise benchmarks/validate_ns3.csv  # the .md again from a CSV

The reduced and full matrices write validate_ns3.{csv,md}, the corners validate_ns3_corners.{csv,md},
the timeout-bound cases validate_ns3_timeout_bound.{csv,md}. `--timestamps` runs the chosen cases
with tcp.timestamps=true on every backend and adds `_timestamps` to the file names.

Needs the `ns3` extra (`pip install 'netsweep[ns3]'`) and g++. Settings both simulators share:
100 Gb/s links with 1 us latency, MTU 1500, ACK per segment, SACK, 200 ms minimum RTO; both open
their connections with a handshake before time 0 (`tcp.handshake`), whose RTT sample sets the
first RTO. Timestamps are off unless `--timestamps` (`tcp.timestamps=false`, as the stored tables).
The packet engine runs with `host.tx_jitter_ns=0`: ns-3 transmits with exact timing, so both simulate the
same phases (the default 30 ns of jitter, docs/hosts.md, would compare two different draws).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
import sys
import time
from pathlib import Path

import engine
from engine.backends.ns3.helper import Ns3Error

HERE = Path(__file__).resolve().parent
BACKENDS = ("packet", "ns3", "analytical", "alpha_beta")
BUFFERS_KB = {"deep": 16384.0, "shallow": 32.0}  # per switch egress port, KiB
DCTCP_ECN_THRESHOLD_KB = 20.0  # about 14 full packets: the marking threshold for DCTCP runs
COLUMNS = ("case", "workload", "op", "bytes", "npus", "topology", "buffer", "cc", "backend", "status",
           "time_s", "retransmits", "timeouts", "drops", "ecn_marks", "wall_s")


def matrix(full: bool) -> list[dict]:
    """The cases, each a dict of the varied values."""
    ops = ("all_reduce", "all_to_all", "all_gather") if full else ("all_reduce", "all_to_all")
    sizes = (4096, 262_144, 4_194_304, 67_108_864) if full else (4096, 262_144, 4_194_304)
    npus_values = (4, 8, 16, 32) if full else (4, 16)
    ccs = ("newreno", "cubic", "dctcp") if full else ("newreno", "dctcp")
    cases = [dict(workload="collective", op=op, bytes=size, npus=npus, topology=topology, buffer=buffer, cc=cc)
             for op, size, npus, topology, buffer, cc in itertools.product(
                 ops, sizes, npus_values, ("switch", "leaf_spine"), BUFFERS_KB, ccs)]
    cases += [dict(workload="astra_dlrm", op="dlrm", bytes=0, npus=16, topology="switch", buffer=buffer, cc="newreno")
              for buffer in BUFFERS_KB]
    return cases


def corners() -> list[dict]:
    """A few cases at the extremes of the full matrix that the reduced one misses: 32 NPUs,
    all-gather and CUBIC, with both buffers and all three congestion controls. (64 MiB per NPU is
    left to --full: ns-3's time grows with the square of the window, since TcpSocketBase's
    SendPendingData calls TcpTxBuffer::NextSeg once per segment and NextSeg walks the whole list of
    segments in flight; windows grow without loss behind host NICs that never drop. A 4 MiB ring
    all-reduce on 4 NPUs takes 1.1 s in ns-3, 16 MiB 8.4 s, 64 MiB more than 5 minutes.)"""
    def case(op: str, npus: int, topology: str, buffer: str, cc: str) -> dict:
        return dict(workload="collective", op=op, bytes=4_194_304, npus=npus, topology=topology, buffer=buffer,
                    cc=cc)
    return [case("all_to_all", 32, "leaf_spine", "deep", "newreno"),
            case("all_to_all", 32, "leaf_spine", "deep", "dctcp"),
            case("all_to_all", 32, "switch", "shallow", "newreno"),
            case("all_reduce", 32, "leaf_spine", "deep", "cubic"),
            case("all_gather", 16, "leaf_spine", "deep", "newreno"),
            case("all_gather", 32, "leaf_spine", "shallow", "dctcp"),
            case("all_to_all", 16, "leaf_spine", "deep", "cubic"),
            case("all_to_all", 16, "leaf_spine", "shallow", "cubic")]


def timeout_bound() -> list[dict]:
    """The shallow-buffer cases whose completion is set by retransmission timeouts: the all-to-alls
    of 256 KiB and 4 MiB on 16 NPUs on the leaf-spine (NewReno, DCTCP) and the CUBIC corner."""
    cases = [dict(workload="collective", op="all_to_all", bytes=size, npus=16, topology="leaf_spine", buffer="shallow",
                  cc=cc) for size in (262_144, 4_194_304) for cc in ("newreno", "dctcp")]
    return cases + [dict(cases[-1], cc="cubic")]


def config_of(case: dict, backend: str, timestamps: bool = False) -> dict:
    """The engine config of one case on one backend (with the RFC 7323 timestamp option or not)."""
    npus = case["npus"]
    network: dict = {"topology": case["topology"], "npus": npus, "link_gbps": 100.0, "link_latency_us": 1.0,
                     "buffer_kb": BUFFERS_KB[case["buffer"]]}
    if case["topology"] == "leaf_spine":  # two leaves, two spines at the host rate: ECMP, no oversubscription
        network.update(hosts_per_leaf=npus // 2, spines=2, uplink_gbps=100.0)
    if case["cc"] == "dctcp":
        network["ecn_threshold_kb"] = DCTCP_ECN_THRESHOLD_KB
    if case["workload"] == "astra_dlrm":
        workload = {"type": "astra", "path": "bundled:astra-sim-1.0/DLRM_HybridParallel.txt", "iterations": 1}
    else:
        workload = {"type": "collective", "op": case["op"], "bytes": case["bytes"], "iterations": 1}
    config = {"engine": {"backend": backend, "max_sim_time_s": 30.0}, "network": network,
              "tcp": {"cc": case["cc"], "min_rto_ms": 200.0, "timestamps": timestamps},
              "workload": workload}
    if backend == "packet":  # exact transmit timing, as ns-3's: the same phases on both (docs/hosts.md)
        config["host"] = {"tx_jitter_ns": 0}
    return config


def run_case(case: dict, backend: str, timestamps: bool = False) -> dict:
    """One case on one backend: a row of the table."""
    wall_start = time.perf_counter()
    try:
        run_row = engine.run(config_of(case, backend, timestamps))["runs"][0]
    except Ns3Error as error:  # ns-3 itself failed (e.g. one of its assertions): a row that says so
        print(f"{backend} failed: {error}", file=sys.stderr, flush=True)
        run_row = {"status": "error", "iteration_time_s": None}
    return {**case, "backend": backend, "status": run_row["status"], "time_s": run_row["iteration_time_s"],
            **{key: run_row.get(key) for key in ("retransmits", "timeouts", "drops", "ecn_marks")},
            "wall_s": round(time.perf_counter() - wall_start, 3)}


def relative_error(value: float | None, reference: float | None) -> float | None:
    """(value - reference) / reference, or None if either is missing or the reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / reference


def count_error(value: int | None, reference: int | None) -> float | None:
    """Relative difference of two counts; 0 when both are 0."""
    if value is None or reference is None:
        return None
    if value == reference:
        return 0.0
    return (value - reference) / max(reference, 1)


def summarise(rows: list[dict]) -> tuple[list[dict], dict]:
    """One line per case (times per backend, packet vs ns3 errors) and the summary per buffer."""
    by_case: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["backend"]] = row
    lines = []
    for _case, by_backend in sorted(by_case.items()):
        packet, ns3 = by_backend["packet"], by_backend["ns3"]
        line = {key: packet[key] for key in ("case", "workload", "op", "bytes", "npus", "topology", "buffer", "cc")}
        for backend in BACKENDS:
            line[f"{backend}_s"] = by_backend[backend]["time_s"]
        line["error"] = relative_error(packet["time_s"], ns3["time_s"])
        line["analytical_vs_ns3"] = relative_error(by_backend["analytical"]["time_s"], ns3["time_s"])
        for counter in ("drops", "timeouts", "retransmits"):
            line[f"packet_{counter}"], line[f"ns3_{counter}"] = packet[counter], ns3[counter]
        lines.append(line)
    summary = {}
    for buffer in BUFFERS_KB:
        errors = [abs(line["error"]) for line in lines if line["buffer"] == buffer and line["error"] is not None]
        # drops and timeouts are compared where there is something to compare: a case that loses
        # nothing on either side agrees trivially (0 = 0) and would swell the count
        lossy = [line for line in lines if line["buffer"] == buffer and line["packet_drops"] is not None
                 and line["ns3_drops"] is not None and (line["packet_drops"] or line["ns3_drops"])]
        drop_errors = [count_error(line["packet_drops"], line["ns3_drops"]) for line in lossy]
        timeout_errors = [count_error(line["packet_timeouts"], line["ns3_timeouts"]) for line in lossy]
        summary[buffer] = {
            "cases": len(errors),
            "failed": sum(1 for line in lines if line["buffer"] == buffer and line["error"] is None),
            "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": max(errors) if errors else None,
            "within_25pct": sum(error <= 0.25 for error in errors),
            "lossy_cases": len(lossy),
            "drops_within_30pct": sum(error is not None and abs(error) <= 0.30 for error in drop_errors),
            "timeouts_within_30pct": sum(error is not None and abs(error) <= 0.30 for error in timeout_errors),
        }
    return lines, summary


def markdown(lines: list[dict], summary: dict) -> str:
    """The table and the summary as Markdown."""
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.4g}"

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:+.2f} %"

    out = ["| op | bytes/NPU | NPUs | topology | buffer | cc | packet ms | ns3 ms | packet vs ns3 | analytical ms "
           "| alpha_beta ms | drops p/n | timeouts p/n | retransmits p/n |",
           "| --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for line in lines:
        size = "DLRM iteration" if line["workload"] == "astra_dlrm" else f"{line['bytes']:,}"
        out.append(f"| {line['op']} | {size} | {line['npus']} | {line['topology']} | {line['buffer']} | {line['cc']} "
                   f"| {ms(line['packet_s'])} | {ms(line['ns3_s'])} | {pct(line['error'])} "
                   f"| {ms(line['analytical_s'])} | {ms(line['alpha_beta_s'])} "
                   f"| {line['packet_drops']}/{line['ns3_drops']} | {line['packet_timeouts']}/{line['ns3_timeouts']} "
                   f"| {line['packet_retransmits']}/{line['ns3_retransmits']} |")
    out.append("")
    for buffer, numbers in summary.items():
        lossy = numbers["lossy_cases"]
        counters = (f"{lossy} with losses: drops within 30 % in {numbers['drops_within_30pct']} of {lossy}, "
                    f"timeouts within 30 % in {numbers['timeouts_within_30pct']} of {lossy}") if lossy \
            else "none with losses"
        out.append(f"- {buffer} buffers ({BUFFERS_KB[buffer]:g} KiB): {numbers['cases']} cases, packet vs ns3 "
                   f"median |error| {pct(numbers['median_abs_error'])}, worst {pct(numbers['worst_abs_error'])}; "
                   f"{numbers['within_25pct']} within 25 %; {counters}"
                   + (f"; {numbers['failed']} more failed on a backend (no time)" if numbers["failed"] else ""))
    return "\n".join(out) + "\n"


def read_rows(path: Path) -> list[dict]:
    """The rows of a CSV this script wrote, typed as `run_case` returns them (empty cells: None)."""
    integers = ("case", "bytes", "npus", "retransmits", "timeouts", "drops", "ecn_marks")
    floats = ("time_s", "wall_s")
    rows = []
    with open(path, newline="") as handle:
        for raw in csv.DictReader(handle):
            row: dict = dict(raw)
            for key in integers + floats:
                text = raw[key]
                row[key] = None if text == "" else int(text) if key in integers else float(text)
            rows.append(row)
    return rows


def write_summary(rows: list[dict], md_path: Path) -> None:
    """Write the Markdown table and summary of `rows` to `md_path` and print them."""
    lines, summary = summarise(rows)
    table = markdown(lines, summary)
    md_path.write_text(table)
    print(table)


def main() -> int:
    """Run the matrix, write the CSV and the Markdown table, print the table (or, with
    --summarise, only the table again from a CSV written earlier)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--full", action="store_true", help="the full matrix (hours)")
    choice.add_argument("--corners", action="store_true",
                        help="8 cases at the full matrix's extremes, into validate_ns3_corners.{csv,md}")
    choice.add_argument("--timeout-bound", action="store_true",
                        help="the 5 timeout-bound shallow-buffer cases, into validate_ns3_timeout_bound.{csv,md}")
    parser.add_argument("--timestamps", action="store_true",
                        help="tcp.timestamps=true on every backend; file names get a _timestamps suffix")
    parser.add_argument("--max-bytes", type=int, default=None,
                        help="leave out cases of more bytes per NPU (e.g. --full --max-bytes 4194304: the full "
                             "matrix but 64 MiB, into validate_ns3_full_upto_4194304.{csv,md})")
    choice.add_argument("--summarise", type=Path, default=None, metavar="CSV",
                        help="run nothing: read a CSV this script wrote and write its .md (same name) again")
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases (a smoke test)")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for the .csv and .md files")
    args = parser.parse_args()
    if args.summarise is not None:
        write_summary(read_rows(args.summarise), args.summarise.with_suffix(".md"))
        return 0
    if args.corners:
        cases, stem = corners(), "validate_ns3_corners"
    elif args.timeout_bound:
        cases, stem = timeout_bound(), "validate_ns3_timeout_bound"
    else:
        cases, stem = matrix(args.full), "validate_ns3_full" if args.full else "validate_ns3"
    if args.max_bytes is not None:
        cases = [case for case in cases if case["bytes"] <= args.max_bytes]
        stem += f"_upto_{args.max_bytes}"
    cases = cases[:args.limit]
    if args.timestamps:
        stem += "_timestamps"
    rows = []
    for case_id, case in enumerate(cases):
        for backend in BACKENDS:
            row = run_case(case, backend, args.timestamps)
            rows.append({"case": case_id, **row})
        print(f"[{case_id + 1}/{len(cases)}] {case}: " + ", ".join(
            f"{row['backend']} {row['time_s']}" for row in rows[-len(BACKENDS):]), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({key: row.get(key) for key in COLUMNS} for row in rows)
    write_summary(rows, args.out / f"{stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
