"""results.json's ``series``: the checker's acknowledged, lost, duplicated and divergent counts per second and
partition, which the report's timeline draws, so that it never decides by a rule of its own what was lost
(docs/architecture.md, "Verdicts").

Both engines give the same block (tests/test_spark_checker.py)::

    {"second_ns": 1000000000,
     "partitions": [{"topic", "partition", "acked": [[second, n], ...], "lost": [...], "duplicated": [...],
                     "divergent": [...]}]}

A second is ``floor(ns / second_ns)`` on the run's clock. ``acked`` counts the winning sends with status ok at
their ``complete_ns``; ``lost``, ``duplicated`` and ``divergent`` count the entries of ``anomaly_ranges`` at
their time (a lost message at its winning send's ``complete_ns``, a duplicated message per partition of its
final reads at the same, a divergent position at its earliest ack). What has no time is in the counts and the
ranges, not in the series. Partitions in (topic, partition) order, partition null last; each list in second
order, with no zero; a partition with nothing in any list has no row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

SERIES = ("acked", "lost", "duplicated", "divergent")
SECOND_NS = 1_000_000_000

Part = tuple[str, "int | None"]


def second_of(ns: int) -> int:
    """The second a time falls in (floor division: the same for a time before the run's start)."""
    return ns // SECOND_NS


def second_sql(column: str) -> str:
    """SQL: ``second_of`` of a BIGINT column. ``div`` truncates toward zero, so a negative time is turned around
    first (as -(t + 1), which no long overflows)."""
    return (f"(CASE WHEN {column} >= 0 THEN {column} div {SECOND_NS}L "
            f"ELSE -(-({column} + 1) div {SECOND_NS}L) - 1 END)")


def part_order(part: Part) -> tuple[str, bool, int]:
    return part[0], part[1] is None, part[1] or 0


def series_document(counted: Iterable[tuple[str, str, "int | None", int, int]]) -> dict[str, Any]:
    """The ``series`` block from (name, topic, partition, second, n) rows (a row may repeat a key: summed)."""
    parts: dict[Part, dict[str, dict[int, int]]] = defaultdict(lambda: {name: defaultdict(int) for name in SERIES})
    for name, topic, partition, second, n in counted:
        if n:
            parts[(topic, partition)][name][second] += n
    return {"second_ns": SECOND_NS,
            "partitions": [{"topic": part[0], "partition": part[1],
                            **{name: [[s, n] for s, n in sorted(parts[part][name].items())] for name in SERIES}}
                           for part in sorted(parts, key=part_order)]}


def entries_per_second(entries: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, "int | None", int, int]]:
    """The ``anomaly_ranges`` entries with a time (checkers.anomalies.RangeEntry: anomaly, topic, partition, ns)
    counted per (anomaly, topic, partition, second), as ``series_document`` takes them."""
    counted: dict[tuple[str, str, int | None, int], int] = defaultdict(int)
    for anomaly, topic, partition, ns, *_ in entries:
        if ns is not None:
            counted[(anomaly, topic, partition, second_of(ns))] += 1
    return [(a, t, p, sec, n) for (a, t, p, sec), n in counted.items()]


def totals_per_second(series: dict[str, Any], name: str) -> dict[int, int]:
    """One series summed over the partitions: second -> n."""
    out: dict[int, int] = defaultdict(int)
    for row in series.get("partitions") or []:
        for second, n in row.get(name) or []:
            out[second] += n
    return dict(out)
