"""The reference checker on small hand-made histories: one test per anomaly, plus the reader's edge cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.anomalies import (ANOMALIES, COUNTS, CUT_SHORT_NOTE, DEFINITIONS, NO_SCENARIO_NOTE, Promises,
                                promises_from_scenario, validity)
from checkers import history as history_module
from checkers.history import UNKNOWN_STATUS, History, checked_send, parse_send, read_history
from checkers.reference import check, check_run
from rundir.documents import write_results
from rundir.layout import NotJudged, RunDir
from rundir.lines import HistoryError

TOPIC = "t"
NONE = Promises(idempotent=False, ordered=False)
IDEMPOTENT = Promises(idempotent=True, ordered=True)
ORDERED = Promises(idempotent=False, ordered=True)


# --- building histories ---------------------------------------------------------------------------


def send(producer: str, seq: int, status: str = "ok", partition: int | None = 0, offset: int | None = None,
         topic: str = TOPIC) -> dict[str, Any]:
    line = {"producer": producer, "seq": seq, "topic": topic, "key": str(seq), "partition": partition,
            "status": status, "error": None if status == "ok" else "boom", "invoke_ns": seq, "complete_ns": seq + 1}
    if status == "ok":
        line["offset"] = seq if offset is None else offset
    return line


def read(producer: str | None, seq: int | None, offset: int, phase: str = "final", partition: int = 0,
         group: str | None = None, consumer: str | None = None, topic: str = TOPIC) -> dict[str, Any]:
    if consumer is None:
        consumer = "final-reader" if phase == "final" else "c0"
    if phase == "live" and group is None:
        group = "g"
    return {"consumer": consumer, "group": group, "phase": phase, "topic": topic, "partition": partition,
            "offset": offset, "producer": producer, "seq": seq, "time_ns": offset}


def final_read(partition: int = 0, complete: bool = True, high_watermark: int = 0,
               topic: str = TOPIC) -> dict[str, Any]:
    return {"kind": "final-read", "topic": topic, "partition": partition, "high_watermark": high_watermark,
            "complete": complete, "time_ns": 1}


def committed(offset: int | None, group: str = "g", partition: int = 0) -> dict[str, Any]:
    return {"kind": "committed", "group": group, "topic": TOPIC, "partition": partition, "offset": offset}


def write_jsonl(path: Path, lines: list[dict[str, Any] | str]) -> None:
    """Lines as JSON; a str is written verbatim (for broken lines)."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def make_run(tmp_path: Path, sends: list, reads: list | None = None, events: list | None = None,
             scenario: dict[str, Any] | str | None = None, txns: list | None = None,
             shares: list | None = None) -> Path:
    """A run directory with a history; reads/events/txns/shares None: that file is not written."""
    history = tmp_path / "history"
    history.mkdir(parents=True)
    write_jsonl(history / "sends.jsonl", sends)
    if txns is not None:
        write_jsonl(history / "txns.jsonl", txns)
    if reads is not None:
        write_jsonl(history / "reads.jsonl", reads)
    if shares is not None:
        write_jsonl(history / "shares.jsonl", shares)
    if events is not None:
        write_jsonl(history / "events.jsonl", events)
    if scenario is not None:
        text = scenario if isinstance(scenario, str) else json.dumps(scenario)
        (tmp_path / "scenario.yaml").write_text(text)
    return tmp_path


def run_check(tmp_path: Path, promises: Promises = NONE, **history: Any) -> dict[str, Any]:
    run = make_run(tmp_path, **history)
    return check(read_history(run / "history"), promises)


def clean(n: int = 3) -> dict[str, list]:
    """n acknowledged sends of p0, each read live once by group g and once by the final read."""
    return {
        "sends": [send("p0", i) for i in range(n)],
        "reads": [read("p0", i, i, phase="live") for i in range(n)] + [read("p0", i, i) for i in range(n)],
        "events": [final_read(high_watermark=n), committed(n)],
    }


def nonzero(results: dict[str, Any]) -> dict[str, int]:
    return {a: results["counts"][a] for a in ANOMALIES if results["counts"][a]}


# --- a clean history ---------------------------------------------------------------------------------


