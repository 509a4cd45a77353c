"""Each fault on a real cluster: it takes effect, and healing undoes it."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from clusters.cluster import Cluster
from clusters.node import Node, tcp_open
from clusters.spec import TopicSpec
from clusters.topics import create_topic, request_topic
from faults.base import Fault
from faults.disk_full import DiskFullFault
from faults.kill import KillFault
from faults.partition import PartitionFault
from faults.pause import PauseFault
from faults.power_loss import PowerLossFault
from faults.slow_network import SlowNetworkFault
from waiting import eventually

pytestmark = pytest.mark.cluster


def topic_on(cluster: Cluster, broker: Node, config: dict[str, str] | None = None) -> str:
    """A one-partition topic with its only replica on ``broker``."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    request_topic(cluster, NewTopic(name, num_partitions=1, replica_assignment=[[broker.node_id]],
                                    config=config or {}))
    eventually(lambda: cluster.partitions(name)[0].leader == broker.node_id, 30, f"{name} has a leader")
    return name


def produce(cluster: Cluster, topic: str, count: int, size: int = 100, timeout_s: float = 30) -> list[bool]:
    """Send ``count`` messages with acks=1 and return, per message, whether it was acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1", "linger.ms": 2,
                         "message.timeout.ms": int(timeout_s * 1000)})
    outcomes: list[bool] = []
    for _ in range(count):
        producer.produce(topic, value=b"x" * size, on_delivery=lambda err, _m: outcomes.append(err is None))
        producer.poll(0)
    producer.flush(timeout_s + 10)
    return outcomes


def high_watermark(cluster: Cluster, topic: str, timeout_s: float = 60) -> int:
    """The partition's high watermark, once its leader answers (it may still be opening its socket)."""
    deadline = time.monotonic() + timeout_s
    while True:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kchaos-test-hw"})
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
        finally:
            consumer.close()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(7)


