"""The `flows` table as a run fills it: one entry per point-to-point message, kept in columns.

A DLRM iteration on n NPUs sends about 16 n(n - 1) messages (16.8 million at 1,024 NPUs), so an
object per message (a record and, at the end, a row dict: about 1 KB) does not fit in memory; five
arrays of 64-bit integers take 40 bytes a message, and the few messages that saw retransmissions,
timeouts or ECN marks keep those counts in a dict. Rows or columns in the table's units (seconds,
Gb/s) are made only when asked for, at the end.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from math import nan as NAN
from typing import Iterator

from ..units import goodput_gbps, ps_to_s


@dataclass(frozen=True)
class MessageRecord:
    """One message as the log holds it, times in picoseconds; `end_ps` is -1 until delivered."""

    flow_id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: int
    end_ps: int = -1
    retransmits: int = 0
    timeouts: int = 0
    ecn_marks: int = 0


class MessageLog:
    """Messages in the order they were sent; a message's index is its `flow_id`."""

    __slots__ = ("_src", "_dst", "_size_bytes", "_start_ps", "_end_ps", "_counts")

    def __init__(self) -> None:
        self._src = array("q")
        self._dst = array("q")
        self._size_bytes = array("q")
        self._start_ps = array("q")
        self._end_ps = array("q")  # -1 until delivered
        self._counts: dict[int, tuple[int, int, int]] = {}  # flow_id -> (retransmits, timeouts, ecn_marks) if any

    def add(self, src: int, dst: int, size_bytes: int, start_ps: int) -> int:
        """Log a message sent at `start_ps`; returns its flow_id."""
        self._src.append(src)
        self._dst.append(dst)
        self._size_bytes.append(size_bytes)
        self._start_ps.append(start_ps)
        self._end_ps.append(-1)
        return len(self._src) - 1

    def finish(self, flow_id: int, end_ps: int, retransmits: int = 0, timeouts: int = 0,
               ecn_marks: int = 0) -> None:
        """The message's last byte arrived at `end_ps`; the counts are its own, not its connection's."""
        self._end_ps[flow_id] = end_ps
        if retransmits or timeouts or ecn_marks:
            self._counts[flow_id] = (retransmits, timeouts, ecn_marks)

    def __len__(self) -> int:
        return len(self._src)

    def __getitem__(self, flow_id: int) -> MessageRecord:
        retransmits, timeouts, ecn_marks = self._counts.get(flow_id, (0, 0, 0))
        return MessageRecord(flow_id, self._src[flow_id], self._dst[flow_id], self._size_bytes[flow_id],
                             self._start_ps[flow_id], self._end_ps[flow_id], retransmits, timeouts, ecn_marks)

    def __iter__(self) -> Iterator[MessageRecord]:
        for flow_id in range(len(self._src)):
            yield self[flow_id]

    def columns(self) -> dict[str, array]:
        """The `flows` table (DESIGN.md) by column, in its order: typed arrays (64-bit integers,
        doubles), times in seconds, NaN where a row holds None (a message not delivered; goodput
        of a zero flow completion time)."""
        count = len(self._src)
        fct_ps = [end - start if end >= 0 else -1 for start, end in zip(self._start_ps, self._end_ps)]
        count_columns = [array("q", bytes(8 * count)) for _ in range(3)]  # zeros
        for flow_id, counts in self._counts.items():
            for column, value in zip(count_columns, counts):
                column[flow_id] = value
        return {
            "flow_id": array("q", range(count)),
            "src": self._src,
            "dst": self._dst,
            "bytes": self._size_bytes,
            "start_s": array("d", [ps_to_s(start) for start in self._start_ps]),
            "end_s": array("d", [ps_to_s(end) if end >= 0 else NAN for end in self._end_ps]),
            "fct_s": array("d", [ps_to_s(fct) if fct >= 0 else NAN for fct in fct_ps]),
            "goodput_gbps": array("d", [goodput_gbps(size, fct) if fct > 0 else NAN
                                        for size, fct in zip(self._size_bytes, fct_ps)]),
            "retransmits": count_columns[0],
            "timeouts": count_columns[1],
            "ecn_marks": count_columns[2],
        }

    def rows(self) -> list[dict]:
        """The `flows` table as one dict per message (for small runs; `columns` at any size)."""
        return flow_rows(self.columns())


def flow_rows(columns: dict[str, array]) -> list[dict]:
    """`MessageLog.columns` as one dict per row, None where a column holds NaN."""
    names = list(columns)
    return [{name: None if value != value else value for name, value in zip(names, values)}  # NaN != NaN
            for values in zip(*[columns[name] for name in names])]
