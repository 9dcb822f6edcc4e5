"""The figure of docs/linux-tcp.md for the `linux_tcp` experiment: iteration time against the minimum
RTO, a line per TCP preset and congestion control, with the retransmission timeouts per iteration beside it.

Usage: python -m sweep -m experiment=linux_tcp
       python benchmarks/plot_linux_tcp.py results/linux_tcp docs/linux_tcp_iteration_time.png
Prints the table behind the figure (that page's numbers).
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import sweep  # noqa: E402

COLOURS = {"newreno": "tab:blue", "cubic": "tab:green", "dctcp": "tab:red"}
STYLES = {"newreno": ("--", "o", "engine defaults (RFC 6675 SACK)"),
          "linux": ("-", "s", "tcp=linux (RACK-TLP, PRR, ...)")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="results/linux_tcp")
    parser.add_argument("png", help="where to write the figure")
    args = parser.parse_args()
    runs = sweep.load_runs(args.dataset)
    runs = runs[runs["status"] == "ok"].copy()
    runs["iteration_ms"] = runs["iteration_time_s"] * 1e3
    runs["timeouts_per_iteration"] = runs["timeouts"] / runs["iterations_done"]
    columns = ["tcp", "tcp.cc", "tcp.min_rto_ms", "iteration_ms", "timeouts", "loss_probes", "rack_lost_segments",
               "retransmits", "drops"]
    table = runs[columns].sort_values(["tcp", "tcp.cc", "tcp.min_rto_ms"])
    print(table.to_string(index=False))
    figure, (time_axis, timeout_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (preset, cc), group in runs.groupby(["tcp", "tcp.cc"]):
        group = group.sort_values("tcp.min_rto_ms")
        style, marker, preset_label = STYLES[preset]
        label = f"{cc}, {preset_label}"
        time_axis.plot(group["tcp.min_rto_ms"], group["iteration_ms"], style, marker=marker,
                       color=COLOURS[cc], label=label)
        timeout_axis.plot(group["tcp.min_rto_ms"], group["timeouts_per_iteration"], style, marker=marker,
                          color=COLOURS[cc], label=label)
    for axis in (time_axis, timeout_axis):
        axis.set_xscale("log")
        axis.set_xlabel("minimum RTO (ms)")
        axis.grid(True, which="both", alpha=0.3)
    time_axis.set_yscale("log")
    time_axis.set_ylabel("iteration time (ms)")
    time_axis.set_title("dlrm_large on the quickstart's leaf-spine")
    timeout_axis.set_ylabel("retransmission timeouts per iteration")
    timeout_axis.set_title("RTOs (tail losses left to the timer)")
    time_axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.png, dpi=110)
    print("wrote", args.png)


if __name__ == "__main__":
    main()
