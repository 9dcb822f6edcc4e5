"""The `links` table: one row per link of a run, when `engine.link_stats` asks for it (`switch_ports`:
every switch egress port; `all`: every link, the hosts' NICs too).

Everything here runs once, after the simulation: with `link_stats: none` (the default) nothing is
collected and the run costs nothing more. Each backend's `link_rows` (engine/backends/) builds its
rows with one of the two functions here, from what it knows:
- `packet`: the counters every link keeps anyway (packets and bytes accepted into its queue, drops,
  CE marks, the largest backlog an arriving packet saw; with RoCE, a pausable port's PFC PAUSE frames
  received and time spent paused): `packet_link_rows`;
- `analytical` and `phase`: the wire bytes delivered on every link of the messages' (the phases')
  routes: `fluid_link_rows`;
- `alpha_beta`: the wire bytes of the messages of the phases that ended, on the links that join a
  host to its first switch only (`HOST_LINK_KINDS`): it routes no message, so it cannot say which
  equal-cost path, hence which link between switches, one would take.
Columns a backend does not know are null, never zero.
"""

from __future__ import annotations

from typing import Any

from .links import Link, PausableLink
from .topology import HOST_LINK_KINDS, LinkRole, Topology
from .units import bps_to_gbps, bytes_in_duration, ps_to_s, utilisation

BYTES_PER_KB = 1024  # max_queue_kb is in KiB, like network.buffer_kb


def selected_links(topology: Topology, link_stats: str) -> list[tuple[Link, LinkRole]]:
    """The links `engine.link_stats` asks rows for, with their roles, in the topology's order."""
    if link_stats == "none":
        return []
    pairs = zip(topology.links, topology.link_roles)
    return [(link, role) for link, role in pairs if link_stats == "all" or role.switch_port]


def _identity(link: Link, role: LinkRole) -> dict[str, Any]:
    return {"link": link.name, "kind": role.kind, "src": role.src, "dst": role.dst,
            "gbps": bps_to_gbps(link.rate_bps)}


def packet_link_rows(topology: Topology, link_stats: str, end_ps: int) -> list[dict[str, Any]]:
    """Rows from the links' own counters. `end_ps` is the end of the run: utilisation counts the
    bytes serialised by then (what was still queued at a time limit is left out, so it never
    exceeds 1); a run that finished has empty queues, and `bytes` is all it carried."""
    rows = []
    for link, role in selected_links(topology, link_stats):
        queued_bytes = bytes_in_duration(max(0, link.busy_until_ps - end_ps), link.rate_bps)
        rows.append({
            **_identity(link, role),
            "bytes": link.bytes_sent,
            "packets": link.packets_sent,
            "drops": link.drops,
            "ecn_marks": link.ecn_marks,
            "max_queue_kb": link.max_queue_bytes / BYTES_PER_KB,
            "utilisation": utilisation(link.bytes_sent - queued_bytes, link.rate_bps, end_ps) if end_ps > 0 else None,
        })
        if isinstance(link, PausableLink):  # PFC: what the far end's PAUSEs did to it (null on other links)
            rows[-1] |= {"pause_frames": link.pause_frames, "paused_s": ps_to_s(link.time_paused_ps(end_ps))}
    return rows


def fluid_link_rows(topology: Topology, link_stats: str, end_ps: int, link_bytes: dict[Link, int],
                    host_links_only: bool) -> list[dict[str, Any]]:
    """Rows of a fluid backend: `bytes` and `utilisation` from `link_bytes` (a link it does not
    name carried nothing), the packet-level columns null. With `host_links_only` (alpha_beta) the
    links between switches get null bytes too: the backend does not know them."""
    rows = []
    for link, role in selected_links(topology, link_stats):
        known = not host_links_only or role.kind in HOST_LINK_KINDS
        size = link_bytes.get(link, 0) if known else None
        rows.append({
            **_identity(link, role),
            "bytes": size,
            "packets": None,
            "drops": None,
            "ecn_marks": None,
            "max_queue_kb": None,
            "utilisation": utilisation(size, link.rate_bps, end_ps) if size is not None and end_ps > 0 else None,
        })
    return rows