def test_clean_history_is_valid(tmp_path: Path) -> None:
    results = run_check(tmp_path, IDEMPOTENT, **clean())
    assert results["valid"] is True
    assert nonzero(results) == {}
    assert tuple(results["counts"]) == COUNTS
    c = results["counts"]
    assert (c["sent"], c["acked"], c["failed"], c["unknown"]) == (3, 3, 0, 0)
    assert (c["reads_live"], c["reads_final"], c["lost_unverifiable"]) == (3, 3, 0)
    assert results["final_read_complete"] is True
    assert results["incomplete_partitions"] == []
    assert results["cut_short"] is False
    assert results["checker"] == "python"
    assert results["promises"] == {"idempotent": True, "ordered": True, "hanging_after_ms": 70000}
    assert set(results["examples"]) == set(ANOMALIES)
    assert all(v == [] for v in results["examples"].values())
    assert results["notes"] == []


# --- one test per anomaly ---------------------------------------------------------------------------


def test_lost(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3))  # acked at offset 3, never read
    results = run_check(tmp_path, **h)
    assert nonzero(results) == {"lost": 1}
    assert results["valid"] is False
    [example] = results["examples"]["lost"]
    assert (example["producer"], example["seq"]) == ("p0", 3)
    assert example["send"]["offset"] == 3 and example["send"]["key"] == "3"  # the whole line, re-read
    assert example["reads"] == []


def test_lost_after_read(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3))
    h["reads"].append(read("p0", 3, 3, phase="live"))  # a consumer saw it; the log lost it
    results = run_check(tmp_path, **h)
    assert nonzero(results) == {"lost": 1, "lost_after_read": 1}
    assert results["valid"] is False
    [example] = results["examples"]["lost_after_read"]
    assert [r["phase"] for r in example["reads"]] == ["live"]


@pytest.mark.parametrize(("promises", "valid"), [(NONE, True), (ORDERED, True), (IDEMPOTENT, False)])
def test_duplicated_is_a_violation_only_for_idempotent_producers(tmp_path: Path, promises: Promises,
                                                                  valid: bool) -> None:
    h = clean()
    h["reads"] += [read("p0", 1, 7), read("p0", 1, 7), read("p0", 2, 8)]  # p0/1 twice at 7 still counts once
    results = run_check(tmp_path, promises, **h)
    assert nonzero(results) == {"duplicated": 2}
    assert results["valid"] is valid
    assert [(e["producer"], e["seq"]) for e in results["examples"]["duplicated"]] == [("p0", 1), ("p0", 2)]


def test_same_position_read_twice_is_not_a_duplicate(tmp_path: Path) -> None:
    h = clean()
    h["reads"] += [read("p0", 1, 1)]
    results = run_check(tmp_path, IDEMPOTENT, **h)
    assert nonzero(results) == {}
    assert results["counts"]["reads_final"] == 4


def test_unexpected(tmp_path: Path) -> None:
    h = clean()
    h["reads"] += [read("ghost", 0, 5, phase="live"), read("ghost", 0, 5), read("ghost", 1, 6),
                   read(None, None, 9)]  # a value kchaos did not write: one unexpected position
    results = run_check(tmp_path, **h)
    assert nonzero(results) == {"unexpected": 3}
    assert results["valid"] is False
    examples = results["examples"]["unexpected"]
    assert [(e["producer"], e["seq"]) for e in examples] == [("ghost", 0), ("ghost", 1), (None, None)]
    assert examples[0]["send"] is None and len(examples[0]["reads"]) == 2
    assert examples[2]["offset"] == 9
    assert any("did not write" in n for n in results["notes"])


def test_failed_but_present(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3, status="fail"), send("p0", 4, status="fail")]
    h["reads"].append(read("p0", 3, 3))  # 3 was said to fail, yet it is there; 4 really failed
    results = run_check(tmp_path, **h)
    assert nonzero(results) == {"failed_but_present": 1}
    assert results["counts"]["failed"] == 2
    assert results["valid"] is False
    [example] = results["examples"]["failed_but_present"]
    assert example["send"]["status"] == "fail" and example["reads"][0]["offset"] == 3


