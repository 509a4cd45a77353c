"""What the request path costs a producer with no fault active: each client direct against through the proxy.

    .venv/bin/python benchmarks/proxy_overhead.py [--records 500000] [--rounds 3] [--metadata zookeeper]
                                                  [--client librdkafka|java]

Starts one cluster (3 brokers, one ZooKeeper or three KRaft controllers) with the request path on
(``ClusterSpec(request_path=True)``: the proxy process, and each broker's PROXIED listener advertising
its port), and a topic of 6 partitions, RF 3, min.insync.replicas 2. Each round writes ``--records``
records of 100 bytes with a confluent-kafka (librdkafka) producer, acks=all,
max.in.flight.requests.per.connection=5 (the scenarios' setting), everything else librdkafka's default
(``--client java``: Kafka's own ``ProducerPerformance`` on the host JRE, the kafka-clients of
``--kafka-version``, the same settings, as ``producer_vs_kafka.py`` runs it): once bootstrapped at the
brokers themselves (direct), once at the proxy's ports (proxied: every connection then goes through it),
the order alternating between rounds. A rate counts from the first produce() to the end of flush(). Each
line also gives the CPU seconds the proxy process spent in it.
Target (issue #35): proxied >= 0.8 of direct.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402

from clusters.cleanup import remove_orphans  # noqa: E402
from clusters.cluster import Cluster  # noqa: E402
from clusters.spec import ClusterSpec, TopicSpec  # noqa: E402
from clusters.topics import create_topic  # noqa: E402
from producer_vs_kafka import Tools  # noqa: E402

VALUE = b"x" * 100


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, records: int) -> float:
    """Records per second acknowledged by acks=all, first produce() to the end of flush()."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "max.in.flight.requests.per.connection": 5})
    failed = 0

    def report(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    producer.list_topics(topic, timeout=10)   # connected and bootstrapped before the clock starts
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0 or failed:
        raise RuntimeError(f"{failed} records failed, {len(producer)} not delivered")
    return records / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--metadata", choices=("zookeeper", "kraft"), default="zookeeper")
    parser.add_argument("--kafka-version", default="3.9.2")
    parser.add_argument("--client", choices=("librdkafka", "java"), default="librdkafka")
    args = parser.parse_args()
    quorum = {"zookeepers": 1} if args.metadata == "zookeeper" else {"controllers": 3}
    spec = ClusterSpec(kafka_version=args.kafka_version, metadata=args.metadata, brokers=3,
                       request_path=True, **quorum)  # type: ignore[arg-type]
    remove_orphans()
    workdir = Path(tempfile.mkdtemp(prefix="kchaos-proxy-bench-"))
    cluster = Cluster.start(spec, workdir, owner_pid=os.getpid())
    try:
        assert cluster.request_path is not None
        pid = cluster.request_path.pid
        topic = TopicSpec("bench", partitions=6, replication_factor=3, min_insync_replicas=2)
        create_topic(cluster, topic)
        tools = Tools(cluster, args.kafka_version, "host", workdir) if args.client == "java" else None

        def rate(bootstrap: str) -> float:
            if tools is None:
                return produce(bootstrap, topic.name, args.records)
            tools.bootstrap = bootstrap
            return tools.producer_perf(topic.name, args.records, "all",
                                       {"max.in.flight.requests.per.connection": "5"})["rate"]

        print(f"Kafka {args.kafka_version} ({args.metadata}), 3 brokers; {args.client}; {args.records:,} records "
              f"of 100 bytes a run, acks=all, max.in.flight 5")
        ratios = []
        for r in range(1, args.rounds + 1):
            ways = [("direct", cluster.bootstrap_servers), ("proxied", cluster.client_bootstrap_servers)]
            if r % 2 == 0:
                ways.reverse()
            rates = {}
            for name, bootstrap in ways:
                cpu0, load = cpu_s(pid), os.getloadavg()[0]
                rates[name] = rate(bootstrap)
                print(f"round {r} {name:8s} {rates[name]:>10,.0f} records/s  proxy CPU {cpu_s(pid) - cpu0:5.2f} s"
                      f"  load {load:.2f}", flush=True)
            ratios.append(rates["proxied"] / rates["direct"])
            print(f"round {r} ratio proxied/direct {ratios[-1]:.2f}", flush=True)
        print(f"ratio: mean {statistics.mean(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f} (target >= 0.8)")
    finally:
        cluster.teardown()


if __name__ == "__main__":
    main()
