"""Why the packet engine drops and retransmits more than ns-3 in one lossy case of the validation:
a direct all-to-all of 4 MiB per NPU on 4 NPUs, leaf-spine (two leaves, two spines), 32 KiB switch
buffers, NewReno with SACK (validate_ns3.py's case; drops 930 vs 622, retransmissions 1,374 vs 414).

    python benchmarks/ns3_lossy_case.py              # both backends: the evidence of docs/validation-ns3.md
    python benchmarks/ns3_lossy_case.py --trace 4 150 240   # flow 4's sends from 150 to 240 us
    python benchmarks/ns3_lossy_case.py --perturb    # the counters when the buffer or the latency moves a little

Per connection it prints, for the packet engine: segments sent, retransmissions, fast recoveries,
timeouts, and the retransmissions that reached a receiver already holding those bytes (spurious);
per switch port and connection, the data and the ACK packets dropped and when the last drop came;
for ns-3 (if its extra is installed): retransmissions and timeouts per connection. The packet
engine is observed by wrapping methods of its classes, so this runs the interpreted kernel
(NETSWEEP_PURE_PYTHON=1 is set here before the engine is imported); results are the same as
compiled (tests/test_kernel.py).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

os.environ["NETSWEEP_PURE_PYTHON"] = "1"  # wrappers below need the interpreted classes

from validate_ns3 import config_of  # noqa: E402

import engine  # noqa: E402
from engine import network  # noqa: E402
from engine.backends.ns3.build import unavailable_reason  # noqa: E402
from engine.transport import tcp  # noqa: E402

CASE = dict(workload="collective", op="all_to_all", bytes=4_194_304, npus=4, topology="leaf_spine",
            buffer="shallow", cc="newreno")
PS_PER_US = 1_000_000


def packet_evidence(trace: tuple[int, float, float] | None) -> None:
    """Run the case on the packet engine, observing drops, sends and arrivals; print per connection."""
    prepared = engine.prepare(config_of(CASE, "packet"))
    sim = prepared.sim
    owner: dict[int, tuple[int, str]] = {}  # id(route) -> (flow, "data" | "ack")
    drops: collections.Counter = collections.Counter()  # (link, flow, kind) -> packets
    last_drop_ps = [0]
    spurious: collections.Counter = collections.Counter()  # flow -> retransmissions already held
    flow_of_receiver: dict[int, int] = {}
    flow_of_sender: dict[int, int] = {}

    def known(route_id: int) -> tuple[int, str] | None:
        if route_id not in owner:
            for c in sim.connections:
                owner[id(c.sender.data_route)] = (c.flow_id, "data")
                owner[id(c.receiver.ack_route)] = (c.flow_id, "ack")
                flow_of_receiver[id(c.receiver)] = c.flow_id
                flow_of_sender[id(c.sender)] = c.flow_id
        return owner.get(route_id)

    link_receive = network.Link.receive_packet

    def link_receive_observed(self: network.Link, pkt: network.Packet) -> None:
        before = self.drops
        link_receive(self, pkt)
        if self.drops != before:
            flow, kind = known(id(pkt.route)) or (-1, "?")
            drops[(self.name, flow, kind)] += 1
            last_drop_ps[0] = self.eventlist.now_ps

    receiver_receive = tcp.TcpReceiver.receive_packet

    def receiver_receive_observed(self: tcp.TcpReceiver, pkt: network.Packet) -> None:
        end = pkt.seq + pkt.payload_bytes
        if end <= self.rcv_nxt or any(start <= pkt.seq and end <= stop for start, stop in self.out_of_order or ()):
            known(id(pkt.route))
            spurious[flow_of_receiver[id(self)]] += 1
        receiver_receive(self, pkt)

    sender_transmit = tcp.TcpSender._transmit

    def sender_transmit_traced(self: tcp.TcpSender, seq: int, length: int) -> None:
        known(-1)
        now_us = self.eventlist.now_ps / PS_PER_US
        if trace and flow_of_sender.get(id(self)) == trace[0] and trace[1] <= now_us <= trace[2]:
            receiver = sim.connections[trace[0]].receiver
            mss = self.mss_bytes
            print(f"{now_us:9.3f} us  send {seq // mss:4d} {'rtx' if seq < self.snd_max else 'new'}  "
                  f"snd_una {self.snd_una // mss}  recovery {int(self.in_recovery)}  "
                  f"cwnd {self.cc.cwnd_bytes / mss:.1f}  "
                  f"SACKed {[(s // mss, e // mss) for s, e in self.sacked or ()]}  |  receiver: rcv_nxt "
                  f"{receiver.rcv_nxt // mss}, "
                  f"out of order {[(s // mss, e // mss) for s, e in receiver.out_of_order or ()]}")
        sender_transmit(self, seq, length)

    network.Link.receive_packet = link_receive_observed
    tcp.TcpReceiver.receive_packet = receiver_receive_observed
    tcp.TcpSender._transmit = sender_transmit_traced
    prepared.start()
    sim.run()
    if trace:
        return
    print(f"packet: retransmissions {sum(c.sender.retransmits for c in sim.connections)}, "
          f"timeouts {sum(c.sender.timeouts for c in sim.connections)}, drops {sum(drops.values())} "
          f"(data {sum(n for (_, _, kind), n in drops.items() if kind == 'data')}, "
          f"ACKs {sum(n for (_, _, kind), n in drops.items() if kind == 'ack')}), last drop at "
          f"{last_drop_ps[0] / PS_PER_US:.1f} us")
    print("| flow | src->dst | data path | sent | retransmissions | of them spurious | fast recoveries | timeouts |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for c in sim.connections:
        s = c.sender
        path = " ".join(link.name for link in s.data_route[:-1])
        print(f"| {c.flow_id} | {c.src}->{c.dst} | {path} | {s.packets_sent} | {s.retransmits} | "
              f"{spurious[c.flow_id]} | {s.fast_retransmits} | {s.timeouts} |")
    print("\n| switch port | flow | data drops | ACK drops |")
    print("| --- | ---: | ---: | ---: |")
    for link, flow in sorted({(link, flow) for link, flow, _ in drops}):
        print(f"| {link} | {flow} | {drops[(link, flow, 'data')]} | {drops[(link, flow, 'ack')]} |")


def ns3_evidence() -> None:
    """Run the case on ns-3 and print its counters per connection."""
    reason = unavailable_reason()
    if reason:
        print(f"ns3: not run ({reason})")
        return
    rows = engine.run(config_of(CASE, "ns3"))
    run = rows["runs"][0]
    print(f"\nns3: retransmissions {run['retransmits']}, timeouts {run['timeouts']}, drops {run['drops']}")
    print("| flow | src->dst | retransmissions | timeouts | end (us) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for flow in rows["flows"]:
        print(f"| {flow['flow_id']} | {flow['src']}->{flow['dst']} | {flow['retransmits']} | {flow['timeouts']} | "
              f"{flow['end_s'] * 1e6:.1f} |")


def perturbed() -> None:
    """Drops, retransmissions and timeouts on both backends with the switch buffer one full packet
    smaller or larger, the link latency 1 ns shorter or longer, and both: how much the counters of
    this case move for changes far below what either simulator models exactly."""
    backends = ("packet",) if unavailable_reason() else ("packet", "ns3")
    print("| buffer KiB | latency us | "
          + " | ".join(f"{b} drops / retransmissions / timeouts" for b in backends) + " |")
    print("| ---: | ---: |" + " ---: |" * len(backends))
    one_packet_kb = 1500 / 1024
    for buffer_kb, latency_us in ((32.0, 1.0), (32.0 - one_packet_kb, 1.0), (32.0 + one_packet_kb, 1.0),
                                  (32.0, 0.999), (32.0, 1.001), (32.0 + one_packet_kb, 0.999),
                                  (32.0 + one_packet_kb, 1.001)):
        cells = []
        for backend in backends:
            config = config_of(CASE, backend)
            config["network"].update(buffer_kb=buffer_kb, link_latency_us=latency_us)
            run = engine.run(config)["runs"][0]
            cells.append(f"{run['drops']} / {run['retransmits']} / {run['timeouts']}")
        print(f"| {buffer_kb:.3f} | {latency_us:g} | " + " | ".join(cells) + " |")


def main() -> int:
    """Print the evidence, one connection's trace, or the perturbed runs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", nargs=3, type=float, metavar=("FLOW", "FROM_US", "TO_US"),
                        help="print every send of one connection in a time window, with both ends' state")
    parser.add_argument("--perturb", action="store_true",
                        help="only the counters of both backends with the buffer or the latency moved a little")
    args = parser.parse_args()
    if args.perturb:
        perturbed()
        return 0
    trace = (int(args.trace[0]), args.trace[1], args.trace[2]) if args.trace else None
    packet_evidence(trace)
    if trace is None:
        ns3_evidence()
    return 0


if __name__ == "__main__":
    sys.exit(main())
