"""What TCP Small Queues keeps alive: a sender's record of its packets below TCP (linked through the
packets) must let go of them once they are sent, or every idle connection holds its last window's
packets for the rest of the run (a million connections at 1,024 NPUs: 2.2 GiB,
benchmarks/host_stack_memory.py)."""

from __future__ import annotations

from engine import load_config
from engine.simulation import Simulation
from engine.units import PS_PER_US


def test_an_acknowledged_message_leaves_no_packet_below_tcp() -> None:
    # four hosts on one switch, each sending 256 KiB to each other at once: a NIC carries three
    # connections, so each one's packets wait behind the others' and are still below TCP when it
    # sends its last. Once a message is acknowledged, each of its packets has reached the receiver,
    # so its host interface has sent it: nothing of it is below TCP any more.
    sim = Simulation(load_config({"network": {"npus": 4}}), models_host_stack=True)
    delivered = []
    for src in range(4):
        for dst in range(4):
            if src != dst:
                sim.open_connection(src, dst).send_message(262_144, lambda: delivered.append(1))
    sim.eventlist.run(1_000 * PS_PER_US)  # 1 ms: 3 x 256 KiB (with headers) leave a 100 Gb/s NIC in about 65 us
    senders = [connection.sender for connection in sim.connections]
    assert len(delivered) == 12
    assert all(sender.snd_una == sender.snd_max == 262_144 for sender in senders)  # all acknowledged
    assert [sender.bytes_below_tcp for sender in senders if sender.below_head is not None] == []
