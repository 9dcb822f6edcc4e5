"""Collective algorithms as step programs (Thakur, Rabenseifner and Gropp 2005; NCCL's double
binary tree), independent of the topology they run on.

A program gives every rank of a group (ranks 0..p-1) a list of steps. At a step a rank issues its
sends, then waits for the messages that step needs; the next step starts once they have all
arrived. Each send names the receiving rank (relative to the sender: `peer_offset`, so p - 1 is the
previous rank), the bytes and the receiver's step that consumes it. Ranks whose steps read the same
that way share one list (every rank of a ring, of a direct exchange): a program then holds
O(steps) objects, not O(p x steps), which at a thousand NPUs is millions fewer.
`chunk_bytes` is the per-NPU data of the collective (for all-gather: the gathered result).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SYSTEM_ALGORITHMS as ALGORITHMS  # the algorithms each op offers, defined once


@dataclass(frozen=True)
class Send:
    """One message of a step: to the rank `peer_offset` after the sender (modulo p), `size_bytes`
    long, consumed by the peer's step `peer_step`."""

    peer_offset: int
    size_bytes: int
    peer_step: int


@dataclass(frozen=True)
class Step:
    """What a rank sends at this step and how many messages it must receive before moving on."""

    sends: tuple[Send, ...]
    receives: int


Program = list[list[Step]]  # one list of steps per rank (ranks may share one list)


