"""The report's one streaming pass over the history: per-second series, per-partition rows, fault windows.

A history may hold ten million messages, so each file is read once, line by
line, and reduced to per-second counts, every send's latency (thinned past a
million points, ``latency``) and per-fault tallies; lost and duplicated
messages are recounted with compact arrays indexed by seq (per producer) and
by offset (per partition), never one dict per message.
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir.broker_events import read_broker_events
from rundir.documents import FaultWindows
from rundir.layout import RunDir
from rundir.lines import iter_jsonl
from verdicts.report.latency import Points, new_points
from verdicts.report.windows import Blame

NS = 1_000_000_000
MAX_DENSE = 1 << 27  # seqs and offsets above this go to a dict instead of a dense array


class Grow:
    """A list of ints indexed by second that grows as later seconds appear."""

    __slots__ = ("v",)

    def __init__(self) -> None:
        self.v: list[int] = []

    def add(self, i: int, n: int = 1) -> None:
        v = self.v
        if i >= len(v):
            v.extend([0] * (i + 1 - len(v)))
        v[i] += n


class MessageTable:
    """Per producer, by seq: where a message sits in the final read, in 13 bytes a message."""

    __slots__ = ("part", "offset", "dup", "extra")

    def __init__(self) -> None:
        self.part = array("i")  # partition index + 1 of its first final-read position; 0: not in the final read
        self.offset = array("q")  # offset of that position
        self.dup = bytearray()  # 1: seen at a second distinct position in the final read; 2: already placed
        self.extra: dict[int, list[int]] = {}  # seqs beyond MAX_DENSE: [part, offset, dup]

    def grow(self, seq: int) -> None:
        n = max(seq + 1, len(self.part) * 3 // 2) - len(self.part)
        self.part.extend(array("i", bytes(4 * n)))
        self.offset.extend(array("q", bytes(8 * n)))
        self.dup.extend(bytes(n))


class PositionTable:
    """Per partition, by offset: the first message read there (id + 1; -1: a value kchaos did not write),
    and whether the offset was seen holding different messages (9 bytes an offset); and where the lost
    messages were acknowledged."""

    __slots__ = ("first", "div", "extra", "extra_div", "lost")

    def __init__(self) -> None:
        self.first = array("q")
        self.div = bytearray()
        self.extra: dict[int, int] = {}  # offsets beyond MAX_DENSE
        self.extra_div: set[int] = set()
        self.lost = array("q")  # the acknowledged offsets of lost messages

    def grow(self, offset: int) -> None:
        n = max(offset + 1, len(self.first) * 3 // 2) - len(self.first)
        self.first.extend(array("q", bytes(8 * n)))
        self.div.extend(bytes(n))

    def mark(self, offset: int) -> None:
        if 0 <= offset < len(self.div):
            self.div[offset] = 1
        else:
            self.extra_div.add(offset)

    def divergent(self) -> int:
        return self.div.count(1) + len(self.extra_div)

    def lost_divergent(self) -> int:
        """How many lost messages were acknowledged at an offset seen holding different messages."""
        div, size = self.div, len(self.div)
        return sum(1 for o in self.lost if (div[o] if 0 <= o < size else o in self.extra_div))


@dataclass
class Partition:
    label: str
    sends: int = 0
    acked: int = 0
    lost: int = 0
    unverifiable: int = 0
    duplicated: int = 0
    divergent: int = 0
    reads_live: int = 0
    reads_final: int = 0
    high_watermark: int | None = None
    complete: bool | None = None
    leader: Any = None
    leader_changes: int = 0
    min_isr: int | None = None


@dataclass
class Scan:
    """What one streaming pass over the history leaves: per-second series, per-partition rows, events."""

    acked: Grow = field(default_factory=Grow)
    failed: Grow = field(default_factory=Grow)
    unknown: Grow = field(default_factory=Grow)
    reads_live: Grow = field(default_factory=Grow)
    reads_final: Grow = field(default_factory=Grow)
    lost: Grow = field(default_factory=Grow)
    duplicated: Grow = field(default_factory=Grow)
    latency: dict[str, Points] = field(default_factory=new_points)  # every send, by status
    partitions: list[Partition] = field(default_factory=list)
    part_keys: list[tuple[str, int]] = field(default_factory=list)  # (topic, partition) of each partition row
    faults: list[dict[str, Any]] = field(default_factory=list)  # applied windows, by start (skipped ones: notes)
    per_fault: list[Counter[str]] = field(default_factory=list)  # lost, duplicated, divergent, by fault window
    lost_divergent: int = 0  # lost messages whose acknowledged offset was seen holding different messages
    leaders: dict[int, list[tuple[int, Any, tuple[int, ...]]]] = field(default_factory=dict)  # part -> (t, leader, isr)
    broker_events: list[dict[str, Any]] = field(default_factory=list)  # history/broker-events.jsonl, when present
    leader_changes: list[tuple[int, int, Any, Any]] = field(default_factory=list)  # (t_ns, part, old, new)
    end_ns: int = 0
    start_ns: int | None = None  # the first send or leader observation: the run clock starts before the cluster
    final_read: list[int] = field(default_factory=list)  # [first, last] time_ns of the final read-back
    sent: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long the scan took
    at_offsets: dict[tuple[str, int, int], list[dict[str, Any]]] = field(default_factory=dict)  # wanted positions

    def leader_at(self, topic: Any, partition: Any, t_ns: int) -> Any:
        """The partition's leader as last observed at or before ``t_ns`` (None: not observed by then)."""
        try:
            obs = self.leaders.get(self.part_keys.index((topic, partition)), [])
        except ValueError:
            return None
        before = [leader for t, leader, _ in obs if t <= t_ns]
        return before[-1] if before else None


