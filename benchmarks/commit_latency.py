"""How long a synchronous offset commit takes, librdkafka's against the Java consumer's, on one cluster.

    .venv/bin/python benchmarks/commit_latency.py [--commits 30] [--fetch-min-bytes 1048576] [--kafka-version V]

Why: in ``acks1-leader-kill`` the application consumer (500-record batches,
a commit after each) reads about 1,000 records a second with either client,
far behind its producers. A commit is an acks=all write to
``__consumer_offsets``; the followers answer it only when their fetch
returns, and with ``replica.fetch.min.bytes`` 1 MiB (that file's brokers)
a fetch waits up to ``replica.fetch.wait.max.ms`` (500 ms). This measures
it: a cluster with the given ``replica.fetch.min.bytes`` (0: Kafka's
default of 1 byte), an acks=1 producer writing ~8,000 100-byte records a
second to a topic of 6 partitions, then ``--commits`` commits of what one
poll returned, first by a confluent-kafka consumer, then by
benchmarks/java/CommitLatency.java on the kafka-clients of the cluster's
version (the Java workload's build), each in a group of its own. Prints
median, p90 and max per client, with the load average. The cluster is torn
down on every exit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_vs_kafka import ROOT, run_main, say, start_cluster  # noqa: E402

from confluent_kafka import Consumer, Producer  # noqa: E402

from clusters.java_build import ensure_built  # noqa: E402
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION  # noqa: E402
from clusters.spec import TopicSpec  # noqa: E402
from clusters.topics import create_topic  # noqa: E402
from harness.errors import install_termination_handlers  # noqa: E402
from workloads.consumer import batch_offsets  # noqa: E402

JAVA_SOURCE = ROOT / "benchmarks" / "java" / "CommitLatency.java"
RATE = 8000          # records a second, the acks1-leader-kill producers' sum
BATCH = 500          # records a poll returns at most (both consumers' setting in the workload)


def produce(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """acks=1 load at about RATE records a second until stopped: the followers' fetches carry it."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    step = RATE // 20
    while not stop.is_set():
        for _ in range(step):
            producer.produce(topic, b"x" * 100)
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(10)


def librdkafka_commits(bootstrap: str, topic: str, commits: int) -> list[float]:
    """Milliseconds per synchronous commit of one consume() batch's offsets, as the workload's consumer commits."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    latencies: list[float] = []
    try:
        while len(latencies) < commits:
            batch = [m for m in consumer.consume(BATCH, timeout=0.5) if m.error() is None]
            if not batch:
                continue
            offsets = batch_offsets(topic, batch)
            started = time.monotonic()
            consumer.commit(offsets=offsets, asynchronous=False)
            latencies.append((time.monotonic() - started) * 1000)
    finally:
        consumer.close()
    return latencies


def java_commits(bootstrap: str, topic: str, commits: int, kafka_version: str) -> list[float]:
    """Milliseconds per commitSync() of one poll()'s offsets, by the Java consumer of ``kafka_version``."""
    libs = ensure_built(kafka_version) / "libs"
    result = subprocess.run(["java", "-cp", f"{libs}/*", str(JAVA_SOURCE), bootstrap, topic, str(commits)],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"commit_latency: the Java consumer failed: {result.stderr.strip().splitlines()[-1:]}")
    return [float(line) for line in result.stdout.split()]


def summary(client: str, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{client:>10}: {len(ordered)} commits, median {statistics.median(ordered):.1f} ms, " \
           f"p90 {p90:.1f} ms, max {ordered[-1]:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=30, help="commits per client (default 30)")
    parser.add_argument("--fetch-min-bytes", type=int, default=1_048_576,
                        help="the brokers' replica.fetch.min.bytes (default 1 MiB, as acks1-leader-kill; 0: Kafka's)")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    args = parser.parse_args(argv)
    if args.commits < 1:
        parser.error("--commits must be at least 1")
    install_termination_handlers()
    config = {"replica.fetch.min.bytes": str(args.fetch_min_bytes)} if args.fetch_min_bytes else {}
    cluster = start_cluster("zookeeper", args.kafka_version, Path(tempfile.mkdtemp(prefix="kchaos-bench-commit-")),
                            broker_config=config)
    stop = threading.Event()
    try:
        topic = f"commits-{uuid.uuid4().hex[:6]}"
        create_topic(cluster, TopicSpec(topic, partitions=6, replication_factor=3, min_insync_replicas=1))
        load = threading.Thread(target=produce, args=(cluster.bootstrap_servers, topic, stop), daemon=True)
        load.start()
        time.sleep(3)
        say(f"replica.fetch.min.bytes {args.fetch_min_bytes or 'default'}, acks=1 load ~{RATE}/s, "
            f"batches of up to {BATCH}")
        say(summary("librdkafka", librdkafka_commits(cluster.bootstrap_servers, topic, args.commits)))
        say(summary("java", java_commits(cluster.bootstrap_servers, topic, args.commits, args.kafka_version)))
    finally:
        stop.set()
        cluster.teardown()
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    run_main(main, __file__)
