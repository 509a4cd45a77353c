"""Each consumer's own sequence of reads and each producer's of acknowledgements (checkers/polls.py), on planted
histories through the reference checker; tests/test_spark_checker.py holds the Spark checker to the same results
on these histories (POLL_CASES)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers.anomalies import Promises
from test_checker_reference import IDEMPOTENT, clean, final_read, nonzero, read, run_check, send

Lines = dict[str, list[Any]]


def live(offset: int, assignment: int | None, consumer: str = "c0", partition: int = 0,
         isolation: str | None = None) -> dict[str, Any]:
    """A live read of p0's message at ``offset`` (p0/offset) in one of ``consumer``'s assignments."""
    line = read("p0", offset, offset, phase="live", partition=partition, consumer=consumer)
    if assignment is not None:
        line["assignment"] = assignment
    if isolation is not None:
        line["isolation"] = isolation
    return line


def written(n: int, live_reads: list[dict[str, Any]]) -> Lines:
    """p0's n acknowledged messages at offsets 0..n-1, all in the final read, and these live reads."""
    h = clean(n)
    h["reads"] = live_reads + [r for r in h["reads"] if r["phase"] == "final"]
    return h


def with_a_hole(n: int, hole: int, live_reads: list[dict[str, Any]], *, committed_hole: bool = False) -> Lines:
    """Offsets 0..n-1 of a transactional run where ``hole`` holds p0/hole's aborted record: the read_uncommitted
    read-back has it, the read_committed one not (``committed_hole``: nor does the plain read-back: a marker)."""
    sends = [{**send("p0", i), "txn": 0 if i == hole else 1} for i in range(n)]
    finals = [{**read("p0", i, i), "isolation": "read_uncommitted"} for i in range(n)
              if not (committed_hole and i == hole)]
    finals += [{**read("p0", i, i, consumer="final-reader-committed"), "isolation": "read_committed"}
               for i in range(n) if i != hole]
    events = [{**final_read(high_watermark=n), "isolation": isolation} for isolation in
              ("read_uncommitted", "read_committed")]
    txns = [{"producer": "p0", "txn": 0, "outcome": "aborted", "intent": "abort"},
            {"producer": "p0", "txn": 1, "outcome": "committed", "intent": "commit"}]
    return {"sends": sends, "reads": live_reads + finals, "events": events, "txns": txns}


POLL_CASES: dict[str, Lines] = {
    # c0 read 0, 1 then 3 in one assignment: 2 holds a record it never got
    "skip_within_an_assignment": written(4, [live(0, 1), live(1, 1), live(3, 1)]),
    # the same jump with a rebalance between (assignment 2), or with no assignment recorded (an older history)
    "skip_across_a_rebalance": written(4, [live(0, 1), live(1, 1), live(3, 2)]),
    "skip_with_no_assignment_recorded": written(4, [live(0, None), live(1, None), live(3, None)]),
    # back to 1 after 2 in one assignment; then, after a rebalance, back to 0 (redelivery from the commit)
    "back_within_and_across": written(4, [live(0, 1), live(1, 1), live(2, 1), live(1, 1), live(2, 1),
                                          live(0, 3), live(1, 3)]),
    # read twice in a row is a step back too
    "the_same_offset_twice": written(2, [live(0, 1), live(0, 1), live(1, 1)]),
    # two consumers and two partitions are four sequences: no read follows another's
    "sequences_apart": {**written(4, [live(0, 1, "c0"), live(2, 1, "c1"), live(1, 1, "c0"), live(3, 1, "c1"),
                                      live(0, 1, "c0", partition=1)]),
                        "sends": [send("p0", i) for i in range(4)] + [send("p0", 0, partition=1, offset=0)]},
    # a jump over an offset holding no record (a transaction marker: in neither read-back) is no skip
    "jump_over_a_marker": with_a_hole(4, 2, [live(0, 1, isolation="read_committed"),
                                             live(1, 1, isolation="read_committed"),
                                             live(3, 1, isolation="read_committed")], committed_hole=True),
    # an aborted record: not there for a read_committed consumer, skipped by a read_uncommitted one
    "jump_over_an_aborted_record": with_a_hole(4, 2, [
        live(0, 1, isolation="read_committed"), live(1, 1, isolation="read_committed"),
        live(3, 1, isolation="read_committed"),
        live(0, 1, "c1", isolation="read_uncommitted"), live(1, 1, "c1", isolation="read_uncommitted"),
        live(3, 1, "c1", isolation="read_uncommitted")]),
    # a jump beyond what the final read holds: nothing visible to skip
    "jump_past_the_final_read": written(2, [live(0, 1), live(1, 1), live(5, 1)]),
    # p0's acks of partition 0 in the order they came: 0, 1, 5, then 3 and 4 below 5 (partition 1 apart)
    "acks_going_down": {"sends": [send("p0", 0), send("p0", 1), send("p0", 2, offset=5), send("p0", 3),
                                  send("p0", 4), send("p0", 5, partition=1, offset=0)],
                        "reads": [read("p0", i, o) for i, o in ((0, 0), (1, 1), (2, 5), (3, 3), (4, 4))]
                        + [read("p0", 5, 0, partition=1)],
                        "events": [final_read(high_watermark=6), final_read(1, high_watermark=1)]},
}


def check(tmp_path: Path, name: str, promises: Promises = IDEMPOTENT) -> dict[str, Any]:
    return run_check(tmp_path, promises, **POLL_CASES[name])


@pytest.mark.parametrize(("name", "found"), [
    ("skip_within_an_assignment", {"poll_skipped": 1}),
    ("skip_across_a_rebalance", {"poll_skipped_rebalance": 1}),
    ("skip_with_no_assignment_recorded", {"poll_skipped_rebalance": 1}),
    ("back_within_and_across", {"poll_nonmonotonic": 1, "poll_nonmonotonic_rebalance": 1}),
    ("the_same_offset_twice", {"poll_nonmonotonic": 1}),
    ("sequences_apart", {}),
    ("jump_over_a_marker", {}),
    ("jump_over_an_aborted_record", {"poll_skipped": 1}),
    ("jump_past_the_final_read", {}),
    ("acks_going_down", {"send_nonmonotonic": 2, "reordered": 2}),
])
def test_planted_sequences(tmp_path: Path, name: str, found: dict[str, int]) -> None:
    results = check(tmp_path, name)
    polls = {a: n for a, n in nonzero(results).items()
             if a.startswith("poll_") or a in ("send_nonmonotonic", "reordered")}
    assert polls == found
    violations = {"poll_skipped", "poll_nonmonotonic", "send_nonmonotonic", "reordered"}
    assert results["valid"] is not (found.keys() & violations)


def test_a_poll_example_names_the_consumer_and_shows_both_reads(tmp_path: Path) -> None:
    results = check(tmp_path, "jump_over_an_aborted_record")
    [example] = results["examples"]["poll_skipped"]
    assert {k: v for k, v in example.items() if k != "reads"} == {
        "consumer": "c1", "topic": "t", "partition": 0, "previous_offset": 1, "offset": 3}
    assert [(r["consumer"], r["offset"], r["isolation"]) for r in example["reads"]] == [
        ("c1", 1, "read_uncommitted"), ("c1", 3, "read_uncommitted")]


def test_a_nonmonotonic_send_example_is_the_message(tmp_path: Path) -> None:
    results = check(tmp_path, "acks_going_down")
    assert [(e["producer"], e["seq"], e["send"]["offset"]) for e in results["examples"]["send_nonmonotonic"]] == [
        ("p0", 3, 3), ("p0", 4, 4)]