def purged_but_present() -> dict[str, list]:
    """A message librdkafka's abort purged (``_PURGE_QUEUE``) that an earlier attempt had written: the final
    read finds it. Its status is what the producer process records for that report."""
    from confluent_kafka import KafkaError
    from workloads.producer import outcome
    h = clean()
    purged = send("p0", 3, status=outcome(KafkaError(KafkaError._PURGE_QUEUE)))
    h["sends"].append({**purged, "error": "_PURGE_QUEUE"})
    h["reads"].append(read("p0", 3, 3))
    return h


def test_a_purged_message_found_in_the_log_is_never_failed(tmp_path: Path) -> None:
    results = run_check(tmp_path, **purged_but_present())
    assert results["counts"]["failed"] == 0 and results["counts"]["failed_but_present"] == 0
    assert results["counts"]["unknown"] == 1 and results["valid"] is True


def test_divergent(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p1", 0, offset=1))  # acked at offset 1, where the reads found p0/1
    h["reads"].append(read("p1", 0, 1))
    h["reads"] += [read("p0", 2, 2, phase="live", group="h"), read("p1", 9, 2, phase="live", group="h")]
    results = run_check(tmp_path, **h)
    c = results["counts"]
    assert c["divergent"] == 2  # offsets 1 (ack vs read, and two reads) and 2 (two reads)
    assert c["unexpected"] == 1  # p1/9 was never sent
    assert results["valid"] is False
    first, second = results["examples"]["divergent"]
    assert (first["topic"], first["partition"], first["offset"]) == (TOPIC, 0, 1)
    assert (first["send"]["producer"], first["send"]["seq"]) == ("p0", 1)  # both contradicted: the smallest
    assert {(r["producer"], r["seq"]) for r in first["reads"]} == {("p0", 1), ("p1", 0)}
    assert second["offset"] == 2


def test_divergent_ack_against_a_read_alone(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p1", 0, offset=2))  # acked at 2, but offset 2 holds p0/2
    results = run_check(tmp_path, **h)
    assert results["counts"]["divergent"] == 1
    assert results["counts"]["lost"] == 1  # and p1/0 is nowhere
    [example] = results["examples"]["divergent"]
    assert example["send"]["producer"] == "p1"


@pytest.mark.parametrize(("promises", "counted"), [(NONE, 0), (ORDERED, 1), (IDEMPOTENT, 1)])
def test_reordered_counts_only_where_order_was_promised(tmp_path: Path, promises: Promises, counted: int) -> None:
    # seq 2's ack came first, at the lower offset (a retried seq 1 written after it): the acks rise in offset in
    # the order they came, so only their seqs disagree
    sends = [send("p0", 0, offset=0), send("p0", 2, offset=1), send("p0", 1, offset=2),
             send("p1", 0, offset=3), send("p0", 3, partition=1, offset=0)]  # other producer, other partition
    reads = [read("p0", 0, 0), read("p0", 2, 1), read("p0", 1, 2), read("p1", 0, 3), read("p0", 3, 0, partition=1)]
    events = [final_read(0, high_watermark=4), final_read(1, high_watermark=1)]
    results = run_check(tmp_path, promises, sends=sends, reads=reads, events=events)
    assert results["counts"]["reordered"] == counted
    assert results["valid"] is (counted == 0)
    assert [(e["producer"], e["seq"]) for e in results["examples"]["reordered"]] == [("p0", 2)] * counted
    assert any("did not promise order" in n for n in results["notes"]) is (counted == 0)


def test_consumer_skipped(tmp_path: Path) -> None:
    h = clean(5)
    h["reads"] = [r for r in h["reads"] if not (r["phase"] == "live" and r["seq"] in (1, 4))]
    h["events"] = [final_read(high_watermark=5), committed(4)]  # 1 lies below the commit unread; 4 is above it
    results = run_check(tmp_path, **h)
    # c0's own reads jump over offset 1 too: with no assignment recorded, judged as across a rebalance (counted)
    assert nonzero(results) == {"consumer_skipped": 1, "poll_skipped_rebalance": 1}
    assert results["valid"] is False
    [example] = results["examples"]["consumer_skipped"]
    assert (example["producer"], example["seq"], example["group"]) == ("p0", 1, "g")


def test_consumer_skipped_ignores_groups_without_a_commit(tmp_path: Path) -> None:
    h = clean()
    h["events"] = [final_read(high_watermark=3), committed(None), committed(3, group="other", partition=5)]
    assert nonzero(run_check(tmp_path, **h)) == {}


def test_consumer_redelivered_is_never_a_violation(tmp_path: Path) -> None:
    h = clean()
    h["reads"] += [read("p0", 0, 0, phase="live", consumer="c1"), read("p0", 0, 0, phase="live", consumer="c1"),
                   read("p0", 1, 1, phase="live", group="other")]  # another group reading it is no redelivery
    results = run_check(tmp_path, IDEMPOTENT, **h)
    # c1 reading offset 0 again, and c0 offset 1 after 2 (for group other), with no assignment recorded: steps
    # back across a rebalance (counted)
    assert nonzero(results) == {"consumer_redelivered": 1, "poll_nonmonotonic_rebalance": 2}
    assert results["valid"] is True
    [example] = results["examples"]["consumer_redelivered"]
    assert (example["producer"], example["seq"], example["group"]) == ("p0", 0, "g")
    assert len(example["reads"]) == 4  # three live reads and the final one


def test_unknown_sends_found_and_not_found(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3, status="unknown", partition=None), send("p0", 4, status="unknown", partition=None),
                   send("p0", 5, status="unknown", partition=0)]
    h["reads"].append(read("p0", 4, 3))  # the in-doubt 4 made it
    results = run_check(tmp_path, IDEMPOTENT, **h)
    c = results["counts"]
    assert (c["unknown"], c["unknown_found"], c["unknown_not_found"]) == (3, 1, 2)
    assert c["lost"] == 0
    assert results["valid"] is True
    assert [e["seq"] for e in results["examples"]["unknown"]] == [3, 4, 5]


def test_an_old_info_line_is_judged_as_unknown(tmp_path: Path) -> None:
    """A history written before the status was renamed says ``info`` where it now says ``unknown``: read as
    ``unknown`` (catalogue.history.SEND_STATUS_ALIASES), on the reader's quick path and field by field, and judged
    alike (the examples show the line as it was written)."""
    line = send("p0", 3, status="info", partition=None)
    assert parse_send(line, 1).status == checked_send(line, 1).status == UNKNOWN_STATUS == "unknown"

    def history(status: str) -> dict[str, list]:
        h = clean()
        h["sends"] += [send("p0", 3, status=status, partition=None), send("p0", 4, status=status, partition=None),
                       send("p0", 5, status=status), send("p0", 1, status=status)]  # p0/1: ok wins, as over unknown
        h["reads"].append(read("p0", 4, 3))
        return h
    old = run_check(tmp_path / "old", IDEMPOTENT, **history("info"))
    new = run_check(tmp_path / "new", IDEMPOTENT, **history("unknown"))
    assert old["counts"] == new["counts"] and old["notes"] == new["notes"] and old["valid"] is True
    assert (old["counts"]["unknown"], old["counts"]["unknown_found"], old["counts"]["unknown_not_found"]) == (3, 1, 2)
    shown = [(e["seq"], e["send"]["status"]) for e in old["examples"]["unknown"]]
    assert shown == [(3, "info"), (4, "info"), (5, "info")]


def test_examples_are_the_twenty_smallest(tmp_path: Path) -> None:
    sends = [send("p1", 0)] + [send("p0", i) for i in range(30)]  # only p1/0 read: all 30 of p0 lost
    results = run_check(tmp_path, sends=sends, reads=[read("p1", 0, 0)], events=[final_read(high_watermark=31)])
    assert results["counts"]["lost"] == 30
    assert [e["seq"] for e in results["examples"]["lost"]] == list(range(20))


def test_example_reads_are_at_most_ten_in_file_order(tmp_path: Path) -> None:
    h = clean(1)
    h["reads"] += [read("p0", 0, 0, phase="live", consumer=f"c{i}") for i in range(1, 15)]
    results = run_check(tmp_path, **h)
    [example] = results["examples"]["consumer_redelivered"]
    assert [r["consumer"] for r in example["reads"]] == ["c0", "final-reader"] + [f"c{i}" for i in range(1, 9)]


# --- incomplete, truncated, cut short, broken ----------------------------------------------------------


def test_incomplete_partition_is_not_lost(tmp_path: Path) -> None:
    sends = [send("p0", 0), send("p0", 1), send("p1", 0, partition=1, offset=0), send("p1", 1, partition=1, offset=1)]
    reads = [read("p0", 0, 0), read("p1", 0, 0, partition=1)]
    events = [final_read(0, complete=False, high_watermark=2), final_read(1, high_watermark=2)]
    results = run_check(tmp_path, sends=sends, reads=reads, events=events)
    c = results["counts"]
    assert (c["lost"], c["lost_unverifiable"]) == (1, 1)  # p0/1 cannot be judged; p1/1 is lost
    assert [(e["producer"], e["seq"]) for e in results["examples"]["lost"]] == [("p1", 1)]
    assert results["valid"] is False
    assert results["final_read_complete"] is False
    assert results["incomplete_partitions"] == [[TOPIC, 0]]
    assert any("lost_unverifiable" in n for n in results["notes"])


def test_repeated_send_lines_an_ack_is_never_downgraded(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 1, status="unknown", partition=None), send("p0", 3, status="fail"), send("p0", 3),
                   send("p0", 4, status="fail"), send("p0", 4, status="unknown")]
    results = run_check(tmp_path, **h)
    c = results["counts"]
    # p0/1: ok, then unknown: still acknowledged (and found); p0/3: fail, then ok: acknowledged and nowhere;
    # p0/4: fail, then unknown: the last line
    assert (c["sent"], c["acked"], c["failed"], c["unknown"]) == (8, 4, 0, 1)
    assert c["lost"] == 1 and c["unknown"] == 1 and c["unknown_found"] == 0
    assert ("3 send lines repeated an earlier (producer, seq); an ok line wins over unknown and fail "
            "(an acknowledgement is never downgraded), else the last line") in results["notes"]


