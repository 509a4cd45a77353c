"""The share-group role (workload.share_consumers) end to end on a real Kafka 4.3.1 KRaft cluster: Java members
of one share group read the topic as a queue and acknowledge explicitly; the run's history holds every delivery
and acknowledgement, the group's settings and the brokers' start offsets, and the checker finds every record
settled; the request path watches the members' ShareAcknowledge requests and the brokers' answers. (The faults'
cells, on 4.2.2, 4.3.1 and 4.4.0 and on librdkafka's preview client, are measured by hand
and in the nightly: docs/scenarios.md.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers import reference
from harness.run import run_scenario
from harness.scenario import load_scenario

SCENARIO = """\
name: share-smoke
seed: 4
cluster:
  kafka_version: 4.3.1
  metadata: kraft
  broker_config: {group.share.min.record.lock.duration.ms: 1000}
  watch_requests: ShareAcknowledge
topic: {name: q, partitions: 3, replication_factor: 3, min_insync_replicas: 2}
workload:
  duration_s: 8
  client: java
  producers: {count: 1, rate: 200, config: {acks: all, enable.idempotence: true}}
  consumers: {count: 0}
  share_consumers: {count: 2, group: sg, release: 0.3, reject: 0.1, delivery_limit: 2, lock_ms: 2000}
schedule: {warmup_s: 1, settle_s: 1}
"""


@pytest.mark.cluster
def test_a_share_group_settles_every_record_and_the_history_says_how(tmp_path: Path) -> None:
    path = tmp_path / "share-smoke.yaml"
    path.write_text(SCENARIO)
    outcome = run_scenario(load_scenario(path), tmp_path / "runs")
    assert outcome.harness_error is None
    results = reference.check_run(outcome.run_dir)
    counts = results["counts"]
    assert results["valid"] is True and counts["acked"] > 500
    assert counts["share_lost"] == counts["share_unsettled"] == counts["share_redelivered_after_accept"] == 0
    assert counts["share_over_delivered"] == 0
    # with 30% released and a limit of 2, records come back, and some are archived at the limit
    assert counts["share_redelivered_released"] > 0 and counts["share_archived"] > 0
    assert counts["share_deliveries"] == counts["acked"] + sum(
        counts[a] for a in ("share_redelivered_released", "share_redelivered_failed_ack", "share_redelivered_expired"))
    events = [json.loads(line) for line in (outcome.run_dir / "history" / "events.jsonl").read_text().splitlines()]
    [group] = [e for e in events if e["kind"] == "share-group"]
    assert (group["group"], group["delivery_limit"], group["lock_ms"]) == ("sg", 2, 2000)
    offsets = {e["partition"]: e for e in events if e["kind"] == "share-offsets"}
    ends = {e["partition"]: e["high_watermark"] for e in events if e["kind"] == "final-read"}
    assert set(offsets) == set(ends) == {0, 1, 2}
    # the brokers settled the whole log too: nothing above the start offset unsettled (it moves on lazily)
    assert all(offsets[p]["lag"] == 0 and offsets[p]["start_offset"] <= ends[p] for p in ends)
    members = {e["process"] for e in events if e["kind"] == "client" and e["role"] == "share_consumer"}
    assert members == {"s0", "s1"}
    lines = [json.loads(line) for line in (outcome.run_dir / "history" / "shares.jsonl").read_text().splitlines()]
    assert {line["member"] for line in lines} <= members
    assert {line["ack"] for line in lines if line["kind"] == "acknowledged"} == {"accept", "release", "reject"}
    # what the members acknowledged, as the brokers were told it (KIP-932's types: 1 accept, 2 release, 3 reject)
    # and answered it, partition by partition: every offset the members reported ok is in an answered request
    watched = [e for e in events if e["kind"] == "request" and e["action"] == "watched"]
    assert watched and {(e["api"], e["outcome"]) for e in watched} == {("ShareAcknowledge", "answered")}
    assert {e["client"] for e in watched} <= {"kchaos-s0", "kchaos-s1"}
    told = {(p, o) for e in watched for p, first, last, _ in e["detail"]["acks"] for o in range(first, last + 1)
            if any(a[0] == p and a[1] == "none" for a in e["detail"]["answer"]["partitions"])}
    assert {t for e in watched for _, _, _, types in e["detail"]["acks"] for t in types} <= {0, 1, 2, 3}
    reported_ok = {(line["partition"], line["offset"]) for line in lines
                   if line["kind"] == "acknowledged" and line["result"] == "ok"}
    assert reported_ok and reported_ok <= told
