"""A real 3-ZooKeeper + 3-broker cluster: readiness, topics, traffic, a leader kill, teardown."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from tenacity import retry, stop_after_delay, wait_fixed

from clusters.cluster import CONSUMER_OFFSETS_TOPIC, Cluster, coordinator_partition
from clusters.errors import ClusterError
from clusters.spec import TopicSpec
from clusters.topics import create_topic
from helpers import maps_class_archive, new_topic

pytestmark = pytest.mark.cluster


def test_every_node_is_up_with_an_address_and_a_pid(cluster: Cluster) -> None:
    assert sorted(n.name for n in cluster.nodes) == ["broker1", "broker2", "broker3", "zk1", "zk2", "zk3"]
    for node in cluster.nodes:
        assert node.running
        assert node.pid > 0
        assert node.ip.count(".") == 3
    for broker in cluster.brokers:
        assert broker.volume is not None and broker.volume.device is not None
        mounts = open("/proc/mounts").read()
        assert f"{broker.volume.device} {broker.data_dir} ext4" in mounts
    assert cluster.controller() in cluster.brokers
    assert [n.name for n in cluster.nodes if not maps_class_archive(n)] == []


def test_impossible_topic_is_refused(cluster: Cluster) -> None:
    with pytest.raises(ClusterError, match="min_insync_replicas=4 is above replication_factor=3"):
        create_topic(cluster, TopicSpec("impossible", partitions=1, replication_factor=3, min_insync_replicas=4))
    assert "impossible" not in cluster.admin().list_topics(timeout=10).topics


def test_the_group_coordinator_is_the_broker_kafka_names(cluster: Cluster) -> None:
    """Cluster.group_coordinator agrees with Kafka's FindCoordinator (the broker that answers DescribeGroups) for
    a group on each broker that leads a __consumer_offsets partition."""
    topic = new_topic(cluster, "gc", partitions=1)
    admin = cluster.admin()

    @retry(stop=stop_after_delay(60), wait=wait_fixed(1), reraise=True)
    def commit(group: str) -> None:  # the first FindCoordinator creates __consumer_offsets, which then elects
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
        admin.alter_consumer_group_offsets([request])[group].result(timeout=15)

    commit(f"g-{topic}")
    leaders = {s.partition: s.leader for s in cluster.partitions(CONSUMER_OFFSETS_TOPIC)}
    groups: dict[int, str] = {}   # a leader -> a group its partition holds
    for name in (f"g-{topic}-{i}" for i in range(10_000)):
        leader = leaders[coordinator_partition(name, len(leaders))]
        if leader is not None:
            groups.setdefault(leader, name)
        if len(groups) == len(set(leaders.values()) - {None}):
            break
    assert groups, leaders
    for group in groups.values():
        commit(group)

    @retry(stop=stop_after_delay(60), wait=wait_fixed(1), reraise=True)
    def agree() -> dict[str, int]:  # a leadership that moved meanwhile: both sides settle
        described = {g: f.result(timeout=15).coordinator.id
                     for g, f in admin.describe_consumer_groups(sorted(groups.values())).items()}
        ours = {g: getattr(cluster.group_coordinator(g), "node_id", None) for g in groups.values()}
        assert described == ours
        return described

    assert set(agree().values()) == set(groups)


def test_produce_consume_and_survive_a_leader_kill(cluster: Cluster) -> None:
    topic = TopicSpec(f"t-{uuid.uuid4().hex[:6]}", partitions=3, replication_factor=3, min_insync_replicas=2)
    create_topic(cluster, topic)
    states = cluster.partitions(topic.name)
    assert all(s.isr and len(s.isr) == 3 and s.leader in s.isr for s in states)

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked: list[int] = []
    for seq in range(10_000):
        producer.produce(topic.name, value=str(seq).encode(),
                         on_delivery=lambda err, msg: acked.append(int(msg.value())) if err is None else None)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == 10_000

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic.name}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    # from the beginning, not from the group's committed offset: a coordinator that briefly
    # answers NOT_COORDINATOR would otherwise leave the partitions without a position
    consumer.assign([TopicPartition(topic.name, p, OFFSET_BEGINNING) for p in range(topic.partitions)])
    seen: set[int] = set()
    for _ in range(600):
        for msg in consumer.consume(1000, timeout=1):
            if msg.error() is None:
                seen.add(int(msg.value()))
        if len(seen) == 10_000:
            break
    consumer.close()
    assert seen == set(range(10_000))

    before = cluster.partitions(topic.name)[0]
    victim = cluster.leader(topic.name, 0)
    assert victim is not None and victim.node_id == before.leader
    victim.kill()
    assert not victim.running

    @retry(stop=stop_after_delay(60), wait=wait_fixed(0.5), reraise=True)
    def new_leader() -> int:
        leader = cluster.partitions(topic.name)[0].leader
        assert leader is not None and leader != victim.node_id
        return leader

    leader = new_leader()
    assert leader in before.isr
    victim.start()
    cluster.wait_ready()
    assert victim.running


def test_cli_cluster_lifecycle_and_bad_input(nothing_left: Callable[[str, Path], None]) -> None:
    kchaos = [sys.executable, "-m", "harness.cli"]
    bad = subprocess.run([*kchaos, "cluster", "up", "--zookeepers", "2"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "odd number" in bad.stderr

    up = subprocess.run([*kchaos, "cluster", "up", "--brokers", "1", "--zookeepers", "1"],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    cluster_id = up.stdout.split()[1]
    try:
        status = subprocess.run([*kchaos, "cluster", "status", "--id", cluster_id],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "broker1" in status.stdout and "active controller: broker1" in status.stdout
    finally:
        down = subprocess.run([*kchaos, "cluster", "down", "--id", cluster_id], capture_output=True, text=True)
    assert down.returncode == 0 and cluster_id in down.stdout
    with pytest.raises(ClusterError):
        Cluster.attach(cluster_id)
    workdir = (Path("runs/clusters") / cluster_id).resolve()
    nothing_left(cluster_id, workdir)
    assert not workdir.exists()
