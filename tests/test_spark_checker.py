"""The Spark checker against the reference checker: the same results.json on every history.

Two kinds of evidence, both on one shared local SparkSession:

- the hand-made histories of tests/test_checker_reference.py (one per
  anomaly, plus the reader's edge cases), where Spark must give exactly the
  reference's results, or raise exactly its HistoryError;
- generated histories (hypothesis) with every anomaly planted, overlapping
  (a message duplicated and divergent, lost messages in partitions whose final
  read was incomplete, in-doubt sends found and not found, repeated send lines,
  foreign values, cut-short runs, missing files, a cut-off last line), where
  every count, ``valid``, every note and every example must agree.

Some cases also run with the files split into many tiny blocks, so that the
position keys, line numbers and "first reads in file order" are exercised
across Spark tasks (and across conversion blocks).

Spark reads the Parquet caches of the JSON lines by default; the reader's
edge cases, the tiny blocks and the generated histories also run with Spark
parsing the JSON lines itself (KCHAOS_SPARK_INPUT=json).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import reference
from checkers.anomalies import COUNTS, RANGE_ANOMALIES, RANGE_GAP_NS
from rundir.layout import NotJudged
from rundir.lines import HistoryError
from spark_analysis import checker as spark_checker, columnar
from spark_analysis.judge import sql_conf
from spark_analysis.session import spark_session
from test_anomaly_ranges import GROUPING_CASES, RANGES_HISTORY_EXPECTED, S, ranges_history, timed
from test_checker_reference import clean, committed, final_read, make_run, purged_but_present, read, send, write_jsonl
from test_checker_transactions import CASES as TXN_CASES, cread, final_reads, tsend, txn, uread
from test_polls import POLL_CASES
from test_shares import SHARE_CASES
from checkers.shares import SHARE_ANOMALIES

TOPIC = "t"
PROMISES = {
    "none": None,
    "ordered": "name: s\nworkload:\n  producers:\n    config:\n      max.in.flight.requests.per.connection: 1\n",
    "idempotent": "name: s\nworkload:\n  producers:\n    config:\n      enable.idempotence: true\n",
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", history_bytes=0)
    yield session
    session.stop()


@pytest.fixture
def tiny_blocks(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Split every file into blocks of a few lines, so that one file is read by many tasks (and converted
    in many blocks)."""
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 300)
    monkeypatch.setattr(columnar, "MARK_BYTES", 200)
    with sql_conf(spark, "spark.sql.files.maxPartitionBytes", "300"), \
            sql_conf(spark, "spark.sql.files.openCostInBytes", "1"):
        yield


