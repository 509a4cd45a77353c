"""The exactly-once pipeline: its values and lines, the harness's bookkeeping of a pipeline process, and (on a
real cluster) a pipeline SIGKILLed mid-transaction whose replacement fences it and finishes the input exactly once."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer

from checkers.reference import check_run
from clusters.cluster import Cluster
from clusters.spec import TopicSpec
from clusters.topics import create_topic
from faults.base import FaultError
from faults.client_crash import ClientCrashFault
from faults.registry import FAULTS
from faults.targets import choose_clients
from rundir.layout import RunDir
from workloads.client import Client
from workloads.consumer import read_back_both
from workloads.history import History, RunClock
from workloads.messages import encode
from workloads.observer import record_committed
from workloads.pipeline import PipelineClient, joined, joined_fields
from workloads.producer import ProducerClient
from workloads.protocol import ProtocolError, completed, polled, processed, txn_begun, txn_outcome, txn_requested
from helpers import jsonl
from waiting import wait_for



def open_history(tmp_path: Path, clock: RunClock | None = None) -> History:
    return History(RunDir(tmp_path), clock or RunClock(origin_ns=0), transactions=True)


# ---------------------------------------------------------------------- lines

def test_j_lines_round_trip_and_bad_ones_are_refused() -> None:
    assert joined(3, "p1", 9, 1234) == "J 3 p1 9 1234"
    assert joined_fields(b"J 3 p1 9 1234") == (b"3", b"p1", b"9", b"1234")
    assert joined_fields(joined(0, None, None, 5).encode()) == (b"0", b"-", b"-", b"5")
    for bad in (b"J 3 p1 9", b"J x p1 9 1", b"J 3 p1 9 1 2", b"J 3 p1 -1 5"):
        with pytest.raises(ProtocolError):
            joined_fields(bad)


# ---------------------------------------------------------------------- the harness's bookkeeping

def feed(client: PipelineClient, name: str, lines: list[str]) -> None:
    client.on_lines(name, [line.encode() for line in lines])


def pipeline(history: History) -> PipelineClient:
    return PipelineClient("pipe0", "nowhere:9092", "in", "in.out", "g", "kchaos-r-pipe0", history)


def test_the_pipeline_target_hits_a_pipeline_and_so_may_random_client(tmp_path: Path) -> None:
    history = open_history(tmp_path)
    assert isinstance(pipeline(history), Client) and PipelineClient.role == "pipeline"
    history.close()
    clients = [SimpleNamespace(name=name, role=role, running=True)
               for name, role in (("p0", "producer"), ("c0", "consumer"), ("pipe0", "pipeline"))]
    rng = random.Random(1)
    assert choose_clients(clients, "pipeline", rng) == [clients[2]]  # type: ignore[arg-type]
    assert {choose_clients(clients, "random-client", rng)[0].name  # type: ignore[arg-type]
            for _ in range(50)} == {"p0", "c0", "pipe0"}
    FAULTS["client-crash"].check_target("pipeline")
    with pytest.raises(FaultError, match="kill hits a node"):
        FAULTS["kill"].check_target("pipeline")


def test_a_pipeline_needs_a_transactional_history(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="transactions=True"):
        PipelineClient("pipe0", "nowhere:9092", "in", "in.out", "g", "t", History(RunDir(tmp_path), RunClock()))


def test_one_committed_transaction_and_one_cut_by_a_kill(tmp_path: Path) -> None:
    history = open_history(tmp_path)
    client = pipeline(history)
    feed(client, "pipe0", ["H 99", polled(2, 10), txn_begun(0, 11),
                           processed(1, 5, "p0", 5, 12), joined(0, "p0", 5, 12),
                           processed(1, 6, "p0", 6, 12), joined(1, "p0", 6, 12)])
    assert client.open_transaction is not None and client.open_transaction.intent is None
    feed(client, "pipe0", [completed("ok", 0, 2, 40, 20, None), completed("ok", 1, 0, 17, 21, None),
                           txn_requested(0, "commit", 22), txn_outcome(0, "committed", 30, None), "D"])
    assert client.open_transaction is None
    feed(client, "pipe0", [polled(1, 40), txn_begun(1, 41), processed(2, 0, "p1", 0, 42), joined(2, "p1", 0, 42),
                           completed("ok", 2, 1, 3, 45, None)])
    feed(client, "pipe0", [txn_requested(1, "commit", 46)])
    client.on_exit("pipe0", False, "killed")
    history.close()

    run = RunDir(tmp_path)
    reads = jsonl(run.reads)
    assert [(r["consumer"], r["group"], r["phase"], r["topic"], r["partition"], r["offset"], r["producer"], r["seq"])
            for r in reads] == [("pipe0", "g", "live", "in", 1, 5, "p0", 5),
                                ("pipe0", "g", "live", "in", 1, 6, "p0", 6),
                                ("pipe0", "g", "live", "in", 2, 0, "p1", 0)]
    sends = jsonl(run.sends)
    assert [(s["producer"], s["seq"], s["topic"], s["key"], s["partition"], s["offset"], s["status"], s["txn"],
             s["from_producer"], s["from_seq"]) for s in sends] == [
        ("pipe0", 0, "in.out", "0", 2, 40, "ok", 0, "p0", 5), ("pipe0", 1, "in.out", "1", 0, 17, "ok", 0, "p0", 6),
        ("pipe0", 2, "in.out", "2", 1, 3, "ok", 1, "p1", 0)]
    committed, killed = jsonl(run.txns)
    assert committed == {"producer": "pipe0", "txn": 0, "outcome": "committed", "intent": "commit", "error": None,
                         "invoke_ns": 22, "complete_ns": 30, "begin_ns": 11}
    assert killed.pop("complete_ns") >= 46  # when the harness saw the process gone
    assert killed == {"producer": "pipe0", "txn": 1, "outcome": "unknown", "intent": "commit",
                      "error": "producer process killed", "invoke_ns": 46, "begin_ns": 41}
    assert client.counts.ok == 3 and client.reads == 3 and not client.input.processing


def test_outputs_in_flight_at_a_kill_are_info_in_their_transaction(tmp_path: Path) -> None:
    history = open_history(tmp_path)
    client = pipeline(history)
    feed(client, "pipe0", ["H 1", polled(2, 1), txn_begun(0, 2), processed(0, 0, "p0", 0, 3), joined(0, "p0", 0, 3),
                           processed(0, 1, None, None, 3), joined(1, None, None, 3)])
    client.on_exit("pipe0", False, "killed")
    client.generation += 1  # what restart() does: the next process, a new name, its own seqs and transactions
    feed(client, "pipe0.1", ["H 2", polled(1, 10), txn_begun(0, 11), processed(0, 0, "p0", 0, 12),
                             joined(0, "p0", 0, 12), txn_requested(0, "commit", 13)])
    client.on_exit("pipe0.1", True, "exited with code 0")
    history.close()
    run = RunDir(tmp_path)
    sends = jsonl(run.sends)
    assert [(s["producer"], s["seq"], s["status"], s["error"], s["txn"], s["from_producer"], s["from_seq"])
            for s in sends] == [("pipe0", 0, "unknown", "producer process killed", 0, "p0", 0),
                                ("pipe0", 1, "unknown", "producer process killed", 0, None, None),
                                ("pipe0.1", 0, "unknown", "in flight at the end of the run", 0, "p0", 0)]
    txns = jsonl(run.txns)
    assert [(t["producer"], t["txn"], t["outcome"], t["intent"], t["invoke_ns"], t["error"]) for t in txns] == [
        ("pipe0", 0, "unknown", None, None, "producer process killed"),
        ("pipe0.1", 0, "unknown", "commit", 13, "in flight at the end of the run")]
    assert client.counts.unknown == 3


def test_lines_out_of_place_are_protocol_errors(tmp_path: Path) -> None:
    history = open_history(tmp_path)
    client = pipeline(history)
    with pytest.raises(ProtocolError, match="outside a transaction"):
        feed(client, "pipe0", [joined(0, "p0", 0, 1)])
    feed(client, "pipe0", [txn_begun(0, 1)])
    with pytest.raises(ProtocolError, match="not the open one"):
        feed(client, "pipe0", [txn_outcome(1, "committed", 2, None)])
    with pytest.raises(ProtocolError):
        feed(client, "pipe0", ["O 0 maybe 2 -"])
    with pytest.raises(ProtocolError):
        feed(client, "pipe0", ["I 0 1 5"])  # a plain producer's announcement: never from a pipeline
    history.close()


# ---------------------------------------------------------------------- a real pipeline on a real cluster


def transactional(run_id: str) -> dict[str, Any]:
    """A transactional producer's settings, as the harness gives them (10 per transaction, a fifth aborted)."""
    return {"size": 10, "abort_probability": 0.2, "timeout_ms": 15000, "commit_timeout_s": 10,
            "transactional_id": f"kchaos-{run_id}-p0", "partitions": 3, "seed": 1}


