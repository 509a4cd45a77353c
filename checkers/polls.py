"""Each consumer's own sequence of reads, and each producer's sequence of acknowledgements (Jepsen's poll-skip,
nonmonotonic-poll and nonmonotonic-send), judged the plainest way: the reference checker's, and the Spark
checker's oracle.

A consumer process reads a partition in offset order: each live read of it
should be the next visible record after the one before. Within one
assignment (no rebalance callback between the two reads: the same
``assignment`` number) a jump over a visible record is ``poll_skipped`` and a
step back (or a repeat) is ``poll_nonmonotonic``; across a rebalance both
are allowed and only counted (``*_rebalance``): a new owner starts from the
committed offset. What is visible to a consumer is what the final read of
its isolation holds there: the read_committed read-back for a read_committed
consumer when the run had one (transaction markers and aborted records take
offsets but are no records to it), else the read_uncommitted one.

A producer's acknowledgements of one partition, in the order sends.jsonl
lists them (the order they came), should never go down in offset: one that
does is ``send_nonmonotonic``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from checkers.history import FINAL, OK, Read, Send

# (skipped?, within one assignment?) -> the anomaly of a broken pair of reads
POLL_ANOMALY = {(True, True): "poll_skipped", (False, True): "poll_nonmonotonic",
                (True, False): "poll_skipped_rebalance", (False, False): "poll_nonmonotonic_rebalance"}
POLL_ANOMALIES = tuple(POLL_ANOMALY.values())
SEND_ANOMALY = "send_nonmonotonic"
SEQUENCE_ANOMALIES = (SEND_ANOMALY, *POLL_ANOMALIES)  # every anomaly judged here

Part = tuple[str, int]


class PollFinding(NamedTuple):
    """One read that broke its consumer's sequence in a partition: ``line`` read ``offset`` after ``previous_line``
    had read ``previous_offset``."""

    anomaly: str
    consumer: str
    topic: str
    partition: int
    previous_offset: int
    offset: int
    previous_line: int
    line: int


def visible_offsets(reads: Iterable[Read]) -> dict[tuple[bool, Part], list[int]]:
    """(read by the read_committed read-back?, partition) -> the sorted offsets the final reads found a record at."""
    found: dict[tuple[bool, Part], set[int]] = defaultdict(set)
    for r in reads:
        if r.phase == FINAL:
            found[(r.committed, (r.topic, r.partition))].add(r.offset)
    return {key: sorted(offsets) for key, offsets in found.items()}


def visible_kind(read: Read, committed_read_back: bool) -> bool:
    """Which read-back says what ``read``'s consumer could see: the read_committed one (True) for a read_committed
    consumer when the run had one (``committed_read_back``), else the read_uncommitted one."""
    return read.committed and committed_read_back


def poll_findings(reads: list[Read], committed_read_back: bool) -> list[PollFinding]:
    """Every broken pair of successive live reads, per consumer process and partition, in reads.jsonl order.

    The final reads are indexed only when some pair jumps ahead: a run without consumers, or whose consumers
    read every partition in order, never needs them."""
    last: dict[tuple[str, str, int], Read] = {}
    broken: list[tuple[Read, Read]] = []  # (the read before, the read that did not follow it)
    for r in reads:
        if r.phase == FINAL:
            continue
        key = (r.consumer, r.topic, r.partition)
        before = last.get(key)
        last[key] = r
        if before is not None and r.offset != before.offset + 1:
            broken.append((before, r))
    visible = visible_offsets(reads) if any(r.offset > before.offset for before, r in broken) else {}
    found: list[PollFinding] = []
    for before, r in broken:
        same = r.assignment is not None and r.assignment == before.assignment
        if r.offset <= before.offset:
            found.append(finding(POLL_ANOMALY[(False, same)], before, r))
            continue
        offsets = visible.get((visible_kind(r, committed_read_back), (r.topic, r.partition)), ())
        if bisect_left(offsets, r.offset) > bisect_right(offsets, before.offset):
            found.append(finding(POLL_ANOMALY[(True, same)], before, r))
    return found


def finding(anomaly: str, before: Read, read: Read) -> PollFinding:
    return PollFinding(anomaly, read.consumer, read.topic, read.partition, before.offset, read.offset, before.line,
                       read.line)


def nonmonotonic_sends(sends: Iterable[Send]) -> set[tuple[str, int]]:
    """(producer, seq) of every acknowledgement below the highest offset acknowledged before it (sends.jsonl
    order) to the same producer in the same partition."""
    highest: dict[tuple[str, str, int], int] = {}
    found: set[tuple[str, int]] = set()
    for s in sends:
        if s.status != OK or s.partition is None or s.offset is None:
            continue
        key = (s.producer, s.topic, s.partition)
        top = highest.get(key)
        if top is not None and s.offset < top:
            found.add((s.producer, s.seq))
        else:
            highest[key] = s.offset
    return found
