"""The workload without a cluster: message values, send outcomes, history files, the line protocol,
the harness's bookkeeping, and workload processes that are killed, stopped or orphaned."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from rundir.layout import RunDir
from workloads import protocol
from workloads.client import WorkloadError
from workloads.child import LineOut
from workloads.consumer import (DEFAULT_ISOLATION, ConsumeLoop, ConsumerClient, ReadLines, ReaderClient,
                                consumer_settings, librdkafka_consumer_settings, read_line_head, read_record, slices)
from workloads.history import FLUSH_INTERVAL_S, History, HistoryWriter, RunClock, json_line
from workloads.messages import decode, decode_source, encode, encode_output
from workloads.pending import PendingSends, Transactions
from workloads.pipeline import PipelineLoop
from workloads.producer import ProduceLoop, ProducerClient, TransactionalLoop, outcome
from workloads.txn_policy import ON_COMMIT_ERROR, next_call
from workloads.protocol import (BatchDone, Completed, End, Hello, Invoked, Polled, Processed, TxnBegun, TxnOutcome,
                                TxnRequested, Withdrawn)
from waiting import eventually


def test_values_carry_producer_and_seq_at_the_requested_size() -> None:
    value = encode("p3", 12345, 100)
    assert len(value) == 100
    assert decode(value) == ("p3", 12345)
    assert decode(b"not ours") == (None, None)
    assert decode(None) == (None, None)


def test_a_pipeline_output_value_names_its_input() -> None:
    value = encode_output("pipe0", 7, "p0.1", 42)
    assert decode(value) == ("pipe0", 7) and decode_source(value) == ("p0.1", 42)
    for other in (encode("p0", 3, 100), encode("p0", 3, 0), b"a:1:b:2:padding", b"a:1:b:x:", None):
        assert decode_source(other) == (None, None)


def test_only_definite_refusals_are_failures() -> None:
    assert outcome(None) == "ok"
    assert outcome(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)) == "fail"
    for code in (KafkaError._MSG_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT,
                 KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                 KafkaError._UNKNOWN_PARTITION, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError._PURGE_QUEUE):  # an abort purges retries too, whose first attempt may be in the log
        assert outcome(KafkaError(code)) == "unknown", KafkaError(code).name()


def test_history_is_flushed_within_a_second_and_fsynced_on_close(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history" / "sends.jsonl")
    writer.write({"producer": "p0", "seq": 0})
    written = tmp_path / "history" / "sends.jsonl"
    eventually(lambda: written.read_text().endswith("\n"), FLUSH_INTERVAL_S * 3, "the line is flushed",
               interval_s=0.02, ignoring=(FileNotFoundError,))
    assert json.loads(written.read_text()) == {"producer": "p0", "seq": 0}
    writer.write({"producer": "p0", "seq": 1})
    writer.close()
    writer.close()
    lines = (tmp_path / "history" / "sends.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [0, 1]


# ---------------------------------------------------------------------- the line protocol


def test_protocol_lines_round_trip() -> None:
    lines = [protocol.hello(42), protocol.invoked(10, 3, 123), protocol.withdrawn(12, 1),
             protocol.completed("ok", 10, 2, 99, 456, None),
             protocol.completed("unknown", 11, None, None, 457, "in flight at the end of the run"),
             protocol.polled(2, 500), protocol.processed(1, 7, "p0.1", 5, 600),
             protocol.processed(0, 8, None, None, 601), protocol.BATCH_DONE, protocol.END]
    parsed = [protocol.parse(line) for line in protocol.encode_lines(lines).split(b"\n") if line]
    assert parsed == [Hello(42), Invoked(10, 3, 123), Withdrawn(12, 1), Completed("ok", 10, 2, 99, 456, None),
                      Completed("unknown", 11, None, None, 457, "in flight at the end of the run"),
                      Polled(2, 500), Processed(1, 7, "p0.1", 5, 600), Processed(0, 8, None, None, 601),
                      BatchDone(), End()]


def test_transaction_lines_round_trip() -> None:
    lines = [protocol.txn_begun(3, 100), protocol.txn_requested(3, "abort", 150),
             protocol.txn_outcome(3, "aborted", 170, None), protocol.txn_outcome(4, "unknown", 9, "commit did not x")]
    parsed = [protocol.parse(line) for line in protocol.encode_lines(lines).split(b"\n") if line]
    assert parsed == [TxnBegun(3, 100), TxnRequested(3, "abort", 150), TxnOutcome(3, "aborted", 170, None),
                      TxnOutcome(4, "unknown", 9, "commit did not x")]


@pytest.mark.parametrize("line", [b"T 1", b"T 1 x", b"C 1 maybe 5", b"C 1 commit", b"O 1 done 5 -",
                                  b"O 1 committed 5", b"O x committed 5 -"])
def test_a_transaction_line_no_process_writes_is_refused(line: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse(line)


@pytest.mark.parametrize("line", [b"Z 1", b"I 1 2", b"S ok x 1 2 3 -", b"S maybe 1 1 2 3 -", b"S ok 1 1 2 -3 -",
                                  b"S ok 1 1 2", b"R 1 2 p0 x 5", b"R 1 2 p0 3", b"H", b"ED"])
def test_a_line_no_process_writes_is_refused(line: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse(line)


def test_a_line_cut_off_by_a_kill_is_never_parsed() -> None:
    splitter = protocol.LineSplitter()
    data = protocol.encode_lines([protocol.invoked(0, 5, 1), protocol.completed("ok", 0, 1, 2, 3, None)])
    cut = data[:-7]  # killed in the middle of the second line
    first, second = splitter.feed(cut[:4]), splitter.feed(cut[4:])
    assert first == [] and second == [b"I 0 5 1"]
    assert splitter.partial.startswith(b"S ok")


# ---------------------------------------------------------------------- bookkeeping in the harness


def test_pending_seqs_are_invoked_completed_withdrawn_and_drained() -> None:
    pending = PendingSends()
    pending.invoke(0, 5, 100)
    pending.invoke(5, 2, 200)
    assert pending.complete(3) == 100 and pending.complete(3) is None
    pending.withdraw(6, 1)
    assert len(pending) == 5
    assert pending.drain() == [(0, 100), (1, 100), (2, 100), (4, 100), (5, 200)]
    assert len(pending) == 0 and pending.drain() == []


class ListWriter:
    """Stands in for a HistoryWriter; every line must be JSON."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(json.loads(json.dumps(record)))

    def write_many(self, records: list[dict]) -> None:
        self.records.extend(records)

    def write_lines(self, lines: list[bytes]) -> None:
        self.records.extend(json.loads(line) for line in lines)


