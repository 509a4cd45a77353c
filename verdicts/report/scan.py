"""The report's one streaming pass over the history: what the report draws, never a count it shows.

A history may hold ten million messages, so each file is read once, line by
line, and reduced to per-second series, every send's latency (thinned past a
million points, ``latency``), leadership per partition and the fault windows.
The timeline's lost and duplicated bars are placed with compact arrays
indexed by seq (per producer), never one dict per message; they are drawing
data only. Every count the report shows as a number, per partition and per
fault too, comes from results.json (docs/architecture.md, "Verdicts": the report never counts
anomalies itself).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir.broker_events import read_broker_events
from rundir.documents import FaultWindows
from rundir.layout import RunDir
from rundir.lines import iter_jsonl
from verdicts.report.latency import UNKNOWN, Points, new_points

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


@dataclass
class Partition:
    """What the report draws and labels of one partition (its counts are results.json's ``breakdown``)."""

    label: str
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
    leaders: dict[int, list[tuple[int, Any, tuple[int, ...]]]] = field(default_factory=dict)  # part -> (t, leader, isr)
    broker_events: list[dict[str, Any]] = field(default_factory=list)  # history/broker-events.jsonl, when present
    node_versions: list[dict[str, Any]] = field(default_factory=list)  # events.jsonl node-version lines (versions.py)
    leader_changes: list[tuple[int, int, Any, Any]] = field(default_factory=list)  # (t_ns, part, old, new)
    end_ns: int = 0
    start_ns: int | None = None  # the first send or leader observation: the run clock starts before the cluster
    final_read: list[int] = field(default_factory=list)  # [first, last] time_ns of the final read-back
    sent: int = 0
    totals: dict[str, int] = field(default_factory=dict)  # the checker's counts the timeline's legend names (page.py)
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
    _scan_reads(run, scan, part_of, producers, tables)
    _scan_sends(run, scan, part_of, producers, tables)
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
            elif kind == "node-version":
                scan.node_versions.append(e)
            elif kind == "final-read":
                p = scan.partitions[part_of(e["topic"], e["partition"])]
                p.complete = bool(p.complete) or bool(e.get("complete"))
                if e.get("high_watermark") is not None:
                    p.high_watermark = e["high_watermark"]
        except (KeyError, TypeError):
            continue
    scan.faults = windows.ordered()


def _scan_reads(run: RunDir, scan: Scan, part_of: PartOf, producers: dict[str, int], tables: list[MessageTable]
                ) -> None:
    live_s, final_s = scan.reads_live, scan.reads_final
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
            if not first_final or t < first_final[0]:
                first_final[:1] = [t]
            if len(first_final) < 2 or t > first_final[1]:
                first_final[1:2] = [t]
        else:
            live_s.add(sec)
        if not final or producer is None or type(seq) is not int:
            continue
        p = producers.get(producer)
        if p is None:
            p = producers[producer] = len(producers)
            tables.append(MessageTable())
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


def _scan_sends(run: RunDir, scan: Scan, part_of: PartOf, producers: dict[str, int], tables: list[MessageTable]
                ) -> None:
    acked, failed, unknown = scan.acked, scan.failed, scan.unknown
    lost_s, dup_s, latency = scan.lost, scan.duplicated, scan.latency
    parts = scan.partitions
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
        if status == "ok":
            acked.add(sec)
        elif status == "fail":
            failed.add(sec)
        else:
            unknown.add(sec)
        points = latency.get(status) or latency[UNKNOWN]  # any other status is unknown (an old history's info)
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
        if dup == 1:  # duplicated: drawn once, at its ack (or completion) time
            dup_s.add(sec)
        # an ack its complete final read lacks: drawn as lost at its ack time (results.json has the count)
        if status == "ok" and part is not None and where != part + 1 and parts[part].complete:
            lost_s.add(sec)
    scan.end_ns = end
    scan.sent = n
    if n:
        scan.start_ns = first if scan.start_ns is None else min(scan.start_ns, first)
