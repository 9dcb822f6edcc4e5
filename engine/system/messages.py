"""The `flows` table as a run fills it: one entry per point-to-point message, kept in columns.

A DLRM iteration on n NPUs sends about 16 n(n - 1) messages (16.8 million at 1,024 NPUs), so an
object per message (a record and, at the end, a row dict: about 1 KB) does not fit in memory; six
arrays of 64-bit integers take 48 bytes a message, and the few messages that saw retransmissions,
timeouts or ECN marks keep those counts in a dict. Rows or columns in the table's units (seconds,
Gb/s) are made only when asked for, at the end.
"""

from __future__ import annotations

from array import array
from math import nan as NAN
from typing import Final, Iterator

from ..units import goodput_gbps, ps_to_s

_BATCH: Final = 4096  # messages logged in lists before they move to the arrays


class MessageRecord:
    """One message, times in picoseconds; `end_ps` is -1 until delivered. What iterating a
    `MessageLog` yields; the analytical backend keeps one per message in flight. (A plain class
    with slots: compiled, a dataclass's constructor would run interpreted.)"""

    __slots__ = ("flow_id", "src", "dst", "size_bytes", "start_ps", "end_ps", "retransmits", "timeouts",
                 "ecn_marks")

    def __init__(self, flow_id: int, src: int, dst: int, size_bytes: int, start_ps: int, end_ps: int = -1,
                 retransmits: int = 0, timeouts: int = 0, ecn_marks: int = 0) -> None:
        self.flow_id = flow_id
        self.src = src
        self.dst = dst
        self.size_bytes = size_bytes
        self.start_ps = start_ps
        self.end_ps = end_ps
        self.retransmits = retransmits
        self.timeouts = timeouts
        self.ecn_marks = ecn_marks


class MessageLog:
    """Messages in the order they were sent; a message's index is its `flow_id`.

    Appending to an array is a method call that parses its argument (~50 ns compiled); a message
    is logged with appends to plain lists instead (`_sent`, `_ended`), which move to the arrays
    `_BATCH` messages at a time (`array.fromlist`)."""

    __slots__ = ("_src", "_dst", "_size_bytes", "_start_ps", "_ended_flow_ids", "_ended_ps", "_sent",
                 "_ended", "_count", "_counts")

    def __init__(self) -> None:
        self._src = array("q")
        self._dst = array("q")
        self._size_bytes = array("q")
        self._start_ps = array("q")
        self._ended_flow_ids = array("q")  # deliveries in the order they happened
        self._ended_ps = array("q")
        self._sent: list[int] = []  # src, dst, size_bytes, start_ps of the messages not yet in the arrays
        self._ended: list[int] = []  # flow_id, end_ps of the deliveries not yet in the arrays
        self._count = 0
        self._counts: dict[int, tuple[int, int, int]] = {}  # flow_id -> (retransmits, timeouts, ecn_marks) if any

    def add(self, src: int, dst: int, size_bytes: int, start_ps: int) -> int:
        """Log a message sent at `start_ps`; returns its flow_id."""
        sent = self._sent
        sent.append(src)
        sent.append(dst)
        sent.append(size_bytes)
        sent.append(start_ps)
        if len(sent) == 4 * _BATCH:
            self._store()
        flow_id = self._count
        self._count = flow_id + 1
        return flow_id

    def finish(self, flow_id: int, end_ps: int, retransmits: int = 0, timeouts: int = 0,
               ecn_marks: int = 0) -> None:
        """The message's last byte arrived at `end_ps`; the counts are its own, not its connection's."""
        ended = self._ended
        ended.append(flow_id)
        ended.append(end_ps)
        if len(ended) == 2 * _BATCH:
            self._store()
        if retransmits or timeouts or ecn_marks:
            self._counts[flow_id] = (retransmits, timeouts, ecn_marks)

    def _store(self) -> None:
        """Move what the lists hold to the arrays."""
        sent, ended = self._sent, self._ended
        self._src.fromlist(sent[0::4])
        self._dst.fromlist(sent[1::4])
        self._size_bytes.fromlist(sent[2::4])
        self._start_ps.fromlist(sent[3::4])
        self._ended_flow_ids.fromlist(ended[0::2])
        self._ended_ps.fromlist(ended[1::2])
        sent.clear()
        ended.clear()

    def __len__(self) -> int:
        return self._count

    def _end_ps(self) -> array:
        """Each message's delivery time, -1 if not delivered."""
        self._store()
        end_ps = array("q", [-1]) * self._count
        for flow_id, time_ps in zip(self._ended_flow_ids, self._ended_ps):
            end_ps[flow_id] = time_ps
        return end_ps

    def __iter__(self) -> Iterator[MessageRecord]:
        end_ps = self._end_ps()
        for flow_id in range(self._count):
            retransmits, timeouts, ecn_marks = self._counts.get(flow_id, (0, 0, 0))
            yield MessageRecord(flow_id, self._src[flow_id], self._dst[flow_id], self._size_bytes[flow_id],
                                self._start_ps[flow_id], end_ps[flow_id], retransmits, timeouts, ecn_marks)

    def columns(self) -> dict[str, array]:
        """The `flows` table (DESIGN.md) by column, in its order: typed arrays (64-bit integers,
        doubles; `src`, `dst` and `bytes` are the log's own), times in seconds, NaN where a row holds
        None (a message not delivered; goodput of a zero flow completion time). Made `_BATCH` rows
        at a time, so no list of all values is ever held."""
        end_ps = self._end_ps()
        count = self._count
        start_s, end_s, fct_s, goodput = array("d"), array("d"), array("d"), array("d")
        for first in range(0, count, _BATCH):
            starts = self._start_ps[first:first + _BATCH]
            ends = end_ps[first:first + _BATCH]
            fcts = [end - start if end >= 0 else -1 for start, end in zip(starts, ends)]
            start_s.fromlist([ps_to_s(start) for start in starts])
            end_s.fromlist([ps_to_s(end) if end >= 0 else NAN for end in ends])
            fct_s.fromlist([ps_to_s(fct) if fct >= 0 else NAN for fct in fcts])
            goodput.fromlist([goodput_gbps(size, fct) if fct > 0 else NAN
                              for size, fct in zip(self._size_bytes[first:first + _BATCH], fcts)])
        count_columns = [array("q", bytes(8 * count)) for _ in range(3)]  # zeros
        for flow_id, counts in self._counts.items():
            for column, value in zip(count_columns, counts):
                column[flow_id] = value
        return {
            "flow_id": array("q", range(count)),
            "src": self._src,
            "dst": self._dst,
            "bytes": self._size_bytes,
            "start_s": start_s,
            "end_s": end_s,
            "fct_s": fct_s,
            "goodput_gbps": goodput,
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