def wire(*lines: str) -> list[bytes]:
    """Protocol lines as the harness reads them from a process."""
    return [line.encode() for line in lines]


def producer_client(sends: ListWriter) -> ProducerClient:
    return ProducerClient("p0", "nowhere:9092", "t", {}, sends, RunClock())  # type: ignore[arg-type]


def test_completions_become_sends_and_a_dead_process_leaves_info_never_fail() -> None:
    sends = ListWriter()
    p = producer_client(sends)
    p.on_lines("p0", wire(protocol.invoked(0, 4, 10), protocol.completed("ok", 0, 1, 50, 20, None),
                          protocol.completed("fail", 1, None, None, 21, "MSG_SIZE_TOO_LARGE")))
    p.on_lines("p0", wire(protocol.completed("ok", 2, 0, 7, 22, None)))
    p.on_exit("p0", clean=False, how="killed")
    by_seq = {r["seq"]: r for r in sends.records}
    assert [(s, by_seq[s]["status"]) for s in sorted(by_seq)] == [(0, "ok"), (1, "fail"), (2, "ok"), (3, "unknown")]
    assert by_seq[3]["error"] == "producer process killed" and by_seq[3]["invoke_ns"] == 10
    assert by_seq[0] | {"complete_ns": 0} == {"producer": "p0", "seq": 0, "topic": "t", "key": "0", "partition": 1,
                                              "offset": 50, "status": "ok", "error": None, "invoke_ns": 10,
                                              "complete_ns": 0, "txn": None}
    assert (p.counts.ok, p.counts.fail, p.counts.unknown) == (2, 1, 1)


def test_hand_formatted_sends_are_the_json_of_the_record() -> None:
    sends = ListWriter()
    p = ProducerClient("p0", "nowhere:9092", 't"\u00e9\\', {}, sends, RunClock())  # type: ignore[arg-type]
    p.on_lines("p0.3", wire(protocol.invoked(7, 2, 5),
                            protocol.completed("unknown", 7, 2, None, 9, 'a "quoted" \u00e9'),
                            protocol.completed("ok", 8, 0, 12345678901, 10, None)))
    assert sends.records == [
        {"producer": "p0.3", "seq": 7, "topic": 't"\u00e9\\', "key": "7", "partition": 2, "offset": None,
         "status": "unknown", "error": 'a "quoted" \u00e9', "invoke_ns": 5, "complete_ns": 9, "txn": None},
        {"producer": "p0.3", "seq": 8, "topic": 't"\u00e9\\', "key": "8", "partition": 0, "offset": 12345678901,
         "status": "ok", "error": None, "invoke_ns": 5, "complete_ns": 10, "txn": None}]


def test_an_acknowledgement_takes_the_quick_path_to_the_very_bytes_of_its_record() -> None:
    """An ``S ok`` line outside transactions is formatted by the harness's quick path (ACK_LINE): the bytes are
    json_line of the send's record, and a completion of a seq never announced is dropped as on the other path."""
    written: list[bytes] = []
    sends = ListWriter()
    sends.write_lines = written.extend  # type: ignore[method-assign]
    p = ProducerClient("p0.2", "nowhere:9092", 't"\u00e9', {}, sends, RunClock())  # type: ignore[arg-type]
    p.on_lines("p0.2", wire(protocol.invoked(99, 2, 5), protocol.completed("ok", 99, 5, 123, 9, None),
                            protocol.completed("ok", 100, 0, 0, 10, None), protocol.completed("ok", 7, 1, 1, 11, None),
                            protocol.completed("unknown", 7, 1, None, 12, "x")))
    assert (p.counts.ok, p.counts.fail, p.counts.unknown, len(p.pending)) == (2, 0, 0, 0)
    assert written == [json_line(p._record("p0.2", 99, "ok", 5, 5, 123, None, 9, None)),
                       json_line(p._record("p0.2", 100, "ok", 5, 0, 0, None, 10, None))]


def test_a_foreign_line_from_a_producer_is_a_protocol_error() -> None:
    p = producer_client(ListWriter())
    with pytest.raises(protocol.ProtocolError):
        p.on_lines("p0", [b"S ok 1 2 3 4"])


def test_a_clean_stop_calls_what_is_left_in_flight_at_the_end() -> None:
    sends = ListWriter()
    p = producer_client(sends)
    p.on_lines("p0.1", wire(protocol.invoked(0, 3, 10), protocol.withdrawn(2, 1),
                            protocol.completed("unknown", 0, None, None, 20, "_MSG_TIMED_OUT")))
    p.on_exit("p0.1", clean=True, how="exited with code 0")
    assert [(r["producer"], r["seq"], r["status"], r["error"]) for r in sends.records] == [
        ("p0.1", 0, "unknown", "_MSG_TIMED_OUT"), ("p0.1", 1, "unknown", "in flight at the end of the run")]


TXNS = {"size": 3, "abort_probability": 0.0, "timeout_ms": 60000, "commit_timeout_s": 10,
        "transactional_id": "kchaos-run-p0", "partitions": 3, "seed": 1}


def txn_client(sends: ListWriter, txns: ListWriter) -> ProducerClient:
    return ProducerClient("p0", "nowhere:9092", "t", {}, sends,  # type: ignore[arg-type]
                          RunClock(), transactions=TXNS, txns=txns)  # type: ignore[arg-type]


