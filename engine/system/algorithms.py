"""Collective algorithms as step programs (Thakur, Rabenseifner and Gropp 2005; NCCL's double
binary tree), independent of the topology they run on.

A program gives every rank of a group (ranks 0..p-1) a list of steps. At a step a rank issues its
sends, then waits for the messages that step needs; the next step starts once they have all
arrived. Each send names the receiving rank (relative to the sender: `peer_offset`, so p - 1 is the
previous rank), the bytes and the receiver's step that consumes it. Ranks whose steps read the same
that way share one list (every rank of a ring, of a direct exchange): a program then holds
O(steps) objects, not O(p x steps), which at a thousand NPUs is millions fewer.
`chunk_bytes` is the per-NPU data of the collective (for all-gather: the gathered result).
Where every rank does the same at each step (ring, direct, halving_doubling), the algorithm is
defined once as a list of `SymmetricStep`s and every rank's program is expanded from it.
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


RING = "ring"  # every rank sends to rank r+1 and receives from r-1
XOR = "xor"  # every rank exchanges with rank r XOR mask
ALL = "all"  # every rank sends to every other rank and receives from each


@dataclass(frozen=True)
class SymmetricStep:
    """A step every rank of a group performs alike: send `size_bytes` to each of its peers under
    `pattern` (RING, XOR with `mask`, or ALL), then wait for one message from each rank that has it
    as a peer. A list of them describes a whole algorithm in O(steps), whatever the group size: the
    alpha_beta backend costs it without materialising the p x (p - 1) messages of a direct step."""

    pattern: str
    size_bytes: int
    mask: int = 0


def _direct_order(p: int, node_size: int, r: int) -> list[int]:
    """The ranks rank r sends to in a direct step, in a staggered order so that at each position of
    the send order the ranks of one node target different nodes, and different ranks within them
    (a two-level Latin square): rank r = n * B + i goes to nodes n, n+1, ... and in each to local
    ranks i, i+1, .... With B = 1 that is r+1, r+2, ...: the first messages of all ranks then go to
    different receivers, not all to rank 0 (which would start every step with an incast)."""
    nodes = p // node_size
    node, local = divmod(r, node_size)
    order = [((node + j) % nodes) * node_size + (local + m) % node_size
             for j in range(nodes) for m in range(node_size)]
    return [q for q in order if q != r]


def _direct_program(p: int, node_size: int, sizes: list[int]) -> Program:
    """A direct algorithm's program: at step k every rank sends `sizes[k]` to each other one in
    `_direct_order` and receives from each; the k-th message from a to b is consumed by b's step
    k. Relative to the sender, that order depends only on its local rank i (peer - rank =
    j * B + (i + m) % B - i for node offset j and local offset m), so ranks of equal i share one
    list of steps."""
    nodes = p // node_size
    steps_by_local: list[list[Step]] = []
    for local in range(node_size):
        offsets = [(j * node_size + (local + m) % node_size - local) % p
                   for j in range(nodes) for m in range(node_size)]
        offsets = [offset for offset in offsets if offset]
        steps_by_local.append([Step(tuple(Send(offset, size, k) for offset in offsets), p - 1)
                               for k, size in enumerate(sizes)])
    return [steps_by_local[r % node_size] for r in range(p)]


def _expand(p: int, steps: list[SymmetricStep], node_size: int) -> Program:
    """Every rank's steps of a symmetric algorithm. A ring (each rank sends step k's block to the
    next rank, whose step k consumes it) is one list of steps shared by every rank, a direct
    algorithm one per local rank (`_direct_program`); halving-doubling, whose partner's offset
    differs from rank to rank, is linked rank by rank (O(p log p))."""
    if all(step.pattern == RING for step in steps):
        shared = [Step((Send(1, step.size_bytes, k),), 1) for k, step in enumerate(steps)]
        return [shared] * p
    if all(step.pattern == ALL for step in steps):
        return _direct_program(p, node_size, [step.size_bytes for step in steps])
    raw: list[list[tuple[list[tuple[int, int]], list[int]]]] = []
    for r in range(p):
        rank_steps: list[tuple[list[tuple[int, int]], list[int]]] = []
        others = _direct_order(p, node_size, r) if any(step.pattern == ALL for step in steps) else []
        for step in steps:
            if step.pattern == RING:
                rank_steps.append(([((r + 1) % p, step.size_bytes)], [(r - 1) % p]))
            elif step.pattern == XOR:
                rank_steps.append(([(r ^ step.mask, step.size_bytes)], [r ^ step.mask]))
            else:
                rank_steps.append(([(q, step.size_bytes) for q in others], others))
        raw.append(rank_steps)
    return _link(raw)


def symmetric_steps(op: str, algorithm: str, p: int, chunk_bytes: int,
                    astra_compat: bool = False) -> list[SymmetricStep] | None:
    """The steps of `op` with `algorithm` on p ranks, if every rank performs them alike (ring, direct,
    halving_doubling); None for double_binary_tree, whose ranks play different roles.
    `astra_compat` makes the ring all-to-all ASTRA-sim 1.0's: p(p-1)/2 steps of one block each
    (astra-sim/system/collective/Ring.cc, `Ring::Ring`: `stream_count = ((nodes_in_ring - 1) *
    nodes_in_ring) / 2` messages of `msg_size = data_size / nodes_in_ring`, one in flight at a time
    under the `Normal` injection policy that Sys.cc's `generate_collective_phase` passes), instead of
    p-1 steps that forward the blocks still on their way."""
    if algorithm not in ALGORITHMS.get(op, ()):
        raise ValueError(f"{op} has no algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS.get(op, ()))}")
    if p == 1:
        return []
    block = _share(chunk_bytes, p)
    if algorithm == "ring":
        if op == "all_reduce":
            return [SymmetricStep(RING, block)] * (2 * (p - 1))
        if op == "all_to_all" and astra_compat:  # every block, its own message, one after another
            return [SymmetricStep(RING, block)] * (p * (p - 1) // 2)
        if op == "all_to_all":
            # step s forwards the blocks still on their way: p-1-s of them
            return [SymmetricStep(RING, block * (p - 1 - s)) for s in range(p - 1)]
        return [SymmetricStep(RING, block)] * (p - 1)
    if algorithm == "direct":
        steps = 2 if op == "all_reduce" else 1  # all-reduce: direct reduce-scatter, then all-gather
        return [SymmetricStep(ALL, block)] * steps
    if algorithm == "halving_doubling":
        return _halving_doubling_steps(p, chunk_bytes, reduce=op != "all_gather", gather=op != "reduce_scatter")
    return None


def _halving_doubling_steps(p: int, chunk_bytes: int, reduce: bool, gather: bool) -> list[SymmetricStep]:
    """Rabenseifner: recursive halving (partner r XOR p/2, p/4, ...; sizes c/2, c/4, ..., c/p), then
    recursive doubling back (partner r XOR 1, 2, ...; sizes c/p, 2c/p, ..., c/2)."""
    if p & (p - 1):
        raise ValueError(f"halving_doubling needs a power-of-two group, got {p} NPUs")
    levels = p.bit_length() - 1
    steps: list[SymmetricStep] = []
    if reduce:
        steps += [SymmetricStep(XOR, _share(chunk_bytes, 2 ** (k + 1)), p >> (k + 1)) for k in range(levels)]
    if gather:
        steps += [SymmetricStep(XOR, _share(chunk_bytes * 2 ** k, p), 1 << k) for k in range(levels)]
    return steps


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


# -- ASTRA-sim 1.0's double binary tree (system.astra_compat), kept apart from NCCL's above --------

def astra_tree_links(p: int, root_max: bool) -> tuple[list[int], list[list[int]]]:
    """Parent (-1 for the root) and children of every rank in one of ASTRA-sim 1.0's two trees
    (astra-sim/system/topology/BinaryTree.cc): a complete binary tree of log2(p) levels numbered in
    order (left subtree, node, right subtree) under a root with one child. The RootMax tree numbers
    the subtree 0..p-2 and gives the root p-1; the RootMin tree gives the root 0 and the subtree
    1..p-1. ASTRA-sim builds it for a power-of-two p only (other ranks would have no node)."""
    if p < 2 or p & (p - 1):
        raise ValueError(f"ASTRA-sim 1.0's double binary tree needs a power-of-two group, got {p} NPUs")
    parent = [-1] * p
    children: list[list[int]] = [[] for _ in range(p)]
    labels = iter(range(p))

    def subtree(levels: int) -> int:  # number a subtree in order; returns its root's rank
        left = subtree(levels - 1) if levels > 1 else -1
        node = next(labels)
        right = subtree(levels - 1) if levels > 1 else -1
        for child in (left, right):
            if child >= 0:
                parent[child] = node
                children[node].append(child)
        return node

    levels = p.bit_length() - 1  # the subtree holds p - 1 ranks
    root = p - 1 if root_max else next(labels)
    top = subtree(levels)
    if root_max:
        next(labels)  # the root's number, p - 1, comes after its subtree's in order
    parent[top] = root
    children[root].append(top)
    return parent, children


def _astra_tree_program(p: int, chunk_bytes: int, root_max: bool) -> Program:
    """ASTRA-sim 1.0's tree all-reduce (DoubleBinaryTreeAllReduce.cc): the whole chunk goes up one
    tree and back down, unpipelined. A leaf sends it to its parent and waits for the result; an
    inner node waits for both children, sends the sum up, waits for its parent, sends to both
    children; the root waits for its child and sends the result back."""
    parent, children = astra_tree_links(p, root_max)
    raw: list[list[tuple[list[tuple[int, int]], list[int]]]] = []
    for r in range(p):
        up, down = parent[r], children[r]
        if up < 0:  # the root
            raw.append([([], down), ([(down[0], chunk_bytes)], [])])
        elif not down:  # a leaf
            raw.append([([(up, chunk_bytes)], [up])])
        else:
            raw.append([([], down), ([(up, chunk_bytes)], [up]), ([(child, chunk_bytes) for child in down], [])])
    return _link(raw)


def plan(op: str, algorithm: str, p: int, chunk_bytes: int, node_size: int = 1,
         astra_tree: int | None = None, astra_compat: bool = False) -> list[Program]:
    """Programs (run concurrently) that perform collective `op` with `algorithm` on p ranks;
    `node_size` consecutive ranks share a node (it staggers direct sends, see `_direct_order`).
    `astra_tree` (0 = RootMax, 1 = RootMin) makes `double_binary_tree` ASTRA-sim 1.0's: the whole
    chunk on that one tree, unpipelined; None = NCCL's two pipelined trees. `astra_compat` makes the
    ring all-to-all ASTRA-sim 1.0's (`symmetric_steps`)."""
    steps = symmetric_steps(op, algorithm, p, chunk_bytes, astra_compat)
    if steps is not None:
        return [_expand(p, steps, node_size if p % node_size == 0 else 1)] if steps else []
    if astra_tree is not None:
        return [_astra_tree_program(p, chunk_bytes, root_max=astra_tree == 0)]
    # double_binary_tree (all_reduce): two trees, each carrying half of the data
    half = _share(chunk_bytes, 2)
    return [_binary_tree_steps(p, half, mirrored=False), _binary_tree_steps(p, half, mirrored=True)]
