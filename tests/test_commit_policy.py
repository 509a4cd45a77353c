"""on_commit_error on a real cluster: with ``abort``, a commit that timed out (its transaction coordinator frozen
longer than commit_timeout_s) is followed by an abort, which both clients refuse while the commit may still
complete; the commit is resumed, its outcome is the one the client reports, and the same process goes on with
its next transaction (no replacement)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from clusters.cluster import Cluster
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION
from faults.pause import PauseFault
from rundir.layout import RunDir
from workloads.history import History, RunClock
from workloads.producer import ProducerClient
from helpers import jsonl, new_topic
from waiting import wait_for

PARTITIONS = 3


@pytest.mark.cluster
@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_abort_after_a_timed_out_commit_goes_on_with_the_same_producer(cluster: Cluster, tmp_path: Path,
                                                                       client: str) -> None:
    topic = new_topic(cluster, f"pol-{client}", partitions=PARTITIONS, min_insync=2)
    transactional_id = f"kchaos-test-{topic}-p0"
    clock = RunClock()
    history = History(RunDir(tmp_path), clock, transactions=True)
    config = {"acks": "all", "max.block.ms": 2000} if client == "java" else {"acks": "all"}
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, config, history.sends, clock, rate=100,
                              transactions={"size": 5, "abort_probability": 0.0, "timeout_ms": 60000,
                                            "commit_timeout_s": 2, "transactional_id": transactional_id,
                                            "partitions": PARTITIONS, "seed": 1, "on_commit_error": "abort"},
                              txns=history.txns, client=client, kafka_version=DEFAULT_KAFKA_VERSION)
    pause = PauseFault(cluster, topic, random.Random(1))
    try:
        producer.start()
        producer.wait_started()
        wait_for(lambda: producer.outcomes.get("committed", 0) >= 3, 90, "transactions commit")
        coordinator = cluster.transaction_coordinator(transactional_id)
        assert coordinator is not None
        pause.apply([coordinator])
        time.sleep(8)  # well past commit_timeout_s: the commit under way times out
        pause.heal([coordinator])
        before = sum(producer.outcomes.values())
        wait_for(lambda: sum(producer.outcomes.values()) >= before + 3, 90, "transactions after the thaw")
        producer.stop()
    finally:
        producer.abort()
    history.close()

    assert producer.failures == []
    txns = jsonl(tmp_path / "history" / "txns.jsonl")
    assert {t["producer"] for t in txns} == {"p0"}  # never replaced
    refused = [t for t in txns if t["error"] and "aborted (on_commit_error abort)" in t["error"]]
    assert refused, [t["error"] for t in txns]
    for t in refused:
        assert t["intent"] == "commit"
        # the abort was refused (the commit resumed, as reported) or it went through (aborted)
        assert ("abort refused" in t["error"]) == (t["outcome"] == "committed"), t
        assert t["outcome"] in ("committed", "aborted")
    after = [t for t in txns if t["begin_ns"] > max(r["complete_ns"] for r in refused)]
    assert after and all(t["outcome"] == "committed" for t in after)
