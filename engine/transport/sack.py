"""A SACK scoreboard: the byte ranges one end holds beyond the cumulative point, as sorted, disjoint
[start, end) blocks (RFC 2018, RFC 6675).

The sender's scoreboard holds what ACKs reported SACKed above snd_una; the receiver's, the
out-of-order data it holds above rcv_nxt (the SACK blocks it announces); RACK reads the sender's to
find the segments delivered. Both keep a scoreboard only while it holds something (None otherwise:
most connections never see a hole). A kernel module (engine/kernel.py): the sender asks it on every
ACK of a recovery.
"""

from __future__ import annotations

from typing import Final

_MAX_SACK_BLOCKS: Final = 3  # blocks an ACK carries: as many as fit beside the timestamp option (RFC 2018)


class SackScoreboard:
    """Sorted, disjoint, non-adjacent [start, end) byte ranges; `held_bytes` is their total."""

    __slots__ = ("blocks", "held_bytes")

    def __init__(self) -> None:
        self.blocks: list[list[int]] = []  # [start, end) each, sorted by start; never touching
        self.held_bytes = 0

    @property
    def highest(self) -> int:
        """The end of the highest block (the scoreboard is never asked while empty)."""
        return self.blocks[-1][1]

    def add(self, start: int, end: int) -> int:
        """Hold [start, end), merged with the blocks it overlaps or touches; return the bytes it adds
        that were not held (0: nothing new)."""
        blocks = self.blocks
        index = 0
        count = len(blocks)
        while index < count and blocks[index][1] < start:
            index += 1
        absorbed = 0  # bytes of the blocks that the new range overlaps or touches
        while index < count and blocks[index][0] <= end:
            block_start, block_end = blocks.pop(index)
            count -= 1
            absorbed += block_end - block_start
            if block_start < start:
                start = block_start
            if block_end > end:
                end = block_end
        blocks.insert(index, [start, end])
        added = end - start - absorbed  # the union is one contiguous range
        self.held_bytes += added
        return added

    def trim_below(self, seq: int) -> None:
        """Forget what lies below `seq` (the cumulative ACK has passed it)."""
        blocks = self.blocks
        while blocks and blocks[0][1] <= seq:
            block_start, block_end = blocks.pop(0)
            self.held_bytes -= block_end - block_start
        if blocks and blocks[0][0] < seq:
            self.held_bytes -= seq - blocks[0][0]
            blocks[0][0] = seq

    def take_from(self, seq: int) -> int:
        """Take out the blocks that start at or below `seq` (data now in order up to `seq`) and return
        how far the data is in order with them: `seq`, or the end of the last block taken if above it."""
        blocks = self.blocks
        while blocks and blocks[0][0] <= seq:
            block_start, block_end = blocks.pop(0)
            self.held_bytes -= block_end - block_start
            if block_end > seq:
                seq = block_end
        return seq

    def covers(self, start: int, end: int) -> bool:
        """Whether one block holds all of [start, end)."""
        for block_start, block_end in self.blocks:
            if block_start <= start and end <= block_end:
                return True
        return False

    def held_in(self, start: int, end: int) -> int:
        """Bytes of [start, end) that the blocks hold (0 if end <= start)."""
        held = 0
        for block_start, block_end in self.blocks:
            if block_start >= end:
                break
            if block_end > start:
                held += (block_end if block_end < end else end) - (block_start if block_start > start else start)
        return held

    def next_hole(self, start: int, limit: int) -> tuple[int, int]:
        """The first range at or above `start` and below `limit` that no block holds, as (start, end);
        an empty range (start == end) if there is none."""
        for block_start, block_end in self.blocks:
            if start >= limit:
                break
            if start < block_start:
                return start, (block_start if block_start < limit else limit)
            if start < block_end:
                start = block_end
        return (start, limit) if start < limit else (start, start)

    def block_holding(self, seq: int) -> list[int] | None:
        """The block that holds byte `seq`, or None."""
        for block in self.blocks:
            if block[0] <= seq < block[1]:
                return block
        return None

    def announced(self, latest: int) -> tuple[tuple[int, int], ...]:
        """The SACK blocks a receiver announces: up to three, the one holding byte `latest` (the
        latest segment received) first, then the others from the lowest (RFC 2018)."""
        first = self.block_holding(latest)
        announced = [] if first is None else [(first[0], first[1])]
        for block in self.blocks:
            if len(announced) == _MAX_SACK_BLOCKS:
                break
            if block is not first:
                announced.append((block[0], block[1]))
        return tuple(announced)
