"""The Java consumer side of issue #19 on a real cluster: the final read-back by Kafka's Java client (workloads/java
Reader) and the exactly-once pipeline (Pipeline), each against what the Python side of the harness and the
reference checker make of it. The application consumer killed mid-batch is test_client_crash's, on both clients."""

from __future__ import annotations

import json
import random
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from checkers.reference import check_run
from clusters.cluster import Cluster
from clusters.spec import TopicSpec
from clusters.topics import create_topic
from faults.client_crash import ClientCrashFault
from rundir.layout import RunDir
from workloads.client import LIBRARIES, Library
from workloads.consumer import Isolation, end_offsets, read_back, read_back_both
from workloads.history import History, RunClock
from workloads.java_client import java_command
from workloads.messages import encode, encode_output
from workloads.observer import record_committed
from workloads.pipeline import PipelineClient
from workloads.producer import ProducerClient
from helpers import jsonl, new_topic
from waiting import wait_for

pytestmark = pytest.mark.cluster





# ---------------------------------------------------------------------- the final read-back


def run_reader(cluster: Cluster, topic: str, high: dict[int, int], isolation: str, timeout_s: float = 30,
               origin_ns: int = 0) -> tuple[list[str], float]:
    """The Java reader's lines (as text) and how long it ran. Its stdin stays open: EOF would halt it."""
    spec = {"name": "final-reader-committed" if isolation == "read_committed" else "final-reader",
            "origin_ns": origin_ns, "verbose": False, "bootstrap_servers": cluster.bootstrap_servers, "topic": topic,
            "partitions": len(high), "high": {str(p): h for p, h in high.items()}, "isolation": isolation,
            "timeout_s": timeout_s}
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(java_command(cluster.spec.kafka_version, "reader", json.dumps(spec)),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        try:
            out = proc.stdout.read()  # type: ignore[union-attr]
            code = proc.wait(30)
        finally:
            proc.kill()
            proc.wait()
            proc.stdin.close()  # type: ignore[union-attr]
        err.seek(0)
        assert code == 0, err.read().decode()
    return out.decode().splitlines(), time.monotonic() - started


def fill(cluster: Cluster, topic: str) -> None:
    """Partition 0: transactions of t0 (seqs 0-9 committed, 10-14 aborted after reaching the log, 15-19
    committed); partition 1: p1's seqs 0-99, plain; partition 2: ten outputs of a pipeline and a value that is
    not kchaos's."""
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for seq in range(100):
        plain.produce(topic, key=str(seq).encode(), value=encode("p1", seq, 50), partition=1)
    for seq in range(10):
        plain.produce(topic, key=str(seq).encode(), value=encode_output("pipe0", seq, "p1", seq), partition=2)
    plain.produce(topic, value=b"not kchaos's", partition=2)
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"t-{topic}"})
    txn.init_transactions(30)
    for first, count, commit in ((0, 10, True), (10, 5, False), (15, 5, True)):
        txn.begin_transaction()
        for seq in range(first, first + count):
            txn.produce(topic, key=str(seq).encode(), value=encode("t0", seq, 50), partition=0)
        assert txn.flush(30) == 0  # in the log before the abort: an abort of unsent records reads the same
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)


def wait_for_ends(cluster: Cluster, topic: str, expected: dict[int, int]) -> dict[int, int]:
    ends: dict[int, int] = {}

    def there() -> bool:
        ends.update(end_offsets(cluster.admin(), topic, len(expected), "read_uncommitted", 10))
        return ends == expected

    wait_for(there, 30, f"the high watermarks of {topic} are {expected}")
    return ends


def parse_reader(lines: list[str]) -> tuple[dict[str, Any], list[tuple], dict[int, int]]:
    """The K line's settings, the records (partition, offset, producer, seq, from_producer, from_seq) and the
    F lines' positions; checks the lines' order: H, K, R..., F..., E."""
    assert lines[0].split()[0] == "H" and lines[0].split()[1].isdigit()
    tag, library, _version, settings = lines[1].split(" ", 3)
    assert (tag, library) == ("K", "java")
    assert lines[-1] == "E"
    records, positions = [], {}
    for line in lines[2:-1]:
        f = line.split(" ")
        if f[0] == "R":
            assert not positions, "R after F"
            assert len(f) in (6, 8) and int(f[5]) > 0
            opt = [None if v == "-" else v for v in f[3:5] + f[6:8]] + [None] * (8 - len(f))
            records.append((int(f[1]), int(f[2]), opt[0], None if opt[1] is None else int(opt[1]), opt[2],
                            None if opt[3] is None else int(opt[3])))
        else:
            assert f[0] == "F" and len(f) == 3, line
            positions[int(f[1])] = int(f[2])
    return json.loads(settings), records, positions


