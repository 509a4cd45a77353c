"""The reference checker on hand-made transactional histories: one or more tests per transaction anomaly.

``CASES`` are whole histories (sends, reads, events, txns) that the Spark
checker's differential tests replay on both engines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers.anomalies import ANOMALIES, COUNTS, Promises, promises_from_scenario
from checkers.history import INTENT_UNKNOWN, read_history
from checkers.reference import check
from rundir.lines import HistoryError
from verdicts.expect import assess
from test_checker_reference import TOPIC, committed, final_read, make_run, read, send, write_jsonl

OUT = "t.out"
TXN = Promises(idempotent=True, ordered=True, hanging_after_ms=70_000)


def tsend(producer: str, seq: int, txn: int, status: str = "ok", partition: int = 0, offset: int | None = None,
          topic: str = TOPIC, source: tuple[str, int] | None = None) -> dict[str, Any]:
    line = {**send(producer, seq, status, partition, offset, topic), "txn": txn}
    if source is not None:
        line["from_producer"], line["from_seq"] = source
    return line


def cread(producer: str, seq: int, offset: int, phase: str = "final", partition: int = 0, topic: str = TOPIC,
          source: tuple[str, int] | None = None, consumer: str | None = None,
          group: str | None = None) -> dict[str, Any]:
    """A read_committed read (the committed read-back, or a live read_committed consumer)."""
    if consumer is None:
        consumer = "final-reader-committed" if phase == "final" else "c0"
    line = {**read(producer, seq, offset, phase, partition, group, consumer, topic), "isolation": "read_committed"}
    if source is not None:
        line["from_producer"], line["from_seq"] = source
    return line


def uread(producer: str, seq: int, offset: int, partition: int = 0, topic: str = TOPIC) -> dict[str, Any]:
    return {**read(producer, seq, offset, "final", partition, topic=topic), "isolation": "read_uncommitted"}


def final_reads(partitions: int = 1, high_watermark: int = 10, topic: str = TOPIC, complete: bool = True,
                committed_complete: bool = True, lso: int | None = None) -> list[dict[str, Any]]:
    """Both read-backs' final-read events for every partition."""
    events = []
    for p in range(partitions):
        events.append({**final_read(p, complete, high_watermark, topic), "isolation": "read_uncommitted"})
        events.append({**final_read(p, committed_complete, high_watermark, topic), "isolation": "read_committed",
                       "last_stable_offset": high_watermark if lso is None else lso})
    return events


def txn(producer: str, number: int, outcome: str, intent: str | None = "commit") -> dict[str, Any]:
    if outcome == "aborted" and intent == "commit":
        intent = "abort"
    return {"producer": producer, "txn": number, "outcome": outcome, "intent": intent, "error": None,
            "begin_ns": 0, "invoke_ns": None if intent is None else 1, "complete_ns": 2}


def run(tmp_path: Path, case: dict[str, Any], promises: Promises = TXN) -> dict[str, Any]:
    make_run(tmp_path, case["sends"], case["reads"], case["events"])
    if case.get("txns") is not None:
        write_jsonl(tmp_path / "history" / "txns.jsonl", case["txns"])
    return check(read_history(tmp_path / "history"), promises)


def nonzero(results: dict[str, Any]) -> dict[str, int]:
    return {a: results["counts"][a] for a in ANOMALIES if results["counts"][a]}


# --- the cases ----------------------------------------------------------------------------------------

def committed_and_aborted() -> dict[str, Any]:
    """txn 0 committed (seqs 0-1, both visible), txn 1 aborted (seqs 2-3: in the log, invisible): all as promised."""
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0), tsend("p0", 2, 1, offset=3), tsend("p0", 3, 1, offset=4)],
        "reads": [uread("p0", 0, 0), uread("p0", 1, 1), uread("p0", 2, 3), uread("p0", 3, 4),
                  cread("p0", 0, 0), cread("p0", 1, 1)],
        "events": final_reads(high_watermark=6),
        "txns": [txn("p0", 0, "committed"), txn("p0", 1, "aborted")],
    }


def aborted_read() -> dict[str, Any]:
    """An aborted transaction's message read by a live read_committed consumer and the committed read-back."""
    case = committed_and_aborted()
    case["reads"] += [cread("p0", 2, 3, phase="live", group="g"), cread("p0", 2, 3)]
    return case


