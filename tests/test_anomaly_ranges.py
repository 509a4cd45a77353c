"""anomaly_ranges: the grouping into time islands (checkers/anomalies.py), and what the reference checker feeds it.

The Spark checker's islands are held to the same cases in tests/test_spark_checker.py
(``test_spark_islands_are_the_grouping``), and to the reference's whole results there.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from checkers.anomalies import RANGE_ANOMALIES, RANGE_GAP_NS, RangeEntry, anomaly_ranges, range_record
from test_checker_reference import final_read, read, run_check, send

S = 1_000_000_000  # one second, in ns


def lost(ns: int | None, offset: int | None = 0, partition: int | None = 0, topic: str = "t") -> RangeEntry:
    return RangeEntry("lost", topic, partition, ns, offset, offset)


def span(anomaly: str, topic: str, partition: int | None, count: int, first_ns: int | None, last_ns: int | None,
         min_offset: int | None, max_offset: int | None) -> dict[str, Any]:
    return range_record(anomaly, topic, partition, count, first_ns, last_ns, min_offset, max_offset)


# (entries, the ranges they make): each case one rule of the grouping; the Spark checker's islands get the same
GROUPING_CASES: dict[str, tuple[list[RangeEntry], list[dict[str, Any]]]] = {
    "a gap of exactly 1 s keeps one range": (
        [lost(0, 3), lost(RANGE_GAP_NS, 4), lost(2 * RANGE_GAP_NS, 5)],
        [span("lost", "t", 0, 3, 0, 2 * S, 3, 5)]),
    "a gap of 1 s and 1 ns starts a new one": (
        [lost(0, 3), lost(RANGE_GAP_NS + 1, 4), lost(RANGE_GAP_NS + 2, 6)],
        [span("lost", "t", 0, 1, 0, 0, 3, 3), span("lost", "t", 0, 2, S + 1, S + 2, 4, 6)]),
    "gaps are between neighbours in time, not from the range's start": (
        [lost(0), lost(S), lost(2 * S), lost(3 * S)],
        [span("lost", "t", 0, 4, 0, 3 * S, 0, 0)]),
    "entries without a time are one range of their own, last": (
        [lost(None, 9), lost(5 * S, 1), lost(None, 2), lost(None, None)],
        [span("lost", "t", 0, 1, 5 * S, 5 * S, 1, 1), span("lost", "t", 0, 3, None, None, 2, 9)]),
    "offsets are null only when no entry has one (acks=0)": (
        [lost(7, None), lost(8, None)],
        [span("lost", "t", 0, 2, 7, 8, None, None)]),
    "equal times are one range": (
        [lost(4 * S, 2), lost(4 * S, 1), lost(4 * S, 3)],
        [span("lost", "t", 0, 3, 4 * S, 4 * S, 1, 3)]),
    "negative times": (
        [lost(-S, 3), lost(-3 * S, 1), lost(0, 4), lost(-2 * S - 1, 2)],
        [span("lost", "t", 0, 2, -3 * S, -2 * S - 1, 1, 2), span("lost", "t", 0, 2, -S, 0, 3, 4)]),
    "times further apart than a long holds": (
        [lost(2 ** 63 - 1, 2), lost(-2 ** 63, 1)],
        [span("lost", "t", 0, 1, -2 ** 63, -2 ** 63, 1, 1), span("lost", "t", 0, 1, 2 ** 63 - 1, 2 ** 63 - 1, 2, 2)]),
    "per anomaly, topic and partition, in that order; a null partition last": (
        [RangeEntry("divergent", "a", 0, 0, 5, 5), RangeEntry("duplicated", "b", 1, 0, 2, 7),
         RangeEntry("duplicated", "b", 0, 0, 1, 1), RangeEntry("duplicated", "a", 2, 10, 3, 3),
         lost(0, 1, partition=None, topic="b"), lost(S // 2, 4, partition=1, topic="b"), lost(0, 3, topic="b"),
         lost(0, 2, partition=3, topic="a"), lost(S // 2, 6, partition=1, topic="b")],
        [span("lost", "a", 3, 1, 0, 0, 2, 2), span("lost", "b", 0, 1, 0, 0, 3, 3),
         span("lost", "b", 1, 2, S // 2, S // 2, 4, 6), span("lost", "b", None, 1, 0, 0, 1, 1),
         span("duplicated", "a", 2, 1, 10, 10, 3, 3), span("duplicated", "b", 0, 1, 0, 0, 1, 1),
         span("duplicated", "b", 1, 1, 0, 0, 2, 7), span("divergent", "a", 0, 1, 0, 0, 5, 5)]),
}


@pytest.mark.parametrize("name", sorted(GROUPING_CASES))
def test_grouping(name: str) -> None:
    entries, expected = GROUPING_CASES[name]
    assert anomaly_ranges(entries) == expected
    shuffled = list(entries)
    random.Random(name).shuffle(shuffled)
    assert anomaly_ranges(shuffled) == expected  # the input order does not matter


def test_ranges_cover_every_entry_once() -> None:
    """Many entries over several partitions: each range's count and time span are those of its entries, ranges of
    one partition are more than the gap apart, and the counts add up."""
    rng = random.Random(7)
    entries = [RangeEntry(rng.choice(RANGE_ANOMALIES), rng.choice("tu"), rng.randrange(3),
                          None if rng.random() < 0.05 else rng.randrange(20) * S // 2, o, o)
               for o in range(500)]
    ranges = anomaly_ranges(entries)
    assert sum(r["count"] for r in ranges) == len(entries)
    for before, after in zip(ranges, ranges[1:]):
        if (before["anomaly"], before["topic"], before["partition"]) == (after["anomaly"], after["topic"],
                                                                          after["partition"]):
            assert after["first_ns"] is None or after["first_ns"] - before["last_ns"] > RANGE_GAP_NS
    for r in ranges:
        inside = [e for e in entries if (e.anomaly, e.topic, e.partition) == (r["anomaly"], r["topic"], r["partition"])
                  and (e.ns is None if r["first_ns"] is None
                       else e.ns is not None and r["first_ns"] <= e.ns <= r["last_ns"])]
        assert len(inside) == r["count"]
        assert (min(e.min_offset for e in inside), max(e.max_offset for e in inside)) == (r["min_offset"],
                                                                                          r["max_offset"])


def test_nothing_found_is_no_range() -> None:
    assert anomaly_ranges([]) == []


# --- the reference checker ---------------------------------------------------------------------------


def timed(line: dict[str, Any], complete_ns: int) -> dict[str, Any]:
    return {**line, "complete_ns": complete_ns}


def ranges_history() -> dict[str, list[Any]]:
    """Partition 0: p0/2-3 lost around 1 s and p0/7-8 around 5 s (two islands), p0/4 (sent at 2 s) read at offsets
    4 and 12. Partition 1: p1/0 (3 s) and p1/1 (3.2 s) both acknowledged at offset 0, where p1/1 is read (divergent,
    at the earlier ack; p1/0 lost); offset 9 read as p1/5 live and p1/6 finally, both in doubt (divergent, no ack)."""
    sends = [timed(send("p0", i), t) for i, t in enumerate(
        [S // 10, S // 2, S, 3 * S // 2, 2 * S, 4 * S, 9 * S // 2, 5 * S, 26 * S // 5, 6 * S])]
    sends += [timed(send("p1", 0, partition=1, offset=0), 3 * S),
              timed(send("p1", 1, partition=1, offset=0), 16 * S // 5),
              timed(send("p1", 5, status="unknown", partition=1), 7 * S),
              timed(send("p1", 6, status="unknown", partition=1), 7 * S)]
    reads = [read("p0", i, i) for i in (0, 1, 4, 5, 6, 9)] + [read("p0", 4, 12), read("p1", 1, 0, partition=1),
                                                              read("p1", 5, 9, phase="live", partition=1),
                                                              read("p1", 6, 9, partition=1)]
    events = [final_read(0, high_watermark=13), final_read(1, high_watermark=10)]
    return {"sends": sends, "reads": reads, "events": events}


RANGES_HISTORY_EXPECTED = [
    span("lost", "t", 0, 2, S, 3 * S // 2, 2, 3), span("lost", "t", 0, 2, 5 * S, 26 * S // 5, 7, 8),
    span("lost", "t", 1, 1, 3 * S, 3 * S, 0, 0),
    span("duplicated", "t", 0, 1, 2 * S, 2 * S, 4, 12),
    span("divergent", "t", 1, 1, 3 * S, 3 * S, 0, 0), span("divergent", "t", 1, 1, None, None, 9, 9),
]


def test_reference_checker_ranges(tmp_path: Path) -> None:
    results = run_check(tmp_path, **ranges_history())
    c = results["counts"]
    assert (c["lost"], c["duplicated"], c["divergent"]) == (5, 1, 2)
    assert results["anomaly_ranges"] == RANGES_HISTORY_EXPECTED


def test_a_duplicate_in_two_partitions_is_one_entry_per_partition(tmp_path: Path) -> None:
    h = ranges_history()
    h["reads"].append(read("p0", 4, 3, partition=1))
    results = run_check(tmp_path, **h)
    assert [r for r in results["anomaly_ranges"] if r["anomaly"] == "duplicated"] == [
        span("duplicated", "t", 0, 1, 2 * S, 2 * S, 4, 12), span("duplicated", "t", 1, 1, 2 * S, 2 * S, 3, 3)]


def test_sends_without_complete_ns_are_placed_nowhere(tmp_path: Path) -> None:
    """complete_ns is optional to the reader (null or missing): such entries form the range without a time."""
    h = ranges_history()
    h["sends"][2]["complete_ns"] = None
    del h["sends"][3]["complete_ns"]
    results = run_check(tmp_path, **h)
    assert results["anomaly_ranges"][:2] == [span("lost", "t", 0, 2, 5 * S, 26 * S // 5, 7, 8),
                                             span("lost", "t", 0, 2, None, None, 2, 3)]


def test_a_clean_run_has_no_ranges(tmp_path: Path) -> None:
    h = ranges_history()
    h["sends"] = [s for s in h["sends"] if s["producer"] == "p0" and s["seq"] in (0, 1, 5, 6, 9)]
    h["reads"] = [r for r in h["reads"] if r["producer"] == "p0" and r["seq"] != 4]
    results = run_check(tmp_path, **h)
    assert results["valid"] is True and results["anomaly_ranges"] == []