def scan_history(run: RunDir, wanted: set[tuple[str, int, int]] | None = None) -> Scan:
    """Read events, reads and sends once each and reduce them to what the report shows.

    ``wanted`` positions (topic, partition, offset) get their first reads kept in ``scan.at_offsets``:
    what sits where a lost message was acknowledged.
    """
    started = time.monotonic()
    scan = Scan()
    scan.at_offsets = {pos: [] for pos in wanted or ()}
    part_index: dict[tuple[str, int], int] = {}

    def part_of(topic: str, partition: int) -> int:
        key = (topic, partition)
        i = part_index.get(key)
        if i is None:
            i = part_index[key] = len(scan.partitions)
            scan.partitions.append(Partition(label=f"{topic}-{partition}"))
            scan.part_keys.append(key)
        return i

    _scan_events(run, scan, part_of)
    if run.broker_events.is_file():
        scan.broker_events = read_broker_events(run.history, scan.notes)
    producers: dict[str, int] = {}
    tables: list[MessageTable] = []
    positions: list[PositionTable] = []
    _scan_reads(run, scan, part_of, producers, tables, positions)
    _scan_sends(run, scan, part_of, producers, tables, positions)
    for part, pt in enumerate(positions):
        scan.partitions[part].divergent = pt.divergent()
        scan.lost_divergent += pt.lost_divergent()
    scan.totals = {
        "lost": sum(p.lost for p in scan.partitions),
        "duplicated": sum(p.duplicated for p in scan.partitions),
        "divergent": sum(p.divergent for p in scan.partitions),
    }
    if len({p.label.rsplit("-", 1)[0] for p in scan.partitions}) == 1:
        for p in scan.partitions:
            p.label = "p" + p.label.rsplit("-", 1)[1]
    scan.seconds = time.monotonic() - started
    return scan


PartOf = Callable[[str, int], int]  # (topic, partition) -> its index in scan.partitions


