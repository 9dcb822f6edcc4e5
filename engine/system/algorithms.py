"""Collective algorithms as step programs (Thakur, Rabenseifner and Gropp 2005; NCCL's double
binary tree), independent of the topology they run on.

A program gives every rank of a group (ranks 0..p-1) a sequence of steps: `program[rank][index]`.
At a step a rank issues its sends, then waits for the messages that step needs; the next step
starts once they have all arrived. Each send names the receiving rank, the bytes and the
receiver's step that consumes it. `chunk_bytes` is the per-NPU data of the collective (for
all-gather: the gathered result).

Ring and direct programs hold p(p - 1) sends or more (a ring all-reduce: 2p(p - 1)), so they make
each step when a rank reaches it; built up front, a ring all-reduce on 1,024 ranks took 10 s and
350 MiB for every collective. The others are lists of steps built once.
"""

from __future__ import annotations

from typing import Final, Iterator, Protocol

from ..config import SYSTEM_ALGORITHMS as ALGORITHMS  # the algorithms each op offers, defined once


class Send:
    """One message of a step: to `peer`, `size_bytes` long, consumed by the peer's step `peer_step`.

    Send and Step are plain classes with Final fields rather than frozen dataclasses: compiled, a
    dataclass's constructor still runs interpreted, about a microsecond, and a ring makes a Step and
    a Send per message."""

    __slots__ = ("peer", "size_bytes", "peer_step")

    def __init__(self, peer: int, size_bytes: int, peer_step: int) -> None:
        self.peer: Final = peer
        self.size_bytes: Final = size_bytes
        self.peer_step: Final = peer_step


class Step:
    """What a rank sends at this step and how many messages it must receive before moving on."""

    __slots__ = ("sends", "receives")

    def __init__(self, sends: tuple[Send, ...], receives: int) -> None:
        self.sends: Final = sends
        self.receives: Final = receives


class RankSteps(Protocol):
    """The steps of one rank (a list, or steps made on demand)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Step: ...


class Program(Protocol):
    """The steps of each rank: `program[rank][index]` (a list of lists, or steps made on demand)."""

    def __len__(self) -> int: ...

    def __getitem__(self, rank: int) -> RankSteps: ...


class _StepsOnDemand:
    """A program whose steps are made when asked for: every rank has `len(sizes)` steps, step
    `index` moving `sizes[index]` bytes a message (`step` says to whom)."""

    __slots__ = ("ranks", "sizes")

    def __init__(self, ranks: int, sizes: list[int]) -> None:
        self.ranks = ranks
        self.sizes = sizes

    def __len__(self) -> int:
        return self.ranks

    def __getitem__(self, rank: int) -> _RankSteps:
        if not 0 <= rank < self.ranks:
            raise IndexError(rank)
        return _RankSteps(self, rank)

    def __iter__(self) -> Iterator[_RankSteps]:
        for rank in range(self.ranks):
            yield _RankSteps(self, rank)

    def step(self, rank: int, index: int) -> Step:
        """Step `index` of `rank`."""
        raise NotImplementedError


class _RankSteps:
    """The steps of one rank of a `_StepsOnDemand` program, as a sequence."""

    __slots__ = ("program", "rank")

    def __init__(self, program: _StepsOnDemand, rank: int) -> None:
        self.program = program
        self.rank = rank

    def __len__(self) -> int:
        return len(self.program.sizes)

    def __getitem__(self, index: int) -> Step:
        if not 0 <= index < len(self.program.sizes):
            raise IndexError(index)
        return self.program.step(self.rank, index)

    def __iter__(self) -> Iterator[Step]:
        for index in range(len(self.program.sizes)):
            yield self.program.step(self.rank, index)


class _RingSteps(_StepsOnDemand):
    """Rank r sends to r + 1 and receives from r - 1 at every step; the message of step k is
    consumed by the receiver's step k."""

    __slots__ = ()

    def step(self, rank: int, index: int) -> Step:
        return Step((Send((rank + 1) % self.ranks, self.sizes[index], index),), 1)


class _DirectSteps(_StepsOnDemand):
    """Every rank sends to every other at each step (in `_direct_order`) and receives from every
    other; the message of step k is consumed by the receiver's step k."""

    __slots__ = ("node_size",)

    def __init__(self, ranks: int, sizes: list[int], node_size: int) -> None:
        super().__init__(ranks, sizes)
        self.node_size = node_size

    def step(self, rank: int, index: int) -> Step:
        size = self.sizes[index]
        return Step(tuple([Send(peer, size, index) for peer in _direct_order(rank, self.ranks, self.node_size)]),
                    self.ranks - 1)


def _share(total_bytes: int, parts: int) -> int:
    """Bytes of one of `parts` equal pieces, rounded up (at least one byte)."""
    return max(1, -(-total_bytes // parts))


def _link(raw: list[list[tuple[list[tuple[int, int]], list[int]]]]) -> list[list[Step]]:
    """Turn raw steps ((peer, bytes) sends, sender list of receives) into `Step`s whose sends know the
    receiver's step: the k-th message from a to b is consumed by b's k-th receive naming a."""
    consuming_steps: dict[tuple[int, int], list[int]] = {}
    for rank, steps in enumerate(raw):
        for index, (_, receives_from) in enumerate(steps):
            for source in receives_from:
                consuming_steps.setdefault((source, rank), []).append(index)
    used: dict[tuple[int, int], int] = {}
    program: list[list[Step]] = []
    for rank, steps in enumerate(raw):
        linked = []
        for sends, receives_from in steps:
            sends_linked = []
            for peer, size in sends:
                k = used.get((rank, peer), 0)
                used[(rank, peer)] = k + 1
                sends_linked.append(Send(peer, size, consuming_steps[(rank, peer)][k]))
            linked.append(Step(tuple(sends_linked), len(receives_from)))
        program.append(linked)
    return program


def _direct_order(r: int, p: int, node_size: int) -> list[int]:
    """The ranks r sends to, in a staggered order so that at each position of the send order the
    ranks of one node target different nodes, and different ranks within them (a two-level Latin
    square): rank r = n * B + i goes to nodes n, n+1, ... and in each to local ranks i, i+1, ....
    With B = 1 that is r+1, r+2, ...: the first messages of all ranks then go to different
    receivers, not all to rank 0 (which would start every step with an incast)."""
    nodes = p // node_size
    node, local = divmod(r, node_size)
    order = [((node + j) % nodes) * node_size + (local + m) % node_size
             for j in range(nodes) for m in range(node_size)]
    return [q for q in order if q != r]


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
            return [_RingSteps(p, [block] * (2 * (p - 1)))]
        if op == "all_to_all":
            # step s forwards the blocks still on their way: p-1-s of them
            return [_RingSteps(p, [block * (p - 1 - s) for s in range(p - 1)])]
        return [_RingSteps(p, [block] * (p - 1))]
    if algorithm == "direct":
        steps = 2 if op == "all_reduce" else 1  # all-reduce: direct reduce-scatter, then all-gather
        return [_DirectSteps(p, [block] * steps, node_size if p % node_size == 0 else 1)]
    if algorithm == "halving_doubling":
        if p & (p - 1):
            raise ValueError(f"halving_doubling needs a power-of-two group, got {p} NPUs")
        return [_halving_doubling_steps(p, chunk_bytes, reduce=op != "all_gather", gather=op != "reduce_scatter")]
    # double_binary_tree (all_reduce): two trees, each carrying half of the data
    half = _share(chunk_bytes, 2)
    return [_binary_tree_steps(p, half, mirrored=False), _binary_tree_steps(p, half, mirrored=True)]