def test_transactions_give_each_send_its_txn_and_each_outcome_a_txns_line() -> None:
    sends, txns = ListWriter(), ListWriter()
    p = txn_client(sends, txns)
    assert p.spec()["transactions"] == TXNS
    p.on_lines("p0", wire(protocol.txn_begun(0, 5), protocol.invoked(0, 3, 6),
                          protocol.completed("ok", 0, 0, 10, 7, None), protocol.txn_requested(0, "commit", 8)))
    p.on_lines("p0", wire(protocol.completed("ok", 1, 1, 4, 9, None), protocol.completed("ok", 2, 2, 4, 9, None),
                          protocol.txn_outcome(0, "committed", 11, None),
                          protocol.txn_begun(1, 12), protocol.invoked(3, 2, 13), protocol.withdrawn(4, 1),
                          protocol.completed("unknown", 3, None, None, 14, "_PURGE_QUEUE"),
                          protocol.txn_requested(1, "abort", 15), protocol.txn_outcome(1, "aborted", 16, None)))
    assert [(r["seq"], r["status"], r["txn"]) for r in sends.records] == [(0, "ok", 0), (1, "ok", 0), (2, "ok", 0),
                                                                         (3, "unknown", 1)]
    assert txns.records == [
        {"producer": "p0", "txn": 0, "outcome": "committed", "intent": "commit", "error": None, "invoke_ns": 8,
         "complete_ns": 11, "begin_ns": 5},
        {"producer": "p0", "txn": 1, "outcome": "aborted", "intent": "abort", "error": None, "invoke_ns": 15,
         "complete_ns": 16, "begin_ns": 12}]
    assert p.outcomes == {"committed": 1, "aborted": 1} and p.book is not None and p.book.open is None


@pytest.mark.parametrize("requested, intent", [(False, None), (True, "commit")])
def test_a_transaction_open_when_its_process_dies_is_unknown(requested: bool, intent: str | None) -> None:
    """Killed with the transaction open (intent null: it never committed) or with its commit in flight."""
    sends, txns = ListWriter(), ListWriter()
    p = txn_client(sends, txns)
    p.on_lines("p0", wire(protocol.txn_begun(0, 5), protocol.invoked(0, 3, 6),
                          protocol.txn_outcome(0, "committed", 7, None), protocol.txn_begun(1, 8),
                          protocol.invoked(3, 3, 9), protocol.completed("ok", 3, 0, 1, 10, None),
                          *([protocol.txn_requested(1, "commit", 11)] if requested else [])))
    p.on_exit("p0", clean=False, how="killed")
    assert [(r["seq"], r["status"], r["txn"]) for r in sends.records] == [
        (3, "ok", 1), (0, "unknown", 0), (1, "unknown", 0), (2, "unknown", 0), (4, "unknown", 1), (5, "unknown", 1)]
    last = txns.records[-1]
    assert last | {"complete_ns": 0} == {"producer": "p0", "txn": 1, "outcome": "unknown", "intent": intent,
                                         "error": "producer process killed", "invoke_ns": 11 if requested else None,
                                         "complete_ns": 0, "begin_ns": 8}
    # the replacement counts its own transactions from 0, with nothing left of its predecessor's
    p.on_lines("p0.1", wire(protocol.txn_begun(0, 20), protocol.invoked(0, 1, 21),
                            protocol.completed("ok", 0, 0, 9, 22, None),
                            protocol.txn_outcome(0, "committed", 23, None)))
    assert (sends.records[-1]["producer"], sends.records[-1]["txn"]) == ("p0.1", 0)
    assert [(t["producer"], t["txn"], t["outcome"]) for t in txns.records] == [
        ("p0", 0, "committed"), ("p0", 1, "unknown"), ("p0.1", 0, "committed")]


def test_a_clean_exit_with_nothing_open_writes_no_txns_line() -> None:
    sends, txns = ListWriter(), ListWriter()
    p = txn_client(sends, txns)
    p.on_lines("p0", wire(protocol.txn_begun(0, 5), protocol.txn_outcome(0, "committed", 7, None), protocol.END))
    p.on_exit("p0", clean=True, how="exited with code 0")
    assert len(txns.records) == 1 and sends.records == []


@pytest.mark.parametrize("lines", [
    [protocol.txn_begun(0, 1), protocol.txn_begun(1, 2)],                # began while one is open
    [protocol.txn_outcome(0, "committed", 1, None)],                     # an outcome of nothing open
    [protocol.txn_begun(0, 1), protocol.txn_requested(1, "commit", 2)],  # asked for another one
])
def test_transaction_lines_out_of_order_are_a_protocol_error(lines: list[str]) -> None:
    with pytest.raises(protocol.ProtocolError):
        txn_client(ListWriter(), ListWriter()).on_lines("p0", wire(*lines))


def test_the_book_knows_the_txn_of_every_seq_announced_under_a_transaction() -> None:
    book = Transactions()
    book.claim(0, 2)  # before any transaction: not transactional
    book.begin(4, 100)
    book.claim(2, 3)
    assert [book.release(s) for s in range(6)] == [None, None, 4, 4, 4, None]
    book.request(4, "commit", 120)
    assert book.abandon("p0", 130, "producer process killed") == {
        "producer": "p0", "txn": 4, "outcome": "unknown", "intent": "commit", "error": "producer process killed",
        "invoke_ns": 120, "complete_ns": 130, "begin_ns": 100}
    assert book.open is None and book.abandon("p0", 131, "x") is None


def test_a_transactional_producer_needs_a_txns_writer() -> None:
    with pytest.raises(ValueError):
        ProducerClient("p0", "nowhere:9092", "t", {}, ListWriter(),  # type: ignore[arg-type]
                       RunClock(), transactions=TXNS)


def test_consumer_lines_become_live_reads_of_the_group() -> None:
    reads = ListWriter()
    c = ConsumerClient("c0", "nowhere:9092", "t", "app", "auto", {}, reads, RunClock(), 100)  # type: ignore[arg-type]
    changes: list[tuple[str, protocol.AssignmentChanged]] = []
    c.on_assignment = lambda name, change: changes.append((name, change))
    c.on_lines("c0", wire(protocol.assignment_changed(3, "assigned", [1, 0], 4), protocol.polled(2, 5)))
    assert c.processing
    assert changes == [("c0", protocol.AssignmentChanged(3, "assigned", (0, 1), 4))]
    c.on_lines("c0", wire(protocol.processed(1, 7, "p0", 3, 9), protocol.processed(1, 8, None, None, 9)))
    assert c.processing and c.count == 2
    c.on_exit("c0", clean=False, how="killed")
    assert not c.processing
    assert reads.records == [{"consumer": "c0", "group": "app", "phase": "live", "topic": "t", "partition": 1,
                              "offset": 7, "producer": "p0", "seq": 3, "time_ns": 9, "isolation": "read_committed",
                              "assignment": 3},
                             {"consumer": "c0", "group": "app", "phase": "live", "topic": "t", "partition": 1,
                              "offset": 8, "producer": None, "seq": None, "time_ns": 9,
                              "isolation": "read_committed", "assignment": 3}]