@pytest.fixture
def replicated(cluster: Cluster) -> Iterator[str]:
    topic = TopicSpec(f"r-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(cluster, topic)
    yield topic.name


def test_pause_past_the_session_timeout_expires_the_broker(cluster: Cluster, replicated: str,
                                                           rng: random.Random) -> None:
    leader = cluster.leader(replicated, 0)
    assert leader is not None
    fault = PauseFault(cluster, replicated, rng)
    fault.apply([leader])
    try:
        assert leader.status == "paused"
        eventually(lambda: leader.node_id not in cluster.registered_brokers(), 30,
                   "the frozen broker's session expires")
        eventually(lambda: cluster.partitions(replicated)[0].leader not in (None, leader.node_id), 30,
                   "another replica leads")
    finally:
        fault.heal([leader])
    assert leader.running and leader.node_id in cluster.registered_brokers()


def test_isolating_a_follower_shrinks_the_isr_and_healing_lets_it_rejoin(cluster: Cluster, replicated: str,
                                                                          rng: random.Random) -> None:
    state = cluster.partitions(replicated)[0]
    follower = cluster.broker(next(r for r in state.replicas if r != state.leader))
    rules_before = follower.in_netns("iptables", "-S").stdout
    fault = PartitionFault(cluster, replicated, rng, {"mode": "isolate"})
    detail = fault.apply([follower])
    try:
        assert follower.name in detail
        peer = cluster.broker(state.leader)  # type: ignore[arg-type]
        assert not follower.can_reach(peer.ip, 9092)
        assert tcp_open(follower.ip, 9092)  # clients still reach it
        eventually(lambda: follower.node_id not in cluster.partitions(replicated)[0].isr, 45,
                   "the isolated follower leaves the ISR")
    finally:
        fault.heal([follower])
    assert follower.in_netns("iptables", "-S").stdout == rules_before
    assert follower.can_reach(cluster.broker(state.leader).ip, 9092)  # type: ignore[arg-type]
    eventually(lambda: follower.node_id in cluster.partitions(replicated)[0].isr, 60, "the follower rejoins the ISR")


def main_process(node: Node) -> str:
    """The command line of the node's main process: its entry point, or the service once it exec'd."""
    return Path(f"/proc/{node.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.parametrize("inner", [KillFault, PowerLossFault])
def test_a_partitioned_broker_restarted_inside_the_cut_stays_cut_until_it_heals(
        cluster: Cluster, replicated: str, rng: random.Random, inner: type[Fault]) -> None:
    victim = cluster.brokers[1]
    peers = [b for b in cluster.brokers if b is not victim]
    partition = PartitionFault(cluster, replicated, rng, {"mode": "brokers"})
    partition.apply([victim])
    restarted_as: list[str] = []
    try:
        victim.network_rules["test: what runs while the rules go in"] = lambda n: restarted_as.append(main_process(n))
        crash = inner(cluster, replicated, rng)
        crash.apply([victim])
        crash.heal([victim])  # restarted until it serves: registered with ZooKeeper, listening
        assert restarted_as and all("run-node.sh" in p and "java" not in p for p in restarted_as), restarted_as
        assert "kafka.Kafka" in main_process(victim)
        for peer in peers:
            assert not victim.can_reach(peer.ip, 9092) and not peer.can_reach(victim.ip, 9092), peer.name
        assert all(victim.can_reach(zk.ip, 2181) for zk in cluster.zookeepers)  # only the brokers are cut
    finally:
        victim.network_rules.pop("test: what runs while the rules go in", None)
        if not victim.running:
            cluster.recover(victim)
        partition.heal([victim])
    assert all(victim.can_reach(p.ip, 9092) and p.can_reach(victim.ip, 9092) for p in peers)
    eventually(lambda: victim.node_id in cluster.partitions(replicated)[0].isr, 60, "the victim rejoins the ISR")


def test_slow_network_outlives_a_restart_of_its_node(cluster: Cluster, rng: random.Random) -> None:
    broker = cluster.brokers[0]
    slow = SlowNetworkFault(cluster, "unused", rng, {"rate": "512kbit"})
    slow.apply([broker])
    try:
        kill = KillFault(cluster, "unused", rng)
        kill.apply([broker])
        kill.heal([broker])
        assert "tbf" in broker.in_netns("tc", "qdisc", "show", "dev", "eth0").stdout
    finally:
        slow.heal([broker])
    assert "tbf" not in broker.in_netns("tc", "qdisc", "show", "dev", "eth0").stdout


def test_cutting_clients_from_a_broker_leaves_the_cluster_connected(cluster: Cluster, rng: random.Random) -> None:
    broker = cluster.brokers[0]
    fault = PartitionFault(cluster, "unused", rng, {"mode": "clients"})
    fault.apply([broker])
    try:
        assert not tcp_open(broker.ip, 9092)
        assert broker.can_reach(cluster.brokers[1].ip, 9092)
    finally:
        fault.heal([broker])
    assert tcp_open(broker.ip, 9092)


def test_topic_creation_outlasts_a_controller_the_clients_cannot_reach(cluster: Cluster, rng: random.Random) -> None:
    """CreateTopics sent down a connection that stopped answering gets librdkafka's local time-out;
    it is asked again through a new AdminClient once the link is back, not given up."""
    controller = cluster.controller()
    topic_on(cluster, controller)  # the AdminClient holds a connection to the controller
    fault = PartitionFault(cluster, "unused", rng, {"mode": "clients"})
    fault.apply([controller])
    healer = threading.Timer(8, fault.heal, args=([controller],))  # past the client's 5 s socket time-out
    healer.start()
    name = f"t-{uuid.uuid4().hex[:8]}"
    try:
        request_topic(cluster, NewTopic(name, num_partitions=1, replication_factor=3), timeout=60)
    finally:
        healer.join()
    assert tcp_open(controller.ip, 9092)
    eventually(lambda: cluster.partitions(name)[0].leader is not None, 30, f"{name} has a leader")


def test_power_loss_drops_unflushed_messages_and_keeps_fsynced_ones(cluster: Cluster, rng: random.Random) -> None:
    broker = cluster.brokers[1]
    flushed = topic_on(cluster, broker, {"flush.messages": "1"})
    unflushed = topic_on(cluster, broker)
    assert all(produce(cluster, flushed, 1000))
    assert all(produce(cluster, unflushed, 1000))
    ip_before = broker.ip
    fault = PowerLossFault(cluster, unflushed, rng)
    fault.apply([broker])
    fault.heal([broker])
    assert broker.ip == ip_before
    eventually(lambda: cluster.partitions(unflushed)[0].leader == broker.node_id, 60, "the broker leads again")
    assert high_watermark(cluster, flushed) == 1000
    assert high_watermark(cluster, unflushed) < 1000


def test_slow_network_limits_bandwidth_until_healed(cluster: Cluster, rng: random.Random) -> None:
    broker = cluster.brokers[2]
    topic = topic_on(cluster, broker)
    assert all(produce(cluster, topic, 100, size=4096))

    def seconds_to_read_back() -> float:
        """Fetch the 400 KB back: it leaves the broker through the shaped interface."""
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{uuid.uuid4().hex}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        started, seen = time.monotonic(), 0
        while seen < 100 and time.monotonic() - started < 60:
            seen += sum(m.error() is None for m in consumer.consume(100, timeout=1))
        consumer.close()
        assert seen == 100
        return time.monotonic() - started

    baseline = seconds_to_read_back()
    fault = SlowNetworkFault(cluster, topic, rng, {"rate": "512kbit"})
    fault.apply([broker])
    try:
        slowed = seconds_to_read_back()  # 400 KB at 512 kbit/s takes more than 6 s
    finally:
        fault.heal([broker])
    assert slowed > 4 and slowed > 3 * baseline, (baseline, slowed)
    assert "tbf" not in broker.in_netns("tc", "qdisc", "show", "dev", "eth0").stdout
    assert seconds_to_read_back() < slowed / 2


def test_disk_full_makes_producers_fail_loudly_and_heals(cluster: Cluster, rng: random.Random) -> None:
    broker = cluster.brokers[0]
    topic = topic_on(cluster, broker)
    assert all(produce(cluster, topic, 10))
    fault = DiskFullFault(cluster, topic, rng)
    fault.apply([broker])
    try:
        assert broker.volume is not None and broker.volume.free_bytes() < 1024 * 1024
        outcomes = produce(cluster, topic, 200, size=1000, timeout_s=15)
        assert outcomes and not any(outcomes)  # every send reported an error: none acknowledged
    finally:
        fault.heal([broker])
    assert broker.running
    eventually(lambda: cluster.partitions(topic)[0].leader == broker.node_id, 60, "the broker leads again")
    assert all(produce(cluster, topic, 10))
    assert high_watermark(cluster, topic) == 20
