"""Whether a send file proves its acks in order, learnt while it is converted: then no reorder window runs.

``reordered`` (catalogue/anomalies.py) is an acknowledged write at a lower
offset than some lower seq of its producer in its partition; the judge finds
them with a window over every ack sorted by seq (judge.reordered_table), a
sort of the whole file that almost always finds nothing. Acks are logged as
they arrive, and a producer's acks of one partition arrive in seq order at
rising offsets. So when, line by line, each (producer, topic, partition)'s
acks (status ok, with a partition and an offset) rise in seq and do not fall
in offset, sorting them by seq keeps that order and none is reordered; the
same holds for any subset of them, such as each message's winning line. The
conversion checks this block by block (Arrow and NumPy, no Python loop per
row) and across blocks and ranges by each group's first and last ack; one
ack out of line order means "not proved", and the window runs as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.encode import OK

Group = tuple[str, str, int]  # (producer, topic, partition)
Bounds = tuple[int, int, int, int]  # first seq, first offset, last seq, last offset


@dataclass
class AckOrder:
    """So far: the acks rise in every group (``ordered``), and each group's first and last ack."""

    ordered: bool = True
    bounds: dict[Group, Bounds] = field(default_factory=dict)

    def add(self, stored: pa.Table, producers: list[str], topics: list[str]) -> None:
        """The next block's rows (columnar.stored_table: pid, tid, partition, seq, offset, status), whose ids
        name ``producers`` and ``topics``."""
        if not self.ordered:
            return
        acks = stored.filter(pc.and_(pc.equal(stored["status"], OK), pc.and_(
            pc.is_valid(stored["partition"]), pc.is_valid(stored["offset"]))))
        if not acks.num_rows:
            return
        pid, tid, part, seq, offset = (acks[c].to_numpy() for c in ("pid", "tid", "partition", "seq", "offset"))
        by_group = np.lexsort((np.arange(len(pid)), part, tid, pid))  # each group's acks in line order
        pid, tid, part, seq, offset = (a[by_group] for a in (pid, tid, part, seq, offset))
        same = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1]) & (part[1:] == part[:-1])
        if np.any(same & ((seq[1:] <= seq[:-1]) | (offset[1:] < offset[:-1]))):
            self.ordered = False
            return
        firsts = np.flatnonzero(np.concatenate(([True], ~same)))
        lasts = np.concatenate((firsts[1:], [len(pid)])) - 1
        for first, last in zip(firsts.tolist(), lasts.tolist()):
            self.extend((producers[pid[first]], topics[tid[first]], int(part[first])),
                        (int(seq[first]), int(offset[first]), int(seq[last]), int(offset[last])))

    def extend(self, group: Group, bounds: Bounds) -> None:
        """A later stretch of one group's acks: in order if its first ack follows the group's last so far."""
        known = self.bounds.get(group)
        if known is None:
            self.bounds[group] = bounds
        elif bounds[0] > known[2] and bounds[1] >= known[3]:
            self.bounds[group] = (known[0], known[1], bounds[2], bounds[3])
        else:
            self.ordered = False

    def follow(self, later: "AckOrder") -> None:
        """The acks of the next range of the file (ranged.py merges its parts in file order)."""
        self.ordered = self.ordered and later.ordered
        for group, bounds in later.bounds.items():
            if not self.ordered:
                return
            self.extend(group, bounds)