@pytest.mark.parametrize("commit, processing_ms", [("auto", 0), ("manual", 0), ("auto", 250)])
def test_a_consumer_process_sends_its_reads_lines_ready_to_write(commit: str, processing_ms: float) -> None:
    """The librdkafka consumer process formats each processed record's reads.jsonl line itself: what the harness
    writes is the record's dict as ``read_record`` makes it, a pipeline's output with its source, a foreign value
    with nulls; the batch is polled and then done, in slices when processing takes time."""
    values = [encode("p0", 3, 100), encode("p1.1", 0, 20), encode_output("pipe0", 4, "p0", 9), b"foreign",
              b'we ird"x:5:xx']
    batch = [Message(topic="t", partition=i % 2, offset=100 + i, value=v) for i, v in enumerate(values)]
    read_fd, write_fd = os.pipe()
    spec = {"topic": "t", "commit": commit, "processing_ms": processing_ms, "config": {},
            "bootstrap_servers": "nowhere:9092", "name": "c0.2", "group": "app", "isolation": None}
    loop = ConsumeLoop(spec, RunClock(), threading.Event(), LineOut(write_fd))
    try:
        loop._commit = lambda batch: None  # type: ignore[method-assign]  # no broker to commit to
        # what subscribe()'s on_assign says, as librdkafka would call it (from inside consume())
        loop.assignments.callbacks()["on_assign"](loop.consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])
        loop._process(batch)
    finally:
        loop.consumer.close()
        os.close(write_fd)
    wire_lines = protocol.LineSplitter().feed(os.read(read_fd, 1 << 20))
    os.close(read_fd)
    reads = ListWriter()
    c = ConsumerClient("c0", "nowhere:9092", "t", "app", commit, {}, reads, RunClock(),  # type: ignore[arg-type]
                       processing_ms)
    c.on_lines("c0.2", wire_lines)
    assert c.count == len(values) and c.batches_polled == c.batches_done == 1 and not c.processing
    times = {r["time_ns"] for r in reads.records}
    assert reads.records == [read_record(msg, "c0.2", "app", "live", r["time_ns"], DEFAULT_ISOLATION, 1)
                             for msg, r in zip(batch, reads.records)]
    assert reads.records[2]["from_producer"] == "p0" and reads.records[3]["producer"] is None
    assert len(times) == (3 if processing_ms else 1)  # 250 ms: 3 slices of at most 2 records, each its own time


def test_a_reads_line_of_another_consumer_is_refused() -> None:
    """A consumer process can only write its own reads: a line with another consumer's name, group or topic is
    a protocol error (the harness then kills the process), never a read."""
    c = ConsumerClient("c0", "nowhere:9092", "t", "app", "auto", {}, ListWriter(), RunClock())  # type: ignore[arg-type]
    for head in (read_line_head("c1", "app", "live", "t"), read_line_head("c0", "other", "live", "t"),
                 read_line_head("c0", "app", "final", "t"), read_line_head("c0", "app", "live", "u")):
        with pytest.raises(protocol.ProtocolError):
            c.on_lines("c0", [head + b'1,"offset":2,"producer":"p0","seq":3,"time_ns":4,"isolation":"x"}'])
    assert c.count == 0


@pytest.mark.parametrize("isolation, config, effective", [
    (None, {}, "read_committed"),                      # librdkafka's default (measured)
    (None, {"isolation.level": "read_uncommitted"}, "read_uncommitted"),
    ("read_uncommitted", {"isolation.level": "read_committed"}, "read_uncommitted"),
    ("read_committed", {}, "read_committed"),
])
def test_live_reads_say_which_isolation_the_consumer_really_reads_with(isolation: str | None, config: dict,
                                                                         effective: str) -> None:
    reads = ListWriter()
    c = ConsumerClient("c0", "nowhere:9092", "t", "app", "auto", config, reads, RunClock(),  # type: ignore[arg-type]
                       isolation=isolation)  # type: ignore[arg-type]
    c.on_lines("c0", wire(protocol.processed(0, 1, "p0", 1, 2)))
    assert reads.records[0]["isolation"] == effective
    assert c.spec()["isolation"] == isolation
    settings = consumer_settings(config, "b:9092", "c0", "app", "auto", isolation)  # type: ignore[arg-type]
    assert settings.get("isolation.level", DEFAULT_ISOLATION) == effective


@pytest.mark.parametrize("records, processing_ms, sizes", [
    (500, 0, [500]), (500, 250, [167, 167, 166]), (2, 1000, [1, 1]), (7, 100, [7]),
])
def test_processing_is_reported_in_slices(records: int, processing_ms: float, sizes: list[int]) -> None:
    batch = list(range(records))
    parts = slices(batch, processing_ms)  # type: ignore[arg-type]
    assert [len(p) for p in parts] == sizes and sum(parts, []) == batch


def test_a_restarted_producer_gets_a_new_id_without_colons() -> None:
    p = producer_client(ListWriter())
    assert p.name == "p0"
    p.generation = 2
    assert p.name == "p0.2" and ":" not in p.name
    assert decode(encode(p.name, 5, 30)) == ("p0.2", 5)


# ---------------------------------------------------------------------- the transactional loop, its client faked