def never_committed() -> dict[str, Any]:
    """The producer died with txn 0 open (intent null): reading it is an aborted read."""
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0, status="unknown")],
        "reads": [uread("p0", 0, 0), cread("p0", 0, 0)],
        "events": final_reads(high_watermark=2),
        "txns": [txn("p0", 0, "unknown", intent=None)],
    }


def group_skips_nothing_aborted() -> dict[str, Any]:
    """A read_committed group committed past an aborted transaction it was never handed: nothing skipped."""
    case = committed_and_aborted()
    case["reads"] += [cread("p0", 0, 0, phase="live", group="g"), cread("p0", 1, 1, phase="live", group="g")]
    case["events"] = case["events"] + [committed(6)]
    return case


def commit_timed_out() -> dict[str, Any]:
    """The commit was asked for and never answered: visible or not, nothing can be concluded."""
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0), tsend("p0", 2, 1, offset=3)],
        "reads": [uread("p0", 0, 0), uread("p0", 1, 1), cread("p0", 0, 0), cread("p0", 1, 1)],
        "events": final_reads(high_watermark=5),
        "txns": [txn("p0", 0, "unknown", intent="commit"), txn("p0", 1, "unknown", intent="commit")],
    }


def intent_absent_or_null() -> dict[str, Any]:
    """Two transactions of unknown outcome, both read by the committed read-back: txn 0's line has no intent field
    (written by another tool: it may have committed), txn 1's says null (the application never asked to commit)."""
    unknown = txn("p0", 0, "unknown")
    del unknown["intent"]
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0, offset=1), tsend("p0", 2, 1, offset=2)],
        "reads": [uread("p0", 0, 0), uread("p0", 1, 1), uread("p0", 2, 2),
                  cread("p0", 0, 0), cread("p0", 1, 1), cread("p0", 2, 2)],
        "events": final_reads(high_watermark=3),
        "txns": [unknown, txn("p0", 1, "unknown", intent=None)],
    }


def no_committed_read_back() -> dict[str, Any]:
    """The run stopped between the two read-backs: the read_uncommitted one finished, the read_committed one left
    no final-read event (nor reads), so it proved nothing about the committed messages of partition 0."""
    case = committed_and_aborted()
    case["reads"] = [r for r in case["reads"] if r.get("isolation") != "read_committed"]
    case["events"] = [e for e in case["events"] if e.get("isolation") != "read_committed"]
    return case


def lost_commit() -> dict[str, Any]:
    """A committed transaction whose messages are in the log but invisible to read_committed: lost (not torn)."""
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0, partition=1, offset=0)],
        "reads": [uread("p0", 0, 0), uread("p0", 1, 0, partition=1)],
        "events": final_reads(partitions=2, high_watermark=2),
        "txns": [txn("p0", 0, "committed")],
    }


def torn() -> dict[str, Any]:
    """A committed transaction over two partitions, visible in one only: torn, and the invisible half lost."""
    case = lost_commit()
    case["reads"].append(cread("p0", 0, 0))
    return case


def torn_aborted() -> dict[str, Any]:
    """An aborted transaction half visible: torn, and its visible message an aborted read."""
    return {
        "sends": [tsend("p0", 0, 0), tsend("p0", 1, 0, partition=1, offset=0)],
        "reads": [uread("p0", 0, 0), uread("p0", 1, 0, partition=1), cread("p0", 1, 0, partition=1)],
        "events": final_reads(partitions=2, high_watermark=2),
        "txns": [txn("p0", 0, "aborted")],
    }


def torn_unverifiable() -> dict[str, Any]:
    """The committed read-back of partition 1 did not finish: neither torn nor lost, but unverifiable."""
    case = torn()
    case["events"] = final_reads(partitions=1, high_watermark=2) + [
        {**final_read(1, True, 2), "isolation": "read_uncommitted"},
        {**final_read(1, False, 2), "isolation": "read_committed", "last_stable_offset": 0}]
    return case