def _share(total_bytes: int, parts: int) -> int:
    """Bytes of one of `parts` equal pieces, rounded up (at least one byte)."""
    return max(1, -(-total_bytes // parts))


def _link(raw: list[list[tuple[list[tuple[int, int]], list[int]]]]) -> Program:
    """Turn raw steps ((peer, bytes) sends, sender list of receives) into `Step`s whose sends know the
    receiver's step: the k-th message from a to b is consumed by b's k-th receive naming a."""
    consuming_steps: dict[tuple[int, int], list[int]] = {}
    for rank, steps in enumerate(raw):
        for index, (_, receives_from) in enumerate(steps):
            for source in receives_from:
                consuming_steps.setdefault((source, rank), []).append(index)
    used: dict[tuple[int, int], int] = {}
    p = len(raw)
    program: Program = []
    for rank, steps in enumerate(raw):
        linked = []
        for sends, receives_from in steps:
            sends_linked = []
            for peer, size in sends:
                k = used.get((rank, peer), 0)
                used[(rank, peer)] = k + 1
                sends_linked.append(Send((peer - rank) % p, size, consuming_steps[(rank, peer)][k]))
            linked.append(Step(tuple(sends_linked), len(receives_from)))
        program.append(linked)
    return program


def _ring_steps(p: int, sizes: list[int]) -> Program:
    """Each rank sends step k's block to the next rank, whose step k consumes it; one list of
    steps serves every rank."""
    steps = [Step((Send(1, size, k),), 1) for k, size in enumerate(sizes)]
    return [steps] * p


def _direct_steps(p: int, sizes: list[int], node_size: int = 1) -> Program:
    """Every rank sends to every other at once, in a staggered order so that at each position of
    the send order the ranks of one node target different nodes, and different ranks within them
    (a two-level Latin square): rank r = n * B + i goes to nodes n, n+1, ... and in each to local
    ranks i, i+1, .... With B = 1 that is r+1, r+2, ...: the first messages of all ranks then go to
    different receivers, not all to rank 0 (which would start every step with an incast).

    At step k every rank sends to each other one and receives from each; the k-th message from a
    to b is consumed by b's step k. Relative to the sender, the order depends only on its local
    rank i, so ranks of equal i share one list of steps."""
    nodes = p // node_size
    steps_by_local: list[list[Step]] = []
    for local in range(node_size):
        offsets = [j * node_size + (local + m) % node_size - local  # peer - rank, for any node
                   for j in range(nodes) for m in range(node_size)]
        offsets = [offset % p for offset in offsets if offset % p]
        steps_by_local.append([Step(tuple(Send(offset, size, k) for offset in offsets), p - 1)
                               for k, size in enumerate(sizes)])
    return [steps_by_local[r % node_size] for r in range(p)]


def _halving_doubling_steps(p: int, chunk_bytes: int, reduce: bool, gather: bool) -> Program:
    """Rabenseifner: recursive halving (partner r XOR p/2, p/4, ...; sizes c/2, c/4, ..., c/p), then
    recursive doubling back (partner r XOR 1, 2, ...; sizes c/p, 2c/p, ..., c/2)."""
    levels = p.bit_length() - 1
    raw = []
    for r in range(p):
        steps = []
        if reduce:
            for k in range(levels):
                partner = r ^ (p >> (k + 1))
                steps.append(([(partner, _share(chunk_bytes, 2 ** (k + 1)))], [partner]))
        if gather:
            for k in range(levels):
                partner = r ^ (1 << k)
                steps.append(([(partner, _share(chunk_bytes * 2 ** k, p))], [partner]))
        raw.append(steps)
    return _link(raw)


TREE_PIPELINE_BLOCKS = 8  # blocks each tree's data is cut into, so tree levels work in parallel


def _binary_tree_steps(p: int, half_bytes: int, mirrored: bool) -> Program:
    """Reduce to the root, then broadcast back, on a heap-shaped binary tree (node i has children
    2i+1, 2i+2), pipelined in `TREE_PIPELINE_BLOCKS` blocks: a node passes block b up as soon as
    its children's block b has arrived, while they already send block b+1. The mirrored tree maps
    rank r to node p-1-r, so the leaves of one tree are inner nodes of the other (the two trees of
    NCCL's double binary tree); each carries half of the data."""
    node_of = (lambda r: p - 1 - r) if mirrored else (lambda r: r)
    rank_of = node_of  # the mapping is its own inverse
    blocks = TREE_PIPELINE_BLOCKS
    block_bytes = _share(half_bytes, blocks)
    raw = []
    for r in range(p):
        node = node_of(r)
        parent = [rank_of((node - 1) // 2)] if node else []
        children = [rank_of(c) for c in (2 * node + 1, 2 * node + 2) if c < p]
        steps: list[tuple[list[tuple[int, int]], list[int]]] = []
        for _ in range(blocks):  # reduce: wait for the children's block, then pass the sum up
            if children:
                steps.append(([], children))
            if parent:
                steps.append(([(parent[0], block_bytes)], []))
        for _ in range(blocks):  # broadcast: wait for the parent's block, then pass it down
            if parent:
                steps.append(([], parent))
            if children:
                steps.append(([(child, block_bytes) for child in children], []))
        raw.append(steps)
    return _link(raw)


def plan(op: str, algorithm: str, p: int, chunk_bytes: int, node_size: int = 1) -> list[Program]:
    """Programs (run concurrently) that perform collective `op` with `algorithm` on p ranks;
    `node_size` consecutive ranks share a node (it staggers direct sends, see `_direct_steps`)."""
    if algorithm not in ALGORITHMS.get(op, ()):
        raise ValueError(f"{op} has no algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS.get(op, ()))}")
    if p == 1:
        return []
    block = _share(chunk_bytes, p)
    if algorithm == "ring":
        if op == "all_reduce":
            return [_ring_steps(p, [block] * (2 * (p - 1)))]
        if op == "all_to_all":
            # step s forwards the blocks still on their way: p-1-s of them
            return [_ring_steps(p, [block * (p - 1 - s) for s in range(p - 1)])]
        return [_ring_steps(p, [block] * (p - 1))]
    if algorithm == "direct":
        steps = 2 if op == "all_reduce" else 1  # all-reduce: direct reduce-scatter, then all-gather
        return [_direct_steps(p, [block] * steps, node_size if p % node_size == 0 else 1)]
    if algorithm == "halving_doubling":
        if p & (p - 1):
            raise ValueError(f"halving_doubling needs a power-of-two group, got {p} NPUs")
        return [_halving_doubling_steps(p, chunk_bytes, reduce=op != "all_gather", gather=op != "reduce_scatter")]
    # double_binary_tree (all_reduce): two trees, each carrying half of the data
    half = _share(chunk_bytes, 2)
    return [_binary_tree_steps(p, half, mirrored=False), _binary_tree_steps(p, half, mirrored=True)]
