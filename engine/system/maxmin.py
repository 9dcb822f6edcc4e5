"""Max-min fair sharing of links among flows, kept up to date incrementally as flows come and go.

The max-min fair allocation is the one progressive filling reaches: every rate rises together; when
a link fills, the flows crossing it keep the rate they have and leave the link's capacity to nobody
else; the others go on rising. Each flow then has a bottleneck: a full link on which no flow is
faster.

A start or a finish cannot change that process below the first level at which it makes some link
fill differently: for a finished flow, its own rate (no link it crossed had filled below it); for a
link a flow joins, the level at which the link now fills, which is at least its capacity divided by
its flows. So with `level` the lowest of these over a batch of changes, every flow below `level`
keeps its rate. With those fixed, the flows at or above `level` split into groups joined by the
links they share; a group that holds no change fills as it did. `MaxMinSharing.update` walks the
groups of the changes from the links they touch, over flows at or above `level` (a flow within
rounding of `level` counts as at it: taking one flow too many is exact, one too few is not), and
fills them again with the other flows' rates taken off the capacities: the allocation a filling of
everything would give, at the cost of the part that can change (SimGrid's selective update re-fills
the whole connected set of links instead, which at scale is everything).

Finding the flows at or above `level` on a link without walking the ones below is why each link
keeps its flows grouped by rate, the distinct rates sorted.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify, heappop, heappush
from math import inf
from typing import Final

RATE_TOLERANCE: Final = 1e-9  # relative float slack when comparing a rate with the level of a change


class FluidFlow:
    """Something that crosses `links` at a max-min fair `rate_bps` (0 until first shared).
    `mark` is scratch space of `MaxMinSharing.update`: the last update that re-filled it."""

    __slots__ = ("links", "rate_bps", "mark")

    def __init__(self, links: tuple[SharedLink, ...]) -> None:
        self.links = links
        self.rate_bps = 0.0
        self.mark = 0


class SharedLink:
    """A link's capacity and the flows crossing it, grouped by rate: `rates` holds the distinct
    rates in ascending order, `groups` the flows at each (a dict used as an insertion-ordered set,
    so every walk and every float sum runs in the same order on every run). `mark` and `slot`
    are scratch space of `MaxMinSharing.update`: the update that last reached the link and its
    index in that update's tables. `peak_flow_count` is the most flows that ever crossed it at once
    and `delivered_bytes` the wire bytes of the flows over it that were delivered (kept by its user,
    `FluidMessages`)."""

    __slots__ = ("capacity_bps", "flow_count", "rates", "groups", "mark", "slot", "peak_flow_count",
                 "delivered_bytes")

    def __init__(self, capacity_bps: float) -> None:
        self.capacity_bps = capacity_bps
        self.flow_count = 0  # flows crossing it, those not yet shared included
        self.rates: list[float] = []
        self.groups: list[dict[FluidFlow, None]] = []
        self.mark = 0
        self.slot = 0
        self.peak_flow_count = 0
        self.delivered_bytes = 0

    def group(self, flow: FluidFlow, rate_bps: float) -> None:
        """File `flow` under `rate_bps`."""
        rates = self.rates
        index = bisect_left(rates, rate_bps)
        if index == len(rates) or rates[index] != rate_bps:
            rates.insert(index, rate_bps)
            self.groups.insert(index, {})
        self.groups[index][flow] = None

    def ungroup(self, flow: FluidFlow, rate_bps: float) -> None:
        """Take `flow` out of its group at `rate_bps`."""
        index = bisect_left(self.rates, rate_bps)
        group = self.groups[index]
        del group[flow]
        if not group:
            del self.rates[index]
            del self.groups[index]


class MaxMinSharing:
    """Keeps the max-min fair rates of the flows sharing a set of links."""

    def __init__(self) -> None:
        self._epoch = 0

    def update(self, finished: list[FluidFlow], starting: list[FluidFlow]) -> tuple[list[FluidFlow], list[float]]:
        """`finished` flows leave, `starting` ones join (all at one instant); set the new rates.
        Returns the flows whose rate changed (the starting ones included) and their previous
        rates (0 for a starting flow)."""
        level = inf
        alone = True  # every flow that leaves or joins is the only one on each of its links
        for flow in finished:
            level = min(level, flow.rate_bps)
            for link in flow.links:
                link.ungroup(flow, flow.rate_bps)
                link.flow_count -= 1
                if link.flow_count:
                    alone = False
        for flow in starting:
            for link in flow.links:
                link.flow_count += 1
                if link.flow_count > link.peak_flow_count:
                    link.peak_flow_count = link.flow_count
        for flow in starting:
            for link in flow.links:
                if link.flow_count != 1:
                    alone = False
                level = min(level, link.capacity_bps / link.flow_count)
        if alone:
            # (the messages of a ring step) no other flow's rate can change, and a starting flow
            # gets its tightest link's capacity, as the filling would give it
            for flow in starting:
                rate_bps = inf
                for link in flow.links:
                    rate_bps = min(rate_bps, link.capacity_bps)
                flow.rate_bps = rate_bps
                for link in flow.links:
                    link.group(flow, rate_bps)
            return list(starting), [0.0] * len(starting)
        cutoff = level * (1.0 - RATE_TOLERANCE)
        self._epoch += 1
        epoch = self._epoch
        refilled: list[FluidFlow] = []  # the flows filled again, the starting ones first
        capacity: list[float] = []  # per link slot: the capacity left to them
        users: list[list[FluidFlow]] = []  # per link slot: those of them crossing it
        to_scan: list[SharedLink] = []  # links reached whose flows are not yet looked at
        for flow in starting:
            flow.mark = epoch
            refilled.append(flow)
            for link in flow.links:
                if link.mark != epoch:
                    _reach(link, epoch, capacity, users, to_scan)
                users[link.slot].append(flow)
        for flow in finished:
            for link in flow.links:
                if link.mark != epoch:
                    _reach(link, epoch, capacity, users, to_scan)
        previous: list[float] = [0.0] * len(starting)
        while to_scan:
            link = to_scan.pop()
            rates, groups = link.rates, link.groups
            first_refilled = bisect_left(rates, cutoff)
            link_users = users[link.slot]
            if first_refilled == len(rates) and not link_users:
                # no flow of this update crosses it (a finished flow's link whose flows are all
                # slower than it was: the fastest messages of an all-to-all leaving), so its
                # capacity is never read; skip the sum over its rate groups
                continue
            left = link.capacity_bps
            index = 0
            while index < first_refilled:
                left -= rates[index] * len(groups[index])  # these flows keep their rates
                index += 1
            capacity[link.slot] = left
            while index < len(rates):
                for flow in groups[index]:
                    if flow.mark != epoch:
                        flow.mark = epoch
                        refilled.append(flow)
                        previous.append(flow.rate_bps)
                        for other in flow.links:
                            if other.mark != epoch:
                                _reach(other, epoch, capacity, users, to_scan)
                    link_users.append(flow)
                index += 1
        fill(capacity, users, refilled)
        changed: list[FluidFlow] = []
        changed_from: list[float] = []
        for index, flow in enumerate(refilled):
            old_rate, new_rate = previous[index], flow.rate_bps
            if new_rate == old_rate:
                continue
            for link in flow.links:
                if index >= len(starting):
                    link.ungroup(flow, old_rate)
                link.group(flow, new_rate)
            changed.append(flow)
            changed_from.append(old_rate)
        return changed, changed_from


def _reach(link: SharedLink, epoch: int, capacity: list[float], users: list[list[FluidFlow]],
           to_scan: list[SharedLink]) -> None:
    """Give `link` a slot in this update's tables and queue it to be looked at."""
    link.mark = epoch
    link.slot = len(capacity)
    capacity.append(link.capacity_bps)
    users.append([])
    to_scan.append(link)