@pytest.mark.cluster
@pytest.mark.parametrize("input_transactions", [False, True], ids=["idempotent-input", "transactional-input"])
def test_a_pipeline_killed_mid_transaction_is_fenced_and_its_input_is_written_exactly_once(
        cluster: Cluster, tmp_path: Path, input_transactions: bool) -> None:
    """Killed with its outputs written but not committed: the next process (same transactional.id) fences it,
    the coordinator aborts its transaction, and the next process writes those inputs again from the group's
    committed offsets. Every committed input has exactly one visible output. With a transactional input the
    pipeline also has to step over transaction markers and aborted inputs to catch up."""
    run_id = uuid.uuid4().hex[:6]
    topic = f"pl-{run_id}"
    output = f"{topic}.out"
    for name in (topic, output):
        create_topic(cluster, TopicSpec(name, partitions=3, replication_factor=3, min_insync_replicas=2))
    group = f"g-{run_id}"
    clock = RunClock()
    history = open_history(tmp_path, clock)
    history.event("pipeline", group=group, input_topic=topic, output_topic=output)
    txns = transactional(run_id) if input_transactions else None
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all", "enable.idempotence": True},
                              history.sends, clock, rate=200, transactions=txns,
                              txns=history.txns if txns is not None else None)
    # processing_ms: each transaction stays open a while with its outputs written, where the kill lands;
    # session.timeout.ms: the group gives the dead process's partitions to the new one within seconds
    pipe = PipelineClient("pipe0", cluster.bootstrap_servers, topic, output, group, f"kchaos-{run_id}-pipe0",
                          history, batch=100, processing_ms=400, consumer_config={"session.timeout.ms": 6000})
    try:
        for client in (pipe, producer):
            client.start()
            client.wait_started()
        wait_for(lambda: pipe.outcomes.get("committed", 0) >= 3, 90, "the pipeline commits transactions")
        wait_for(lambda: (pipe.open_transaction is not None and pipe.open_transaction.intent is None
                          and pipe.open_acked > 0), 30, "outputs written in an open transaction")
        killed = pipe.open_transaction
        assert killed is not None
        killed_at = time.monotonic()
        crash = ClientCrashFault(cluster, topic, random.Random(1), clients=[producer, pipe])
        assert crash.choose("pipeline") == [pipe]
        crash.apply([pipe])
        assert pipe.open_transaction is None  # the harness closed it: unknown
        crash.heal([pipe])
        assert pipe.name == "pipe0.1" and pipe.running
        committed = pipe.outcomes.get("committed", 0)
        wait_for(lambda: pipe.outcomes.get("committed", 0) > committed, 60, "the new process commits")
        resumed_s = time.monotonic() - killed_at
        wait_for(lambda: pipe.outcomes.get("committed", 0) > committed + 5, 60, "the new process goes on")
        producer.stop()
        caught_up_at = time.monotonic()
        assert pipe.wait_caught_up(3, 120)
        caught_up_s = time.monotonic() - caught_up_at
        pipe.stop()
        record_committed(cluster, group, topic, 3, history)
    finally:
        producer.abort()
        pipe.abort()
    print(f"kill -> first commit of the new process: {resumed_s:.2f}s, "
          f"caught up after the producer stopped: {caught_up_s:.2f}s")
    for name in (topic, output):
        assert read_back_both(cluster.bootstrap_servers, name, 3, history, 60)
    history.close()

    run = RunDir(tmp_path)
    sends = jsonl(run.sends)
    txn_lines = jsonl(run.txns)
    reads = jsonl(run.reads)
    counts = check_run(tmp_path)["counts"]
    assert counts["pipeline_unprocessed"] == 0  # caught up: every committed input is below the committed offsets
    for anomaly in ("pipeline_lost", "pipeline_duplicated", "aborted_read", "torn_transaction", "lost", "unexpected"):
        assert counts[anomaly] == 0, anomaly

    # what the checker says, seen directly: each committed input has exactly one visible output
    outcome = {(t["producer"], t["txn"]): t["outcome"] for t in txn_lines}
    acked_inputs = {(s["producer"], s["seq"]) for s in sends if s["producer"] == "p0" and s["status"] == "ok"
                    and (s["txn"] is None or outcome[("p0", s["txn"])] == "committed")}
    visible = [r for r in reads if r["consumer"] == "final-reader-committed" and r["topic"] == output]
    outputs = Counter((r["from_producer"], r["from_seq"]) for r in visible)
    assert acked_inputs and set(outputs) == acked_inputs and max(outputs.values()) == 1

    [dead] = [t for t in txn_lines if t["producer"] == "pipe0" and t["txn"] == killed.txn]
    assert (dead["outcome"], dead["intent"], dead["error"]) == ("unknown", None, "producer process killed")
    assert {t["outcome"] for t in txn_lines if t["producer"].startswith("pipe") and t is not dead} == {"committed"}
    # its outputs reached the log (read_uncommitted sees them), and no read_committed reader ever does
    in_dead = {(s["producer"], s["seq"]) for s in sends if s["producer"] == "pipe0" and s["txn"] == killed.txn}
    acked_in_dead = {(s["producer"], s["seq"]) for s in sends
                     if s["producer"] == "pipe0" and s["txn"] == killed.txn and s["status"] == "ok"}
    assert acked_in_dead
    assert acked_in_dead <= {(r["producer"], r["seq"]) for r in reads if r["consumer"] == "final-reader"}
    assert not in_dead & {(r["producer"], r["seq"]) for r in reads if r.get("isolation") == "read_committed"}
    # the new process wrote the dead one's inputs again
    dead_inputs = {(s["from_producer"], s["from_seq"]) for s in sends if (s["producer"], s["seq"]) in in_dead}
    assert dead_inputs <= {(s["from_producer"], s["from_seq"]) for s in sends if s["producer"] == "pipe0.1"}
    live = [r for r in reads if r["phase"] == "live"]
    assert {(r["producer"], r["seq"]) for r in live} == acked_inputs
    assert {(r["consumer"], r["group"], r["isolation"]) for r in live} == {("pipe0", group, "read_committed"),
                                                                           ("pipe0.1", group, "read_committed")}


