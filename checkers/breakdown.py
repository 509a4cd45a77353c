"""results.json's ``breakdown``: the checker's counts per partition and per fault window, so that the report and
the matrix show every count from results.json and never count anomalies themselves (docs/architecture.md, "Verdicts").

Both engines give the same block (tests/test_spark_checker.py)::

    {"partitions": [{"topic", "partition", "acked", "reads_live", "reads_final", "lost", "lost_unverifiable",
                     "duplicated", "divergent"}],
     "faults": [{"fault": N | null, "kind", "start_ns", "lost", "duplicated", "divergent"}],
     "lost_divergent": n}

Per partition: ``acked`` counts the winning sends with status ok naming it, ``reads_live`` and
``reads_final`` its read lines, ``lost_unverifiable`` the acknowledged messages of its sends that its
incomplete read-back did not find; ``lost``, ``duplicated`` and ``divergent`` are the entries of
``anomaly_ranges`` in it (a lost message at its send's partition, a duplicated message in each partition of
its final reads, a divergent position). Every partition a send line, a read line or a final-read event names
has a row; a topic's sends that name no partition make a row with partition null only when it counts
something.

Per fault: the fault windows of events.jsonl (rundir's ``fault_windows``: fault N is the report's and the
causal chains' fault N), each with the ``anomaly_ranges`` entries counted at the first fault that hit on or
after the entry's time (``fault_after``): a write acknowledged at t can only be lost by a fault active at t or
one that starts later. The row with fault null counts the entries no fault follows, or with no time.

``lost_divergent``: lost messages acknowledged at a divergent position (what the report's headline keeps
apart, so that one lost write is not also counted as a divergent offset).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from typing import Any

PER_FAULT = ("lost", "duplicated", "divergent")  # the anomalies of anomaly_ranges, counted per fault
PARTITION_COUNTS = ("acked", "reads_live", "reads_final", "lost", "lost_unverifiable", "duplicated", "divergent")

Part = tuple[str, "int | None"]


class FaultClock:
    """Which fault window a moment is charged to (``after``); the windows in start order (``fault_windows``)."""

    def __init__(self, windows: list[dict[str, Any]]) -> None:
        self.windows = windows
        self.starts = [w["start_ns"] or 0 for w in windows]

    def after(self, t: int | None) -> int | None:
        """The 0-based index of the fault active at ``t`` (of nested or overlapping ones, the last to start), else
        of the first to start after it; None when there is none or ``t`` is unknown."""
        if t is None:
            return None
        i = bisect_right(self.starts, t)
        for j in range(i - 1, -1, -1):
            end = self.windows[j]["end_ns"]
            if end is None or t <= end:
                return j
        return i if i < len(self.windows) else None


def charged_entries(entries: Iterable[tuple[Any, ...]], windows: list[dict[str, Any]]
                    ) -> list[tuple[str, int | None, int]]:
    """The ``anomaly_ranges`` entries (checkers.anomalies.RangeEntry: anomaly first, ns fourth) counted per
    (anomaly, fault window charged by their time: ``FaultClock.after``), as ``fault_rows`` takes them."""
    clock = FaultClock(windows)
    charged = Counter((e[0], clock.after(e[3])) for e in entries)
    return [(anomaly, fault, n) for (anomaly, fault), n in charged.items()]


def fault_rows(windows: list[dict[str, Any]], charged: Iterable[tuple[str, int | None, int]]) -> list[dict[str, Any]]:
    """One row per fault window, then one for fault null when it counts something; ``charged``: (anomaly, 0-based
    fault index or None, how many)."""
    per: dict[int | None, Counter[str]] = {}
    for anomaly, fault, n in charged:
        per.setdefault(fault, Counter())[anomaly] += n
    rows = [{"fault": i + 1, "kind": w.get("fault"), "start_ns": w.get("start_ns"),
             **{a: per.get(i, Counter())[a] for a in PER_FAULT}} for i, w in enumerate(windows)]
    rest = per.get(None, Counter())
    if any(rest[a] for a in PER_FAULT):
        rows.append({"fault": None, "kind": None, "start_ns": None, **{a: rest[a] for a in PER_FAULT}})
    return rows


def ranged_counts(ranges: Iterable[dict[str, Any]]) -> dict[Part, Counter[str]]:
    """Lost, duplicated and divergent per partition: the counts of ``anomaly_ranges`` summed."""
    counts: dict[Part, Counter[str]] = {}
    for r in ranges:
        counts.setdefault((r["topic"], r["partition"]), Counter())[r["anomaly"]] += r["count"]
    return counts


def partition_rows(named: Iterable[Part], *tallies: dict[Part, Counter[str]]) -> list[dict[str, Any]]:
    """The rows of ``named`` partitions (partition null: only when it counts something), each count summed over
    ``tallies``; by topic, then partition (null last)."""
    merged: dict[Part, Counter[str]] = {part: Counter() for part in named if part[1] is not None}
    for tally in tallies:
        for part, counts in tally.items():
            merged.setdefault(part, Counter()).update(counts)
    rows = [{"topic": topic, "partition": partition, **{c: int(counts[c]) for c in PARTITION_COUNTS}}
            for (topic, partition), counts in merged.items()
            if partition is not None or any(counts[c] for c in PARTITION_COUNTS)]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"] is None, r["partition"] or 0))


def breakdown_document(partitions: list[dict[str, Any]], faults: list[dict[str, Any]],
                       lost_divergent: int) -> dict[str, Any]:
    """The ``breakdown`` block of results.json, in one key order from both engines."""
    return {"partitions": partitions, "faults": faults, "lost_divergent": int(lost_divergent)}