def pipeline(outputs: list[tuple[int, int]], committed_offset: int = 3, output_complete: bool = True
             ) -> dict[str, Any]:
    """Plain producer p0 writes seqs 0-2 to the input topic; pipe0 writes outputs (input seq, output offset)."""
    sends = [send("p0", i) for i in range(3)]
    reads = [uread("p0", i, i) for i in range(3)] + [cread("p0", i, i) for i in range(3)]
    for out_seq, (in_seq, offset) in enumerate(outputs):
        sends.append(tsend("pipe0", out_seq, 0, topic=OUT, offset=offset, source=("p0", in_seq)))
        reads.append(cread("pipe0", out_seq, offset, topic=OUT, source=("p0", in_seq)))
    # the pipeline processed (read live, read_committed) every input below its committed offset, once
    reads += [cread("p0", i, i, phase="live", consumer="pipe0", group="pipe") for i in range(committed_offset)]
    events = (final_reads(high_watermark=3)
              + final_reads(high_watermark=len(outputs) + 1, topic=OUT, committed_complete=output_complete)
              + [{"kind": "pipeline", "group": "pipe", "input_topic": TOPIC, "output_topic": OUT},
                 committed(committed_offset, group="pipe")])
    return {"sends": sends, "reads": reads, "events": events, "txns": [txn("pipe0", 0, "committed")]}


def hanging(stuck_s: float) -> dict[str, Any]:
    """The last stable offset of partition 0 stays at 2 below a growing high watermark for ``stuck_s``."""
    case = committed_and_aborted()
    samples = [{"kind": "stable", "topic": TOPIC, "partition": 0, "high_watermark": 6 + i, "last_stable_offset": 2,
                "time_ns": int(i * 1e9)} for i in range(int(stuck_s) + 1)]
    samples.append({"kind": "stable", "topic": TOPIC, "partition": 0, "high_watermark": 9, "last_stable_offset": 9,
                    "time_ns": int((stuck_s + 1) * 1e9)})
    case["events"] = [{**e, "time_ns": int((stuck_s + 2) * 1e9)} for e in case["events"]] + samples
    return case


CASES = {
    "committed_and_aborted": committed_and_aborted,
    "aborted_read": aborted_read,
    "never_committed": never_committed,
    "commit_timed_out": commit_timed_out,
    "group_skips_nothing_aborted": group_skips_nothing_aborted,
    "lost_commit": lost_commit,
    "intent_absent_or_null": intent_absent_or_null,
    "no_committed_read_back": no_committed_read_back,
    "torn": torn,
    "torn_aborted": torn_aborted,
    "torn_unverifiable": torn_unverifiable,
    "pipeline_exactly_once": lambda: pipeline([(0, 0), (1, 1), (2, 2)]),
    "pipeline_lost": lambda: pipeline([(0, 0), (2, 1)]),
    "pipeline_duplicated": lambda: pipeline([(0, 0), (1, 1), (1, 2), (2, 3)]),
    "pipeline_unprocessed": lambda: pipeline([(0, 0)], committed_offset=1),
    "pipeline_unverifiable": lambda: pipeline([(0, 0), (2, 1)], output_complete=False),
    "hanging": lambda: hanging(80),
    "not_hanging": lambda: hanging(30),
}


# --- the tests -----------------------------------------------------------------------------------------


def test_committed_and_aborted_transactions_are_valid(tmp_path: Path) -> None:
    results = run(tmp_path, committed_and_aborted())
    assert results["valid"] is True, nonzero(results)
    assert nonzero(results) == {}
    counts = results["counts"]
    assert (counts["txns_committed"], counts["txns_aborted"], counts["txns_unknown"]) == (1, 1, 0)
    assert counts["acked"] == 4  # what the client said of each send; the aborted ones are not lost
    assert results["final_read_complete"] is True


def test_an_aborted_transaction_read_by_read_committed_readers_is_an_aborted_read(tmp_path: Path) -> None:
    results = run(tmp_path, aborted_read())
    assert nonzero(results) == {"aborted_read": 1, "torn_transaction": 1}  # seq 3 of that transaction is not seen
    assert results["valid"] is False
    [example] = results["examples"]["aborted_read"]
    assert (example["producer"], example["seq"], example["send"]["txn"]) == ("p0", 2, 1)
    assert {r["isolation"] for r in example["reads"]} >= {"read_committed"}