@pytest.fixture(params=spark_checker.INPUT_FORMATS)
def both_formats(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Spark reads the Parquet caches, then the JSON lines themselves."""
    monkeypatch.setenv(spark_checker.INPUT_ENV, request.param)
    return request.param


def agree(spark: Any, run: Path) -> dict[str, Any]:
    """Both checkers on one run directory: the same results (or the same HistoryError); the results."""
    try:
        expected = reference.check_run(run)
    except HistoryError as e:
        with pytest.raises(HistoryError) as error:
            spark_checker.check_run(run, spark)
        assert str(error.value) == str(e)
        return {}
    got = spark_checker.check_run(run, spark)
    assert got.pop("checker") == "spark"
    assert expected.pop("checker") == "python"
    assert got["counts"] == expected["counts"]
    assert got["valid"] == expected["valid"]
    assert got["notes"] == expected["notes"]
    for anomaly, examples in expected["examples"].items():
        assert got["examples"][anomaly] == examples, anomaly
    assert json.dumps(got["anomaly_ranges"]) == json.dumps(expected["anomaly_ranges"])  # byte for byte
    assert got == expected
    return got


def run_dir(tmp_path: Path, scenario: str | None = None, **history: Any) -> Path:
    return make_run(tmp_path, scenario=scenario, **history)


# --- the reference's hand-made histories -------------------------------------------------------------


def _with(base: dict[str, list], sends: list | None = None, reads: list | None = None,
          events: list | None = None) -> dict[str, list]:
    h = {k: list(v) for k, v in base.items()}
    h["sends"] += sends or []
    h["reads"] += reads or []
    if events is not None:
        h["events"] = events
    return h


def _skipped() -> dict[str, list]:
    h = clean(5)
    h["reads"] = [r for r in h["reads"] if not (r["phase"] == "live" and r["seq"] in (1, 4))]
    h["events"] = [final_read(high_watermark=5), committed(4)]
    return h


def _skipped_duplicate() -> dict[str, list]:
    """A duplicate in one partition (settled by the fast aggregates): skipped below commits between or above
    its offsets."""
    h = clean(5)
    h["reads"] = [r for r in h["reads"] if not (r["phase"] == "live" and r["seq"] == 1)] + [read("p0", 1, 6)]
    h["events"] = [final_read(high_watermark=7), committed(3), committed(2, group="h")]
    return h


CASES: dict[str, dict[str, list]] = {
    "clean": clean(),
    "lost": _with(clean(), sends=[send("p0", 3)]),
    "lost_after_read": _with(clean(), sends=[send("p0", 3)], reads=[read("p0", 3, 3, phase="live")]),
    "duplicated": _with(clean(), reads=[read("p0", 1, 7), read("p0", 1, 7), read("p0", 2, 8)]),
    "skipped_duplicate_in_one_partition": _skipped_duplicate(),
    "duplicate_across_partitions": _with(clean(), reads=[read("p0", 1, 0, partition=1)],
                                         events=[final_read(high_watermark=3), final_read(1, high_watermark=1),
                                                 committed(3), committed(1, group="h", partition=1)]),
    "same_position_twice": _with(clean(), reads=[read("p0", 1, 1)]),
    "unexpected": _with(clean(), reads=[read("ghost", 0, 5, phase="live"), read("ghost", 0, 5),
                                        read("ghost", 1, 6), read(None, None, 9)]),
    "purged_but_present": purged_but_present(),
    "failed_but_present": _with(clean(), sends=[send("p0", 3, status="fail"), send("p0", 4, status="fail")],
                                reads=[read("p0", 3, 3)]),
    "divergent": _with(clean(), sends=[send("p1", 0, offset=1)],
                       reads=[read("p1", 0, 1), read("p0", 2, 2, phase="live", group="h"),
                              read("p1", 9, 2, phase="live", group="h")]),
    "divergent_ack_alone": _with(clean(), sends=[send("p1", 0, offset=2)]),
    "reordered": {
        "sends": [send("p0", 0, offset=0), send("p0", 1, offset=2), send("p0", 2, offset=1),
                  send("p1", 0, offset=3), send("p0", 3, partition=1, offset=0)],
        "reads": [read("p0", 0, 0), read("p0", 2, 1), read("p0", 1, 2), read("p1", 0, 3),
                  read("p0", 3, 0, partition=1)],
        "events": [final_read(0, high_watermark=4), final_read(1, high_watermark=1)],
    },
    "consumer_skipped": _skipped(),
    "committed_elsewhere": _with(clean(), events=[final_read(high_watermark=3), committed(3, group="other"),
                                                  committed(3, group="other", partition=5)]),
    "redelivered": _with(clean(), reads=[read("p0", 0, 0, phase="live", consumer="c1"),
                                         read("p0", 0, 0, phase="live", consumer="c1"),
                                         read("p0", 1, 1, phase="live", group="other")]),
    "unknown": _with(clean(), sends=[send("p0", 3, status="unknown", partition=None),
                                     send("p0", 4, status="unknown", partition=None),
                                     send("p0", 5, status="unknown", partition=0)], reads=[read("p0", 4, 3)]),
    "twenty_smallest": {"sends": [send("p0", i) for i in range(30)], "reads": [read("p0", 0, 0)],
                        "events": [final_read(high_watermark=30)]},
    "ten_reads": _with(clean(1), reads=[read("p0", 0, 0, phase="live", consumer=f"c{i}") for i in range(1, 15)]),
    "incomplete_partition": {
        "sends": [send("p0", 0), send("p0", 1), send("p1", 0, partition=1, offset=0),
                  send("p1", 1, partition=1, offset=1)],
        "reads": [read("p0", 0, 0), read("p1", 0, 0, partition=1)],
        "events": [final_read(0, complete=False, high_watermark=2), final_read(1, high_watermark=2)],
    },
    "repeated_sends": _with(clean(), sends=[send("p0", 1, status="unknown", partition=None),
                                            send("p0", 3, status="fail"), send("p0", 3)]),
    # only the winning (last) line names the partition: partition 3, named by the first line alone, is not
    # listed as incomplete
    "repeated_send_names_another_partition": _with(clean(), sends=[send("p0", 5, partition=3, offset=0),
                                                                   send("p0", 5, offset=5), send("p0", 6)],
                                                   reads=[read("p0", 5, 5), read("p0", 6, 6)],
                                                   events=[final_read(high_watermark=7), committed(3),
                                                           final_read(1, complete=False)]),
    # an acknowledgement is never downgraded: ok then unknown (lost), ok then fail (present, not failed_but_present)
    "ack_then_unknown_or_fail": _with(clean(), sends=[send("p0", 3), send("p0", 3, status="unknown"),
                                                   send("p0", 2, status="fail")]),
    # two messages acknowledged at one offset nobody read (and one acknowledged twice there)
    "two_acks_at_an_unread_offset": _with(clean(), sends=[send("p0", 3, offset=7), send("p1", 0, offset=7),
                                                          send("p1", 1, offset=8), send("p1", 1, offset=8)],
                                          events=[final_read(high_watermark=3, complete=False), committed(3)]),
    "no_final_read_event": _with(clean(), sends=[send("p0", 3, partition=2)]),
    "later_complete_wins": _with(clean(), events=[final_read(complete=False), final_read(complete=True)]),
    "cut_short": {"sends": clean()["sends"], "reads": [read("p0", 0, 0, phase="live")],
                  "events": [{"kind": "fault", "fault": "kill", "targets": ["kafka-1"], "start_ns": 5}]},
    "ack_without_partition": _with(clean(), sends=[{**send("p0", 3), "partition": None},
                                                   {**send("p0", 4), "partition": None}],
                                   reads=[read("p0", 3, 0, partition=1)],
                                   events=[final_read(high_watermark=3), committed(3),
                                           final_read(1, high_watermark=1)]),
    "live_without_group": _with(clean(), sends=[send("p0", 3)],
                                reads=[{**read("p0", 3, 3, phase="live"), "group": None}] * 2),
    # the judge groups on one long packed from the ranges of pid, seq, partition and offset: near the limit of
    # a long (a lost, a duplicated and a divergent message among them), and past it (grouped on the columns)
    "numbers_packed_near_the_limit": {
        "sends": [send("p0", 0), send("p0", 2 ** 61, offset=2 ** 61), send("p1", 2 ** 61 - 1, offset=5),
                  send("p1", 7, offset=6)],
        "reads": [read("p0", 0, 0), read("p0", 2 ** 61, 2 ** 61), read("p0", 2 ** 61, 3),
                  read("p1", 2 ** 61 - 1, 5), read("p0", 0, 5, phase="live"), read(None, None, 2 ** 61 - 1)],
        "events": [final_read(high_watermark=2 ** 61 + 1), committed(2 ** 61)],
    },
    "numbers_too_far_apart_to_pack": {
        "sends": [send("p0", -2 ** 62, offset=-2 ** 62), send("p0", 2 ** 62, offset=2 ** 62), send("p0", 0, offset=1)],
        "reads": [read("p0", -2 ** 62, -2 ** 62), read("p0", 2 ** 62, 2 ** 62), read("p0", 2 ** 62, 0)],
        "events": [final_read(high_watermark=2 ** 62 + 1), committed(2 ** 62)],
    },
    "anomaly_ranges": ranges_history(),
    "unknown_fields_and_blank_lines": {**clean(), "sends": [{**send("p0", 0), "extra": {"nested": [1]}},
                                                            *clean()["sends"][1:]],
                                       "reads": clean()["reads"][:2] + ["   ", ""] + clean()["reads"][2:]},
}


# cases that say something of the whole run or of every number in it (a fault window, no final-read event at all,
# raw lines, how far apart the numbers are): checked alone; the others are checked as one history per promise
ALONE = ("cut_short", "no_final_read_event", "unknown_fields_and_blank_lines", "numbers_packed_near_the_limit",
         "numbers_too_far_apart_to_pack")
CASE_PROMISES = {"reordered": "ordered", "clean": "none", "duplicated": "none"}   # the others: idempotent


@pytest.mark.parametrize("promise", ["ordered", "none", "idempotent"])
def test_hand_made_histories_agree(spark: Any, tmp_path: Path, promise: str) -> None:
    """The reference's hand-made histories judged under one promise, each on names of its own, as one history:
    the two documents agree key for key (each case's own judgement is test_checker_reference.py's)."""
    names = [n for n in sorted(CASES) if n not in ALONE and CASE_PROMISES.get(n, "idempotent") == promise]
    agree(spark, run_dir(tmp_path, PROMISES[promise], **as_one([CASES[n] for n in names])))


def test_cases_checked_as_one_are_judged_as_each_alone(tmp_path: Path) -> None:
    """What makes checking the cases as one history worth as much as checking each: the reference's counts of
    the combined history are the sums of each case's own."""
    groups = [(PROMISES[p], [CASES[n] for n in sorted(CASES) if n not in ALONE and CASE_PROMISES.get(n, "idempotent")
                             == p]) for p in ("ordered", "none", "idempotent")]
    groups.append((PROMISES["idempotent"], [TXN_CASES[name]() for name in sorted(TXN_CASES)]))
    for g, (scenario, cases) in enumerate(groups):
        alone: Counter[str] = Counter()
        for i, case in enumerate(cases):
            alone.update(reference.check_run(txn_run(tmp_path / f"{g}-{i}", case, scenario))["counts"])
        together = reference.check_run(txn_run(tmp_path / f"{g}", as_one(cases), scenario))["counts"]
        assert {k: v for k, v in together.items() if v} == {k: v for k, v in alone.items() if v}


@pytest.mark.parametrize("name", ALONE)
def test_hand_made_histories_of_the_whole_run_agree(spark: Any, tmp_path: Path, name: str) -> None:
    agree(spark, run_dir(tmp_path, PROMISES["idempotent"], **CASES[name]))


RENAMED = ("topic", "producer", "from_producer", "group", "input_topic", "output_topic")


def apart(i: int, lines: list[Any]) -> list[Any]:
    """A case's lines on topics, producers and groups of its own (the i-th), so that several cases make one
    history; a raw line (a blank one) stays as it is."""
    return [{**line, **{k: f"{line[k]}.{i}" for k in RENAMED if line.get(k)}} if isinstance(line, dict) else line
            for line in lines]


def as_one(cases: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    """Several cases' histories as one, each apart."""
    kinds = sorted({kind for case in cases for kind in case})
    return {kind: [line for i, case in enumerate(cases) for line in apart(i, case.get(kind, []))] for kind in kinds}


def test_consumer_and_producer_sequences_agree(spark: Any, tmp_path: Path) -> None:
    """test_polls.py's planted histories, each on topics and producers of its own, checked as one history."""
    history = as_one([POLL_CASES[name] for name in sorted(POLL_CASES)])
    results = agree(spark, run_dir(tmp_path, PROMISES["idempotent"], **history))
    assert all(results["counts"][a] for a in ("poll_skipped", "poll_nonmonotonic", "poll_skipped_rebalance",
                                              "poll_nonmonotonic_rebalance", "send_nonmonotonic"))


def test_share_groups_agree(spark: Any, tmp_path: Path) -> None:
    """test_shares.py's planted histories, each on topics and producers of its own, checked as one history."""
    history = as_one([SHARE_CASES[name] for name in sorted(SHARE_CASES)])
    results = agree(spark, run_dir(tmp_path, PROMISES["idempotent"], **history))
    assert all(results["counts"][a] for a in SHARE_ANOMALIES)


def test_agree_when_files_are_read_by_many_tasks(spark: Any, both_formats: str, tiny_blocks: None,
                                                 tmp_path: Path) -> None:
    cases = [CASES[name] for name in ("divergent", "ten_reads", "twenty_smallest", "repeated_sends", "unexpected")]
    agree(spark, run_dir(tmp_path, PROMISES["ordered"], **as_one(cases)))


def txn_run(tmp_path: Path, case: dict[str, Any], scenario: str | None = PROMISES["idempotent"]) -> Path:
    """A run directory of a transactional history (tests/test_checker_transactions.py's shape: txns too)."""
    return make_run(tmp_path, case["sends"], case["reads"], case["events"], scenario=scenario, txns=case.get("txns"),
                    shares=case.get("shares"))


def test_transactional_histories_agree(spark: Any, both_formats: str, tmp_path: Path) -> None:
    """tests/test_checker_transactions.py's histories, each on names of its own, as one history."""
    history = as_one([TXN_CASES[name]() for name in sorted(TXN_CASES)])
    results = agree(spark, txn_run(tmp_path, history))
    assert all(results["counts"][a] for a in ("aborted_read", "torn_transaction", "hanging_transaction",
                                              "pipeline_duplicated", "pipeline_lost"))


@pytest.mark.parametrize("name", ["aborted_read", "torn", "group_skips_nothing_aborted", "pipeline_duplicated"])
def test_transactional_histories_agree_judged_the_exact_way(spark: Any, tmp_path: Path, name: str) -> None:
    """More consumer groups than a bit mask holds: every message through exact_messages."""
    case = TXN_CASES[name]()
    case["events"] = case["events"] + [committed(1, group=f"x{i:02}") for i in range(70)]
    agree(spark, txn_run(tmp_path, case))


@pytest.mark.parametrize("name", ["aborted_read", "torn", "group_skips_nothing_aborted", "pipeline_duplicated"])
def test_transactional_messages_read_in_two_partitions_agree(spark: Any, tmp_path: Path, name: str) -> None:
    """Final reads of p0/0 in two partitions (committed and not): ambiguous to the fast table, judged again."""
    case = TXN_CASES[name]()
    case["reads"] = case["reads"] + [uread("p0", 0, 7, partition=1), cread("p0", 0, 7, partition=1),
                                     cread("p0", 1, 8, partition=1)]
    case["events"] = case["events"] + [committed(9, partition=1)]
    agree(spark, txn_run(tmp_path, case))


def test_results_carry_the_engine_name(spark: Any, tmp_path: Path) -> None:
    results = spark_checker.check_run(run_dir(tmp_path, **CASES["lost"]), spark)
    assert results["checker"] == "spark"
    assert results["counts"]["lost"] == 1 and results["valid"] is False


# --- the reader's edge cases ------------------------------------------------------------------------


def test_missing_reads_and_events(spark: Any, both_formats: str, tmp_path: Path) -> None:
    with pytest.raises(NotJudged, match=r"^not judged: history/reads\.jsonl is missing"):
        spark_checker.check_run(make_run(tmp_path, sends=[send("p0", 0)]), spark)
    run = make_run(tmp_path / "no-events", sends=[send("p0", 0)], reads=[read("p0", 0, 0, phase="live")])
    assert agree(spark, run)["cut_short"] is True


def test_an_ack_is_never_downgraded_and_two_acks_at_one_offset_diverge(spark: Any, tmp_path: Path) -> None:
    downgraded = spark_checker.check_run(run_dir(tmp_path / "a", **CASES["ack_then_unknown_or_fail"]), spark)
    c = downgraded["counts"]
    assert (c["lost"], c["failed_but_present"], c["unknown"], c["acked"]) == (1, 0, 0, 4)
    two_acks = spark_checker.check_run(run_dir(tmp_path / "b", **CASES["two_acks_at_an_unread_offset"]), spark)
    assert two_acks["counts"]["divergent"] == 1
    [example] = two_acks["examples"]["divergent"]
    assert (example["offset"], example["send"]["producer"], example["reads"]) == (7, "p0", [])


@pytest.mark.parametrize("odd", [False, True])
def test_an_old_info_status_is_read_as_unknown(spark: Any, both_formats: str, tmp_path: Path, odd: bool) -> None:
    """A history written before the status was renamed says ``info`` where it now says ``unknown``: Spark codes it
    as unknown (encode.STATUS_CODES) on Arrow's and Spark's quick paths and on the lines the reference's reader
    parses for them (an odd line sends a whole block to the rules, and is fetched by the driver), and judges it as
    the reference does, and as it judges ``unknown``."""
    sends: list[Any] = [send("p0", 3, status="info", partition=None), send("p0", 4, status="info", partition=None),
                        send("p0", 5, status="info"), send("p0", 1, status="info")]
    if odd:
        sends.append('{"producer": "a}{b", "seq": 7, "topic": "t", "partition": null, "status": "info"}\r')
    h = _with(clean(), sends=sends, reads=[read("p0", 4, 3)])
    got = agree(spark, run_dir(tmp_path / "old", PROMISES["idempotent"], **h))
    renamed = [s.replace('"info"', '"unknown"') if isinstance(s, str) else {**s, "status": "unknown"}
               if s["status"] == "info" else s for s in h["sends"]]
    new = reference.check_run(run_dir(tmp_path / "new", PROMISES["idempotent"], **{**h, "sends": renamed}))
    assert got["counts"] == new["counts"] and got["counts"]["unknown"] == (4 if odd else 3)


def test_truncated_last_line_is_dropped(spark: Any, both_formats: str, tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3), '{"producer": "p0", "seq": 4, "top']
    h["reads"] += ['{"consumer": "c0", "gr']
    results = agree(spark, make_run(tmp_path, **h))
    assert "history/sends.jsonl: dropped an incomplete last line (line 5)" in results["notes"]


def test_truncated_last_line_followed_by_blank_lines(spark: Any, both_formats: str, tmp_path: Path,
                                                     tiny_blocks: None) -> None:
    h = clean()
    h["events"] += ['{"kind": "final-re', "", "  \f"]
    agree(spark, make_run(tmp_path, **h))


def test_truncated_inside_a_multibyte_character(spark: Any, both_formats: str, tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    with (run / "history" / "reads.jsonl").open("ab") as f:
        f.write('{"consumer": "c\u00e9'.encode()[:-1])
    results = agree(spark, run)
    assert "history/reads.jsonl: dropped an incomplete last line (line 7)" in results["notes"]


@pytest.mark.parametrize("file", ["sends", "reads", "events"])
@pytest.mark.parametrize("line", [
    '{"producer": "p0", "seq": ',  # cut short, but not the last line
    '{"a": 1}{"b": 2}',  # two objects glued together
    '{"a": 1} trailing',
    "[1, 2]",
    '"text"',
    "{'single': 'quotes'}",
    '\ufeff{"a": 1}',
])
def test_malformed_line_in_the_middle_is_the_same_error(spark: Any, both_formats: str, tmp_path: Path, file: str,
                                                        line: str) -> None:
    h = clean()
    h[file].insert(1, line)
    agree(spark, make_run(tmp_path, **h))


def test_invalid_utf8_in_the_middle_is_the_same_error(spark: Any, both_formats: str, tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    path = run / "history" / "sends.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(1, b'{"producer": "p\xff", "seq": 9, "topic": "t", "partition": 0, "status": "fail"}')
    path.write_bytes(b"\n".join(lines))
    agree(spark, run)


@pytest.mark.parametrize(("file", "line"), [
    ("sends", {"producer": "p0", "topic": TOPIC, "status": "ok", "partition": 0}),
    ("sends", {"producer": "p0", "seq": "1", "topic": TOPIC, "status": "ok", "partition": 0}),
    ("sends", {"producer": "p0", "seq": True, "topic": TOPIC, "status": "ok", "partition": 0}),
    ("sends", {"producer": "p0", "seq": 1.5, "topic": TOPIC, "status": "ok", "partition": 0}),
    ("sends", {"producer": 5, "seq": 1, "topic": TOPIC, "status": "ok", "partition": 0}),
    ("sends", {"producer": "p0", "seq": 1, "topic": TOPIC, "status": "done", "partition": 0}),
    ("sends", {"producer": "p0", "seq": 1, "topic": TOPIC, "status": "ok"}),
    ("sends", {"producer": "p0", "seq": 1, "topic": TOPIC, "status": "ok", "partition": "0"}),
    ("reads", {**read("p0", 0, 0), "phase": "later"}),
    ("reads", {**read("p0", 0, 0), "partition": None}),
    ("reads", {**read("p0", 0, 0), "seq": None}),
    ("reads", {k: v for k, v in read("p0", 0, 0).items() if k != "producer"}),
    ("reads", {**read("p0", 0, 0), "consumer": ["c"]}),
    ("reads", {**read("p0", 0, 0), "group": 7}),
    ("events", {"topic": TOPIC}),
    ("events", {"kind": 3}),
    ("events", {**final_read(), "complete": "yes"}),
    ("events", {**final_read(), "high_watermark": "9"}),
    ("events", {k: v for k, v in committed(3).items() if k != "offset"}),
    ("events", [1, 2]),
    ("sends", {**send("p0", 1), "complete_ns": "5"}),
    ("sends", {**send("p0", 1), "complete_ns": 5.5}),
    ("sends", {**send("p0", 1), "complete_ns": True}),
    ("sends", {**send("p0", 1), "txn": "3"}),
    ("sends", {**send("p0", 1), "txn": True}),
    ("sends", {**send("p0", 1), "from_producer": "p9"}),
    ("sends", {**send("p0", 1), "from_producer": 5, "from_seq": 1}),
    ("reads", {**read("p0", 0, 0), "isolation": None}),
    ("reads", {**read("p0", 0, 0), "isolation": "serializable"}),
    ("reads", {**read("p0", 0, 0), "isolation": 1}),
    ("reads", {**read("p0", 0, 0), "from_seq": 3}),
    ("reads", {**read("p0", 0, 0), "from_producer": "p1", "from_seq": "3"}),
    ("events", {**final_read(), "isolation": "read_committed", "last_stable_offset": "9"}),
    ("events", {**final_read(), "isolation": None}),
    ("events", {"kind": "stable", "topic": TOPIC, "partition": 0, "high_watermark": 3}),
    ("events", {"kind": "pipeline", "group": "pg", "input_topic": TOPIC}),
])
def test_bad_field_is_the_same_error(spark: Any, both_formats: str, tmp_path: Path, file: str, line: Any) -> None:
    h = clean(2)
    h[file] = h[file][:1] + [line] + h[file][1:]
    agree(spark, make_run(tmp_path, **h))


TXN_LINE = {"producer": "p0", "txn": 0, "outcome": "committed", "intent": "commit", "error": None}


@pytest.mark.parametrize("line", [
    {k: v for k, v in TXN_LINE.items() if k != "txn"},
    {**TXN_LINE, "txn": 1.5},
    {**TXN_LINE, "producer": None},
    {**TXN_LINE, "outcome": "maybe"},
    {**TXN_LINE, "outcome": None},
    {**TXN_LINE, "intent": "retry"},
    {**TXN_LINE, "intent": 0},
    '{"producer": "p0", "txn": ',
    "[1, 2]",
])
def test_bad_txns_line_is_the_same_error(spark: Any, both_formats: str, tmp_path: Path, line: Any) -> None:
    case = TXN_CASES["committed_and_aborted"]()
    case["txns"].insert(1, line)
    agree(spark, txn_run(tmp_path, case))


@pytest.mark.parametrize("line", [
    {**TXN_LINE, "txn": 1, "intent": None},
    {k: v for k, v in {**TXN_LINE, "txn": 1, "outcome": "unknown"}.items() if k != "intent"},
    '{"producer": "p\\u0030", "txn": 1, "outcome": "aborted", "intent": "abort", "txn": 1}',
    "   ",
    '{"producer": "p0", "txn": 5, "outco',  # cut off: the last line
])
def test_unusual_txns_lines(spark: Any, both_formats: str, tmp_path: Path, line: Any) -> None:
    case = TXN_CASES["committed_and_aborted"]()
    case["txns"] = [line] + case["txns"] if not isinstance(line, str) or not line.endswith("outco") else \
        case["txns"] + [line]
    agree(spark, txn_run(tmp_path, case))


@pytest.mark.parametrize("line", [
    '{"consumer": "c0", "group": "g", "phase": "live", "topic": "t", "partition": 0, "offset": 0, "producer": "p0", '
    '"seq": 0, "isol\\u0061tion": null}',  # a null isolation, its key spelt with an escape: refused
    '{"consumer": "c0", "group": "g", "phase": "live", "topic": "t", "partition": 0, "offset": 0, "producer": "p0", '
    '"seq": 0, "isol\\u0061tion": "read_committed"}',
    '{"consumer": "c0", "group": "g", "phase": "live", "topic": "t", "partition": 0, "offset": 0, "producer": "p0", '
    '"seq": 0, "isolation": "read_committed", "isolation": null}',
    '{"consumer": "c0", "group": "g", "phase": "live", "topic": "t", "partition": 0, "offset": 0, "producer": "p0", '
    '"seq": 0, "from_producer": null, "from_seq": null, "isolation": "read_uncommitted"}',
])
def test_isolation_and_source_fields_as_the_reference_reads_them(spark: Any, both_formats: str, tmp_path: Path,
                                                                 line: str) -> None:
    h = clean()
    h["reads"].insert(1, line)
    agree(spark, make_run(tmp_path, **h))


@pytest.mark.parametrize("line", [
    '{"producer": "p0", "seq": 7, "seq": 8, "topic": "t", "partition": 0, "offset": 8, "status": "ok"}',
    '{"producer": "a}{b", "seq": 7, "topic": "t", "partition": 0, "offset": 7, "status": "ok"}',
    '{"producer": "p0", "seq": 7, "topic": "t", "partition": 0, "offset": 7, "status": "ok"}\r',
    "\f",
    {**send("p0", 7), "fault": "kill", "note": "odd } {"},
    {**send("p0", 7), "nested": {"producer": 5, "partition": "x"}},
    {**send("p0", 7), "complete_ns": None},
    {k: v for k, v in send("p0", 7).items() if k != "complete_ns"},
])
def test_unusual_but_valid_lines_are_accepted(spark: Any, both_formats: str, tmp_path: Path, line: Any) -> None:
    h = clean()
    h["sends"].insert(1, line)
    agree(spark, make_run(tmp_path, **h))


def test_unusual_lines_are_accepted_when_a_key_is_repeated_with_a_bad_type(spark: Any, both_formats: str,
                                                                           tmp_path: Path) -> None:
    h = clean()
    h["sends"].insert(1, '{"producer": "p0", "seq": "x", "seq": 7, "topic": "t", "partition": 0, "offset": 7, '
                         '"status": "ok"}')
    agree(spark, make_run(tmp_path, **h))


def test_integers_beyond_64_bits_stop_the_spark_checker(spark: Any, both_formats: str, tmp_path: Path) -> None:
    """Python's integers have no limit, Spark's columns do: the one line the two readers knowingly disagree on."""
    h = clean()
    h["sends"].insert(1, {**send("p0", 9), "seq": 2 ** 70})
    run = make_run(tmp_path, **h)
    assert reference.check_run(run)["counts"]["sent"] == 4
    with pytest.raises(HistoryError, match=r"^history/sends\.jsonl line 2: field 'seq' does not fit in 64 bits"):
        spark_checker.check_run(run, spark)


def test_the_parquet_cache_follows_the_jsonl(spark: Any, tmp_path: Path) -> None:
    run = run_dir(tmp_path, PROMISES["idempotent"], **clean())
    assert agree(spark, run)["counts"]["lost"] == 0
    assert (run / "history" / "sends.parquet").is_file() and (run / "history" / "reads.parquet").is_file()
    with (run / "history" / "sends.jsonl").open("a") as f:  # one more ack, then the harness dies mid-line
        f.write(json.dumps(send("p0", 3)) + "\n" + '{"producer": "p0", "se')
    second = agree(spark, run)
    assert second["counts"]["lost"] == 1
    assert "history/sends.jsonl: dropped an incomplete last line (line 5)" in second["notes"]
    written = (run / "history" / "sends.parquet").stat().st_mtime_ns
    assert agree(spark, run) == second  # from the cache as it is: the note too
    assert (run / "history" / "sends.parquet").stat().st_mtime_ns == written


def test_missing_history(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history directory"):
        spark_checker.check_run(tmp_path, spark)
    (tmp_path / "history").mkdir()
    with pytest.raises(NotJudged, match=r"^not judged: history/sends\.jsonl is missing \(no send was recorded\)$"):
        spark_checker.check_run(tmp_path, spark)


def test_empty_files(spark: Any, both_formats: str, tmp_path: Path) -> None:
    agree(spark, make_run(tmp_path, sends=[], reads=[], events=[]))


def test_broken_scenario_is_the_same_error(spark: Any, tmp_path: Path) -> None:
    agree(spark, make_run(tmp_path, **clean(), scenario="workload: [unclosed\n"))


# --- generated histories ----------------------------------------------------------------------------

PRODUCERS = ["p0", "p1", "pé"]
# how far a send's complete_ns is after the one before: the same time, just inside and just past an island's gap
STEPS = [0, 1, S // 3, RANGE_GAP_NS, RANGE_GAP_NS + 1, 4 * S]
GROUPS = ["g", "h", None]


OUTCOMES = [("committed", "commit")] * 3 + [("aborted", "abort"), ("unknown", "commit"), ("unknown", None),
                                             (None, None)]  # (None, None): no txns line at all
ISOLATIONS = [None, "read_uncommitted", "read_committed"]


@st.composite
def histories(draw: st.DrawFn) -> dict[str, Any]:
    """A history with planted anomalies of every kind, overlapping.

    Messages are acked at increasing offsets per partition, then disturbed:
    some acks are lost from the final read (in complete and incomplete
    partitions), read twice at two positions (duplicated), overwritten by
    another message (divergent, possibly also duplicated), acked out of seq
    order (reordered), failed yet present, in doubt and found or not, read by
    consumer groups too often or not at all below the commit; reads of
    messages never sent and of foreign values, repeated send lines, missing
    final-read events, a cut-short run, missing files and a cut-off last line.
    Sends complete at times close together or far apart (or unknown), so
    that anomaly_ranges finds islands.

    Half of them are transactional: some producers send in transactions of
    any outcome (or none recorded, or recorded twice), a read_committed
    read-back sees most committed messages and a few of the others (lost,
    torn, aborted_read), live readers read committed or not, both read-backs
    have final-read events (complete or not), the last stable offset is
    sampled (hanging or not), and a pipeline may turn input messages into
    output records (lost, duplicated, unprocessed, unverifiable).
    """
    topics = draw(st.sampled_from([["t"], ["t", "u"]]))
    parts = [(t, p) for t in topics for p in range(draw(st.integers(1, 3)))]
    transactional = draw(st.booleans())
    next_offset = {part: 0 for part in parts}
    clock = 0
    sends: list[Any] = []
    reads: list[Any] = []
    finals: list[dict[str, Any]] = []
    outcomes: dict[tuple[str, int], tuple[str | None, str | None]] = {}
    for producer in draw(st.lists(st.sampled_from(PRODUCERS), min_size=1, max_size=3, unique=True)):
        in_txns = transactional and draw(st.booleans())
        txn = 0
        for seq in range(draw(st.integers(0, 10))):
            if in_txns and seq and draw(st.integers(0, 2)) == 0:
                txn += 1
            outcome = outcomes.setdefault((producer, txn), draw(st.sampled_from(OUTCOMES))) if in_txns else None
            topic, partition = draw(st.sampled_from(parts))
            status = draw(st.sampled_from(["ok"] * 6 + ["fail", "unknown"]))
            offset = next_offset[(topic, partition)]
            written = status == "ok" or draw(st.booleans())  # a fail or unknown send may still have been written
            if written:
                next_offset[(topic, partition)] += 1
            named = partition if status != "unknown" or draw(st.booleans()) else None
            if status == "ok" and draw(st.integers(0, 9)) == 0:
                named = None  # an ack without a partition: judged against its topic
            line = send(producer, seq, status=status, partition=named, offset=offset, topic=topic)
            clock += draw(st.sampled_from(STEPS))  # lost and duplicated messages in time islands, or in none
            line["complete_ns"] = None if draw(st.integers(0, 15)) == 0 else clock
            if transactional:
                line["txn"] = txn if in_txns else None
            if status == "ok" and draw(st.integers(0, 7)) == 0:
                line["offset"] = max(0, offset - draw(st.integers(1, 3)))  # acked out of order, or at a taken spot
            sends.append(line)
            if draw(st.integers(0, 9)) == 0:  # the same message on an earlier line, with another outcome
                sends.insert(draw(st.integers(0, len(sends) - 1)),
                             send(producer, seq, status=draw(st.sampled_from(["ok", "fail", "unknown"])),
                                  partition=partition, offset=offset, topic=topic))
            if written and draw(st.integers(0, 5)) != 0:  # not lost
                finals.append(read(producer, seq, offset, partition=partition, topic=topic))
                if draw(st.integers(0, 8)) == 0:  # duplicated at a new position
                    finals.append(read(producer, seq, next_offset[(topic, partition)], partition=partition,
                                       topic=topic))
                    next_offset[(topic, partition)] += 1
                # the read_committed read-back: committed transactions' messages (and plain ones) mostly, the
                # others seldom
                if transactional and draw(st.integers(0, 5)) != 0 and (
                        outcome is None or outcome[0] == "committed" or draw(st.integers(0, 3)) == 0):
                    finals.append({**read(producer, seq, offset, partition=partition, topic=topic,
                                          consumer="final-reader-committed"), "isolation": "read_committed"})
            for _ in range(draw(st.integers(0, 2))):  # live reads, redelivered when one group reads twice
                live = read(producer, seq, offset, phase="live", partition=partition, topic=topic,
                            group=draw(st.sampled_from(GROUPS)), consumer=draw(st.sampled_from(["c0", "c1"])))
                assignment = draw(st.sampled_from([None, 1, 1, 1, 2]))  # the reads are shuffled: polls break
                if assignment is not None:
                    live["assignment"] = assignment
                if transactional:
                    live["isolation"] = draw(st.sampled_from(ISOLATIONS))
                reads.append(live)
    for _ in range(draw(st.integers(0, 3))):  # a position holding another message, or a foreign value
        topic, partition = draw(st.sampled_from(parts))
        offset = draw(st.integers(0, max(0, next_offset[(topic, partition)])))
        producer, seq = draw(st.sampled_from([(None, None), ("ghost", 0), ("p0", 1), ("p1", 0), ("pé", 2)]))
        phase = draw(st.sampled_from(["live", "final"]))
        reads.append(read(producer, seq, offset, phase=phase, partition=partition, topic=topic,
                          group="g" if phase == "live" else None))
    if transactional:  # the plain read-back says so, or not (an old reader)
        finals = [{**r, "isolation": draw(st.sampled_from(ISOLATIONS[:2]))} if "isolation" not in r else r
                  for r in finals]
    reads += finals

    events: list[Any] = []
    if not draw(st.sampled_from([False] * 7 + [True])):  # else the run was cut short: no final-read event
        for topic, partition in parts:
            if draw(st.sampled_from([False] * 5 + [True])):
                continue  # a partition without a final-read event
            for _ in range(draw(st.integers(1, 2))):
                events.append(final_read(partition, complete=draw(st.integers(0, 3)) != 0,
                                         high_watermark=next_offset[(topic, partition)], topic=topic))
                if transactional:
                    events[-1]["isolation"] = "read_uncommitted"
            if transactional and draw(st.integers(0, 5)) != 0:  # the read_committed read-back's
                hw = next_offset[(topic, partition)]
                events.append({**final_read(partition, complete=draw(st.integers(0, 3)) != 0, high_watermark=hw,
                                            topic=topic), "isolation": "read_committed",
                               "last_stable_offset": draw(st.integers(0, hw)), "time_ns": 90_000_000_000})
    for _ in range(draw(st.integers(0, 4))):
        topic, partition = draw(st.sampled_from(parts))
        events.append({**committed(draw(st.one_of(st.none(), st.integers(0, 8))),
                                   group=draw(st.sampled_from(["g", "h"])), partition=partition), "topic": topic})
    events.append({"kind": "fault", "fault": "kill", "targets": ["kafka-1"], "start_ns": 1, "detail": {"x": [1]}})
    txns: list[Any] | None = None
    if transactional:
        for _ in range(draw(st.integers(0, 4))):  # last stable offset samples, stuck for up to 100 s
            topic, partition = draw(st.sampled_from(parts))
            lso = draw(st.integers(0, 2))
            events.append({"kind": "stable", "topic": topic, "partition": partition, "last_stable_offset": lso,
                           "high_watermark": lso + draw(st.integers(0, 2)),
                           "time_ns": draw(st.integers(0, 100)) * 1_000_000_000})
        txns = [{"producer": p, "txn": n, "outcome": outcome, "intent": intent, "error": None, "begin_ns": 0,
                 "invoke_ns": None, "complete_ns": 1}
                for (p, n), (outcome, intent) in sorted(outcomes.items()) if outcome is not None]
        txns += [{"producer": "p9", "txn": 0, "outcome": "aborted", "intent": "abort"}][:draw(st.integers(0, 1))]
        if txns and draw(st.booleans()):  # one transaction's outcome written twice (the last line wins)
            txns.append({**draw(st.sampled_from(txns)), "outcome": draw(st.sampled_from(["committed", "unknown"]))})
        if draw(st.booleans()):
            pipe = draw(pipeline(sends, parts))
            sends, reads, events, txns = sends + pipe["sends"], reads + pipe["reads"], events + pipe["events"], \
                txns + pipe["txns"]
        txns = draw(st.permutations(txns)) if draw(st.booleans()) else (txns or None)
    reads = draw(st.permutations(reads))
    events = draw(st.permutations(events))

    files: dict[str, list[Any] | None] = {"sends": sends, "reads": reads, "events": events, "txns": txns}
    missing = draw(st.sampled_from([None] * 8 + ["reads", "events"]))
    if missing:
        files[missing] = None
    cut = draw(st.sampled_from([None] * 4 + ["sends", "reads", "events", "txns"]))
    if cut and files[cut]:
        whole = json.dumps(draw(st.sampled_from([send("p9", 0), read("p9", 0, 0), final_read()])))
        files[cut] = list(files[cut]) + [whole[:draw(st.integers(1, len(whole) - 1))]]
    return {**files, "scenario": PROMISES[draw(st.sampled_from(sorted(PROMISES)))],
            "tiny_blocks": draw(st.integers(0, 3)) == 0, "format": draw(st.sampled_from(spark_checker.INPUT_FORMATS))}


@st.composite
def pipeline(draw: st.DrawFn, inputs: list[dict[str, Any]], parts: list[tuple[str, int]]) -> dict[str, Any]:
    """A pipeline (group pg) from the first topic to topic o: output records of some inputs (none, one, or
    two), read back committed or not, and the group's commits on the input partitions."""
    input_topic = parts[0][0]
    sends, reads = [], []
    offset = 0
    sources = [(s["producer"], s["seq"]) for s in inputs if s["topic"] == input_topic] + [("ghost", 0)]
    for out_seq, source in enumerate(draw(st.lists(st.sampled_from(sources), max_size=8))):
        sends.append({**send("pipe", out_seq, topic="o", offset=offset), "txn": out_seq // 3,
                      "from_producer": source[0], "from_seq": source[1]})
        if draw(st.integers(0, 4)) != 0:
            reads.append({**read("pipe", out_seq, offset, topic="o", consumer="final-reader-committed"),
                          "isolation": "read_committed", "from_producer": source[0], "from_seq": source[1]})
        offset += 1
    events = [{"kind": "pipeline", "group": "pg", "input_topic": input_topic, "output_topic": "o"}]
    for isolation in ("read_uncommitted", "read_committed"):
        events.append({**final_read(0, complete=draw(st.integers(0, 3)) != 0, high_watermark=offset, topic="o"),
                       "isolation": isolation})
    for topic, partition in parts:
        if topic == input_topic and draw(st.integers(0, 3)) != 0:
            events.append({**committed(draw(st.integers(0, 8)), group="pg", partition=partition), "topic": topic})
    txns = [{"producer": "pipe", "txn": n, "outcome": "committed", "intent": "commit"} for n in range(offset // 3 + 1)]
    return {"sends": sends, "reads": reads, "events": events, "txns": txns}


# histories drawn per run: make test draws 6, the nightly workflow's wider sweep KCHAOS_GENERATED_HISTORIES
GENERATED_HISTORIES = int(os.environ.get("KCHAOS_GENERATED_HISTORIES", "6"))


@settings(max_examples=GENERATED_HISTORIES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_generated_histories_agree(spark: Any, history: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        (run / "history").mkdir()
        for name in ("sends", "reads", "events", "txns"):
            if history[name] is not None:
                write_jsonl(run / "history" / f"{name}.jsonl", history[name])
        if history["scenario"] is not None:
            (run / "scenario.yaml").write_text(history["scenario"])
        with input_format(history["format"], tiny=history["tiny_blocks"]):
            if history["tiny_blocks"]:
                with sql_conf(spark, "spark.sql.files.maxPartitionBytes", "500"), \
                        sql_conf(spark, "spark.sql.files.openCostInBytes", "1"):
                    agree(spark, run)
            else:
                agree(spark, run)


@contextmanager
def input_format(name: str, tiny: bool) -> Iterator[None]:
    """KCHAOS_SPARK_INPUT=name, and tiny conversion blocks if asked (hypothesis shares one fixture set-up)."""
    saved = os.environ.get(spark_checker.INPUT_ENV), columnar.BLOCK_BYTES, columnar.MARK_BYTES
    os.environ[spark_checker.INPUT_ENV] = name
    if tiny:
        columnar.BLOCK_BYTES, columnar.MARK_BYTES = 400, 300
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(spark_checker.INPUT_ENV, None)
        else:
            os.environ[spark_checker.INPUT_ENV] = saved[0]
        columnar.BLOCK_BYTES, columnar.MARK_BYTES = saved[1], saved[2]


def everything_at_once() -> dict[str, list[Any]]:
    """Every anomaly in one history, several on the same message or position (transactions: on topic x)."""
    sends = [send("p0", i) for i in range(6)] + [
        send("p0", 6, offset=9),  # lost, in a completely read partition, after a live read
        send("p0", 7, offset=4),  # acked where p0/4 sits: divergent, and p0/7 is also read twice: duplicated
        send("p0", 8, offset=3),  # acked below an earlier seq's offset: reordered
        send("p1", 0, status="fail"), send("p1", 1, status="fail"),  # 0 is present anyway
        send("p1", 2, status="unknown", partition=None), send("p1", 3, status="unknown"),  # found / not found
        send("p1", 4, partition=1, offset=0),  # not read, but partition 1's final read was incomplete
    ]
    reads = [read("p0", i, i) for i in range(6)] + [
        read("p0", 6, 9, phase="live"),
        read("p0", 7, 4, phase="live"), read("p0", 7, 11), read("p0", 7, 12),
        read("p1", 0, 13), read("p1", 2, 14),
        read("ghost", 0, 15), read(None, None, 16),  # never sent; a foreign value
        read("p0", 1, 1, phase="live"), read("p0", 1, 1, phase="live"),  # redelivered to group g
        # consumer c9, in its first assignment, jumps over offset 1 and steps back to it; after a rebalance, over 3
        *({**read("p0", o, o, phase="live", consumer="c9"), "assignment": a} for o, a in ((0, 1), (2, 1), (1, 1),
                                                                                          (4, 2))),
    ]
    events = [final_read(0, high_watermark=17), final_read(1, complete=False, high_watermark=1), committed(6)]
    return merge(merge(merge({"sends": sends, "reads": reads, "events": events, "txns": []}, transactions()),
                       pipelines()), share_groups())


def share_groups() -> dict[str, list[Any]]:
    """test_shares.py's planted share histories, each on a topic and producer of its own (t.100, p0.100, ...)."""
    cases = [SHARE_CASES[name] for name in sorted(SHARE_CASES)]
    return {kind: [line for i, case in enumerate(cases, 100) for line in apart(i, case.get(kind, []))]
            for kind in ("sends", "reads", "events", "shares")}


def merge(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {k: a.get(k, []) + b.get(k, []) for k in a.keys() | b.keys()}


def transactions() -> dict[str, list[Any]]:
    """On topic x: txn 0 of tp committed over two partitions, half visible (torn, and one message lost); txn 1
    aborted, yet read_committed read it (aborted_read); txn 2 has no txns line (unknown); partition 0's last
    stable offset hangs for 80 s."""
    sends = [tsend("tp", 0, 0, topic="x"), tsend("tp", 1, 0, partition=1, offset=0, topic="x"),
             tsend("tp", 2, 1, offset=1, topic="x"), tsend("tp", 3, 2, status="unknown", topic="x")]
    reads = [uread("tp", 0, 0, topic="x"), uread("tp", 1, 0, partition=1, topic="x"), uread("tp", 2, 1, topic="x"),
             cread("tp", 0, 0, topic="x"), cread("tp", 2, 1, topic="x")]
    events = [{**e, "time_ns": 90_000_000_000} for e in final_reads(partitions=2, high_watermark=3, topic="x")]
    events += [{"kind": "stable", "topic": "x", "partition": 0, "high_watermark": 3, "last_stable_offset": 1,
                "time_ns": t * 1_000_000_000} for t in (0, 80)]
    return {"sends": sends, "reads": reads, "events": events,
            "txns": [txn("tp", 0, "committed"), txn("tp", 1, "aborted")]}


def pipelines() -> dict[str, list[Any]]:
    """Two pipelines read topic x: pipe's output of tp/0 is duplicated and of tp/1 lost; pipe2 processed tp/1 only
    (its output topic's read-back is incomplete: unverifiable), and tp/0 lies above its commits (unprocessed)."""
    sends = [tsend("pipe0", i, 0, topic="x.out", offset=i, source=("tp", 0)) for i in range(2)]
    reads = [cread("pipe0", i, i, topic="x.out", source=("tp", 0)) for i in range(2)]
    events = (final_reads(high_watermark=2, topic="x.out")
              + final_reads(high_watermark=0, topic="x.out2", committed_complete=False)
              + [{"kind": "pipeline", "group": "pg", "input_topic": "x", "output_topic": "x.out"},
                 {"kind": "pipeline", "group": "pg2", "input_topic": "x", "output_topic": "x.out2"}]
              + [{**committed(1, group=g, partition=p), "topic": "x"} for g, p in (("pg", 0), ("pg", 1), ("pg2", 1))])
    return {"sends": sends, "reads": reads, "events": events, "txns": [txn("pipe0", 0, "committed")]}


def test_every_anomaly_at_once(spark: Any, both_formats: str, tmp_path: Path) -> None:
    results = agree(spark, txn_run(tmp_path, everything_at_once()))
    c = results["counts"]
    assert all(c[name] for name in COUNTS), {name: c[name] for name in COUNTS if not c[name]}
    # p0/6 and p0/8 lost, tp/1 of a committed transaction lost, p0/7 duplicated, two positions divergent (at p0/3's
    # ack, and at the earlier of p0/4's and p0/7's)
    assert [(r["anomaly"], r["topic"], r["partition"], r["count"], r["first_ns"], r["last_ns"])
            for r in results["anomaly_ranges"]] == [("lost", "t", 0, 2, 7, 9), ("lost", "x", 1, 1, 2, 2),
                                                    ("duplicated", "t", 0, 1, 8, 8), ("divergent", "t", 0, 2, 4, 5)]


def _ranges_variant(name: str) -> dict[str, list[Any]]:
    """ranges_history (tests/test_anomaly_ranges.py) judged along each path of the Spark checker."""
    h = ranges_history()
    if name == "exact":  # more consumer groups than a bit mask holds: every message through exact_messages
        h["events"] = h["events"] + [committed(1, group=f"x{i:02}") for i in range(70)]
    elif name == "repeated_sends":  # the acks come from the message table; the winning (ok) line's time counts
        h["sends"] = [timed(send("p0", 7, status="unknown"), 99 * S), timed(send("p1", 0, status="fail"), 99 * S),
                      *h["sends"]]
    elif name == "ambiguous":  # p0/4 also read in partition 1: judged again from its reads
        h["reads"] = h["reads"] + [read("p0", 4, 3, partition=1)]
    return h



@pytest.mark.parametrize("name", sorted(GROUPING_CASES))
def test_spark_islands_are_the_grouping(spark: Any, name: str) -> None:
    """The window that finds the islands on Spark, on the grouping's own cases."""
    from spark_analysis.anomaly_ranges import collected_ranges
    from spark_analysis.encode import literal_table

    entries, expected = GROUPING_CASES[name]
    topics = sorted({e.topic for e in entries})
    table = literal_table(spark, [("anomaly", "int"), ("tid", "int"), ("partition", "bigint"), ("ns", "bigint"),
                                  ("min_offset", "bigint"), ("max_offset", "bigint")],
                          [(RANGE_ANOMALIES.index(e.anomaly), topics.index(e.topic), e.partition, e.ns, e.min_offset,
                            e.max_offset) for e in entries])
    assert collected_ranges(table, topics) == expected


def test_promises_are_read_from_the_scenario(spark: Any, tmp_path: Path) -> None:
    h = _with(clean(), reads=[read("p0", 1, 9)])
    results = agree(spark, run_dir(tmp_path, PROMISES["idempotent"], **h))
    assert (results["promises"] == {"idempotent": True, "ordered": True, "hanging_after_ms": 70000}
            and results["valid"] is False)


@pytest.mark.parametrize("ranges, packed", [
    ({"a": (-3, 2), "b": (0, 9)}, True),
    ({"a": (-3, 0), "b": (-2 ** 60, 2 ** 60 - 1)}, True),  # 4 * 2^61 keys: exactly every value of a long >= 0
    ({"a": (-3, 1), "b": (-2 ** 60, 2 ** 60 - 1)}, False),  # 5 * 2^61: too many
    ({"a": (-3, 2), "b": (-2 ** 63, 2 ** 63 - 1)}, False),
    ({"a": (-3, 2)}, False),  # b's range unknown
    (None, False),
])
def test_group_by_packs_the_key_only_when_it_fits(spark: Any, ranges: Any, packed: bool) -> None:
    from pyspark.sql import functions as F

    from spark_analysis.judge import PACKED_KEY, group_by

    a_low, a_high = (ranges or {}).get("a", (-3, 2))
    b_low, b_high = (ranges or {}).get("b", (-5, 5))
    rows = [(a, b, i) for i, (a, b) in enumerate(
        (a, b) for a in (a_low, a_high, a_low) for b in (b_low, b_high, max(b_low, min(0, b_high))))]
    table = spark.createDataFrame(rows, "a int, b bigint, v bigint")
    grouped = group_by(table, ("a", "b"), ranges, ["count(1) AS n", "sum(v) AS total"])
    assert (PACKED_KEY in grouped._jdf.queryExecution().optimizedPlan().toString()) == packed
    assert grouped.dtypes == [("a", "int"), ("b", "bigint"), ("n", "bigint"), ("total", "bigint")]
    expected = table.groupBy("a", "b").agg(F.expr("count(1) AS n"), F.expr("sum(v) AS total"))
    assert sorted(map(tuple, grouped.collect())) == sorted(map(tuple, expected.collect()))


def test_complete_partitions_are_compared_as_runs() -> None:
    from spark_analysis.judge import Facts, complete_sql

    facts = Facts(complete={(0, 0): True, (0, 1): True, (0, 3): True, (0, 4): False, (1, 2): True, (2, 0): False},
                  topic_complete={})
    assert complete_sql(facts) == ("((tid = 0 AND `partition` BETWEEN 0 AND 1)"
                                   " OR (tid = 0 AND `partition` BETWEEN 3 AND 3)"
                                   " OR (tid = 1 AND `partition` BETWEEN 2 AND 2))")
    assert complete_sql(Facts(complete={(0, 0): False}, topic_complete={})) == "false"


def test_literal_tables_hold_any_name_and_number(spark: Any) -> None:
    """Names from a history reach SQL text as literals: quotes, backslashes and any character must survive."""
    from spark_analysis.encode import literal_table, sql_in

    names = ["p'0", "back\\slash", 'dq"', "é→😀", "", "x' OR '1'='1", "tab\tnew\nline", "$'{}%"]
    rows = [(i, name, (-2 ** 63 if i % 2 else 2 ** 63 - 1) if i < 2 else i) for i, name in enumerate(names)]
    rows.append((len(names), None, None))
    table = literal_table(spark, [("pid", "int"), ("producer", "string"), ("seq", "bigint")], rows)
    assert table.dtypes == [("pid", "int"), ("producer", "string"), ("seq", "bigint")]
    assert sorted(map(tuple, table.collect())) == rows
    empty = literal_table(spark, [("pid", "int"), ("producer", "string")], [])
    assert empty.dtypes == [("pid", "int"), ("producer", "string")] and empty.count() == 0
    assert table.filter(sql_in("producer", names[2:4])).select("pid").collect() == [(2,), (3,)]
    assert table.filter(sql_in("producer", [])).count() == 0


# --- the breakdown per partition and per fault (checkers/breakdown.py) ----------------------------------------


@pytest.mark.parametrize("variant, history_format", [
    ("plain", "parquet"), ("plain", "json"),   # the readers: each format once; the paths below: the default one
    *((v, "parquet") for v in ("exact", "repeated_sends", "ambiguous", "grouped_in_spark"))])
def test_the_anomaly_ranges_and_the_breakdown_agree(spark: Any, tmp_path: Path, variant: str, history_format: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """ranges_history (tests/test_anomaly_ranges.py) judged along each path of the Spark checker, with fault
    windows (which place the ranges' entries, never change the ranges); the entries grouped in Python (the
    reference's code), and as for a run with too many of them, in Spark."""
    from spark_analysis import anomaly_ranges
    from test_breakdown import FAULTED_EXPECTED, FAULTS

    monkeypatch.setenv(spark_checker.INPUT_ENV, history_format)
    if variant == "grouped_in_spark":
        monkeypatch.setattr(anomaly_ranges, "ENTRIES_IN_DRIVER", 0)
    h = _ranges_variant(variant)
    h["events"] = h["events"] + FAULTS
    results = agree(spark, run_dir(tmp_path, PROMISES["idempotent"], **h))
    ranges = results["anomaly_ranges"]
    if variant == "ambiguous":
        assert [r["partition"] for r in ranges if r["anomaly"] == "duplicated"] == [0, 1]
        ranges = [r for r in ranges if (r["anomaly"], r["partition"]) != ("duplicated", 1)]
    assert ranges == RANGES_HISTORY_EXPECTED
    if variant != "ambiguous":  # there the duplicate counts in both partitions it was read in
        assert results["breakdown"]["faults"] == FAULTED_EXPECTED
    assert results["breakdown"]["lost_divergent"] == 1


def test_the_breakdown_of_unverifiable_acks_agrees(spark: Any, tmp_path: Path) -> None:
    sends = [send("p0", 0), send("p0", 1), send("p0", 2, partition=1), send("p0", 3, status="fail", partition=2),
             send("p0", 4, status="fail", partition=None), send("p0", 5, partition=None)]
    results = agree(spark, run_dir(tmp_path, sends=sends, reads=[read("p0", 0, 0)], events=[
        final_read(0, high_watermark=2, complete=False), final_read(3, high_watermark=0)]))
    assert [r["partition"] for r in results["breakdown"]["partitions"]] == [0, 1, 2, 3, None]


def test_the_fault_sql_is_the_fault_clock(spark: Any) -> None:
    from checkers.breakdown import FaultClock
    from spark_analysis.anomaly_ranges import fault_sql

    windows = [{"start_ns": 0, "end_ns": 10}, {"start_ns": 15, "end_ns": None}, {"start_ns": 15, "end_ns": 20},
               {"start_ns": 25, "end_ns": 30}, {"start_ns": 40, "end_ns": 50}, {"start_ns": None, "end_ns": 5}]
    windows.sort(key=lambda w: w["start_ns"] or 0)
    times = [None, *range(-5, 60)]
    got = spark.createDataFrame([(t,) for t in times], "t bigint").selectExpr(
        "t", f"{fault_sql(windows, 't')} AS f").collect()
    clock = FaultClock(windows)
    assert {r["t"]: r["f"] for r in got} == {t: clock.after(t) for t in times}
    assert spark.sql(f"SELECT {fault_sql([], 'CAST(1 AS BIGINT)')} AS f").collect()[0]["f"] is None


def test_second_sql_is_second_of(spark: Any) -> None:
    from checkers.series import SECOND_NS, second_of, second_sql

    times = [0, 1, SECOND_NS - 1, SECOND_NS, -1, -SECOND_NS, -SECOND_NS - 1, 2 ** 63 - 1, -2 ** 63, 1234567890123]
    got = spark.createDataFrame([(t,) for t in times], "t bigint").selectExpr("t", f"{second_sql('t')} AS s").collect()
    assert {r["t"]: r["s"] for r in got} == {t: second_of(t) for t in times}


def test_spark_reads_a_missing_intent_as_unknown_and_a_missing_committed_read_back_as_incomplete(
        spark: Any, both_formats: str, tmp_path: Path) -> None:
    """The two truth leftovers on Spark itself (beside agreeing with the reference)."""
    results = spark_checker.check_run(txn_run(tmp_path / "intent", TXN_CASES["intent_absent_or_null"]()), spark)
    assert {a: n for a, n in results["counts"].items() if n and a in ("aborted_read", "torn_transaction")} == {
        "aborted_read": 1}
    results = spark_checker.check_run(txn_run(tmp_path / "unread", TXN_CASES["no_committed_read_back"]()), spark)
    assert results["final_read_complete"] is False and results["counts"]["lost_unverifiable"] == 2
    assert results["unread_committed_partitions"] == [["t", 0]] == results["incomplete_partitions"]
