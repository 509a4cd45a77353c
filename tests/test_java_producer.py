"""Kafka's Java producer as a workload process on a real cluster (issue #19), driven through the same
ProducerClient as the librdkafka one: SIGKILLed mid-run it leaves its in-flight sends ``unknown`` (never ``fail``,
no seq unaccounted for) and the read-back finds every acknowledged one; transactional, it commits and aborts
and read_committed readers see exactly the committed messages (on 3.9.2 and on 4.3.1, whose client speaks the
KIP-890 transaction protocol)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkers.reference import check_run
from clusters.cluster import Cluster
from clusters.kafka_versions import NEWEST_KAFKA_4
from clusters.spec import ClusterSpec
from rundir.layout import RunDir
from conftest import assert_nothing_left, start_owned_cluster  # the module pytest loaded: tests/ has no __init__.py
from workloads.client import ClientIdentity
from workloads.consumer import read_back, read_back_both
from workloads.history import History, RunClock
from workloads.producer import ProducerClient
from helpers import jsonl, new_topic
from waiting import wait_for

PARTITIONS = 3


@pytest.fixture(scope="module")
def kraft4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Kafka 4.3.1 KRaft cluster (3 brokers, 1 controller: a 2-core machine also runs the other one)."""
    spec = ClusterSpec(kafka_version=NEWEST_KAFKA_4, metadata="kraft", brokers=3, controllers=1)
    c = start_owned_cluster(spec, tmp_path_factory.mktemp("kraft4"))
    try:
        yield c
    finally:
        c.teardown(logs_to=tmp_path_factory.mktemp("kraft4-logs"))
        assert_nothing_left(c.cluster_id, c.workdir)


def cluster_of(request: pytest.FixtureRequest, version: str) -> Cluster:
    """The shared ZooKeeper cluster (the default version) or the 4.x KRaft one, started only when asked for."""
    return request.getfixturevalue("kraft4" if version == NEWEST_KAFKA_4 else "cluster")





def identities(producer: ProducerClient) -> dict[str, ClientIdentity]:
    """Record what each process of ``producer`` says it is (the harness makes client events of it)."""
    seen: dict[str, ClientIdentity] = {}
    producer.on_identity = lambda name, identity: seen.__setitem__(name, identity)
    return seen


@pytest.mark.cluster
def test_a_java_producer_killed_mid_run_leaves_info_and_loses_no_ack(cluster: Cluster, tmp_path: Path) -> None:
    version = cluster.spec.kafka_version
    topic = new_topic(cluster, "jp", partitions=PARTITIONS, min_insync=2)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock)
    # linger.ms=50: a few hundred sends are always in flight when the kill comes
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all", "linger.ms": 50},
                              history.sends, clock, rate=3000, client="java", kafka_version=version)
    seen = identities(producer)
    try:
        producer.start()
        producer.wait_started()
        wait_for(lambda: producer.counts.ok > 3000, 60, "the Java producer gets acks")
        pid = producer.pid
        assert pid is not None
        producer.kill()  # what the client-crash fault does
        assert not os.path.exists(f"/proc/{pid}")
        killed_ok = producer.counts.ok
        producer.restart()
        assert producer.name == "p0.1"
        wait_for(lambda: producer.counts.ok > killed_ok + 3000, 60, "the replacement gets acks")
        producer.stop()
    finally:
        producer.abort()
    assert read_back(cluster.bootstrap_servers, topic, PARTITIONS, history)
    history.close()

    assert producer.failures == []
    assert set(seen) == {"p0", "p0.1"}
    for identity in seen.values():
        assert (identity.library, identity.version) == ("java", version)
        assert identity.settings["enable.idempotence"] == "true" and identity.settings["linger.ms"] == "50"
    sends = jsonl(tmp_path / "history" / "sends.jsonl")
    killed = [s for s in sends if s["producer"] == "p0" and s["error"] == "producer process killed"]
    assert killed and all(s["status"] == "unknown" for s in killed)
    assert not [s for s in sends if s["status"] == "fail"]
    for name in ("p0", "p0.1"):  # every seq of each process has exactly one line: none unaccounted for
        seqs = sorted(s["seq"] for s in sends if s["producer"] == name)
        assert seqs == list(range(len(seqs)))
    ok = [s for s in sends if s["status"] == "ok"]
    assert all(s["partition"] is not None and s["offset"] is not None for s in ok)
    reads = {(r["producer"], r["seq"]): (r["partition"], r["offset"])
             for r in jsonl(tmp_path / "history" / "reads.jsonl") if r["phase"] == "final"}
    assert all(reads.get((s["producer"], s["seq"])) == (s["partition"], s["offset"]) for s in ok)
    results = check_run(tmp_path)
    counts = results["counts"]
    assert counts["lost"] == 0 and counts["failed"] == 0 and counts["unexpected"] == 0
    assert counts["duplicated"] == 0 and counts["divergent"] == 0  # idempotent: no duplicates even across a kill
    assert counts["unknown"] >= len(killed) and results["final_read_complete"] and results["valid"]


