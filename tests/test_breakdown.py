"""results.json's ``breakdown`` (checkers/breakdown.py): the checker's counts per partition and per fault window,
which the report shows instead of counting anything itself. The Spark checker's are held to the same in
tests/test_spark_checker.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers.breakdown import FaultClock, fault_rows, partition_rows
from test_anomaly_ranges import S, ranges_history, run_check


def fault(kind: str, start: int, end: int | None, target: str = "broker1") -> list[dict[str, Any]]:
    """A fault's events.jsonl lines: its start and, when it healed, its heal."""
    lines = [{"kind": "fault", "fault": kind, "target": target, "targets": [target], "phase": "start",
              "start_ns": start, "time_ns": start, "detail": ""}]
    if end is not None:
        lines.append({"kind": "fault", "fault": kind, "target": target, "targets": [target], "phase": "heal",
                      "start_ns": start, "end_ns": end, "time_ns": end, "detail": ""})
    return lines


# A kill around the first loss, a pause that never heals with a partition nested in it, a late kill that costs
# nothing, and a skipped fault (no window).
FAULTS = [*fault("kill", 8 * S // 10, 12 * S // 10), *fault("pause", 5 * S // 2, None, "broker2"),
          *fault("partition", 29 * S // 10, 31 * S // 10, "broker3"), *fault("kill", 9 * S, 10 * S, "broker2"),
          {"kind": "fault", "fault": "kill", "target": "broker1", "phase": "skipped", "time_ns": 4 * S,
           "detail": "no leader"}]


def faulted_history() -> dict[str, list[Any]]:
    h = ranges_history()
    h["events"] = h["events"] + FAULTS
    return h


def row(fault_: int | None, kind: str | None, start: int | None, lost: int = 0, duplicated: int = 0,
        divergent: int = 0) -> dict[str, Any]:
    return {"fault": fault_, "kind": kind, "start_ns": start, "lost": lost, "duplicated": duplicated,
            "divergent": divergent}


FAULTED_EXPECTED = [
    row(1, "kill", 8 * S // 10, lost=1),  # p0/2 acknowledged at 1 s, during the kill
    # p0/3 (1.5 s) and the duplicated p0/4 (2 s): the next fault to start; p0/7-8 (5 s): while it lasts
    row(2, "pause", 5 * S // 2, lost=3, duplicated=1),
    row(3, "partition", 29 * S // 10, lost=1, divergent=1),  # at 3 s: nested in the pause, the later one
    row(4, "kill", 9 * S),
    row(None, None, None, divergent=1),  # offset 9 of partition 1: no ack places it in time
]


def test_each_victim_is_charged_to_the_first_fault_that_hit_on_or_after_it(tmp_path: Path) -> None:
    results = run_check(tmp_path, **faulted_history())
    assert results["breakdown"]["faults"] == FAULTED_EXPECTED
    c = results["counts"]
    assert sum(r["lost"] for r in FAULTED_EXPECTED) == c["lost"]
    assert sum(r["divergent"] for r in FAULTED_EXPECTED) == c["divergent"]


def test_partitions_count_what_the_checker_judged(tmp_path: Path) -> None:
    results = run_check(tmp_path, **faulted_history())
    empty = {"lost_unverifiable": 0, "duplicated": 0, "divergent": 0}
    assert results["breakdown"]["partitions"] == [
        {"topic": "t", "partition": 0, "acked": 10, "reads_live": 0, "reads_final": 7, "lost": 4,
         **empty, "duplicated": 1},
        {"topic": "t", "partition": 1, "acked": 2, "reads_live": 1, "reads_final": 2, "lost": 1,
         **empty, "divergent": 2},
    ]
    # p1/0 was acknowledged at offset 0 of partition 1, where p1/1 is read
    assert results["breakdown"]["lost_divergent"] == 1


def test_without_faults_every_victim_is_unattributed(tmp_path: Path) -> None:
    results = run_check(tmp_path, **ranges_history())
    assert results["breakdown"]["faults"] == [row(None, None, None, lost=5, duplicated=1, divergent=2)]


def test_unverifiable_acks_count_in_their_partition_and_an_unread_partition_has_a_row(tmp_path: Path) -> None:
    from test_checker_reference import final_read, read, send

    sends = [send("p0", 0), send("p0", 1), send("p0", 2, partition=1), send("p0", 3, status="fail", partition=2),
             send("p0", 4, status="fail", partition=None)]
    results = run_check(tmp_path, sends=sends, reads=[read("p0", 0, 0)],
                        events=[final_read(0, high_watermark=2, complete=False), final_read(3, high_watermark=0)])
    rows = {r["partition"]: r for r in results["breakdown"]["partitions"]}
    assert sorted(rows) == [0, 1, 2, 3]  # no row for the failed send without a partition: it counts nothing
    assert (rows[0]["acked"], rows[0]["lost_unverifiable"], rows[0]["reads_final"]) == (2, 1, 1)
    assert (rows[1]["acked"], rows[1]["lost_unverifiable"]) == (1, 1)
    assert rows[2]["acked"] == 0 and rows[3] == {"topic": "t", "partition": 3, **dict.fromkeys(
        ("acked", "reads_live", "reads_final", "lost", "lost_unverifiable", "duplicated", "divergent"), 0)}


@pytest.mark.parametrize("t, expected", [
    (None, None), (0, 0), (S // 2, 0), (S, 0), (S + 1, 1), (3 * S // 2, 1), (2 * S, 1), (5 * S // 2, 2),
    (3 * S, 2), (4 * S, 3), (100 * S, 1),
])
def test_the_fault_clock(t: int | None, expected: int | None) -> None:
    """Windows [0, 1 s], [1.5 s, never], [2.5 s, 3 s] nested in it, [4 s, 5 s]."""
    windows = [{"start_ns": 0, "end_ns": S}, {"start_ns": 3 * S // 2, "end_ns": None},
               {"start_ns": 5 * S // 2, "end_ns": 3 * S}, {"start_ns": 4 * S, "end_ns": 5 * S}]
    assert FaultClock(windows).after(t) == expected


def test_the_clock_after_the_last_fault_healed_charges_nothing() -> None:
    assert FaultClock([{"start_ns": 0, "end_ns": S}]).after(2 * S) is None
    assert fault_rows([], [("lost", None, 0)]) == []


def test_a_partition_named_only_without_a_number_has_no_row_unless_it_counts() -> None:
    assert partition_rows({("t", None), ("t", 0)}) == [{"topic": "t", "partition": 0, **dict.fromkeys(
        ("acked", "reads_live", "reads_final", "lost", "lost_unverifiable", "duplicated", "divergent"), 0)}]