def test_a_transaction_its_producer_never_asked_to_commit_must_not_be_read(tmp_path: Path) -> None:
    results = run(tmp_path, never_committed())
    assert nonzero(results) == {"aborted_read": 1, "unknown": 1, "torn_transaction": 1}
    assert results["counts"]["txns_unknown"] == 1
    assert any("unknown outcome" in n for n in results["notes"])


def test_a_read_committed_group_is_not_said_to_skip_aborted_messages(tmp_path: Path) -> None:
    case = group_skips_nothing_aborted()
    assert nonzero(run(tmp_path, case)) == {}
    case["reads"] = [r for r in case["reads"] if not (r["phase"] == "live" and r["seq"] == 1)]
    assert nonzero(run(tmp_path / "skipped", case)) == {"consumer_skipped": 1}


def test_a_commit_that_timed_out_proves_nothing_either_way(tmp_path: Path) -> None:
    results = run(tmp_path, commit_timed_out())
    assert nonzero(results) == {}
    assert results["valid"] is True


def test_a_committed_transaction_invisible_to_read_committed_is_lost(tmp_path: Path) -> None:
    results = run(tmp_path, lost_commit())
    assert nonzero(results) == {"lost": 2}


def test_a_partly_visible_committed_transaction_is_torn_and_its_missing_half_lost(tmp_path: Path) -> None:
    results = run(tmp_path, torn())
    assert nonzero(results) == {"lost": 1, "torn_transaction": 1}
    assert results["examples"]["torn_transaction"] == [
        {"producer": "p0", "txn": 0, "outcome": "committed", "visible_count": 1, "missing_count": 1,
         "visible": [0], "missing": [1]}]


def test_a_partly_visible_aborted_transaction_is_torn(tmp_path: Path) -> None:
    results = run(tmp_path, torn_aborted())
    assert nonzero(results) == {"aborted_read": 1, "torn_transaction": 1}


def test_an_incomplete_committed_read_back_judges_neither_torn_nor_lost(tmp_path: Path) -> None:
    results = run(tmp_path, torn_unverifiable())
    assert nonzero(results) == {}
    assert results["counts"]["lost_unverifiable"] == 1
    assert results["final_read_complete"] is False
    assert results["incomplete_partitions"] == [[TOPIC, 1]]


def test_a_txns_line_without_intent_may_have_committed_and_a_null_one_never_did(tmp_path: Path) -> None:
    results = run(tmp_path, intent_absent_or_null())
    assert nonzero(results) == {"aborted_read": 1}  # txn 1's message only
    [example] = results["examples"]["aborted_read"]
    assert (example["producer"], example["seq"]) == ("p0", 2)
    history = read_history(tmp_path / "history")
    assert [t.intent for t in history.txns] == [INTENT_UNKNOWN, None]


def test_a_missing_read_committed_read_back_is_an_incomplete_one(tmp_path: Path) -> None:
    results = run(tmp_path, no_committed_read_back())
    assert nonzero(results) == {}
    assert results["counts"]["lost_unverifiable"] == 2  # txn 0's two committed messages
    assert results["final_read_complete"] is False
    assert results["incomplete_partitions"] == [[TOPIC, 0]]
    assert results["unread_committed_partitions"] == [[TOPIC, 0]]
    assessment = assess(None, results)
    assert (assessment.outcome, assessment.exit_code) == ("not judged", 2)
    [why] = assessment.not_judged
    assert "the read_committed read-back left no final-read event for 1 partition with transactional sends" in why
    assert "2 acknowledged messages not found there" in why


def test_an_explicitly_incomplete_read_committed_read_back_is_not_said_to_be_missing(tmp_path: Path) -> None:
    results = run(tmp_path, torn_unverifiable())
    assert results["unread_committed_partitions"] == []
    [why] = assess(None, results).not_judged
    assert "the final read of 1 partition did not reach the high watermark" in why and "no final-read" not in why


@pytest.mark.parametrize("name, found", [
    ("pipeline_exactly_once", {}),
    ("pipeline_lost", {"pipeline_lost": 1}),
    ("pipeline_duplicated", {"pipeline_duplicated": 1}),
    ("pipeline_unprocessed", {}),
    ("pipeline_unverifiable", {}),
])
def test_pipeline(tmp_path: Path, name: str, found: dict[str, int]) -> None:
    results = run(tmp_path, CASES[name]())
    assert nonzero(results) == found
    counts = results["counts"]
    assert counts["pipeline_unprocessed"] == (2 if name == "pipeline_unprocessed" else 0)
    assert counts["pipeline_unverifiable"] == (1 if name == "pipeline_unverifiable" else 0)