def transactions(topic: str, **overrides: Any) -> dict[str, Any]:
    return {"size": 10, "abort_probability": 0.3, "timeout_ms": 60000, "commit_timeout_s": 20,
            "transactional_id": f"kchaos-test-{topic}-p0", "partitions": PARTITIONS, "seed": 1, **overrides}


@pytest.mark.cluster
@pytest.mark.parametrize("version", ["3.9.2", NEWEST_KAFKA_4])
def test_a_transactional_java_producer_commits_and_aborts(request: pytest.FixtureRequest, tmp_path: Path,
                                                          version: str) -> None:
    cluster = cluster_of(request, version)
    assert cluster.spec.kafka_version == version
    topic = new_topic(cluster, "jp", partitions=PARTITIONS, min_insync=2)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all"}, history.sends, clock,
                              rate=300, transactions=transactions(topic), txns=history.txns, client="java",
                              kafka_version=version)
    seen = identities(producer)
    try:
        producer.start()
        producer.wait_started()
        wait_for(lambda: producer.outcomes.get("committed", 0) >= 10 and producer.outcomes.get("aborted", 0) >= 3,
                 90, "transactions commit and abort")
        producer.stop()
    finally:
        producer.abort()
    assert read_back_both(cluster.bootstrap_servers, topic, PARTITIONS, history)
    history.close()

    assert producer.failures == []
    assert seen["p0"].settings["transactional.id"] == f"kchaos-test-{topic}-p0"
    sends = jsonl(tmp_path / "history" / "sends.jsonl")
    txns = jsonl(tmp_path / "history" / "txns.jsonl")
    reads = jsonl(tmp_path / "history" / "reads.jsonl")
    # a clean run: every transaction ended as asked, every send acknowledged, each spread seq % partitions
    assert txns and all(t["outcome"] == {"commit": "committed", "abort": "aborted"}[t["intent"]] and
                        t["error"] is None for t in txns)
    assert [t["txn"] for t in txns] == list(range(len(txns)))
    assert all(s["status"] == "ok" and s["partition"] == s["seq"] % PARTITIONS for s in sends)
    assert sorted(s["seq"] for s in sends) == list(range(len(sends)))
    by_txn: dict[int, list[int]] = {}
    for s in sends:
        by_txn.setdefault(s["txn"], []).append(s["seq"])
    assert all(len(seqs) == 10 for seqs in by_txn.values()) and set(by_txn) == {t["txn"] for t in txns}
    outcome = {t["txn"]: t["outcome"] for t in txns}
    committed = {("p0", s["seq"]) for s in sends if outcome[s["txn"]] == "committed"}
    aborted = {("p0", s["seq"]) for s in sends if outcome[s["txn"]] == "aborted"}
    assert committed and aborted

    def final(isolation: str) -> list[tuple[str, int]]:
        return [(r["producer"], r["seq"]) for r in reads if r["phase"] == "final" and r["isolation"] == isolation]

    assert sorted(final("read_committed")) == sorted(committed)  # exactly the committed ones, each once
    assert sorted(final("read_uncommitted")) == sorted(committed | aborted)  # aborted ones were written too
    results = check_run(tmp_path)
    assert results["valid"] and results["final_read_complete"]
    assert results["counts"]["aborted_read"] == 0 and results["counts"]["torn_transaction"] == 0


