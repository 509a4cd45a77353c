"""`kchaos cluster up|status|down`: a cluster an operator explores by hand."""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import KafkaException

from clusters.cleanup import remove_cluster
from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.spec import ClusterSpec

CLUSTERS_ROOT = Path("runs") / "clusters"


def up(spec: ClusterSpec, as_json: bool) -> int:
    started = time.monotonic()
    spec.validate()
    cluster_id = f"kc{int(time.time()) % 1_000_000:06d}"
    cluster = Cluster.start(spec, CLUSTERS_ROOT / cluster_id, cluster_id=cluster_id)
    elapsed = time.monotonic() - started
    if as_json:
        print(json.dumps(describe(cluster) | {"ready_s": round(elapsed, 1)}, indent=2))
    else:
        quorum = (f"{spec.controllers} KRaft controllers" if spec.metadata == "kraft"
                  else f"{spec.zookeepers} ZooKeeper")
        print(f"cluster {cluster.cluster_id} ready in {elapsed:.1f}s "
              f"({quorum}, {spec.brokers} brokers, Kafka {spec.kafka_version})")
        print(f"bootstrap servers: {cluster.bootstrap_servers}")
        print("stop it with: kchaos cluster down")
    return 0


def describe(cluster: Cluster) -> dict[str, object]:
    return {
        "cluster": cluster.cluster_id,
        "kafka_version": cluster.spec.kafka_version,
        "metadata": cluster.spec.metadata,
        "bootstrap_servers": cluster.bootstrap_servers,
        "nodes": [{"name": n.name, "role": n.role, "id": n.node_id, "ip": n.ip if n.running else None,
                   "status": n.status, "pid": n.pid, "container": n.container.name} for n in cluster.nodes],
    }


def status(cluster_id: str | None) -> int:
    cluster = Cluster.attach(cluster_id)
    print(f"cluster {cluster.cluster_id} (Kafka {cluster.spec.kafka_version}, {cluster.spec.metadata})")
    for n in cluster.nodes:
        print(f"  {n.name:<11} {n.role:<10} {n.status:<8} {n.ip if n.running else '-'}")
    try:
        controller = cluster.controller().name
        topics = sorted(t for t in cluster.admin().list_topics(timeout=10).topics if not t.startswith("__"))
    except (ClusterError, KafkaException) as e:
        print(f"brokers unreachable: {e}")
        return 0
    print(f"active controller: {controller}")
    for topic in topics:
        print(f"topic {topic}")
        for p in cluster.partitions(topic):
            print(f"  partition {p.partition}: leader {p.leader}  replicas {list(p.replicas)}  isr {list(p.isr)}")
    return 0


def down(cluster_id: str | None) -> int:
    started = time.monotonic()
    removed = remove_cluster(cluster_id)
    if removed:
        print(f"removed {', '.join(removed)} in {time.monotonic() - started:.1f}s")
    else:
        print("nothing to remove")
    return 0