def test_an_ack_followed_by_info_is_still_lost_when_missing(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3), send("p0", 3, status="unknown")]
    results = run_check(tmp_path, **h)
    assert results["counts"]["lost"] == 1 and results["counts"]["unknown"] == 0
    assert results["valid"] is False


def test_an_ack_followed_by_fail_is_not_failed_but_present(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 2, status="fail")]  # p0/2 was acknowledged at offset 2 and is read there
    results = run_check(tmp_path, **h)
    assert results["counts"]["failed_but_present"] == 0 and results["counts"]["acked"] == 3
    assert results["valid"] is True


def test_two_messages_acknowledged_at_one_unread_offset_are_divergent(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3, offset=7), send("p1", 0, offset=7)]  # both lost too: nothing read at 7
    h["events"] = [final_read(high_watermark=3, complete=False), committed(3)]
    results = run_check(tmp_path, **h)
    assert results["counts"]["divergent"] == 1
    [example] = results["examples"]["divergent"]
    assert (example["offset"], example["send"]["producer"], example["send"]["seq"]) == (7, "p0", 3)
    assert example["reads"] == []


def test_one_message_acknowledged_twice_at_one_offset_is_not_divergent(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [send("p0", 3, offset=7), send("p0", 3, offset=7)]
    h["events"] = [final_read(high_watermark=3, complete=False), committed(3)]
    assert run_check(tmp_path, **h)["counts"]["divergent"] == 0


@pytest.mark.parametrize("sends, reads, said", [
    (None, [], "history/sends.jsonl is missing (no send was recorded)"),
    ([], [read("p0", 0, 0)], "history/sends.jsonl is empty (no send was recorded)"),
    ([send("p0", 0)], None, "history/reads.jsonl is missing (nothing was read back)"),
    ([send("p0", 0)], [], "history/reads.jsonl is empty (nothing was read back)"),
    ([send("p0", 0)], ['{"consumer": "final-rea'], "history/reads.jsonl is empty (nothing was read back)"),
])
def test_a_history_without_sends_or_reads_is_not_judged(tmp_path: Path, sends: list | None, reads: list | None,
                                                        said: str) -> None:
    run = make_run(tmp_path, sends=sends or [], reads=reads, events=[final_read()])
    if sends is None:
        (run / "history" / "sends.jsonl").unlink()
    with pytest.raises(NotJudged) as error:
        check_run(run)
    assert str(error.value) == f"not judged: {said}"


def test_partition_without_a_final_read_event_is_incomplete(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3, partition=2))
    results = run_check(tmp_path, **h)
    assert results["counts"]["lost"] == 0 and results["counts"]["lost_unverifiable"] == 1
    assert results["incomplete_partitions"] == [[TOPIC, 2]]
    assert results["final_read_complete"] is False


