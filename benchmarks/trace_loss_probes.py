"""Which tail loss probes of a `linux_tcp` run found a loss? A diagnostic for docs/linux-tcp.md.

A probe episode (RFC 8985 7.4) runs from the probe until the ACKs pass what was out when it went,
or until the recovery it triggered takes it over. It found a loss when RACK marked a segment lost in
that time or the sender is in recovery when it ends; otherwise the flight's ACKs were only late
(queueing beyond the probe timeout) and the probe was not needed. Runs one point of the experiment
(`experiment=linux_tcp tcp=linux` plus the overrides given), composed from this repository's conf/,
on the pure-Python kernel (the tracing wraps methods of the sender class, which the compiled kernel
does not allow).

Usage: python benchmarks/trace_loss_probes.py tcp.cc=newreno tcp.min_rto_ms=200 [tcp.pto_slack_ms=0]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["NETSWEEP_PURE_PYTHON"] = "1"  # engine/kernel.py PURE_PYTHON_ENV: before importing engine

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import engine  # noqa: E402
from engine.transport import tcp  # noqa: E402

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    overrides = sys.argv[1:]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        composed = compose(config_name="config", overrides=["experiment=linux_tcp", "tcp=linux", *overrides])
    config = OmegaConf.to_container(composed, resolve=True)
    episodes: dict[int, int] = {}  # id(sender) -> its rack_lost_segments when the probe went
    two_srtts_us: list[float] = []  # 2 SRTT of the sender at each probe
    outcomes = {"found a loss": 0, "ACKs only late": 0, "ended by an RTO": 0}
    send_probe, rack_on_ack, on_timeout = (tcp.TcpSender._send_probe, tcp.TcpSender._rack_on_ack,
                                           tcp.TcpSender._on_timeout)

    def traced_send_probe(sender: tcp.TcpSender, now_ps: int) -> None:
        probes = sender.loss_probes
        send_probe(sender, now_ps)
        if sender.loss_probes > probes:
            episodes[id(sender)] = sender.rack_lost_segments
            two_srtts_us.append(2 * sender.rtt.srtt_ps / 1e6)  # ps -> us

    def traced_rack_on_ack(sender: tcp.TcpSender, pkt, now_ps: int, acked_bytes: int, rtt_ps: int) -> None:
        rack_on_ack(sender, pkt, now_ps, acked_bytes, rtt_ps)
        assert sender.rack is not None
        if id(sender) in episodes and sender.rack.probe_end_seq == tcp._NO_PROBE:
            lost_before = episodes.pop(id(sender))
            found = sender.rack_lost_segments > lost_before or sender.in_recovery
            outcomes["found a loss" if found else "ACKs only late"] += 1

    def traced_on_timeout(sender: tcp.TcpSender, now_ps: int) -> None:
        if episodes.pop(id(sender), None) is not None:
            outcomes["ended by an RTO"] += 1
        on_timeout(sender, now_ps)

    tcp.TcpSender._send_probe = traced_send_probe
    tcp.TcpSender._rack_on_ack = traced_rack_on_ack
    tcp.TcpSender._on_timeout = traced_on_timeout
    run = engine.run(config)["runs"][0]
    print(f"{' '.join(overrides)}: {run['iteration_time_s'] * 1e3:.3f} ms per iteration, {run['loss_probes']} probes "
          f"({', '.join(f'{count} {outcome}' for outcome, count in outcomes.items())}, {len(episodes)} open at the "
          f"end), {run['rack_lost_segments']} RACK losses, {run['drops']} drops, {run['timeouts']} RTOs; "
          f"2 SRTT at the probes {min(two_srtts_us, default=0):.0f} to {max(two_srtts_us, default=0):.0f} us")


if __name__ == "__main__":
    main()