def read_back_reads(cluster: Cluster, topic: str, isolation: Isolation, tmp_path: Path,
                    client: Library) -> tuple[set[tuple], bool]:
    """What workloads.consumer.read_back reads of the topic with ``client``, as parse_reader's records."""
    run = tmp_path / f"{client}-{isolation}"
    history = History(RunDir(run), RunClock())
    complete = read_back(cluster.bootstrap_servers, topic, 3, history, timeout_s=60, isolation=isolation,
                         client=client, kafka_version=cluster.spec.kafka_version)
    history.close()
    reads = jsonl(run / "history" / "reads.jsonl")
    assert all(r["phase"] == "final" and r["isolation"] == isolation for r in reads)
    return {(r["partition"], r["offset"], r["producer"], r["seq"], r.get("from_producer"), r.get("from_seq"))
            for r in reads}, complete


def test_the_java_reader_reads_to_the_high_watermarks_and_skips_an_aborted_transaction(
        cluster: Cluster, tmp_path: Path) -> None:
    topic = new_topic(cluster, "jc")
    fill(cluster, topic)
    # partition 0: 20 records and 3 transaction markers (at 10, 16 and 22); a commit returns before its markers
    # are written, so the last one may take a moment
    high = wait_for_ends(cluster, topic, {0: 23, 1: 100, 2: 11})
    clock = RunClock()
    before = clock.now_ns()
    committed_lines, _ = run_reader(cluster, topic, high, "read_committed", origin_ns=clock.origin_ns)
    settings, committed, positions = parse_reader(committed_lines)
    assert settings["isolation.level"] == "read_committed" and settings["enable.auto.commit"] == "false"
    assert positions == high  # past the last marker: complete
    t0 = [(seq, offset) for p, offset, producer, seq, _, _ in committed if p == 0]
    assert t0 == [(seq, seq) for seq in range(10)] + [(seq, seq + 2) for seq in range(15, 20)]
    assert all(before < int(line.split()[5]) < clock.now_ns() for line in committed_lines if line[0] == "R")
    assert [r for r in committed if r[0] == 2] == [(2, seq, "pipe0", seq, "p1", seq) for seq in range(10)] + [
        (2, 10, None, None, None, None)]
    assert sorted((r[1], r[3]) for r in committed if r[0] == 1) == [(seq, seq) for seq in range(100)]

    uncommitted_lines, _ = run_reader(cluster, topic, high, "read_uncommitted")
    settings, uncommitted, positions = parse_reader(uncommitted_lines)
    assert settings["isolation.level"] == "read_uncommitted" and positions == high
    assert sorted(seq for p, _, _, seq, _, _ in uncommitted if p == 0) == list(range(20))  # the aborted ones too

    # the harness's read-back gets the same records through the Java reader as through librdkafka
    both: list[tuple[Isolation, list[tuple]]] = [("read_committed", committed), ("read_uncommitted", uncommitted)]
    for isolation, java in both:
        assert len(java) == len(set(java))
        for client in LIBRARIES:
            assert read_back_reads(cluster, topic, isolation, tmp_path, client) == (set(java), True)

    # records at or past the harness's high watermark are not reported; the position says how far it got
    _, records, positions = parse_reader(run_reader(cluster, topic, {**high, 1: 40}, "read_uncommitted")[0])
    assert sorted(r[1] for r in records if r[0] == 1) == list(range(40))
    assert positions[1] >= 40 and positions[0] == 23