def test_a_later_complete_final_read_wins(tmp_path: Path) -> None:
    h = clean()
    h["events"] = [final_read(complete=False), final_read(complete=True)]
    assert run_check(tmp_path, **h)["final_read_complete"] is True


def test_cut_short_run_calls_nothing_lost(tmp_path: Path) -> None:
    h = clean()
    h["reads"] = [r for r in h["reads"] if r["phase"] == "live"][:1]
    h["events"] = [{"kind": "fault", "fault": "kill", "targets": ["kafka-1"], "start_ns": 5}]
    results = run_check(tmp_path, IDEMPOTENT, **h)
    assert results["cut_short"] is True
    assert results["final_read_complete"] is False
    assert results["counts"]["lost"] == 0
    assert results["counts"]["lost_unverifiable"] == 3
    assert results["incomplete_partitions"] == [[TOPIC, 0]]
    assert CUT_SHORT_NOTE in results["notes"]


def test_missing_events_are_noted(tmp_path: Path) -> None:
    results = run_check(tmp_path, sends=[send("p0", 0)], reads=[read("p0", 0, 0, phase="live")])
    assert results["cut_short"] is True
    assert any("events.jsonl is missing" in n for n in results["notes"])
    assert results["counts"]["lost_unverifiable"] == 1


def test_truncated_last_line_is_dropped_and_the_rest_checked(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3))  # lost
    h["sends"].append('{"producer": "p0", "seq": 4, "top')
    results = run_check(tmp_path, **h)
    assert "history/sends.jsonl: dropped an incomplete last line (line 5)" in results["notes"]
    assert results["counts"]["sent"] == 4
    assert results["counts"]["lost"] == 1