def fill(capacity: list[float], users: list[list[FluidFlow]], flows: list[FluidFlow]) -> None:
    """Progressive filling: set the max-min fair `rate_bps` of `flows`, given per link slot the
    capacity left to them and the ones crossing it (each link of theirs has its `slot` set).

    Repeatedly, the link offering the smallest equal share to its unfixed flows fixes them at that
    share and leaves its capacity to the rest. A heap of (share, slot, version) with stale entries
    skipped keeps this O((flows x hops + links) log links) instead of a scan of all links per
    round; ties go to the lower slot. Each link whose share a round changed gets one new entry,
    after the round; a flow alone on all its links never enters the heap."""
    unfixed = [len(link_users) for link_users in users]
    for flow in flows:
        flow.rate_bps = -1.0  # not fixed yet
    for flow in flows:
        # alone on every link it crosses (the common case of the messages of a ring step): its
        # tightest link's capacity, as the rounds would give it
        share = inf
        for link in flow.links:
            if unfixed[link.slot] != 1:
                break
            share = min(share, max(capacity[link.slot], 0.0))
        else:
            flow.rate_bps = share
            for link in flow.links:
                unfixed[link.slot] = 0
    version = [0] * len(capacity)  # per slot: rounds that changed its share
    heap = [(max(capacity[slot], 0.0) / unfixed[slot], slot, 0) for slot in range(len(capacity)) if unfixed[slot]]
    heapify(heap)
    last_round = [0] * len(capacity)  # per slot: the last round that changed its share
    round_number = 0
    touched: list[int] = []
    while heap:
        share, bottleneck, link_version = heappop(heap)
        if link_version != version[bottleneck] or not unfixed[bottleneck]:
            continue  # stale: the link's share changed since this entry was pushed
        round_number += 1
        for flow in users[bottleneck]:
            if flow.rate_bps >= 0:
                continue
            flow.rate_bps = share
            for link in flow.links:
                slot = link.slot
                capacity[slot] -= share
                unfixed[slot] -= 1
                if last_round[slot] != round_number:
                    last_round[slot] = round_number
                    touched.append(slot)
        for slot in touched:  # the bottleneck among them has no unfixed flow left
            version[slot] += 1
            if unfixed[slot]:
                heappush(heap, (max(capacity[slot], 0.0) / unfixed[slot], slot, version[slot]))
        touched.clear()