def test_the_java_reader_stops_at_an_open_transaction_when_its_time_is_up(cluster: Cluster) -> None:
    """read_committed cannot pass the last stable offset: an open transaction keeps it below the high watermark
    until timeout_s, and the F line says where it stood (the read-back was not complete)."""
    topic = new_topic(cluster, "jc", partitions=1)
    txn = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"t-{topic}"})
    txn.init_transactions(30)
    try:
        for commit in (True, False):
            txn.begin_transaction()
            for seq in range(5):
                txn.produce(topic, value=encode("t0", seq + (0 if commit else 5), 50), partition=0)
            assert txn.flush(30) == 0
            if commit:
                txn.commit_transaction(30)
        high = wait_for_ends(cluster, topic, {0: 11})  # 5 committed, a marker, 5 of the open transaction
        lines, took = run_reader(cluster, topic, high, "read_committed", timeout_s=3)
        _, records, positions = parse_reader(lines)
        assert [r[3] for r in records] == list(range(5)) and positions == {0: 6}
        assert 3 <= took < 20
        _, records, positions = parse_reader(run_reader(cluster, topic, high, "read_uncommitted")[0])
        assert [r[3] for r in records] == list(range(10)) and positions == high
    finally:
        txn.abort_transaction(30)


# ---------------------------------------------------------------------- the exactly-once pipeline


def pipeline_topics(cluster: Cluster, partitions: int) -> tuple[str, str, str, str]:
    run_id = uuid.uuid4().hex[:6]
    topic = f"jp-{run_id}"
    for name in (topic, f"{topic}.out"):
        create_topic(cluster, TopicSpec(name, partitions=partitions, replication_factor=3, min_insync_replicas=2))
    return run_id, topic, f"{topic}.out", f"g-{run_id}"


def test_a_java_pipeline_killed_mid_transaction_is_fenced_and_writes_its_input_exactly_once(
        cluster: Cluster, tmp_path: Path) -> None:
    """A Java pipeline killed with its outputs written but not committed: the next process (same
    transactional.id) fences it, the coordinator aborts its transaction, the new process writes those inputs again
    from the group's committed offsets, and every committed input has exactly one visible output."""
    run_id, topic, output, group = pipeline_topics(cluster, 3)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    history.event("pipeline", group=group, input_topic=topic, output_topic=output)
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all", "enable.idempotence": True},
                              history.sends, clock, rate=200)
    # processing_ms: each transaction stays open a while with its outputs written, where the kill lands
    pipe = PipelineClient("pipe0", cluster.bootstrap_servers, topic, output, group, f"kchaos-{run_id}-pipe0",
                          history, batch=100, processing_ms=400, consumer_config={"session.timeout.ms": 6000},
                          client="java", kafka_version=cluster.spec.kafka_version)
    try:
        for client in (pipe, producer):
            client.start()
            client.wait_started()
        assert pipe.identity is not None and pipe.identity.library == "java"
        wait_for(lambda: pipe.outcomes.get("committed", 0) >= 3, 90, "the pipeline commits transactions")
        wait_for(lambda: (pipe.open_transaction is not None and pipe.open_transaction.intent is None
                          and pipe.open_acked > 0), 30, "outputs written in an open transaction")
        killed = pipe.open_transaction
        assert killed is not None
        crash = ClientCrashFault(cluster, topic, random.Random(1), clients=[pipe])
        crash.apply([pipe])
        crash.heal([pipe])
        assert pipe.name == "pipe0.1" and pipe.running
        committed = pipe.outcomes.get("committed", 0)
        wait_for(lambda: pipe.outcomes.get("committed", 0) > committed + 5, 90, "the new process goes on")
        producer.stop()
        assert pipe.wait_caught_up(3, 120)
        pipe.stop()
        record_committed(cluster, group, topic, 3, history)
    finally:
        producer.abort()
        pipe.abort()
    assert not pipe.failures
    for name in (topic, output):
        assert read_back_both(cluster.bootstrap_servers, name, 3, history, 60, client="java",
                              kafka_version=cluster.spec.kafka_version)
    history.close()

    run = RunDir(tmp_path)
    sends, txn_lines, reads = jsonl(run.sends), jsonl(run.txns), jsonl(run.reads)
    counts = check_run(tmp_path)["counts"]
    assert counts["pipeline_unprocessed"] == 0
    for anomaly in ("pipeline_lost", "pipeline_duplicated", "aborted_read", "torn_transaction", "lost", "unexpected"):
        assert counts[anomaly] == 0, anomaly
    acked_inputs = {(s["producer"], s["seq"]) for s in sends if s["producer"] == "p0" and s["status"] == "ok"}
    visible = [r for r in reads if r["consumer"] == "final-reader-committed" and r["topic"] == output]
    outputs = Counter((r["from_producer"], r["from_seq"]) for r in visible)
    assert acked_inputs and set(outputs) == acked_inputs and max(outputs.values()) == 1

    [dead] = [t for t in txn_lines if t["producer"] == "pipe0" and t["txn"] == killed.txn]
    assert (dead["outcome"], dead["error"]) == ("unknown", "producer process killed")
    assert {t["outcome"] for t in txn_lines if t["producer"].startswith("pipe") and t is not dead} == {"committed"}
    in_dead = {(s["producer"], s["seq"]) for s in sends if s["producer"] == "pipe0" and s["txn"] == killed.txn}
    acked_in_dead = {(s["producer"], s["seq"]) for s in in_dead_sends(sends, killed.txn) if s["status"] == "ok"}
    assert acked_in_dead  # its outputs reached the log, and no read_committed reader ever sees them
    assert acked_in_dead <= {(r["producer"], r["seq"]) for r in reads if r["consumer"] == "final-reader"}
    assert not in_dead & {(r["producer"], r["seq"]) for r in reads if r.get("isolation") == "read_committed"}
    dead_inputs = {(s["from_producer"], s["from_seq"]) for s in in_dead_sends(sends, killed.txn)}
    assert dead_inputs <= {(s["from_producer"], s["from_seq"]) for s in sends if s["producer"] == "pipe0.1"}
    live = [r for r in reads if r["phase"] == "live"]
    assert {(r["producer"], r["seq"]) for r in live} == acked_inputs
    assert {(r["consumer"], r["isolation"]) for r in live} == {("pipe0", "read_committed"),
                                                              ("pipe0.1", "read_committed")}