def test_truncated_last_line_with_a_cut_character(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    with (run / "history" / "reads.jsonl").open("ab") as f:
        f.write('{"consumer": "c\u00e9'.encode()[:-1])  # cut inside a two-byte character, no newline
    results = check(read_history(run / "history"), NONE)
    assert "history/reads.jsonl: dropped an incomplete last line (line 7)" in results["notes"]


def test_malformed_middle_line_names_the_line(tmp_path: Path) -> None:
    h = clean()
    h["sends"].insert(1, '{"producer": "p0", "seq": ')
    run = make_run(tmp_path, **h)
    with pytest.raises(HistoryError, match=r"^history/sends\.jsonl line 2: not valid JSON"):
        read_history(run / "history")


@pytest.mark.parametrize(("file", "line", "message"), [
    ("sends", {"producer": "p0", "topic": TOPIC, "status": "ok", "partition": 0},
     "history/sends.jsonl line 2: missing field 'seq'"),
    ("sends", {"producer": "p0", "seq": "1", "topic": TOPIC, "status": "ok", "partition": 0},
     "history/sends.jsonl line 2: field 'seq' must be an integer, not str"),
    ("sends", {"producer": "p0", "seq": True, "topic": TOPIC, "status": "ok", "partition": 0},
     "history/sends.jsonl line 2: field 'seq' must be an integer, not bool"),
    ("sends", {"producer": "p0", "seq": 1, "topic": TOPIC, "status": "done", "partition": 0},
     "history/sends.jsonl line 2: field 'status' must be 'ok', 'fail' or 'unknown', not 'done'"),
    ("sends", {"producer": "p0", "seq": 1, "topic": TOPIC, "status": "ok"},
     "history/sends.jsonl line 2: missing field 'partition'"),
    ("sends", {**send("p0", 1), "complete_ns": "5"},
     "history/sends.jsonl line 2: field 'complete_ns' must be an integer or null, not str"),
    ("reads", {**read("p0", 0, 0), "phase": "later"},
     "history/reads.jsonl line 2: field 'phase' must be 'live' or 'final', not 'later'"),
    ("reads", {**read("p0", 0, 0), "partition": None},
     "history/reads.jsonl line 2: field 'partition' must be an integer, not null"),
    ("reads", {**read("p0", 0, 0), "seq": None},
     "history/reads.jsonl line 2: fields 'producer' and 'seq' must both be set or both be null"),
    ("events", {"topic": TOPIC}, "history/events.jsonl line 2: missing field 'kind'"),
    ("events", {**final_read(), "complete": "yes"},
     "history/events.jsonl line 2: field 'complete' must be true or false, not str"),
    ("events", [1, 2], "history/events.jsonl line 2: not a JSON object"),
])
def test_bad_field_is_one_line_naming_file_and_line(tmp_path: Path, file: str, line: Any, message: str) -> None:
    h = clean(2)
    h[file] = h[file][:1] + [line] + h[file][1:]  # never the last line: those are not excused either
    run = make_run(tmp_path, **h)
    with pytest.raises(HistoryError) as error:
        read_history(run / "history")
    assert str(error.value) == message


def test_bad_fields_on_the_last_line_are_not_excused(tmp_path: Path) -> None:
    h = clean(1)
    h["sends"].append({"producer": "p0"})
    with pytest.raises(HistoryError, match="line 2: missing field 'seq'"):
        read_history(make_run(tmp_path, **h) / "history")


def test_missing_history(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history directory"):
        check_run(tmp_path)
    (tmp_path / "history").mkdir()
    with pytest.raises(NotJudged, match=r"^not judged: history/sends\.jsonl is missing \(no send was recorded\)$"):
        check_run(tmp_path)


def test_unknown_fields_and_blank_lines_are_ignored(tmp_path: Path) -> None:
    h = clean()
    h["sends"][0]["extra"] = {"nested": [1]}
    h["reads"].insert(2, "   ")
    results = run_check(tmp_path, **h)
    assert nonzero(results) == {}
    assert results["examples"]["lost"] == []


# --- scenario.yaml, promises, results.json -----------------------------------------------------------


def scenario_with(config: dict[str, Any]) -> dict[str, Any]:
    return {"name": "s", "workload": {"producers": {"count": 2, "config": config}}}


@pytest.mark.parametrize(("config", "expected"), [
    ({"acks": "all"}, Promises(False, False)),
    ({"enable.idempotence": True}, Promises(True, True)),
    ({"enable.idempotence": "true"}, Promises(True, True)),
    ({"enable.idempotence": "false", "max.in.flight.requests.per.connection": 5}, Promises(False, False)),
    ({"transactional.id": "tx-1"}, Promises(True, True)),
    ({"max.in.flight.requests.per.connection": 1}, Promises(False, True)),
    ({"max.in.flight": "1"}, Promises(False, True)),
])
def test_promises_from_scenario(config: dict[str, Any], expected: Promises) -> None:
    assert promises_from_scenario(scenario_with(config)) == (expected, None)


def test_promises_without_a_scenario() -> None:
    assert promises_from_scenario(None) == (Promises(False, False), NO_SCENARIO_NOTE)
    promises, note = promises_from_scenario({"name": "s"})
    assert promises == Promises(False, False) and note


def test_check_run_reads_the_promises_from_scenario_yaml(tmp_path: Path) -> None:
    h = clean()
    h["reads"].append(read("p0", 1, 9))  # a duplicate
    yaml_text = "name: s\nworkload:\n  producers:\n    config:\n      enable.idempotence: true\n"
    results = check_run(make_run(tmp_path / "a", **h, scenario=yaml_text))
    assert results["promises"] == {"idempotent": True, "ordered": True, "hanging_after_ms": 70000}
    assert results["valid"] is False and NO_SCENARIO_NOTE not in results["notes"]
    results = check_run(make_run(tmp_path / "b", **h))
    assert results["promises"] == {"idempotent": False, "ordered": False, "hanging_after_ms": 70000}
    assert results["valid"] is True and results["notes"][0] == NO_SCENARIO_NOTE


def test_broken_scenario_yaml_is_one_line(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean(), scenario="workload: [unclosed\n")
    with pytest.raises(HistoryError) as error:
        check_run(run)
    assert str(error.value).startswith("scenario.yaml") and "\n" not in str(error.value)


def test_validity_rule() -> None:
    assert tuple(DEFINITIONS) == ANOMALIES
    zero = dict.fromkeys(COUNTS, 0)
    assert validity(zero, IDEMPOTENT)
    for name in ("lost", "divergent", "unexpected", "failed_but_present", "consumer_skipped"):
        assert not validity({**zero, name: 1}, NONE)
    for name in ("lost_after_read", "consumer_redelivered", "unknown", "lost_unverifiable"):
        assert validity({**zero, name: 1}, IDEMPOTENT)
    assert validity({**zero, "duplicated": 1}, ORDERED) and not validity({**zero, "duplicated": 1}, IDEMPOTENT)
    assert validity({**zero, "reordered": 1}, NONE) and not validity({**zero, "reordered": 1}, ORDERED)


def test_write_results_is_atomic_json(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    results = check_run(run)
    path = write_results(RunDir(run), results)
    assert path == run / "results.json"
    assert json.loads(path.read_text()) == results
    assert sorted(p.name for p in run.iterdir()) == ["history", "results.json"]  # no temp file left


# --- corners of the reader and the checker ----------------------------------------------------------


@pytest.mark.parametrize("line", [
    send("p0", 1), send("p0", 2, status="fail"), send("p0", 3, status="unknown", partition=None),
    {**send("p0", 4), "offset": None}, {k: v for k, v in send("p0", 5, status="unknown").items() if k != "offset"},
    {**send("p0", 6), "complete_ns": None}, {k: v for k, v in send("p0", 7).items() if k != "complete_ns"},
])
def test_quick_and_checked_send_parsing_agree(line: dict[str, Any]) -> None:
    assert history_module.parse_send(line, 7) == history_module.checked_send(line, 7)


@pytest.mark.parametrize("line", [
    read("p0", 1, 1), read("p0", 1, 1, phase="live"), read(None, None, 2),
    {k: v for k, v in read("p0", 1, 1).items() if k != "group"},
])
def test_quick_and_checked_read_parsing_agree(line: dict[str, Any]) -> None:
    assert history_module.parse_read(line, 7) == history_module.checked_read(line, 7)


def test_history_built_in_memory(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3))
    on_disk = read_history(make_run(tmp_path, **h) / "history")
    in_memory = History(sends=on_disk.sends, reads=on_disk.reads, events=on_disk.events)
    results = check(in_memory, NONE)
    [example] = results["examples"]["lost"]
    assert example["send"] == {"producer": "p0", "seq": 3, "topic": TOPIC, "partition": 0, "offset": 3,
                               "status": "ok", "complete_ns": 4}
    assert results["anomaly_ranges"] == [{"anomaly": "lost", "topic": TOPIC, "partition": 0, "count": 1,
                                          "first_ns": 4, "last_ns": 4, "min_offset": 3, "max_offset": 3}]


def test_ack_without_partition_is_judged_against_its_topic(tmp_path: Path) -> None:
    h = clean()
    h["sends"] += [{**send("p0", 3), "partition": None}, {**send("p0", 4), "partition": None}]
    h["reads"].append(read("p0", 3, 0, partition=1))
    h["events"].append(final_read(1, high_watermark=1))
    results = run_check(tmp_path, **h)
    assert results["counts"]["lost"] == 1  # p0/4, nowhere in a completely read topic
    assert any("name no partition" in n for n in results["notes"])
    h["events"].append(final_read(2, complete=False))
    results = run_check(tmp_path / "again", **h)
    assert (results["counts"]["lost"], results["counts"]["lost_unverifiable"]) == (0, 1)


def test_live_reads_without_a_group(tmp_path: Path) -> None:
    h = clean()
    h["sends"].append(send("p0", 3))
    h["reads"] += [{**read("p0", 3, 3, phase="live"), "group": None}] * 2
    results = run_check(tmp_path, **h)
    # read twice, but by no group (and counted as c0's step back, no assignment being recorded)
    assert nonzero(results) == {"lost": 1, "lost_after_read": 1, "poll_nonmonotonic_rebalance": 1}
    assert any("name no consumer group" in n for n in results["notes"])