def test_a_duplicated_pipeline_output_shows_both_records(tmp_path: Path) -> None:
    [example] = run(tmp_path, CASES["pipeline_duplicated"]())["examples"]["pipeline_duplicated"]
    assert (example["producer"], example["seq"]) == ("p0", 1)
    assert [(o["producer"], o["seq"], o["offset"]) for o in example["outputs"]] == [("pipe0", 1, 1), ("pipe0", 2, 2)]


def test_a_last_stable_offset_stuck_past_the_transaction_timeout_is_a_hanging_transaction(tmp_path: Path) -> None:
    results = run(tmp_path, hanging(80))
    assert nonzero(results) == {"hanging_transaction": 1}
    [example] = results["examples"]["hanging_transaction"]
    assert example == {"topic": TOPIC, "partition": 0, "last_stable_offset": 2, "high_watermark": 86,
                       "from_ns": 0, "to_ns": 80_000_000_000, "stuck_ms": 80_000}
    assert nonzero(run(tmp_path / "short", hanging(30))) == {}


def test_the_hanging_threshold_is_the_transaction_timeout_plus_the_clean_up_interval() -> None:
    scenario = {"workload": {"producers": {"config": {}}, "transactions": {"timeout_ms": 10_000}},
                "cluster": {"broker_config": {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000}}}
    promises, note = promises_from_scenario(scenario)
    assert note is None and promises == Promises(idempotent=True, ordered=True, hanging_after_ms=12_000)
    promises, _ = promises_from_scenario({"workload": {"producers": {"config": {"transaction.timeout.ms": 5000}}}})
    assert promises.hanging_after_ms == 15_000 and promises.idempotent is False


def test_every_transaction_count_is_in_results() -> None:
    assert {"txns_committed", "txns_aborted", "txns_unknown", "pipeline_unprocessed",
            "pipeline_unverifiable"} <= set(COUNTS)


def test_a_broken_txns_line_is_one_line_naming_it(tmp_path: Path) -> None:
    case = committed_and_aborted()
    case["txns"] = [txn("p0", 0, "committed"), {"producer": "p0", "txn": 1, "outcome": "maybe"}]
    with pytest.raises(HistoryError, match=r"txns.jsonl line 2: field 'outcome' must be"):
        run(tmp_path, case)


def test_a_history_without_transaction_fields_checks_as_before(tmp_path: Path) -> None:
    make_run(tmp_path, [send("p0", 0), send("p0", 1)], [read("p0", 0, 0), read("p0", 1, 1)],
             [final_read(high_watermark=2)])
    results = check(read_history(tmp_path / "history"), TXN)
    assert nonzero(results) == {} and results["counts"]["txns_committed"] == 0


def test_the_report_explains_torn_and_hanging_transactions_and_duplicated_outputs(tmp_path: Path) -> None:
    from rundir.layout import RunDir
    from verdicts.expect import assess
    from verdicts.report import write_report

    case = torn()
    case["events"] = [{**e, "time_ns": 82_000_000_000} for e in case["events"]]  # the read-back comes last
    case["events"] += [e for e in hanging(80)["events"] if e["kind"] == "stable"]
    results = run(tmp_path, case)
    page = write_report(RunDir(tmp_path), results, None, assess(None, results)).read_text()
    assert "p0 transaction 0 (committed)" in page
    assert "visible to read_committed: 1 (seqs 0); missing: 1 (seqs 1)" in page
    assert "last stable offset 2 below high watermark 86 for 80.0 s" in page
    assert "(transaction 0)" in page and "final read_committed" not in page  # the lost one was never visible

    results = run(tmp_path / "pipe", CASES["pipeline_duplicated"]())
    page = write_report(RunDir(tmp_path / "pipe"), results, None, assess(None, results)).read_text()
    assert "its output records:" in page and "pipe0/1 from p0/1" in page and "pipe0/2 from p0/1" in page