class FakeTxnProducer:
    """Stands in for confluent_kafka.Producer: deliveries succeed at once; commit/abort answer from a script."""

    def __init__(self, commits: list[KafkaError | None], aborts: list[KafkaError | None] | None = None,
                 stall_s: float = 0) -> None:
        self.commits, self.aborts = list(commits), list(aborts or [])
        self.stall_s = stall_s
        self.calls: list[str] = []
        self._reports: list[tuple[int, int]] = []
        self.on_delivery: Callable | None = None  # the real one's "on_delivery" setting

    def __len__(self) -> int:
        return len(self._reports)

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        self._reports.append((int(key), partition))

    def poll(self, timeout: float = 0) -> int:
        reports, self._reports = self._reports, []
        assert self.on_delivery is not None
        for seq, partition in reports:
            self.on_delivery(None, FakeMsg(seq, partition))
        return len(reports)

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        self.poll()
        return 0

    def _end(self, name: str, script: list[KafkaError | None]) -> None:
        self.calls.append(name)
        self.poll()
        error = script.pop(0) if script else None
        if error is not None:
            time.sleep(self.stall_s)
            raise KafkaException(error)

    def commit_transaction(self, timeout: float) -> None:
        self._end("commit", self.commits)

    def abort_transaction(self, timeout: float) -> None:
        self._end("abort", self.aborts)


class FakeMsg:
    def __init__(self, seq: int, partition: int) -> None:
        self._seq, self._partition = seq, partition

    def key(self) -> bytes:
        return str(self._seq).encode()

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._seq


