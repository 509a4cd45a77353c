"""forensics/sequence_reuse.py on lines of a real run (txn-purged-sequence-reuse, librdkafka 2.16.1, Kafka 3.9.2
ZooKeeper, seed 1): p1's transaction 135 aborted after a time-out, its message 810 to chaos-0 was reported
purged although an attempt of it sits at offset 520, and 816 of committed transaction 136 was acknowledged there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics.chains import TransactionExplainer
from forensics.sequence_reuse import SequenceReuse, reports_purges

STARTED_MS = 1795831787608  # 2026-11-28T02:09:47.608989Z
TXNS = [
    {"producer": "p1", "txn": 135, "outcome": "aborted", "intent": "abort", "error": "retried after _TIMED_OUT",
     "invoke_ns": 27118454316, "complete_ns": 29224703174, "begin_ns": 25112572213},
    {"producer": "p1", "txn": 136, "outcome": "committed", "intent": "commit", "error": None,
     "invoke_ns": 29225227903, "complete_ns": 29288033514, "begin_ns": 29224800518}]
PURGED = {"producer": "p1", "seq": 810, "topic": "chaos", "key": "810", "partition": 0, "offset": None,
          "status": "unknown", "error": "_PURGE_QUEUE", "invoke_ns": 25112723248, "complete_ns": 29220675572,
          "txn": 135}
ACKED = {"producer": "p1", "seq": 816, "topic": "chaos", "key": "816", "partition": 0, "offset": 520, "status": "ok",
         "error": None, "invoke_ns": 29225079903, "complete_ns": 29279494972, "txn": 136}
HELD = {"consumer": "final-reader", "group": None, "phase": "final", "topic": "chaos", "partition": 0, "offset": 520,
        "producer": "p1", "seq": 810, "time_ns": 68919052987, "isolation": "read_uncommitted"}
FAULT = {"fault": "drop-responses", "target": "all-brokers", "targets": ["broker1", "broker2", "broker3"],
         "options": {}, "start_ns": 25133069378, "detail": "drop the answers to Produce from producer to broker1, "
         "broker2, broker3 on every connection"}
EVENTS = [{**FAULT, "kind": "fault", "phase": "start", "end_ns": None, "time_ns": 25133788065},
          {"kind": "request", "fault": "drop-responses", "api": "Produce", "client": "kchaos-p1", "node": 1,
           "action": "response-dropped", "cause": "matched", "held_ns": 25161805129, "released_ns": 25161805129,
           "response_error": "none", "detail": {"partitions": ["chaos-0"]}},
          {**FAULT, "kind": "fault", "phase": "heal", "end_ns": 29120227635, "time_ns": 29120238411}]
BATCH = {"node": "broker1", "topic": "chaos", "partition": 0, "base_offset": 520, "last_offset": 520, "count": 1,
         "producer_id": 0, "producer_epoch": 0, "base_sequence": 134, "last_sequence": 134, "leader_epoch": 0,
         "transactional": True, "control": False, "create_time_ms": 1795831812721}
LOST = {"anomaly": "lost", "topic": "chaos", "partition": 0, "count": 1, "first_ns": 29279494972,
        "last_ns": 29279494972, "min_offset": 520, "max_offset": 520}


def jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def reuse(tmp_path: Path, sends: list[dict[str, Any]], reads: list[dict[str, Any]],
          ranges: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return SequenceReuse(ranges, jsonl(tmp_path / "sends.jsonl", sends), jsonl(tmp_path / "reads.jsonl", reads),
                         TXNS, EVENTS, [BATCH], STARTED_MS, []).explain()


def test_an_ack_at_the_offset_of_a_purged_record_is_a_reused_sequence(tmp_path: Path) -> None:
    chains, left = reuse(tmp_path, [PURGED, ACKED], [HELD], [LOST])
    assert left == []
    [chain] = chains
    assert chain["cause"] == "sequence_reuse" and chain["fault"] == 1 and chain["count"] == 1
    assert chain["reused"] == [{"producer": "p1", "seq": 816, "txn": 136, "offset": 520, "held_seq": 810,
                                "held_txn": 135, "batch": {"producer_id": 0, "producer_epoch": 0,
                                                           "base_sequence": 134, "last_sequence": 134,
                                                           "base_offset": 520, "create_time_ms": 1795831812721}}]
    assert chain["sentence"] == (
        "chaos-0: p1's message 816 of transaction 136 (committed) was acknowledged at offset 520 at 29.3 s, where the "
        "log holds p1's message 810 of transaction 135 (aborted, retried after _TIMED_OUT); in a batch of producer "
        "id 0, epoch 0, sequence 134, created at 25.1 s; its Produce to broker1 at 25.2 s was answered and the "
        "answer dropped (fault 1: drop the answers to Produce from producer to broker1, broker2, broker3 on every "
        "connection at 25.1 s); the client reported 810 purged (_PURGE_QUEUE) at 29.2 s, and the broker took "
        "transaction 136's batch, with the same producer id, epoch and sequence, for a retry of it.")
    assert [s["time_ns"] for s in chain["steps"]] == sorted(s["time_ns"] for s in chain["steps"])


def test_other_losses_are_left_to_the_leader_chains(tmp_path: Path) -> None:
    # the record at 520 is another producer's acknowledged one: a new leader's log, not a reused sequence
    other = {**HELD, "producer": "p0", "seq": 5}
    assert reuse(tmp_path, [PURGED, ACKED, {**ACKED, "producer": "p0", "seq": 5}], [other], [LOST]) == ([], [LOST])
    # the message held there was acknowledged, not purged
    assert reuse(tmp_path, [{**PURGED, "status": "ok", "error": None, "offset": 520}, ACKED], [HELD],
                 [LOST]) == ([], [LOST])
    # no final read of uncommitted records at that offset: nothing to set the ack beside
    assert reuse(tmp_path, [PURGED, ACKED], [], [LOST]) == ([], [LOST])


def test_only_runs_that_report_a_purge_are_read(tmp_path: Path) -> None:
    assert reports_purges(jsonl(tmp_path / "a.jsonl", [PURGED])) is True
    assert reports_purges(jsonl(tmp_path / "b.jsonl", [ACKED])) is False
    assert reports_purges(tmp_path / "missing.jsonl") is False
    assert reuse(tmp_path, [ACKED], [HELD], [LOST]) == ([], [LOST])


def test_the_transaction_chain_names_the_reused_sequence(tmp_path: Path) -> None:
    chains, _ = reuse(tmp_path, [PURGED, ACKED], [HELD], [LOST, {**LOST, "anomaly": "divergent"}])
    examples = {"lost": [{"producer": "p1", "seq": 816, "send": ACKED}]}
    [told] = TransactionExplainer(EVENTS, TXNS, examples, chains).explain()
    assert told["sentence"] == (
        "transaction 136 of p1: 1 of its acknowledged messages lost although it committed; 1 of its messages were "
        "acknowledged at offsets that hold records of transaction 135, which the client had reported purged (a "
        "reused sequence: chaos-0 offset 520).")


def test_lines_without_the_fields_looked_at_are_skipped(tmp_path: Path) -> None:
    broken = [{"producer": "p1", "error": "_PURGE_QUEUE"}, {"status": "ok", "topic": "chaos"}, PURGED, ACKED]
    chains, left = reuse(tmp_path, broken, [{"phase": "final"}, HELD], [LOST])
    assert left == [] and [c["reused"][0]["seq"] for c in chains] == [816]
