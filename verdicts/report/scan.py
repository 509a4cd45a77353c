"""The report's one streaming pass over the history: what the report draws, never a count it shows.

A history may hold ten million messages, so each file is read once, line by
line, and reduced to per-second series of sends by status and of reads, every
send's latency (thinned past a million points, ``latency``), leadership per
partition and the fault windows. What was acknowledged, lost and duplicated
per second is the checker's (results.json ``series``, ``use_series``), as is
every count the report shows, per partition and per fault too
(docs/architecture.md, "Verdicts": the report never counts anomalies itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.series import totals_per_second
from rundir.broker_events import read_broker_events
from rundir.documents import FaultWindows
from rundir.layout import RunDir
from rundir.lines import iter_jsonl
from verdicts.report.latency import UNKNOWN, Points, new_points

NS = 1_000_000_000
NO_SERIES = ("results.json has no per-second series (it was checked before they were added): the timeline draws "
             "no acknowledged, lost or duplicated messages; `kchaos check RUN` adds them")


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
    _scan_reads(run, scan, part_of)
    _scan_sends(run, scan, part_of)
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


def _scan_reads(run: RunDir, scan: Scan, part_of: PartOf) -> None:
    live_s, final_s = scan.reads_live, scan.reads_final
    end = scan.end_ns
    at_offsets = scan.at_offsets
    first_final = scan.final_read
    for r in _history_lines(run, run.reads, scan.notes):
        try:
            part_of(r["topic"], r["partition"])
            offset, t = r["offset"], r.get("time_ns") or 0
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
    scan.end_ns = end


def _scan_sends(run: RunDir, scan: Scan, part_of: PartOf) -> None:
    failed, unknown, latency = scan.failed, scan.unknown, scan.latency
    end = scan.end_ns
    n = first = 0
    for s in _history_lines(run, run.sends, scan.notes):
        try:
            status, partition = s["status"], s.get("partition")
            invoke, complete = s.get("invoke_ns") or 0, s.get("complete_ns")
            if partition is not None:
                part_of(s["topic"], partition)
        except (KeyError, TypeError):
            continue
        n += 1
        if n == 1 or invoke < first:
            first = invoke
        t = complete if isinstance(complete, int) else invoke
        if t > end:
            end = t
        if status == "fail":
            failed.add(t // NS)
        elif status != "ok":
            unknown.add(t // NS)
        points = latency.get(status) or latency[UNKNOWN]  # any other status is unknown (an old history's info)
        points.add(invoke, complete - invoke if isinstance(complete, int) else -1)
    scan.end_ns = end
    scan.sent = n
    if n:
        scan.start_ns = first if scan.start_ns is None else min(scan.start_ns, first)


def use_series(scan: Scan, results: dict[str, Any]) -> None:
    """Take the acknowledged, lost and duplicated messages per second from the checker (results.json
    ``series``: checkers/series.py), or say that results.json has none."""
    series = results.get("series")
    if not isinstance(series, dict):
        scan.notes.append(NO_SERIES)
        return
    for name, grow in (("acked", scan.acked), ("lost", scan.lost), ("duplicated", scan.duplicated)):
        for second, n in totals_per_second(series, name).items():
            if second >= 0:
                grow.add(second, n)