@pytest.mark.cluster
def test_a_fenced_java_producer_leaves_its_transaction_unknown_and_is_replaced(cluster: Cluster,
                                                                                tmp_path: Path) -> None:
    """A second producer under the same transactional.id (a zombie's successor) fences the first: its open
    transaction ends unknown with the fencing error, its process exits 4 and the harness starts a replacement."""
    version = cluster.spec.kafka_version
    topic = new_topic(cluster, "jp", partitions=PARTITIONS, min_insync=2)
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    shared = transactions(topic, abort_probability=0.0, size=20)
    first, second = (ProducerClient(name, cluster.bootstrap_servers, topic, {"acks": "all"}, history.sends, clock,
                                    rate=200, transactions=shared, txns=history.txns, client="java",
                                    kafka_version=version) for name in ("a", "b"))
    try:
        first.start()
        first.wait_started()
        wait_for(lambda: first.outcomes.get("committed", 0) >= 3, 60, "the first producer commits")
        second.start()
        second.wait_started()
        wait_for(lambda: first.outcomes.get("unknown", 0) >= 1 and first.generation >= 1, 60,
                 "the first producer is fenced and replaced")
        second.abort()  # no more ping-pong: each replacement would fence the other one again
        before = first.outcomes["committed"]
        wait_for(lambda: first.outcomes["committed"] > before, 60, "the replacement commits")
        first.stop()
    finally:
        first.abort()
        second.abort()
    assert read_back_both(cluster.bootstrap_servers, topic, PARTITIONS, history)
    history.close()

    assert first.failures == []  # exit 4 is the client's fatal error, not the harness's failure
    txns = jsonl(tmp_path / "history" / "txns.jsonl")
    fenced = [t for t in txns if t["producer"] == "a" and t["outcome"] == "unknown"]
    assert len(fenced) == 1 and fenced[0]["error"] is not None
    assert any(name in fenced[0]["error"] for name in ("ProducerFencedException", "InvalidProducerEpochException"))
    assert any(t["producer"] == "a.1" and t["outcome"] == "committed" for t in txns)
    sends = jsonl(tmp_path / "history" / "sends.jsonl")
    # fail: aborted with their transaction, or refused inside send() once the producer was fenced (the client
    # calls the callback there, before the record enters it), only in the fenced transaction
    fencing = ("ProducerFencedException", "InvalidProducerEpochException")
    refused = [s for s in sends if s["status"] == "fail" and s["error"] != "TransactionAbortedException"
               and not (s["error"] in fencing and (s["producer"], s["txn"]) == ("a", fenced[0]["txn"]))]
    assert not refused, \
        f"{len(refused)} sends failed: {sorted({(s['producer'], s['txn'], s['error']) for s in refused})}"
    outcome = {(t["producer"], t["txn"]): t["outcome"] for t in txns}
    committed = {(s["producer"], s["seq"]) for s in sends
                 if s["status"] == "ok" and outcome.get((s["producer"], s["txn"])) == "committed"}
    seen = {(r["producer"], r["seq"]) for r in jsonl(tmp_path / "history" / "reads.jsonl")
            if r["phase"] == "final" and r["isolation"] == "read_committed"}
    assert committed and committed <= seen
    assert not {(s["producer"], s["seq"]) for s in sends if outcome.get((s["producer"], s["txn"])) == "aborted"} & seen