class Lines:
    """Stands in for LineOut."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def send(self, lines: list[str]) -> None:
        self.lines.extend(lines)

    def send_bytes(self, lines: list[bytes]) -> None:
        self.lines.extend(line.decode() for line in lines)


def one_transaction(fake: FakeTxnProducer, abort_probability: float = 0.0, commit_timeout_s: float = 5,
                    stop: bool = False, on_commit_error: str = "replace"
                    ) -> tuple[list[protocol.Message], KafkaException | None]:
    """Run the loop on ``fake`` until its first transaction ended: what it said after the hello, what it raised."""
    spec = {"name": "p0", "topic": "t", "rate": None, "message_bytes": 10, "flush_timeout_s": 1,
            "bootstrap_servers": NO_BROKER, "config": {},
            "transactions": {**TXNS, "size": 4, "abort_probability": abort_probability,
                             "commit_timeout_s": commit_timeout_s, "on_commit_error": on_commit_error}}
    out, stopping = Lines(), threading.Event()
    loop = TransactionalLoop(spec, RunClock(), stopping, out)  # type: ignore[arg-type]
    loop.producer = fake  # type: ignore[assignment]
    fake.on_delivery = loop._on_delivery
    if stop:
        stopping.set()
    try:
        loop._transaction(0, 0, time.monotonic())
        raised = None
    except KafkaException as e:
        raised = e
    return [protocol.parse(line.encode()) for line in out.lines], raised


class CapturingProducer(FakeTxnProducer):
    """Keeps what produce() and produce_batch() were handed; produce_batch refuses the batch's messages at the
    indexes ``refuse`` names, with that error, as librdkafka does (an ``_error`` in the message's dict)."""

    def __init__(self, refuse: dict[int, int] | None = None) -> None:
        super().__init__(commits=[])
        self.produced: list[tuple[bytes, bytes]] = []
        self.refuse = refuse or {}
        self.batches = 0

    def produce(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        self.produced.append((key, value))
        super().produce(topic, key, value, partition if partition is not None else 0)

    def produce_batch(self, topic: str, messages: list[dict]) -> int:
        self.batches += 1
        good = 0
        for i, message in enumerate(messages):
            if i in self.refuse:
                message["_error"] = KafkaError(self.refuse[i])
            else:
                self.produce(topic, message["key"], message["value"])
                good += 1
        self.refuse = {}  # the next batch is taken whole
        return good


@pytest.mark.parametrize("name, size", [("p0", 100), ("p0.12", 100), ("p1", 5), ("p3", 0), ("pé", 12)])
def test_a_producer_sends_encodes_values_and_reports_acks_as_the_protocol_says(name: str, size: int) -> None:
    """The producer process builds each value in place (no encode() call a send) and formats an acknowledgement's
    S line straight from the message: both are what messages.encode and protocol.completed make."""
    spec = {"name": name, "topic": "t", "rate": None, "message_bytes": size, "flush_timeout_s": 1,
            "bootstrap_servers": NO_BROKER, "config": {}}
    out = Lines()
    loop = ProduceLoop(spec, RunClock(), threading.Event(), out)  # type: ignore[arg-type]
    fake = CapturingProducer()
    loop.producer, fake.on_delivery = fake, loop._on_delivery  # type: ignore[assignment]
    for first, count in [(0, 12), (95, 10), (99_995, 10)]:
        assert loop._send(first, count) == first + count
    seqs = [*range(12), *range(95, 105), *range(99_995, 100_005)]
    assert fake.produced == [(str(seq).encode(), encode(name, seq, size)) for seq in seqs]
    fake.poll()
    loop._report()
    acks = [protocol.parse(line.encode()) for line in out.lines if line.startswith("S ")]
    assert [(m.status, m.seq, m.partition, m.offset, m.error) for m in acks] == \
        [("ok", seq, 0, seq, None) for seq in seqs]  # FakeMsg: partition 0, offset = seq


def test_a_batch_the_client_refuses_in_part_is_produced_in_order_or_failed() -> None:
    """produce_batch(): a queue that filled refuses the rest of the batch, which then goes one by one, in seq
    order after what was taken; messages refused between accepted ones were never handed over: ``fail``."""
    spec = {"name": "p0", "topic": "t", "rate": None, "message_bytes": 20, "flush_timeout_s": 1,
            "bootstrap_servers": NO_BROKER, "config": {}}
    out = Lines()
    loop = ProduceLoop(spec, RunClock(), threading.Event(), out)  # type: ignore[arg-type]
    full = CapturingProducer(refuse={i: KafkaError._QUEUE_FULL for i in range(6, 10)})
    loop.producer, full.on_delivery = full, loop._on_delivery  # type: ignore[assignment]
    assert loop._send(0, 10) == 10
    assert [int(key) for key, _ in full.produced] == list(range(10)) and full.batches == 1
    mixed = CapturingProducer(refuse={3: KafkaError._UNKNOWN_PARTITION})
    loop.producer, mixed.on_delivery = mixed, loop._on_delivery  # type: ignore[assignment]
    assert loop._send(10, 5) == 15
    assert [int(key) for key, _ in mixed.produced] == [10, 11, 12, 14]
    loop._report()
    failed = [m for m in (protocol.parse(line.encode()) for line in out.lines) if isinstance(m, Completed)]
    assert [(m.status, m.seq, m.error) for m in failed] == [("fail", 13, "_UNKNOWN_PARTITION")]


class ProducerBeforeBatches(CapturingProducer):
    """A confluent-kafka release older than produce_batch() (2.5.0, run under a pinned workload.client_version)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "produce_batch":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_release_without_produce_batch_hands_each_message_to_produce() -> None:
    spec = {"name": "p0", "topic": "t", "rate": None, "message_bytes": 20, "flush_timeout_s": 1,
            "bootstrap_servers": NO_BROKER, "config": {}}
    loop = ProduceLoop(spec, RunClock(), threading.Event(), Lines())  # type: ignore[arg-type]
    old = ProducerBeforeBatches()
    loop.producer, old.on_delivery = old, loop._on_delivery  # type: ignore[assignment]
    assert loop._send(0, 10) == 10
    assert [int(key) for key, _ in old.produced] == list(range(10)) and old.batches == 0


def intent(said: list[protocol.Message]) -> str:
    [asked] = [m for m in said if isinstance(m, TxnRequested)]
    return asked.intent


def ended(said: list[protocol.Message]) -> tuple[str, str | None]:
    [last] = [m for m in said if isinstance(m, TxnOutcome)]
    return last.outcome, last.error


def test_a_transaction_spreads_its_messages_over_the_partitions_and_commits() -> None:
    fake = FakeTxnProducer(commits=[None])
    said, raised = one_transaction(fake)
    assert isinstance(said[0], TxnBegun) and said[0].txn == 0 and raised is None
    assert [(m.seq, m.partition) for m in said if isinstance(m, Completed)] == [(0, 0), (1, 1), (2, 2), (3, 0)]
    assert fake.calls == ["begin", "commit"] and intent(said) == "commit" and ended(said) == ("committed", None)
    assert isinstance(said[-1], TxnOutcome)  # after its messages' completions


def test_an_abort_on_purpose_waits_for_its_messages_to_reach_the_log() -> None:
    fake = FakeTxnProducer(commits=[])
    said, _ = one_transaction(fake, abort_probability=1.0)
    assert fake.calls == ["begin", "flush", "abort"]
    assert intent(said) == "abort" and ended(said) == ("aborted", None)


def test_stopping_commits_the_transaction_whatever_the_draw() -> None:
    said, _ = one_transaction(FakeTxnProducer(commits=[None]), abort_probability=1.0, stop=True)
    assert intent(said) == "commit" and ended(said) == ("committed", None)


def test_a_retriable_commit_is_retried_and_says_so() -> None:
    fake = FakeTxnProducer(commits=[KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True), None])
    said, _ = one_transaction(fake)
    assert fake.calls == ["begin", "commit", "commit"]
    assert ended(said) == ("committed", "retried after _TIMED_OUT")


def test_an_abortable_commit_error_aborts_the_transaction() -> None:
    fake = FakeTxnProducer(commits=[KafkaError(KafkaError.INVALID_TXN_STATE, "x", txn_requires_abort=True)])
    said, raised = one_transaction(fake)
    assert fake.calls == ["begin", "commit", "abort"] and raised is None
    assert intent(said) == "commit"  # what the application asked for; the outcome says what became of it
    assert ended(said) == ("aborted", "commit failed: INVALID_TXN_STATE")


def test_a_commit_that_never_answers_is_unknown_and_ends_the_producer() -> None:
    retriable = KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)
    said, raised = one_transaction(FakeTxnProducer(commits=[retriable] * 100, stall_s=0.1), commit_timeout_s=0.25)
    assert ended(said) == ("unknown", "commit did not complete within 0.25s (retried after _TIMED_OUT)")
    assert raised is not None and raised.args[0].fatal()  # the harness replaces a process that exits so


def test_a_fatal_commit_error_is_reported_unknown_before_the_process_ends() -> None:
    said, raised = one_transaction(FakeTxnProducer(commits=[KafkaError(KafkaError._FENCED, "fenced", fatal=True)]))
    assert ended(said) == ("unknown", "_FENCED") and raised is not None and raised.args[0].fatal()


# ---------------------------------------------------------------------- on_commit_error (workloads/txn_policy.py)

TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)
CONFLICT = KafkaError(KafkaError._CONFLICT, "Conflicting commit_transaction API call is already in progress",
                      retriable=True)


@pytest.mark.parametrize("policy, calling, kind, past, refused, then", [
    # whatever the policy: fatal and unclassifiable errors give up, an abortable commit aborts
    *[(p, c, "fatal", False, False, None) for p in ON_COMMIT_ERROR for c in ("commit", "abort")],
    *[(p, "commit", "other", False, False, None) for p in ON_COMMIT_ERROR],
    *[(p, "commit", "abortable", True, False, "abort") for p in ON_COMMIT_ERROR],
    # replace: the same call until commit_timeout_s, then unknown
    ("replace", "commit", "retriable", False, False, "commit"),
    ("replace", "commit", "retriable", True, False, None),
    ("replace", "abort", "retriable", True, False, None),
    # retry: the same call, however long it takes
    ("retry", "commit", "retriable", True, False, "commit"),
    ("retry", "abort", "retriable", True, False, "abort"),
    # abort: abort after a timed-out commit; refused, the commit resumed, and not abandoned for another abort
    ("abort", "commit", "retriable", False, False, "abort"),
    ("abort", "abort", "refused", False, False, "commit"),
    ("abort", "commit", "retriable", True, True, "commit"),
    ("abort", "abort", "retriable", True, False, "abort"),
])
def test_what_follows_a_failed_commit_or_abort(policy: str, calling: str, kind: str, past: bool, refused: bool,
                                               then: str | None) -> None:
    assert next_call(policy, calling, kind, past, refused) == then  # type: ignore[arg-type]


def test_retry_resumes_a_timed_out_commit_past_commit_timeout_s_with_the_same_producer() -> None:
    fake = FakeTxnProducer(commits=[TIMED_OUT] * 5 + [None], stall_s=0.02)
    said, raised = one_transaction(fake, commit_timeout_s=0.03, on_commit_error="retry")
    assert raised is None and fake.calls == ["begin"] + ["commit"] * 6
    assert intent(said) == "commit" and ended(said) == ("committed", "retried after _TIMED_OUT")


def test_retry_still_aborts_on_an_abortable_error_and_ends_on_a_fatal_one() -> None:
    abortable = KafkaError(KafkaError.INVALID_TXN_STATE, "x", txn_requires_abort=True)
    said, raised = one_transaction(FakeTxnProducer(commits=[TIMED_OUT, abortable]), on_commit_error="retry")
    assert raised is None and ended(said) == ("aborted", "commit failed: INVALID_TXN_STATE")
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    said, raised = one_transaction(FakeTxnProducer(commits=[TIMED_OUT, fenced]), on_commit_error="retry")
    assert ended(said) == ("unknown", "_FENCED") and raised is not None and raised.args[0].fatal()


def test_abort_aborts_after_a_timed_out_commit_and_keeps_the_intent() -> None:
    fake = FakeTxnProducer(commits=[TIMED_OUT], aborts=[None])
    said, raised = one_transaction(fake, on_commit_error="abort")
    assert raised is None and fake.calls == ["begin", "commit", "abort"]
    assert intent(said) == "commit"  # the EndTxn(COMMIT) may have reached the coordinator: kchaos judges that
    assert ended(said) == ("aborted", "commit failed: _TIMED_OUT, aborted (on_commit_error abort)")


def test_an_abort_the_client_refuses_while_the_commit_is_in_progress_resumes_the_commit() -> None:
    """librdkafka refuses abort_transaction() while a timed-out commit_transaction() is its call in progress
    (_CONFLICT): the commit is resumed, and its outcome is the one the client reports."""
    fake = FakeTxnProducer(commits=[TIMED_OUT, TIMED_OUT, None], aborts=[CONFLICT])
    said, raised = one_transaction(fake, on_commit_error="abort")
    assert raised is None and fake.calls == ["begin", "commit", "abort", "commit", "commit"]
    assert ended(said) == ("committed", "commit failed: _TIMED_OUT, aborted (on_commit_error abort), abort refused "
                                        "(_CONFLICT): commit resumed; retried after _TIMED_OUT")


def test_replace_stays_the_default() -> None:
    said, raised = one_transaction(FakeTxnProducer(commits=[TIMED_OUT] * 100, stall_s=0.1), commit_timeout_s=0.25)
    assert ended(said)[0] == "unknown" and raised is not None and raised.args[0].fatal()


def test_the_pipeline_commits_as_its_policy_says() -> None:
    """PipelineLoop._commit: abort after a timed-out commit reports aborted (and rewinds, nothing assigned here);
    retry resumes it; replace gives up after commit_timeout_s."""
    def loop(policy: str, fake: FakeTxnProducer, commit_timeout_s: float = 5) -> tuple[PipelineLoop, Lines]:
        out = Lines()
        spec = {"name": "pipe0", "input_topic": "in", "output_topic": "out", "batch": 10,
                "commit_timeout_s": commit_timeout_s, "processing_ms": 0, "bootstrap_servers": NO_BROKER,
                "group": "g", "consumer_config": {}, "producer_config": {},
                "transactions": {"transactional_id": "t-pipe0", "timeout_ms": 60000,
                                 "commit_timeout_s": commit_timeout_s, "on_commit_error": policy}}
        pipe = PipelineLoop(spec, RunClock(), threading.Event(), out)  # type: ignore[arg-type]
        pipe.producer, pipe.txn = fake, 0  # type: ignore[assignment]
        fake.on_delivery = lambda err, msg: None
        return pipe, out

    def outcomes(out: Lines) -> list[tuple[str, str | None]]:
        return [(m.outcome, m.error) for m in map(protocol.parse, (line.encode() for line in out.lines))
                if isinstance(m, TxnOutcome)]

    pipe, out = loop("abort", FakeTxnProducer(commits=[TIMED_OUT], aborts=[None]))
    pipe._finish([])
    assert outcomes(out) == [("aborted", "commit failed: _TIMED_OUT, aborted (on_commit_error abort)")]
    pipe.consumer.close()
    pipe, out = loop("retry", FakeTxnProducer(commits=[TIMED_OUT] * 3 + [None], stall_s=0.02), commit_timeout_s=0.03)
    assert pipe._commit() is True and outcomes(out) == [("committed", "retried after _TIMED_OUT")]
    pipe.consumer.close()
    pipe, out = loop("replace", FakeTxnProducer(commits=[TIMED_OUT] * 100, stall_s=0.05), commit_timeout_s=0.2)
    with pytest.raises(KafkaException) as e:
        pipe._commit()
    assert e.value.args[0].fatal()
    assert outcomes(out) == [("unknown", "commit did not complete within 0.2s (retried after _TIMED_OUT)")]
    pipe.consumer.close()


# ---------------------------------------------------------------------- real processes, no broker

NO_BROKER = "127.0.0.1:9"  # nothing listens: produce() queues, nothing is ever acknowledged


def test_a_killed_producer_process_leaves_its_in_flight_seqs_as_info(tmp_path: Path) -> None:
    sends = HistoryWriter(tmp_path / "sends.jsonl")
    p = ProducerClient("p0", NO_BROKER, "t", {"queue.buffering.max.messages": 2000}, sends, RunClock(), rate=2000)
    p.start()
    try:
        p.wait_started()
        eventually(lambda: len(p.pending) >= 1000, 30, "1000 sends in flight", interval_s=0.1)
        pid = p.pid
        p.kill()
        assert not p.running and not Path(f"/proc/{pid}").exists()
    finally:
        p.abort()
    sends.close()
    rows = [json.loads(line) for line in (tmp_path / "sends.jsonl").read_text().splitlines()]
    assert len(rows) >= 1000 and {r["status"] for r in rows} == {"unknown"}
    assert {r["error"] for r in rows} == {"producer process killed"}
    assert sorted(r["seq"] for r in rows) == list(range(len(rows)))  # every announced seq, once
    assert p.failures == []  # killed on purpose: not a harness failure


def test_a_stopped_producer_process_reports_what_is_still_in_flight(tmp_path: Path) -> None:
    sends = HistoryWriter(tmp_path / "sends.jsonl")
    p = ProducerClient("p0", NO_BROKER, "t", {}, sends, RunClock(), rate=500, flush_timeout_s=0.5)
    p.start()
    p.wait_started()
    eventually(lambda: len(p.pending) > 0, 30, "sends in flight", interval_s=0.05)
    p.stop()
    sends.close()
    rows = [json.loads(line) for line in (tmp_path / "sends.jsonl").read_text().splitlines()]
    assert rows and {r["error"] for r in rows} == {"in flight at the end of the run"}
    assert p.failures == [] and not p.running


def test_a_transactional_producer_with_no_coordinator_starts_and_stops(tmp_path: Path) -> None:
    """init_transactions waits for a coordinator after the hello (a replacement may wait for a frozen one);
    a stop request still ends it cleanly, with no transaction begun."""
    sends, txns = HistoryWriter(tmp_path / "sends.jsonl"), HistoryWriter(tmp_path / "txns.jsonl")
    p = ProducerClient("p0", NO_BROKER, "t", {}, sends, RunClock(), rate=100,
                       transactions={**TXNS, "commit_timeout_s": 1}, txns=txns)
    p.start()
    try:
        p.wait_started()
        time.sleep(1.5)
        started = time.monotonic()
        p.stop()
        assert time.monotonic() - started < 10
    finally:
        p.abort()
    sends.close()
    txns.close()
    assert p.failures == [] and p.outcomes == {} and (tmp_path / "txns.jsonl").read_text() == ""


def test_a_workload_process_dies_with_its_harness(tmp_path: Path) -> None:
    """EOF on its stdin (the harness died, even by SIGKILL) ends the process at once."""
    c = ConsumerClient("c0", NO_BROKER, "t", "g", "auto", {}, HistoryWriter(tmp_path / "reads.jsonl"),
                       RunClock())
    c.start()
    try:
        c.wait_started()
        assert c._proc is not None and c._proc.stdin is not None
        c._proc.stdin.close()
        c._proc.wait(timeout=10)
    finally:
        c.abort()


def test_a_process_that_cannot_start_is_a_one_line_error(tmp_path: Path) -> None:
    p = ProducerClient("p0", NO_BROKER, "t", {"no.such.setting": 1}, HistoryWriter(tmp_path / "s.jsonl"),
                       RunClock())
    p.start()
    try:
        with pytest.raises(WorkloadError, match="p0 died before it started; stderr: .*no.such.setting"):
            p.wait_started()
        assert p.failures and "on its own" in p.failures[0]
    finally:
        p.abort()


@pytest.mark.parametrize("value", [encode("p0", 12, 100), encode("p1", 0, 4), encode_output("pipe0", 3, "p0", 7),
                                   b"foreign", None, b"", b"p0:007:x", b"p0:-1:x", b"\xff\xfe:1:x", b'we"ird:5:xx',
                                   b"p0:12:x:y"])
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_the_read_backs_fast_lines_are_the_records_json(value: bytes | None, isolation: str) -> None:
    """Formatting a read-back line from the record's fields gives the bytes of its dict, whatever the value."""
    msg = Message(topic="chaos", partition=4, offset=13_100, value=value)
    fast, = ReadLines("final-reader", None, "final", "chaos", isolation).lines([msg], 123_456_789, {4: 13_101})  # type: ignore[list-item]
    record = read_record(msg, "final-reader", None, "final", 123_456_789, isolation)  # type: ignore[arg-type]
    assert fast == json_line(record)
    assert json.loads(fast)["offset"] == 13_100


def test_the_read_back_keeps_only_records_below_the_high_watermark() -> None:
    """A batch may run past the high watermark measured before the read (records written since): those are not
    part of the read-back, and each partition has its own."""
    msgs = [Message(topic="chaos", partition=p, offset=o, value=encode("p0", 10 * p + o, 20))
            for p, o in [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]]
    lines = ReadLines("final-reader", None, "final", "chaos", "read_uncommitted").lines(msgs, 5, {0: 2, 1: 1})  # type: ignore[arg-type]
    assert [(json.loads(x)["partition"], json.loads(x)["offset"], json.loads(x)["seq"]) for x in lines] == \
        [(0, 0, 0), (1, 0, 10), (0, 1, 1)]


def test_application_consumers_pause_fetching_100ms_not_1s_unless_the_scenario_says() -> None:
    assert librdkafka_consumer_settings({}, "b:9092", "c0", "app", "auto")["fetch.queue.backoff.ms"] == 100
    assert librdkafka_consumer_settings({"fetch.queue.backoff.ms": 1000}, "b:9092", "c0", "app", "auto")[
        "fetch.queue.backoff.ms"] == 1000
    assert "fetch.queue.backoff.ms" not in consumer_settings({}, "b:9092", "c0", "app", "auto")  # the Java one


@pytest.mark.parametrize("line, source", [(b"R 4 13100 p0 12 123456789", {}),
                                          (b"R 4 13100 - - 123456789", {}),
                                          (b"R 4 13100 pipe0 3 123456789 p0 7",
                                           {"from_producer": "p0", "from_seq": 7})])
def test_the_java_read_backs_lines_are_the_records_json(tmp_path: Path, line: bytes, source: dict) -> None:
    """The Java reader's ``R`` lines become the same bytes as the record's dict (read_record's field order)."""
    (tmp_path / "history").mkdir()
    history = History(RunDir(tmp_path), RunClock())
    try:
        reader = ReaderClient("b:9092", "chaos", 6, {4: 20_000}, "read_committed", 10, history, "3.9.2")
        reader.on_lines(reader.name, [line])
    finally:
        history.close()
    written = (tmp_path / "history" / "reads.jsonl").read_bytes().splitlines()
    producer, seq = (None, None) if b" - " in line else (line.split(b" ")[3].decode(), int(line.split(b" ")[4]))
    assert written == [json_line({"consumer": "final-reader-committed", "group": None, "phase": "final",
                                  "topic": "chaos", "partition": 4, "offset": 13_100, "producer": producer,
                                  "seq": seq, "time_ns": 123_456_789, "isolation": "read_committed", **source})]