def in_dead_sends(sends: list[dict[str, Any]], txn: int) -> list[dict[str, Any]]:
    return [s for s in sends if s["producer"] == "pipe0" and s["txn"] == txn]


def test_a_java_pipeline_commits_past_an_aborted_transaction_at_the_end_of_its_input(cluster: Cluster,
                                                                                    tmp_path: Path) -> None:
    """The input ends in an aborted transaction: the Java pipeline gets none of its records, only a position past
    them, and commits that position in a transaction of offsets only, so the group reaches the end."""
    run_id, topic, output, group = pipeline_topics(cluster, 1)
    writer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"w-{run_id}"})
    writer.init_transactions(30)

    def transaction(first: int, end: Callable[[float], None]) -> None:
        writer.begin_transaction()
        for seq in range(first, first + 10):
            writer.produce(topic, value=encode("p0", seq, 20))
        writer.flush(30)
        end(30)

    history = History(RunDir(tmp_path), RunClock(), transactions=True)
    pipe = PipelineClient("pipe0", cluster.bootstrap_servers, topic, output, group, f"kchaos-{run_id}-pipe0",
                          history, client="java", kafka_version=cluster.spec.kafka_version)
    try:
        pipe.start()
        pipe.wait_started()
        transaction(0, writer.commit_transaction)
        wait_for(lambda: pipe.outcomes.get("committed", 0) >= 1, 60, "the pipeline processed the committed ten")
        transaction(10, writer.abort_transaction)  # arrives alone: nothing to read, only a position to pass
        assert pipe.wait_caught_up(1, 60)
        pipe.stop()
    finally:
        pipe.abort()
    history.close()
    assert not pipe.failures
    sends, txn_lines = jsonl(RunDir(tmp_path).sends), jsonl(RunDir(tmp_path).txns)
    assert sorted(s["from_seq"] for s in sends) == list(range(10))  # the aborted ten made nothing
    assert {s["status"] for s in sends} == {"ok"}
    assert {t["outcome"] for t in txn_lines} == {"committed"}
    assert len(txn_lines) > len({s["txn"] for s in sends})  # a transaction of offsets only went past the rest