def _history_lines(run: RunDir, path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    """Every line of one history file by the contract's rules; a missing file is a note, not an error."""
    label = path.relative_to(run.path).as_posix()
    if not path.is_file():
        notes.append(f"{label} is missing")
        return iter(())
    return iter_jsonl(path, label, notes)


def _scan_events(run: RunDir, scan: Scan, part_of: PartOf) -> None:
    windows = FaultWindows()
    for e in _history_lines(run, run.events, scan.notes):
        kind = e.get("kind")
        t = e.get("time_ns")
        if isinstance(t, int):
            scan.end_ns = max(scan.end_ns, t)
        try:
            if kind == "fault" and e.get("phase") == "skipped":
                scan.notes.append(f"a {e.get('fault')} fault on {e.get('target')} was skipped at "
                                  f"{(t or 0) / NS:.1f} s: {e.get('detail')}")
            elif kind == "fault":
                windows.add(e)
            elif kind == "leader":
                i = part_of(e["topic"], e["partition"])
                isr = tuple(e.get("isr") or ())
                obs = scan.leaders.setdefault(i, [])
                if obs and obs[-1][1] != e.get("leader"):
                    scan.leader_changes.append((t, i, obs[-1][1], e.get("leader")))
                    scan.partitions[i].leader_changes += 1
                obs.append((t, e.get("leader"), isr))
                if isinstance(t, int) and (scan.start_ns is None or t < scan.start_ns):
                    scan.start_ns = t
                p = scan.partitions[i]
                p.leader = e.get("leader")
                p.min_isr = len(isr) if p.min_isr is None else min(p.min_isr, len(isr))
            elif kind == "final-read":
                p = scan.partitions[part_of(e["topic"], e["partition"])]
                p.complete = bool(p.complete) or bool(e.get("complete"))
                if e.get("high_watermark") is not None:
                    p.high_watermark = e["high_watermark"]
        except (KeyError, TypeError):
            continue
    scan.faults = windows.ordered()
    scan.per_fault = [Counter() for _ in scan.faults]


def _scan_reads(run: RunDir, scan: Scan, part_of: PartOf, producers: dict[str, int], tables: list[MessageTable],
                positions: list[PositionTable]) -> None:
    live_s, final_s, parts = scan.reads_live, scan.reads_final, scan.partitions
    end = scan.end_ns
    at_offsets = scan.at_offsets
    first_final = scan.final_read
    for r in _history_lines(run, run.reads, scan.notes):
        try:
            part = part_of(r["topic"], r["partition"])
            offset, producer, seq, t = r["offset"], r.get("producer"), r.get("seq"), r.get("time_ns") or 0
            final = r.get("phase") == "final"
        except (KeyError, TypeError):
            continue
        if t > end:
            end = t
        if at_offsets:
            kept = at_offsets.get((r["topic"], r["partition"], offset))
            if kept is not None and len(kept) < 4:
                kept.append(r)
        sec = t // NS
        if final:
            final_s.add(sec)
            parts[part].reads_final += 1
            if not first_final or t < first_final[0]:
                first_final[:1] = [t]
            if len(first_final) < 2 or t > first_final[1]:
                first_final[1:2] = [t]
        else:
            live_s.add(sec)
            parts[part].reads_live += 1
        # the message at this position: id + 1 (producer index << 40 | seq), -1 when kchaos did not write it
        if producer is None or type(seq) is not int:
            ident = -1
        else:
            p = producers.get(producer)
            if p is None:
                p = producers[producer] = len(producers)
                tables.append(MessageTable())
            ident = (p << 40 | seq) + 1
        while part >= len(positions):
            positions.append(PositionTable())
        pt = positions[part]
        if 0 <= offset < MAX_DENSE:
            if offset >= len(pt.first):
                pt.grow(offset)
            seen = pt.first[offset]
            if seen == 0:
                pt.first[offset] = ident
            elif seen != ident:
                pt.div[offset] = 1
        else:
            seen = pt.extra.setdefault(offset, ident)
            if seen != ident:
                pt.extra_div.add(offset)
        if not final or ident == -1:
            continue
        table = tables[p]
        if 0 <= seq < MAX_DENSE:
            if seq >= len(table.part):
                table.grow(seq)
            where = table.part[seq]
            if where == 0:
                table.part[seq] = part + 1
                table.offset[seq] = offset
            elif (where != part + 1 or table.offset[seq] != offset) and not table.dup[seq]:
                table.dup[seq] = 1
        else:
            entry = table.extra.setdefault(seq, [part + 1, offset, 0])
            if (entry[0] != part + 1 or entry[1] != offset) and not entry[2]:
                entry[2] = 1
    scan.end_ns = end


def _scan_sends(run: RunDir, scan: Scan, part_of: PartOf, producers: dict[str, int], tables: list[MessageTable],
                positions: list[PositionTable]) -> None:
    acked, failed, unknown = scan.acked, scan.failed, scan.unknown
    lost_s, dup_s, latency = scan.lost, scan.duplicated, scan.latency
    parts, per_fault, blame = scan.partitions, scan.per_fault, Blame(scan.faults).after
    end = scan.end_ns
    n = first = 0
    for s in _history_lines(run, run.sends, scan.notes):
        try:
            producer, seq, status, partition = s["producer"], s["seq"], s["status"], s.get("partition")
            invoke, complete = s.get("invoke_ns") or 0, s.get("complete_ns")
            part = None if partition is None else part_of(s["topic"], partition)
        except (KeyError, TypeError):
            continue
        n += 1
        if n == 1 or invoke < first:
            first = invoke
        t = complete if isinstance(complete, int) else invoke
        if t > end:
            end = t
        sec = t // NS
        if part is not None:
            parts[part].sends += 1
        if status == "ok":
            acked.add(sec)
        elif status == "fail":
            failed.add(sec)
        else:
            unknown.add(sec)
        points = latency.get(status) or latency["info"]
        points.add(invoke, complete - invoke if isinstance(complete, int) else -1)
        p = producers.get(producer)
        table = tables[p] if p is not None else None
        if table is not None and type(seq) is int:
            if 0 <= seq < MAX_DENSE:
                inside = seq < len(table.part)
                where = table.part[seq] if inside else 0
                dup = table.dup[seq] if inside else 0
                if dup == 1:
                    table.dup[seq] = 2
            else:
                entry = table.extra.get(seq, [0, 0, 0])
                where, dup = entry[0], entry[2]
                if dup == 1:
                    entry[2] = 2
        else:
            where, dup = 0, 0
        if dup == 1:  # duplicated: placed once, at its ack (or completion) time, in its final-read partition
            dup_s.add(sec)
            parts[where - 1].duplicated += 1
            if per_fault and (f := blame(t)) is not None:
                per_fault[f]["duplicated"] += 1
        if status != "ok" or part is None:
            continue
        pr = parts[part]
        pr.acked += 1
        lost = where != part + 1 and bool(pr.complete)
        fault = blame(t) if per_fault and (lost or where != part + 1) else None
        if lost:
            pr.lost += 1
            lost_s.add(sec)
            if fault is not None:
                per_fault[fault]["lost"] += 1
        elif where != part + 1:
            pr.unverifiable += 1
        offset = s.get("offset")
        if type(offset) is int and part < len(positions):  # an ack's offset against what was read there
            pt = positions[part]
            seen = (pt.first[offset] if offset < len(pt.first) else 0) if 0 <= offset < MAX_DENSE \
                else pt.extra.get(offset, 0)
            # a producer no read ever named (p None): whatever was read there is another message
            if lost:
                pt.lost.append(offset)
            if seen != 0 and (p is None or seen != (p << 40 | seq) + 1):
                pt.mark(offset)
                if per_fault and (fault := fault if fault is not None else blame(t)) is not None:
                    per_fault[fault]["divergent"] += 1
    scan.end_ns = end
    scan.sent = n
    if n:
        scan.start_ns = first if scan.start_ns is None else min(scan.start_ns, first)
