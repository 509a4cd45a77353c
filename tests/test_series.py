"""results.json's ``series`` (checkers/series.py): the reference checker's per-second counts on a hand-made
history. The Spark checker is held to the reference's whole results, series included, in
tests/test_spark_checker.py (and to ``second_of`` there, ``test_second_sql_is_second_of``)."""

from __future__ import annotations

from pathlib import Path

from checkers.series import SECOND_NS, second_of, series_document, totals_per_second
from test_checker_reference import final_read, read, run_check, send

S = SECOND_NS


def test_a_second_is_a_floor_also_before_the_start() -> None:
    assert [second_of(t) for t in (0, S - 1, S, -1, -S, -S - 1, -2 ** 63)] == [0, 0, 1, -1, -1, -2, -9223372037]


def test_the_document_sums_orders_and_leaves_out_zeros() -> None:
    doc = series_document([("lost", "b", 1, 3, 2), ("acked", "b", 1, 3, 5), ("acked", "b", 1, 1, 1),
                           ("acked", "a", None, 0, 4), ("acked", "a", 2, 0, 1), ("lost", "b", 1, 3, 1),
                           ("divergent", "c", 0, 9, 0)])
    assert doc["second_ns"] == S
    assert [(r["topic"], r["partition"]) for r in doc["partitions"]] == [("a", 2), ("a", None), ("b", 1)]
    assert doc["partitions"][2] == {"topic": "b", "partition": 1, "acked": [[1, 1], [3, 5]], "lost": [[3, 3]],
                                    "duplicated": [], "divergent": []}
    assert totals_per_second(doc, "acked") == {0: 5, 1: 1, 3: 5}


def timed(line: dict, complete_ns: int | None) -> dict:
    return {**line, "complete_ns": complete_ns}


def test_the_reference_counts_acks_and_anomalies_per_second_and_partition(tmp_path: Path) -> None:
    sends = [timed(send("p", 0, partition=0, offset=0), S // 2),           # second 0, read back
             timed(send("p", 1, partition=0, offset=1), S + 5),            # second 1, lost
             timed(send("p", 2, partition=1, offset=0), 2 * S),            # second 2, duplicated
             timed(send("p", 3, "fail", partition=1), 2 * S),              # not acknowledged
             timed(send("p", 4, partition=1, offset=2), None)]             # acknowledged, no time: not drawn
    reads = [read("p", 0, 0, partition=0), read("p", 2, 0, partition=1), read("p", 2, 3, partition=1),
             read("p", 4, 2, partition=1)]
    results = run_check(tmp_path, sends=sends, reads=reads,
                        events=[final_read(0, high_watermark=2), final_read(1, high_watermark=4)])
    assert results["counts"]["lost"] == 1 and results["counts"]["duplicated"] == 1
    rows = {r["partition"]: r for r in results["series"]["partitions"]}
    assert rows[0]["acked"] == [[0, 1], [1, 1]] and rows[0]["lost"] == [[1, 1]]
    assert rows[1]["acked"] == [[2, 1]] and rows[1]["duplicated"] == [[2, 1]] and rows[1]["lost"] == []