@pytest.mark.cluster
def test_a_pipeline_commits_past_an_aborted_transaction_at_the_end_of_its_input(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    """The input ends in an aborted transaction: a read_committed consumer gets none of its records, only a
    position past them, and the pipeline commits that position in a transaction of offsets only (else the group
    would stay behind the end for ever and the harness wait in vain)."""
    run_id = uuid.uuid4().hex[:6]
    topic, output, group = f"pa-{run_id}", f"pa-{run_id}.out", f"g-{run_id}"
    for name in (topic, output):
        create_topic(cluster, TopicSpec(name, partitions=1, replication_factor=3, min_insync_replicas=2))
    writer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"w-{run_id}"})
    writer.init_transactions(30)

    def transaction(first: int, end: Callable[[float], None]) -> None:
        writer.begin_transaction()
        for seq in range(first, first + 10):
            writer.produce(topic, value=encode("p0", seq, 20))
        writer.flush(30)
        end(30)

    history = open_history(tmp_path, RunClock())
    pipe = PipelineClient("pipe0", cluster.bootstrap_servers, topic, output, group, f"kchaos-{run_id}-pipe0",
                          history)
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
    sends, txn_lines = jsonl(RunDir(tmp_path).sends), jsonl(RunDir(tmp_path).txns)
    assert sorted(s["from_seq"] for s in sends) == list(range(10))  # the aborted ten made nothing
    assert {t["outcome"] for t in txn_lines} == {"committed"}
    assert len(txn_lines) > len({s["txn"] for s in sends})  # a transaction of offsets only went past the rest
