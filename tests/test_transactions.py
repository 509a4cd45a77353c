"""Transactional producers on a real cluster: commits and aborts while the partition leader is frozen, and a
producer killed mid-transaction, fenced by its replacement. The history must say what read_committed readers
may and may not see, and both read-backs must find exactly that."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from clusters.cluster import Cluster
from clusters.kafka_transactions import ask_cluster
from faults.pause import PauseFault
from rundir.documents import read_kafka_transactions, write_kafka_transactions
from rundir.layout import RunDir
from verdicts.verdict import ENDED_STATES, second_opinion
from workloads.consumer import read_back_both
from workloads.history import History, RunClock
from workloads.observer import StableObserver
from workloads.producer import ProducerClient
from helpers import jsonl, new_topic
from waiting import wait_for

PARTITIONS = 3



def transactions(topic: str, **overrides: Any) -> dict[str, Any]:
    return {"size": 10, "abort_probability": 0.3, "timeout_ms": 60000, "commit_timeout_s": 20,
            "transactional_id": f"kchaos-test-{topic}-p0", "partitions": PARTITIONS, "seed": 1, **overrides}




class Outcome:
    """What the history of one test says, indexed the way the assertions need it."""

    def __init__(self, run: Path) -> None:
        history = run / "history"
        self.sends = jsonl(history / "sends.jsonl")
        self.txns = jsonl(history / "txns.jsonl")
        self.reads = jsonl(history / "reads.jsonl")
        self.events = jsonl(history / "events.jsonl")
        outcome = {(t["producer"], t["txn"]): t for t in self.txns}
        self.committed = {k for k, t in outcome.items() if t["outcome"] == "committed"}
        self.never_committed = {k for k, t in outcome.items()
                                if t["outcome"] == "aborted" or (t["outcome"] == "unknown" and t["intent"] != "commit")}

    def ok(self, txns: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """(producer, seq) of the acknowledged sends of these transactions."""
        return {(s["producer"], s["seq"]) for s in self.sends
                if s["status"] == "ok" and (s["producer"], s["txn"]) in txns}

    def read(self, isolation: str) -> set[tuple[str, int]]:
        return {(r["producer"], r["seq"]) for r in self.reads if r["phase"] == "final" and r["isolation"] == isolation}

    def final_reads(self) -> list[dict]:
        return [e for e in self.events if e["kind"] == "final-read"]


def assert_read_backs_agree_with_the_transactions(out: Outcome) -> None:
    """read_committed sees every acknowledged message of a committed transaction and nothing of one that never
    committed; read_uncommitted sees what was written whatever became of it; both got to the end."""
    committed, never = out.ok(out.committed), out.ok(out.never_committed)
    assert committed and never
    assert committed <= out.read("read_committed")
    assert not never & out.read("read_committed")
    assert committed | never <= out.read("read_uncommitted")
    finals = out.final_reads()
    assert sorted((e["isolation"], e["partition"]) for e in finals) == sorted(
        (iso, p) for iso in ("read_committed", "read_uncommitted") for p in range(PARTITIONS))
    assert all(e["complete"] for e in finals)
    assert all(e["last_stable_offset"] == e["high_watermark"] for e in finals if e["isolation"] == "read_committed")
    assert {r["consumer"] for r in out.reads} == {"final-reader", "final-reader-committed"}


@pytest.mark.cluster
def test_transactions_commit_and_abort_while_the_partition_leader_is_frozen(cluster: Cluster,
                                                                            tmp_path: Path) -> None:
    topic = new_topic(cluster, "tx", partitions=PARTITIONS, min_insync=2)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all"}, history.sends, clock,
                              rate=200, transactions=transactions(topic), txns=history.txns)
    observer = StableObserver(cluster, {topic: PARTITIONS}, history)
    pause = PauseFault(cluster, topic, random.Random(1))
    try:
        producer.start()
        producer.wait_started()
        observer.start()
        wait_for(lambda: producer.outcomes.get("committed", 0) >= 5 and producer.outcomes.get("aborted", 0) >= 1,
                 60, "transactions commit and abort")
        leader = cluster.leader(topic, 0)
        assert leader is not None
        pause.apply([leader])
        paused_ns = clock.now_ns()
        time.sleep(6)  # shorter than the commit time-out: commits wait for the thaw
        thawed_ns = clock.now_ns()
        pause.heal([leader])
        before = producer.outcomes.get("committed", 0)
        wait_for(lambda: producer.outcomes.get("committed", 0) >= before + 5, 60, "commits after the thaw")
        producer.stop()
    finally:
        producer.abort()
        observer.stop()
    observer.join()
    assert read_back_both(cluster.bootstrap_servers, topic, PARTITIONS, history)
    history.close()

    out = Outcome(tmp_path)
    assert producer.failures == []
    assert {t["outcome"] for t in out.txns} >= {"committed", "aborted"}
    assert all(s["txn"] is not None for s in out.sends) and {s["producer"] for s in out.sends} == {"p0"}
    # the transaction open at the freeze waited for the thaw, and still committed or aborted as asked
    spanning = [t for t in out.txns if t["begin_ns"] < paused_ns and t["complete_ns"] > thawed_ns]
    assert spanning and all(t["outcome"] == {"commit": "committed", "abort": "aborted"}[t["intent"]]
                            for t in spanning)
    assert_read_backs_agree_with_the_transactions(out)
    stable = [e for e in out.events if e["kind"] == "stable"]
    assert {e["partition"] for e in stable} == set(range(PARTITIONS))
    assert all(e["last_stable_offset"] <= e["high_watermark"] for e in stable)

    # Kafka's own view, as a run asks it before teardown: every broker answers find-hanging, none hangs, and the
    # producer's transactional id has ended its last transaction; kchaos's count (0) agrees
    write_kafka_transactions(RunDir(tmp_path), ask_cluster(cluster.brokers, cluster.spec.kafka_version))
    asked = read_kafka_transactions(RunDir(tmp_path))
    assert asked is not None
    assert [(b["broker"], b["asked"], b["hanging"]) for b in asked["brokers"]] == \
        [(b.node_id, True, []) for b in cluster.brokers], asked
    ours = [t for t in asked["transactions"] or [] if t["transactional_id"] == f"kchaos-test-{topic}-p0"]
    assert len(ours) == 1 and ours[0]["state"] in ENDED_STATES, asked["list_output"]
    view = second_opinion(asked, 0)
    assert view["agree"] is True and view["kafka_hanging_partitions"] == 0, view["summary"]


@pytest.mark.cluster
def test_a_producer_killed_mid_transaction_is_fenced_by_its_replacement(cluster: Cluster, tmp_path: Path) -> None:
    topic = new_topic(cluster, "tx", partitions=PARTITIONS, min_insync=2)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    # 50 messages at 20/s: each transaction stays open for 2.5 s, the kill lands inside one
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all"}, history.sends, clock,
                              rate=20, transactions=transactions(topic, size=50, abort_probability=0.0),
                              txns=history.txns)
    assert producer.book is not None
    book = producer.book
    try:
        producer.start()
        producer.wait_started()
        wait_for(lambda: producer.outcomes.get("committed", 0) >= 1, 60, "a first commit")
        wait_for(lambda: book.open is not None and book.open.intent is None
                 and clock.now_ns() - book.open.begin_ns > 1.2e9, 30, "a transaction half-way")
        assert book.open is not None
        killed_txn = book.open.txn
        producer.kill()
        producer.restart()  # p0.1, same transactional.id: its init_transactions fences p0 and aborts the open one
        wait_for(lambda: producer.outcomes.get("committed", 0) >= 3, 60, "the replacement commits")
        producer.stop()
    finally:
        producer.abort()
    assert read_back_both(cluster.bootstrap_servers, topic, PARTITIONS, history)
    history.close()

    out = Outcome(tmp_path)
    [killed] = [t for t in out.txns if t["outcome"] == "unknown"]
    assert killed | {"complete_ns": 0} == {"producer": "p0", "txn": killed_txn, "outcome": "unknown", "intent": None,
                                           "error": "producer process killed", "invoke_ns": None, "complete_ns": 0,
                                           "begin_ns": killed["begin_ns"]}
    open_sends = [s for s in out.sends if (s["producer"], s["txn"]) == ("p0", killed_txn)]
    assert {s["status"] for s in open_sends} <= {"ok", "unknown"}
    written = out.ok({("p0", killed_txn)})
    assert written, "some messages of the open transaction reached the log before the kill"
    assert written <= out.read("read_uncommitted") and not written & out.read("read_committed")
    assert [t["txn"] for t in out.txns if t["producer"] == "p0.1" and t["outcome"] == "committed"][:2] == [0, 1]
    assert_read_backs_agree_with_the_transactions(out)
